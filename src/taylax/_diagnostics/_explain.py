"""`taylax explain SCRIPT [ARGS...]`: run a Python script under `watch()`, print the report."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from collections.abc import Sequence

from .._argtypes import bounded
from ._watch import watch

# The narrowest table that still shows a function name and a cause next to each other.
_MIN_WIDTH = 60


# argparse types of ``--budget`` and ``--width`` (argparse names the flag in errors).
_non_negative_int = bounded(
    int,
    0,
    what="a whole number of compiles",
    example="10",
    why="(the compiles allowed per function before a warning)",
)
_width = bounded(
    int, _MIN_WIDTH, what="a number of characters", example="120", why="for the table to fit"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `explain` command's arguments to `parser`."""
    parser.add_argument(
        "--json", metavar="FILE", default=None, help="also write the log as JSON to FILE"
    )
    parser.add_argument(
        "--budget",
        type=_non_negative_int,
        default=10,
        help="warn when one function compiles more than this many times (default 10)",
    )
    parser.add_argument(
        "--width",
        type=_width,
        default=120,
        help=f"width of the report table, at least {_MIN_WIDTH} (default 120)",
    )
    # Optional to argparse, checked in `run_from_args`: a missing SCRIPT before a
    # REMAINDER positional is reported as "required: SCRIPT, ARGS", and ARGS is not.
    parser.add_argument("script", metavar="SCRIPT", nargs="?", help="the Python script to run")
    parser.add_argument(
        "args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments for the script"
    )
    parser.set_defaults(explain_parser=parser)


def run_from_args(args: argparse.Namespace) -> int:
    """Runs the `explain` command; returns the exit status (the script's, or 1 on error)."""
    if args.script is None:
        args.explain_parser.error(
            "the following argument is required: SCRIPT (the Python script to run, "
            "followed by its own arguments)"
        )
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
      The exit status: the script's own (0 if it ends normally; 1 if it raised, or called
      ``sys.exit`` with a message, which is printed to stderr as Python does), 2 if the
      script does not exist. If the JSON file cannot be written, a one-line error is
      printed and the script's status is kept, or 1 if the script succeeded.

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
        status = _exit_status(exit_.code)
    except BaseException:  # the script failed: still show what it compiled
        traceback.print_exc()
        status = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    sys.stdout.flush()
    print(log.report(width=width), end="")
    if json_path is not None:
        try:
            log.to_json(json_path)
        except OSError as error:
            # The report is already printed: say what failed without hiding the script's status.
            reason = error.strerror or str(error)
            print(
                f"taylax explain: could not write the JSON log to --json {json_path!r} "
                f"({reason}); pass a path in an existing, writable folder.",
                file=sys.stderr,
            )
            return status or 1
        print(f"Wrote {json_path}.")
    return status


def _exit_status(code: object) -> int:
    """The process status of ``sys.exit(code)``, printing a message as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    # `sys.exit("message")`: Python prints the message to stderr and exits with 1.
    sys.stdout.flush()
    print(code, file=sys.stderr)
    return 1
