"""`taylax explain SCRIPT [ARGS...]`: run a Python script under `watch()`, print the report."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from collections.abc import Sequence

from ._watch import watch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `explain` command's arguments to `parser`."""
    parser.add_argument(
        "--json", metavar="FILE", default=None, help="also write the log as JSON to FILE"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=10,
        help="warn when one function compiles more than this many times (default 10)",
    )
    parser.add_argument(
        "--width", type=int, default=120, help="width of the report table (default 120)"
    )
    parser.add_argument("script", metavar="SCRIPT", help="the Python script to run")
    parser.add_argument(
        "args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments for the script"
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Runs the `explain` command; returns the exit status (the script's, or 1 on error)."""
    return explain(
        args.script, args.args, json_path=args.json, budget=args.budget, width=args.width
    )


def explain(
    script: str,
    argv: Sequence[str] = (),
    *,
    json_path: str | None = None,
    budget: int | None = 10,
    width: int = 120,
) -> int:
    """Runs `script` as ``__main__`` under `taylax.watch()` and prints the compile report.

    Args:
      script: path of the Python script.
      argv: the script's arguments (its ``sys.argv[1:]``).
      json_path: also write the log as JSON to this file.
      budget: the watch's recompile budget (None: no warnings).
      width: width of the printed table.

    Returns:
      The exit status: the script's own (0 if it ends normally), 1 if it raised, 2 if the
      script does not exist.

    Example:
      >>> explain("train.py", ["--steps", "10"], json_path="compiles.json")  # doctest: +SKIP
      0
    """
    if not os.path.isfile(script):
        print(
            f"taylax explain: SCRIPT {script!r} is not a file; pass the path of a Python "
            "script, e.g. `taylax explain train.py --steps 10`.",
            file=sys.stderr,
        )
        return 2
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    status = 0
    log = watch(recompile_budget=budget, all_threads=True)
    try:
        with log:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # the script failed: still show what it compiled
        traceback.print_exc()
        status = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    sys.stdout.flush()
    print(log.report(width=width), end="")
    if json_path is not None:
        log.to_json(json_path)
        print(f"Wrote {json_path}.")
    return status
