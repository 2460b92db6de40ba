"""Recurrence rows kept in buffers or recomputed, by the size of a row (the CPU policy's
`rows_unmarked_min_bytes`).

tanh's and the logistic's Riccati rows and `sqrt`'s rows are marked `computed_once` only
while smaller than `rows_unmarked_min_bytes` (docs/EMISSION.md, "Rows marked by size").
This script times, in one process, `jax.jit(jax.vmap(taylax.derivatives(f, K)))` over
`--points` points (each row is 8 bytes per point in float64) under the CPU policy with
the rows always marked (`rows_unmarked_min_bytes=None`), never marked (`0`) and as
shipped, for three functions whose rows these fields govern: `tanh(log1p(t^2))`,
`sqrt(2 + exp(t) t)` and the sin-sqrt-tanh-log1p chain of `bench_float32.py`. Steady
state: the minimum over `--rounds` interleaved rounds (`bench_batched.minimum_times`).

    python benchmarks/rows_by_size.py
    python benchmarks/rows_by_size.py --orders 8 --points 512,4096
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp

from bench_float32 import chain_c  # noqa: E402  (sets x64 off: turned on below)

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_batched import minimum_times  # noqa: E402

FUNCTIONS = {
    "tanh(log1p(t^2))": lambda t: jnp.tanh(jnp.log1p(t * t)),
    "sqrt(2 + exp(t) t)": lambda t: jnp.sqrt(2 + jnp.exp(t) * t),
    "sin-sqrt-tanh-log1p": chain_c,
}

SETTINGS = {"marked": None, "unmarked": 0, "shipped": taylax.CPU.rows_unmarked_min_bytes}


def _compiled(f, order: int, least, t):
    """The jitted `vmap` of `f`'s derivatives, lowered and compiled under the CPU policy
    with `rows_unmarked_min_bytes=least` (the marks are decided when lowered)."""
    policy = dataclasses.replace(taylax.CPU, name="rows", rows_unmarked_min_bytes=least)
    with taylax.emission_policy(policy):
        return jax.jit(jax.vmap(taylax.derivatives(f, order))).lower(t).compile()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="5,8,12", help="comma-separated K")
    parser.add_argument("--points", default="64,512,1024,2048,4096,8192,65536")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, float64; ms per call")
    print(f"shipped rows_unmarked_min_bytes = {taylax.CPU.rows_unmarked_min_bytes}")
    print("| f | K | points | row bytes | marked | unmarked | shipped | unmarked / marked |")
    print("|---|---|---|---|---|---|---|---|")
    for name, f in FUNCTIONS.items():
        for order in (int(k) for k in args.orders.split(",")):
            for points in (int(p) for p in args.points.split(",")):
                t = jnp.linspace(-0.9, 0.9, points)
                fns = {s: _compiled(f, order, least, t) for s, least in SETTINGS.items()}
                calls = max(1, 200_000 // points)
                best = minimum_times(fns, (t,), args.rounds, calls=calls)
                m, u, s = best["marked"], best["unmarked"], best["shipped"]
                print(
                    f"| {name} | {order} | {points} | {8 * points} | {m:.4f} | {u:.4f} | "
                    f"{s:.4f} | {u / m:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
