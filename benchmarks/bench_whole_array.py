"""Whole-array calls against the vmapped call: time and peak memory.

`taylax.derivatives(f, K)(x, v)` on a whole array `x` of an elementwise `f`, against
`jax.jit(jax.vmap(taylax.derivatives(f, K)))(x, v)`, float64. Steady state: both in one
process, the minimum over 7 interleaved rounds (each timed call right after an untimed
one of its own). Peak memory: each alone in a fresh process, its `ru_maxrss` (which
includes JAX's own ~200 MB). Prints a markdown table and writes it, headed by the
command, to `benchmarks/results/whole_array.md`.

    python benchmarks/bench_whole_array.py                       # N = 2^20, K = 4, 16, 32
    python benchmarks/bench_whole_array.py --points 65536 --orders 8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness import command_line

RESULTS = Path(__file__).resolve().parent / "results" / "whole_array.md"
CHAINS = {
    "exp-cos-div": "lambda t: jnp.exp(jnp.cos(t)) / (1 + t**2)",
    "log1p-tanh-sqrt": "lambda t: jnp.tanh(jnp.log1p(t * t)) * jnp.sqrt(1 + t * t)",
}


def child(chain: str, modes: str, order: int, points: int) -> dict:
    """`modes`: "whole", "vmap" (peak memory of one) or "whole,vmap" (both timed)."""
    import resource

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import taylax

    f = eval(CHAINS[chain], {"jnp": jnp})  # noqa: S307  (the table above)
    x = jnp.linspace(0.1, 1.0, points)
    v = jnp.ones_like(x)
    d = taylax.derivatives(f, order)
    fns = {"whole": jax.jit(d), "vmap": jax.jit(jax.vmap(d))}
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
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        chain, mode, order, points = args.child
        print(json.dumps(child(chain, mode, int(order), int(points))))
        return
    lines = [
        command_line(__file__, sys.argv[1:]),
        "",
        f"N = {args.points}, float64; whole / vmap; {time.strftime('%Y-%m-%d')}",
        "| chain | K | whole, ms | vmap, ms | ratio | whole, MB | vmap, MB | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for chain in args.chains.split(","):
        for order in [int(k) for k in args.orders.split(",")]:
            cells = {}
            for modes in ("whole", "vmap", "whole,vmap"):
                run = [sys.executable, __file__, "--child", chain, modes, str(order)]
                out = subprocess.run(
                    [*run, str(args.points)], capture_output=True, text=True, check=True
                )
                cells[modes] = json.loads(out.stdout.strip().splitlines()[-1])
            w, m = (
                cells["whole,vmap"]["steady_ms"]["whole"],
                cells["whole,vmap"]["steady_ms"]["vmap"],
            )
            wm, mm = cells["whole"]["peak_mb"], cells["vmap"]["peak_mb"]
            lines.append(
                f"| {chain} | {order} | {w:.1f} | {m:.1f} | {w / m:.2f} | {wm:.0f} | {mm:.0f} | "
                f"{wm / mm:.2f} |"
            )
            print(lines[-1], flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
