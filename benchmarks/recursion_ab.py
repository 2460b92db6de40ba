"""The nested-derivative recursion's first call: this tree against an earlier commit.

Runs `python benchmarks/recursion.py <contender> <k>` (one first call in a fresh process,
`recursion._worker`) alternately with this checkout's `src` and with the `src`
of `--base` (checked out into a temporary git worktree), `--processes` times each, and
prints every first call and the medians, with those of the seconds spent in whole-heap
(generation-2) collections during the call and of the steady state (the least of 20
calls after it); `--phases` times its stages apart (trace,
lower, compile). With `--collect-first` each worker runs a
full garbage collection before its timed call: the two trees' processes allocate
differently before it (imports, tracing), so a generation-2 collection of the whole heap
(about 50 ms at k = 9) may fall inside one tree's first call and just after the
other's. `jax.jacfwd`'s first call at `--jacfwd-k` (default 7) is timed the same way,
for the issue's bound (taylax at k = 20 at most `jax.jacfwd` at k = 7).

    python benchmarks/recursion_ab.py --base 5ce19c2 --ks 9,20 --processes 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import checked_out  # noqa: E402


def first_call(src: Path, contender: str, k: int, flags: list[str]) -> dict:
    """The worker's result for one first call: `first_call_s`, `full_collections_s` and,
    with `--phases`, `trace_s`, `lower_s` and `compile_s`."""
    env = dict(os.environ, PYTHONPATH=str(src))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "recursion.py"), contender, str(k), *flags],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _medians(results: list[dict]) -> str:
    keys = ("full_collections_s", "trace_s", "lower_s", "compile_s", "steady_s")
    keys = [k for k in keys if k in results[0]]
    return ", ".join(f"{k[:-2]} {statistics.median(r[k] for r in results):.6f}" for k in keys)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="5ce19c2")
    parser.add_argument("--ks", default="9,20")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--jacfwd-k", type=int, default=7)
    parser.add_argument(
        "--collect-first",
        action="store_true",
        help="a full garbage collection before each timed call (both trees)",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="time the first call's stages (trace, lower, compile) apart",
    )
    args = parser.parse_args(argv)
    flags = [
        f for f, on in (("--collect-first", args.collect_first), ("--phases", args.phases)) if on
    ]
    with checked_out(args.base) as base_src:
        trees = {"head": ROOT / "src", args.base: base_src}
        for k in (int(k) for k in args.ks.split(",")):
            seen = {label: [] for label in trees}
            for _ in range(args.processes):
                for label, src in trees.items():
                    seen[label].append(first_call(src, "taylax", k, flags))
            for label, results in seen.items():
                times = [r["first_call_s"] for r in results]
                print(
                    f"taylax k = {k}, {label}: {statistics.median(times):.2f} s ("
                    + " ".join(f"{x:.2f}" for x in times)
                    + f"); medians: {_medians(results)}",
                    flush=True,
                )
        jac = [
            first_call(ROOT / "src", "jax", args.jacfwd_k, flags)["first_call_s"]
            for _ in range(args.processes)
        ]
        print(f"jax.jacfwd k = {args.jacfwd_k}: median {statistics.median(jac):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
