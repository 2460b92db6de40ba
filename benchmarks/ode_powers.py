"""What a `pow` costs XLA against the forms the ODE integrator writes instead.

Each form runs `--trips` times in a `lax.fori_loop` (its result fed back, so nothing is
hoisted) over `--lanes` values (4,096: a batch of trajectories) and over one value
(a single trajectory, under `taylax.ode.one_function_loops()` so that the loop compiles
into one function and dispatch does not hide the arithmetic). Nanoseconds per trip, the
least of `--calls` calls, float64 and float32:

- `x ** -1.5` (libm's `pow` on XLA:CPU) against `1 / (x sqrt(x))`, the form of
  `taylax.ode._half_powers`;
- the step size's two radii `(s / n)^(1/k)` by two `pow`s against one `exp` of the
  smaller of two logarithms (`taylax.ode`'s step size).

    python benchmarks/ode_powers.py
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

K = 17  # the order at a tolerance of 1e-14


FORMS = {
    "x ** -1.5": lambda c: c**-1.5,
    "1 / (x sqrt(x))": lambda c: 1 / (c * jnp.sqrt(c)),
    "step: two pow": lambda c: jnp.minimum((1.3 / c) ** (1 / (K - 1)), (1.1 / c) ** (1 / K)),
    "step: two log, one exp": lambda c: jnp.exp(
        jnp.minimum(jnp.log(1.3 / c) * (1 / (K - 1)), jnp.log(1.1 / c) * (1 / K))
    ),
    "nothing (a product)": lambda c: c,
}


def per_trip(form, x, trips: int, calls: int) -> float:
    def body(i, c):
        return form(c) * 0.999 + 0.3

    run = jax.jit(lambda x: jax.lax.fori_loop(0, trips, body, x))
    jax.block_until_ready(run(x))
    best = float("inf")
    for _ in range(calls):
        begin = time.perf_counter()
        jax.block_until_ready(run(x))
        best = min(best, time.perf_counter() - begin)
    return best / trips * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=4096)
    parser.add_argument("--trips", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    taylax.ode.one_function_loops()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}; ns per trip")
    print(f"| form | float64, {args.lanes} | float32, {args.lanes} | float64, 1 | float32, 1 |")
    print("|---|---|---|---|---|")
    for name, form in FORMS.items():
        cells = []
        for shape in ((args.lanes,), ()):
            for dtype in (jnp.float64, jnp.float32):
                x = jnp.full(shape, 0.7, dtype)
                trips = args.trips if shape else args.trips * 50
                cells.append(f"{per_trip(form, x, trips, args.calls):.1f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
