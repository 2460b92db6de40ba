"""A quotient by a series of full degree: its rows recomputed or in buffers, by order (the
CPU policy's `series_quotient_rows_unmarked_max_order`).

`q = a / b` unrolled is `q_k = (a_k - sum_{j=1..k} b_j q_{k-j}) / b_0`. Where `b` is a
series of full degree (`2 + cos t`, `cos` inside `tan`), row k reads every row before
it, as tanh's Riccati rows do; up to the field's order those rows keep a mark lowered
only while small (docs/EMISSION.md, "A quotient by a series"). This script times, in one
process, `jax.jit(jax.vmap(taylax.derivatives(f, K)))` over `--points` points (float64)
(`--whole`: on the whole array) under the CPU policy with the field at each of
`--bounds`, for functions that divide by
such a series (tan, atan and log of one, divisions by `2 + cos t` and `1 + exp t`, and
the cos-exp-div-tanh chain of `gpu_check.py`). Steady state: the minimum over `--rounds`
interleaved rounds (`bench_batched.minimum_times`); the last column is each bound's
time over the first bound's.

    python benchmarks/series_quotients.py
    python benchmarks/series_quotients.py --orders 10 --bounds 8,10
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp

from gpu_check import CHAINS  # noqa: E402

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_batched import minimum_times  # noqa: E402

FUNCTIONS = {
    "tan(sin t)": lambda t: jnp.tan(jnp.sin(t)),
    "log(2 + sin t)": lambda t: jnp.log(2 + jnp.sin(t)),
    "atan(exp t)": lambda t: jnp.arctan(jnp.exp(t)),
    "sin t / (2 + cos t)": lambda t: jnp.sin(t) / (2 + jnp.cos(t)),
    "exp(-t^2) / (1 + exp t)": lambda t: jnp.exp(-t * t) / (1 + jnp.exp(t)),
    "asinh(sin t)": lambda t: jnp.arcsinh(jnp.sin(t)),
    "cos-exp-div-tanh": CHAINS["cos-exp-div-tanh"],
}


def _compiled(f, order: int, bound, t, whole: bool):
    """The jitted `vmap` of `f`'s derivatives (with `whole`, its derivatives on the whole
    array along ones), compiled under the CPU policy with
    `series_quotient_rows_unmarked_max_order=bound`."""
    policy = dataclasses.replace(
        taylax.CPU, name=f"bound {bound}", series_quotient_rows_unmarked_max_order=bound
    )
    if whole:
        fn = lambda t: taylax.derivatives(f, order)(t, jnp.ones_like(t))  # noqa: E731
    else:
        fn = jax.vmap(taylax.derivatives(f, order))
    with taylax.emission_policy(policy):
        return jax.jit(fn).lower(t).compile()


def _bound(text: str):
    return None if text == "None" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="8,9,10,11,12", help="comma-separated K")
    parser.add_argument("--bounds", default="8,10,12", help="field values; the first is 1.00")
    parser.add_argument("--points", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--whole", action="store_true", help="whole arrays, not a vmap")
    args = parser.parse_args()
    bounds = [_bound(b) for b in args.bounds.split(",")]
    shipped = taylax.CPU.series_quotient_rows_unmarked_max_order
    form = "the whole array" if args.whole else "jax.vmap"
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}, float64, {args.points} points, {form}"
    )
    print(f"ms per call; shipped series_quotient_rows_unmarked_max_order = {shipped}")
    names = " | ".join(f"bound {b}" for b in bounds)
    print(f"| f | K | {names} | over bound {bounds[0]} |")
    print("|---|---|" + "---|" * len(bounds) + "---|")
    t = jnp.linspace(0.5, 1.5, args.points)
    for name, f in FUNCTIONS.items():
        for order in (int(k) for k in args.orders.split(",")):
            # Keyed by position: a bound may be given twice (the spread of one process).
            fns = {i: _compiled(f, order, b, t, args.whole) for i, b in enumerate(bounds)}
            best = minimum_times(fns, (t,), args.rounds)
            times = [best[i] for i in range(len(bounds))]
            ratios = ", ".join(f"{x / times[0]:.2f}" for x in times[1:])
            cells = " | ".join(f"{x:.3f}" for x in times)
            print(f"| {name} | {order} | {cells} | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
