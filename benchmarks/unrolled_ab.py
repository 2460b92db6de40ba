"""Interleaved A/B of emission-policy variants on an unrolled loop under `jax.vmap`.

`bench_unrolled.py` times one policy at a time; on a loaded machine its figures drift
between runs. Here every variant of the CPU policy (`--variants`, `;`-separated lists of
`FIELD=VALUE`, an empty one for the CPU policy itself) and, with `--jet`, jet's terms
apart, are compiled in one process and timed in interleaved rounds (`gpu_check.time_all`:
the minimum over 7 rounds of 20 calls back to back). Prints one line: the program, K, the
steps, and per variant (ms per call, fused kernels, first call in s). Usage::

    python benchmarks/unrolled_ab.py rk4 4 5 --variants "fusion_cut=128;;fusion_cut=None" --jet
    python benchmarks/unrolled_ab.py rk4 2 10 --points 1048576 --whole --calls 3 --rounds 3

`--compiler-option KEY=VALUE` passes an XLA option to every `jax.jit`, for example
`xla_cpu_use_fusion_emitters=False` (docs/EMISSION.md, "Fusion cuts"). `--api taylor` or
`--api jet` times `taylax.taylor` (primal and normalized coefficients) or `taylax.jet`
(along ones) in place of `taylax.derivatives`. `--whole` calls taylax on the whole array of
`--points` values along ones instead of under `jax.vmap`. Each cell also gives the compiled
program's temporaries in MiB (`memory_analysis().temp_size_in_bytes`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_unrolled import PROGRAMS, jet_terms  # noqa: E402
from gpu_check import time_all  # noqa: E402
from policy_ab import parse_set  # noqa: E402


def compiler_option(text: str):
    """`KEY=VALUE` (from `--compiler-option`) as an XLA option: True/False or the text."""
    key, value = text.split("=", 1)
    parsed = {"True": True, "False": False}.get(value, value)
    return key, parsed


def _mib(n) -> float | None:
    return None if n is None else round(n / 2**20, 1)


def along_ones(api: str, f, K: int, whole: bool = False):
    """`y -> ` the primal and K coefficients of `f` along ones, through taylax's `api`;
    with `whole`, `derivatives` of the whole array `y` (a direction of ones)."""
    if api == "derivatives":
        if whole:
            return lambda y: taylax.derivatives(f, K)(y, jnp.ones_like(y))
        return taylax.derivatives(f, K)
    if api == "taylor":

        def taylor(y):
            primal, coeffs = taylax.taylor(f, K)(y, 1.0)
            return jnp.concatenate([primal[None], coeffs])

        return taylor

    def jet(y):
        primal, terms = taylax.jet(f, (y,), ((1.0,) + (0.0,) * (K - 1),))
        return jnp.stack([primal, *terms])

    return jet


def variant_policy(variant: str) -> taylax.EmissionPolicy:
    """The CPU policy with one `--variants` entry's `FIELD=VALUE,...` changes, named by it
    (`cpu` for the empty entry)."""
    changes = parse_set([item for item in variant.split(",") if item])
    return dataclasses.replace(taylax.CPU, name=variant or "cpu", **changes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", choices=sorted(PROGRAMS))
    parser.add_argument("order", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--variants", default="", help="';'-separated FIELD=VALUE,... lists")
    parser.add_argument("--jet", action="store_true", help="time jet's terms apart too")
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--compiler-option", action="append", default=[])
    parser.add_argument("--api", choices=["derivatives", "taylor", "jet"], default="derivatives")
    parser.add_argument("--whole", action="store_true", help="whole arrays, not jax.vmap")
    parser.add_argument("--calls", type=int, default=20, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.whole and args.api != "derivatives":
        parser.error("--whole times taylax.derivatives only")
    options = dict(compiler_option(o) for o in args.compiler_option) or None
    ys = jnp.linspace(0.5, 1.0, args.points)

    def f(y):
        return PROGRAMS[args.program](y, args.steps)

    contenders = {}
    for variant in args.variants.split(";"):
        policy = variant_policy(variant)
        run = along_ones(args.api, f, args.order, args.whole)
        contenders[variant or "cpu"] = (run if args.whole else jax.vmap(run), policy)
    if args.jet:
        terms = jet_terms(f, args.order)
        contenders["jet"] = (terms if args.whole else jax.vmap(terms), None)
    results = time_all(contenders, (ys,), args.calls, args.rounds, compiler_options=options)
    cells = {
        k: (round(r["ms"], 3), r["fusions"], round(r["first_s"], 2), _mib(r["temp_bytes"]))
        if "ms" in r
        else r["error"]
        for k, r in results.items()
    }
    print(args.api, args.program, args.order, args.steps, options or "", cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
