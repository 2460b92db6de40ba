"""Overhead of `taylax.watch()` on the steady state of a jitted call.

A small jitted function is called 10,000 times in a loop, without and inside `watch()`,
in alternating rounds (the best round of each counts, to reject noise from other work
on the machine). Writes ``benchmarks/results/watch.md``. Run by ``make bench``; takes a
few seconds::

    python benchmarks/bench_watch.py --rounds 7 --calls 10000
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp

import taylax

RESULTS = Path(__file__).resolve().parent / "results" / "watch.md"


def _loop(f, x, calls: int) -> float:
    """Seconds per call of `calls` calls of `f(x)` (dispatch included, one final sync)."""
    start = time.perf_counter()
    for _ in range(calls):
        y = f(x)
    y.block_until_ready()
    return (time.perf_counter() - start) / calls


def measure(rounds: int, calls: int) -> dict[str, float]:
    """Best seconds per call without and with `watch()`, over alternating rounds."""
    f = jax.jit(lambda x: jnp.tanh(x) * 2.0 + 1.0)
    x = jnp.ones(16)
    f(x).block_until_ready()
    plain, watched = [], []
    for _ in range(rounds):
        plain.append(_loop(f, x, calls))
        with taylax.watch() as log:
            watched.append(_loop(f, x, calls))
        assert not log.compiles(), "the benchmarked call must be cached"
    return {"plain_s": min(plain), "watched_s": min(watched)}


def main(argv: Sequence[str] | None = None) -> int:
    """Measures and writes the markdown result.

    Args:
      argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
      The exit status: 0.

    Example:
      >>> main(["--rounds", "3", "--calls", "1000"])  # doctest: +SKIP
      0
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per condition")
    parser.add_argument("--calls", type=int, default=10_000, help="calls per round")
    parser.add_argument("--out", default=str(RESULTS), help="markdown file to write")
    args, _ = parser.parse_known_args(argv)  # `make bench` may pass other suites' options
    result = measure(args.rounds, args.calls)
    overhead = result["watched_s"] / result["plain_s"] - 1
    text = (
        "# Overhead of taylax.watch() on a cached jitted call\n\n"
        f"jax {jax.__version__}, {platform.machine()}, {jax.device_count()} device(s) "
        f"({jax.devices()[0].platform}); best of {args.rounds} alternating rounds of "
        f"{args.calls:,} calls of a jitted `tanh(x) * 2 + 1` on float32[16]; measured "
        f"{time.strftime('%Y-%m-%d')}.\n\n"
        "| | per call |\n|---|---:|\n"
        f"| without watch() | {result['plain_s'] * 1e6:.2f} µs |\n"
        f"| inside watch() | {result['watched_s'] * 1e6:.2f} µs |\n"
        f"| overhead | {overhead:+.1%} |\n"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
