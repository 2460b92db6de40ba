"""An emission change's A/B: this tree against an earlier commit, same machine, same JAX.

Each measurement runs in a fresh process (`python benchmarks/code_ab.py --worker CASE`),
alternately with this checkout's `src` and with the `src` of `--base` (checked out into a
temporary git worktree), `--processes` times each; the medians are printed.

Cases (`--cases`):

* `chain:NAME:K:DTYPE:FORM`: `derivatives(f, K)` of a chain of `untuned_chains.py`
  (`gpu_check.py`'s among them) or `bench_batched.py` over `--n` points, `FORM` `whole`
  (the array along ones), `vmap` (per point), `taylor` (`taylax.taylor` per point, under
  `vmap`: the primal and the coefficients) or `taylor-whole` (`taylax.taylor` of the
  array); steady state is the minimum over 5 rounds of 10 calls back to back (ms), first
  call = lower + compile + run.
* `product:G:K:DTYPE:FORM`: the same for `g(t) cos(t)`, `g` a key of
  `primal_products.FUNCTIONS` (`exp`, `log1p`, `cosh`, ...).
* `rk4:K`: the unrolled RK4 of `bench_large.py` (20 steps, scalar), first call and steady
  state.

    python benchmarks/code_ab.py --base HEAD~1 --processes 3 \\
        --cases chain:log1p-tanh-sqrt-sin:24:float64:whole,rk4:4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
sys.path.insert(0, str(HERE))

from harness import checked_out  # noqa: E402


def _worker(case: str, n: int) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import taylax

    sys.path.insert(0, str(HERE))
    kind, *rest = case.split(":")
    if kind in ("chain", "product"):
        name, order, dtype, form = rest
        if kind == "chain":
            from bench_batched import CHAINS as BATCHED
            from untuned_chains import CHAINS

            f = CHAINS[name] if name in CHAINS else BATCHED[name][0]
        else:
            from primal_products import FUNCTIONS, product_with_cosine

            f = product_with_cosine(FUNCTIONS[name])
        order = int(order)
        args = (jnp.linspace(-0.9, 0.9, n, dtype=dtype),)
        if form == "whole":

            def fn(t):
                return taylax.derivatives(f, order)(t, jnp.ones_like(t))
        elif form == "taylor":
            # `taylax.taylor` per point: two outputs, the primal and the coefficients.
            fn = jax.vmap(lambda t: taylax.taylor(f, order)(t, jnp.ones_like(t)))
        elif form == "taylor-whole":

            def fn(t):
                return taylax.taylor(f, order)(t, jnp.ones_like(t))
        elif form == "vmap":
            fn = jax.vmap(taylax.derivatives(f, order))
        else:
            raise SystemExit(f"unknown form {form!r}: use whole, vmap, taylor or taylor-whole")
    elif kind == "rk4":
        from bench_large import rk4_unrolled

        order = int(rest[0])
        args = (jnp.float64(0.8),)

        def fn(y):
            return taylax.derivatives(rk4_unrolled, order)(y)
    else:
        raise SystemExit(f"unknown case kind {kind!r}: use chain:..., product:... or rk4:K")
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            out = compiled(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / 10)
    return {"first_s": first, "ms": best * 1e3}


def _measure(src: Path, case: str, n: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    done = subprocess.run(
        [sys.executable, __file__, "--worker", case, "--n", str(n)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD")
    parser.add_argument("--cases", default="chain:log1p-tanh-sqrt-sin:24:float64:whole,rk4:4")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, args.n)))
        return 0
    with checked_out(args.base) as base_src:
        trees = {"head": ROOT / "src", args.base: base_src}
        for case in args.cases.split(","):
            seen = {label: [] for label in trees}
            for _ in range(args.processes):
                for label, src in trees.items():
                    seen[label].append(_measure(src, case, args.n))
            cells = []
            for label, runs in seen.items():
                ms = statistics.median(r["ms"] for r in runs)
                first = statistics.median(r["first_s"] for r in runs)
                cells.append(f"{label} {ms:.3f} ms, first {first:.2f} s")
            ratio = statistics.median(r["ms"] for r in seen["head"]) / statistics.median(
                r["ms"] for r in seen[args.base]
            )
            print(f"{case}: " + " | ".join(cells) + f" | head/base {ratio:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
