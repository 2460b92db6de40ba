"""Where the first call of an unrolled loop goes, and what a call then costs, per policy variant.

For one program of `bench_unrolled.PROGRAMS`, one order and one number of steps, each
variant of the CPU policy (`--variants`, `;`-separated lists of `FIELD=VALUE`, an empty
one for the CPU policy itself) runs in a fresh process, under `jax.jit(jax.vmap(...))`
over `--points` values (`--scalar`: one value). The child prints the seconds spent
tracing, lowering and compiling, the fused kernels of the compiled program, whether the
pass rolled the loop into a scan (`EmissionPolicy.rolls`) or else took the compact form
(`EmissionPolicy.within_budget`), and the time of each of
`--calls` calls after the first. A child past `--timeout` seconds is stopped and its row
says so: a program whose run time grows exponentially with its length never finishes
`unrolled_ab.py`'s rounds. Usage::

    python benchmarks/unrolled_parts.py rk4 2 40 --variants ";budget=None"
    python benchmarks/unrolled_parts.py rk4 4 20 --variants ";budget=None" --timeout 300
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(program: str, K: int, steps: int, variant: str, points: int, calls: int) -> None:
    """Compile and call one variant in this process; print one JSON line."""
    import re

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import taylax
    from bench_unrolled import PROGRAMS
    from unrolled_ab import variant_policy

    policy = variant_policy(variant)

    def f(y):
        return PROGRAMS[program](y, steps)

    y = jnp.float64(0.8) if points == 0 else jnp.linspace(0.5, 1.0, points)
    equations = sum(taylax.equation_counts(jax.make_jaxpr(f)(jnp.float64(0.8))).values())
    if policy.rolls(equations, K):
        form = "rolled"
    else:
        form = "compact" if policy.within_budget(equations, K) is not policy else "full"
    with taylax.emission_policy(policy):
        g = taylax.derivatives(f, K)
        fn = jax.jit(g if points == 0 else jax.vmap(g))
        start = time.perf_counter()
        traced = fn.trace(y)
        traced_at = time.perf_counter()
        lowered = traced.lower()
        lowered_at = time.perf_counter()
        compiled = lowered.compile()
        compiled_at = time.perf_counter()
    jax.block_until_ready(compiled(y))
    first_at = time.perf_counter()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        jax.block_until_ready(compiled(y))
        times.append((time.perf_counter() - t) * 1e3)
    print(
        json.dumps(
            {
                "trace_s": traced_at - start,
                "lower_s": lowered_at - traced_at,
                "compile_s": compiled_at - lowered_at,
                "first_s": first_at - start,
                "kernels": len(re.findall(r" fusion\(", compiled.as_text())),
                "form": form,
                "ms": times,
            }
        )
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program")
    parser.add_argument("order", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--variants", default="", help="';'-separated FIELD=VALUE,... lists")
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--scalar", action="store_true", help="one value, not jax.vmap")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    points = 0 if args.scalar else args.points
    if args.child:
        child(args.program, args.order, args.steps, args.variants, points, args.calls)
        return 0
    mode = "scalar" if args.scalar else f"vmap over {points}"
    print(f"{args.program}, K = {args.order}, {args.steps} steps, {mode}")
    columns = ("variant", "form", "trace s", "lower s", "compile s", "first call s")
    print("| " + " | ".join(columns + ("kernels", "ms per call")) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for variant in args.variants.split(";"):
        command = [sys.executable, __file__, args.program, str(args.order), str(args.steps)]
        command += ["--variants", variant, "--points", str(args.points), "--calls"]
        command += [str(args.calls), "--child"] + (["--scalar"] if args.scalar else [])
        label = variant or "cpu"
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=args.timeout, check=True
            )
        except subprocess.TimeoutExpired:
            print(f"| {label} | | | | | | | stopped after {args.timeout:.0f} s |", flush=True)
            continue
        except subprocess.CalledProcessError as e:
            print(f"| {label} | | | | | | | failed: {e.stderr.strip().splitlines()[-1]} |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        ms = " / ".join(f"{t:.3f}" for t in r["ms"])
        cells = [label, r["form"]]
        cells += [f"{r[k]:.2f}" for k in ("trace_s", "lower_s", "compile_s", "first_s")]
        cells += [str(r["kernels"]), ms]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
