"""Batched steady state on chains the CPU policy was not tuned on (issue 40's CPU line).

`bench_batched.py` measures the three chains the CPU policy's constants were chosen on.
This script measures, the same way and in one process, the elementwise chains of
`gpu_check.py`, the two more of `bench_float32.py` and `half_powers`, float64 here: all derivatives
0..K at `--n` points (65,536) under `jax.jit(jax.vmap(taylax.derivatives(f, K)))`,
against `jax.experimental.jet` on the whole array and nested `jax.jvp` on the whole
array and per point under `jax.vmap` (to `--nested-max-order`, 4: the nested program
doubles per level). Steady state: the minimum over `--rounds` interleaved rounds
(`bench_batched.interleaved_minimum`). The issue asks taylax <= 1.0x the best at K = 4
and <= 0.5x jet at K = 8 and 16. Writes `benchmarks/results/untuned_chains.md`.

    python benchmarks/untuned_chains.py
    python benchmarks/untuned_chains.py --orders 4 --n 16384
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from bench_float32 import chain_c, chain_d  # noqa: E402  (sets x64 off: turned on below)
from gpu_check import CHAINS as GPU_CHAINS  # noqa: E402

jax.config.update("jax_enable_x64", True)

from bench_batched import (  # noqa: E402
    calls_at,
    check_agreement,
    interleaved_minimum,
    jet_chain,
    nested_chain,
    nested_vmap_chain,
    taylax_chain,
)
from harness import command_line  # noqa: E402


def half_powers(t):
    """Gravity's `r ** -1.5` and a `** 2.5`: half-integer exponents (docs/EMISSION.md,
    "Half-integer exponents")."""
    return jnp.sin(t) * (1.2 + t * t) ** -1.5 + (2.0 + jnp.cos(t)) ** 2.5


def gaussian_sine(t):
    """A Gaussian envelope: `exp` of a polynomial times a sine (docs/EMISSION.md, "One
    kernel with exponentials, logarithms and divisions")."""
    return jnp.exp(-t * t) * jnp.sin(3 * t)


def sqrt_sine(t):
    """`sqrt` of a polynomial times a sine."""
    return jnp.sqrt(1 + t * t) * jnp.sin(t)


def cosine_over_line(t):
    """A division by a polynomial (a pole at `t = 1.2`)."""
    return jnp.cos(t) / (1.2 - t)


CHAINS = {
    **GPU_CHAINS,
    "sin-sqrt-tanh-log1p": chain_c,
    "cos-exp-div-pow": chain_d,
    "half-powers": half_powers,
    "gaussian-sine": gaussian_sine,
    "sqrt-sine": sqrt_sine,
    "cosine-over-line": cosine_over_line,
}
RESULTS = Path(__file__).resolve().parent / "results" / "untuned_chains.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="4,8,16")
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--nested-max-order", type=int, default=4)
    parser.add_argument("--chains", default=",".join(CHAINS), help=f"some of {list(CHAINS)}")
    args = parser.parse_args(argv)

    lines = [
        f"# {command_line(__file__, sys.argv[1:] if argv is None else argv)}, "
        f"{datetime.date.today()}",
        "",
        f"{jax.devices()[0].device_kind}, jax {jax.__version__}, float64, N = {args.n}; ms, "
        "the minimum over interleaved rounds.",
        "",
        "| chain | K | taylax | jet | nested jvp | nested jvp (vmap) | taylax / best | "
        "taylax / jet | largest difference from jet |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    t = jnp.linspace(-0.9, 0.9, args.n)
    for name in args.chains.split(","):
        f = CHAINS[name]
        for K in (int(k) for k in args.orders.split(",")):
            fns = {"taylax": taylax_chain(f, K), "jet": jet_chain(f, K)}
            if K <= args.nested_max_order:
                fns["nested jvp"] = nested_chain(f, K)
                fns["nested jvp (vmap)"] = nested_vmap_chain(f, K)
            ms = interleaved_minimum(
                fns, {k: (t,) for k in fns}, args.rounds, budget_s=20.0, calls=calls_at(args.n)
            )
            error = check_agreement(fns["jet"](t), fns["taylax"](t), K)
            best = min(ms[k] for k in fns if k != "taylax")

            def cell(key, ms=ms):
                return f"{ms[key]:.3f}" if key in ms else "-"

            line = (
                f"| {name} | {K} | {cell('taylax')} | {cell('jet')} | {cell('nested jvp')} | "
                f"{cell('nested jvp (vmap)')} | {ms['taylax'] / best:.2f}x | "
                f"{ms['taylax'] / ms['jet']:.2f}x | {error:.1e} |"
            )
            lines.append(line)
            print(line, flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
