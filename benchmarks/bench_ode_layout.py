"""Where a batched Taylor step's time goes: the pass's layout and the doubling sweeps.

Kepler's field over `--batch` states (float64, order `--order`), steady state of each
jitted contender (minimum over 5 rounds of 20 calls):

- `vmap`: one Taylor pass along a line per state under `jax.vmap` (every array of the
  pass batch-major, `(batch, K + 1, 4)`), as `jax.vmap(taylax.ode.integrate(...))` runs;
- `vmap(g, 1, 1)`: one pass of the field vmapped over the last axis of `(4, batch)`
  arrays (JAX's batching rules still move the batch to the front inside);
- `batch minor`: one pass of the field written on `(4, batch)` arrays by hand (the
  batch the minor axis of every array);
- `coefficients`: `taylax.ode.coefficients` under `jax.vmap` (the doubling sweeps: passes
  of the field and of its Jacobian), the integrator's work per step.

    python benchmarks/bench_ode_layout.py
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_ode import kepler  # noqa: E402
from bench_ode_ensemble import ensemble  # noqa: E402


def kepler_batch_minor(y):
    """Kepler's field on states stacked `(4, batch)`."""
    r, v = y[:2], y[2:]
    return jnp.concatenate([v, -r / jnp.sum(r * r, axis=0) ** 1.5])


def best_ms(fn, *args, rounds: int = 5, calls: int = 20) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--order", type=int, default=16)
    args = parser.parse_args()
    K = args.order
    y0s = jnp.asarray(ensemble(args.batch, 0.5, 0.05))
    field = lambda y: kepler(0.0, y, None)  # noqa: E731
    contenders = {
        "vmap": (
            jax.jit(jax.vmap(lambda y, v: taylax.derivatives(field, K)(y, v))),
            (y0s, y0s),
        ),
        "vmap(g, 1, 1)": (
            jax.jit(
                lambda y, v: taylax.derivatives(jax.vmap(field, in_axes=1, out_axes=1), K)(y, v)
            ),
            (y0s.T, y0s.T),
        ),
        "batch minor": (
            jax.jit(lambda y, v: taylax.derivatives(kepler_batch_minor, K)(y, v)),
            (y0s.T, y0s.T),
        ),
        "coefficients": (
            jax.jit(jax.vmap(taylax.ode.coefficients(kepler, K), in_axes=(None, 0))),
            (0.0, y0s),
        ),
    }
    print(
        f"Kepler, {args.batch} states, order {K}, float64, jax {jax.__version__}, "
        f"{jax.devices()[0].device_kind}"
    )
    for name, (fn, fn_args) in contenders.items():
        print(f"{name:>14}: {best_ms(fn, *fn_args):7.2f} ms", flush=True)


if __name__ == "__main__":
    main()
