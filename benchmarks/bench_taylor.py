"""Taylor-mode benchmark: taylax vs ``jax.experimental.jet`` vs nested ``jax.jvp``.

Writes ``benchmarks/results/taylor.md`` (markdown tables) and ``taylor.json``.
Each measurement runs in a fresh process (see ``harness.py``). Options (``--help``) set
the orders, the contenders, the per-run time limit and the maximum order of nested jvp,
e.g.::

    python benchmarks/bench_taylor.py --timeout 60 --scalar-orders 10,20
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from harness import main as _main

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the suite and writes the results into ``benchmarks/results`` by default.

    Args:
      argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
      The exit status: 0, or 1 if a run failed with an error.

    Example:
      >>> main(["--scalar-orders", "10", "--mlp-orders", ""])  # doctest: +SKIP
      0
    """
    return _main(argv, default_out_dir=str(RESULTS_DIR))


if __name__ == "__main__":
    sys.exit(main())
