"""Eager calls over a changing closed-over 0-d array: compiles and time per call.

A user's eager loop that closes over a value which changes every step (a time, a step
size) as a 0-d array, `w = jnp.asarray(0.5 + 0.01 * i)`, against the same loop with `w`
of shape (1,). Every public entry point, `--calls` eager calls each (after one untimed
call that compiles), float64; prints the backend compiles inside the timed calls (JAX's
`/jax/core/compile/backend_compile_duration` monitoring event) and the median time per
call of each shape, and their ratio.

    python benchmarks/eager_constants.py --calls 1000
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

import taylax

jax.config.update("jax_enable_x64", True)

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
X = 0.3
XS = jnp.asarray([0.3, -0.2, 0.5])
KEY = jax.random.key(0)


def scalar(w):
    return lambda s: jnp.sin(w * s) * jnp.exp(s)


def vector(w):
    return lambda x: jnp.sum(jnp.sin(w * x) * jnp.exp(x))


# (name, make(w) -> the function, call(f) -> the result)
CASES = [
    ("derivatives", scalar, lambda f: taylax.derivatives(f, 6)(X)),
    ("taylor", scalar, lambda f: taylax.taylor(f, 6)(X, 1.0)),
    ("jet", scalar, lambda f: taylax.jet(f, (X,), ((1.0,) + (0.0,) * 5,))),
    ("derivative", scalar, lambda f: taylax.derivative(f, 3)(X)),
    ("jacfwd", scalar, lambda f: taylax.jacfwd(f)(X)),
    ("laplacian", vector, lambda f: taylax.laplacian(f)(XS)),
    ("laplacian (stochastic)", vector, lambda f: taylax.laplacian(f, key=KEY, samples=4)(XS)),
    ("hessian_diagonal", vector, lambda f: taylax.hessian_diagonal(f)(XS)),
    ("biharmonic", vector, lambda f: taylax.biharmonic(f)(XS)),
    ("biharmonic (stochastic)", vector, lambda f: taylax.biharmonic(f, key=KEY, samples=4)(XS)),
    ("derivative_tensor", vector, lambda f: taylax.derivative_tensor(f, 2)(XS)),
    ("weighted_laplacian", vector, lambda f: taylax.weighted_laplacian(f, jnp.eye(3))(XS)),
    (
        "differential_operator",
        vector,
        lambda f: taylax.differential_operator(f, {(2, 0, 0): 1.0})(XS),
    ),
]


def run(make, call, shape, calls: int) -> tuple[float, int]:
    """(median seconds per call, backend compiles) over `calls` eager calls."""
    compiles = [0]

    def listener(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            compiles[0] += 1

    jax.block_until_ready(call(make(jnp.full(shape, 0.5))))
    times = []
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for i in range(1, calls + 1):
            w = jnp.full(shape, 0.5 + 0.01 * (i % 100))
            start = time.perf_counter()
            jax.block_until_ready(call(make(w)))
            times.append(time.perf_counter() - start)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return statistics.median(times), compiles[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    print(f"# jax {jax.__version__}, {jax.default_backend()}, {args.calls} eager calls each")
    print("| entry point | 0-d: ms per call, compiles | (1,): ms per call, compiles | ratio |")
    print("|---|---|---|---|")
    for name, make, call in CASES:
        t0, c0 = run(make, call, (), args.calls)
        t1, c1 = run(make, call, (1,), args.calls)
        print(f"| {name} | {1e3 * t0:.2f}, {c0} | {1e3 * t1:.2f}, {c1} | {t0 / t1:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
