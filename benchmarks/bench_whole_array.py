"""Whole-array calls against the vmapped call: time and peak memory.

`taylax.derivatives(f, K)(x, v)` on a whole array `x` of an elementwise `f`, against
`jax.jit(jax.vmap(taylax.derivatives(f, K)))(x, v)`, float64 (`--dtype`). Steady state:
both in one process, the minimum over 7 interleaved rounds (each timed call right after
an untimed one of its own), and, in the same rounds, `[set]`: the whole-array call
compiled under the platform's policy changed by `--set FIELD=VALUE ...` (by default
`elementwise_by_points_min_bytes=None`: the whole-array pass never routed through the
`vmap`, so that `whole / [set]` says what the routing buys). Peak memory
(not with `--time-only`): each alone in a fresh process, its `ru_maxrss` (which includes
JAX's own ~200 MB). Each cell runs in fresh processes. Prints a markdown table and writes
it, headed by the command, to `benchmarks/results/whole_array.md` (`--out`: elsewhere).

    python benchmarks/bench_whole_array.py                       # N = 2^20, K = 4, 16, 32
    python benchmarks/bench_whole_array.py --points 65536 --orders 8
    python benchmarks/bench_whole_array.py --points 65536 --orders 16,24,32 --time-only \
        --chains exp-cos-div-pow,cos-exp-div-tanh --dtype float32
    python benchmarks/bench_whole_array.py --points 262144 --orders 8 --time-only \
        --set elementwise_by_points_min_bytes=16777216
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness import changed_policy, command_line

RESULTS = Path(__file__).resolve().parent / "results" / "whole_array.md"
CHAINS = {
    "exp-cos-div": "lambda t: jnp.exp(jnp.cos(t)) / (1 + t**2)",
    "log1p-tanh-sqrt": "lambda t: jnp.tanh(jnp.log1p(t * t)) * jnp.sqrt(1 + t * t)",
    # The chains of `gpu_check.py` and `bench_float32.py`.
    "exp-cos-div-pow": "lambda t: jnp.exp(jnp.cos(t)) / (1 + t**2) ** 2 - t**3",
    "log1p-tanh-sqrt-sin": "lambda t: jnp.sqrt(1 + jnp.tanh(jnp.log1p(t * t))) * jnp.sin(t)",
    "cos-exp-div-tanh": "lambda t: jnp.cos(t) ** 3 * jnp.exp(-t * t) / (2 + jnp.sin(t))"
    " + jnp.tanh(t) ** 2",
    "sin-sqrt-tanh-log1p": "lambda t: jnp.sin(jnp.sqrt(1.5 + jnp.tanh(jnp.log1p(t * t))))",
    "cos-exp-div-pow": "lambda t: jnp.cos(jnp.exp(0.3 * t)) / (2.0 + t**3)",
}


def child(chain: str, modes: str, order: int, points: int, dtype: str, changes: str) -> dict:
    """`modes`: "whole", "vmap" (peak memory of one) or "whole,vmap,set" (timed);
    `changes`: the policy's `FIELD=VALUE` changes for "set", joined by spaces."""
    import resource

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", dtype == "float64")
    import taylax

    f = eval(CHAINS[chain], {"jnp": jnp})  # noqa: S307  (the table above)
    x = jnp.linspace(0.1, 1.0, points, dtype=dtype)
    v = jnp.ones_like(x)
    d = taylax.derivatives(f, order)
    fns = {"whole": jax.jit(d), "vmap": jax.jit(jax.vmap(d))}
    if "set" in modes:
        # A policy is in force while a function is traced: compiled inside it.
        with taylax.emission_policy(changed_policy(changes.split())):
            fns["set"] = jax.jit(d).lower(x, v).compile()
    fns = {mode: fns[mode] for mode in modes.split(",")}
    for g in fns.values():
        jax.block_until_ready(g(x, v))
    times: dict = {mode: [] for mode in fns}
    for _ in range(7 if len(fns) > 1 else 1):
        for mode, g in fns.items():
            jax.block_until_ready(g(x, v))
            start = time.perf_counter()
            jax.block_until_ready(g(x, v))
            times[mode].append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"steady_ms": {m: 1e3 * min(t) for m, t in times.items()}, "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1 << 20)
    parser.add_argument("--orders", default="4,16,32")
    parser.add_argument("--chains", default=",".join(CHAINS))
    parser.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    parser.add_argument("--time-only", action="store_true", help="no peak-memory processes")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument(
        "--set",
        nargs="+",
        default=["elementwise_by_points_min_bytes=None"],
        help="FIELD=VALUE: the policy's changes for the [set] contender",
    )
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        chain, mode, order, points, dtype, changes = args.child
        print(json.dumps(child(chain, mode, int(order), int(points), dtype, changes)))
        return
    lines = [
        command_line(__file__, sys.argv[1:]),
        "",
        f"N = {args.points}, {args.dtype}; [set]: {' '.join(args.set)};"
        f" {time.strftime('%Y-%m-%d')}",
        "| chain | K | whole, ms | vmap, ms | whole / vmap | [set], ms | whole / [set] |"
        " whole, MB | vmap, MB | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for chain in args.chains.split(","):
        for order in [int(k) for k in args.orders.split(",")]:
            cells = {}
            runs = ("whole,vmap,set",) if args.time_only else ("whole", "vmap", "whole,vmap,set")
            for modes in runs:
                run = [sys.executable, __file__, "--child", chain, modes, str(order)]
                out = subprocess.run(
                    [*run, str(args.points), args.dtype, " ".join(args.set)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                cells[modes] = json.loads(out.stdout.strip().splitlines()[-1])
            steady = cells["whole,vmap,set"]["steady_ms"]
            w, m, p = steady["whole"], steady["vmap"], steady["set"]
            memory = "- | - | - |"
            if not args.time_only:
                wm, mm = cells["whole"]["peak_mb"], cells["vmap"]["peak_mb"]
                memory = f"{wm:.0f} | {mm:.0f} | {wm / mm:.2f} |"
            lines.append(
                f"| {chain} | {order} | {w:.2f} | {m:.2f} | {w / m:.2f} | {p:.2f} | {w / p:.2f} |"
                f" {memory}"
            )
            print(lines[-1], flush=True)
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
