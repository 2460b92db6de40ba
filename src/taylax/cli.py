"""The ``taylax`` command line: ``taylax demo``, ``primitives`` and ``explain``.

``taylax demo`` shows the headline in about a minute, each measurement in a fresh
process: (1) the derivatives of ``0.3*sin(t)*t**10`` at a few orders with taylax,
``jax.experimental.jet`` and nested ``jax.jvp``: the equations each emits and the time
of its first call (trace + compile + run), (2) the steady state of
``jax.jit(jax.vmap(...))`` of the same derivatives over a batch of 65,536 points, and
(3) a jitted user recursion of nested derivatives with ``taylax.jacfwd`` and
``jax.jacfwd``; tables, and plots written as PNG files (``taylax._demo``).
``taylax demo --full`` runs the full sweeps (orders up to 100, recursion depths up to
30; several minutes). It needs the ``demo`` extra: ``pip install 'taylax[demo]'``.

The benchmark suite is not part of the package: ``make bench`` runs the scripts of
``benchmarks/`` in a checkout of the repository.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence

from . import _demo

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="taylax", description="Taylor-mode higher-order derivatives for JAX."
    )
    parser.add_argument("--version", action="version", version=f"taylax {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="compare taylax, jet and nested jvp in about a minute (needs taylax[demo])",
        description="Compare taylax, jax.experimental.jet and nested jax.jvp on the "
        "derivatives of 0.3*sin(t)*t**10: equations emitted and first-call time at a few "
        "orders, the steady state of jax.jit(jax.vmap(...)) over a batch, and a jitted "
        "recursion of nested derivatives (taylax.jacfwd vs jax.jacfwd). About a minute; "
        "--full runs the full sweeps (several minutes). Each option overrides the size.",
    )
    _demo.add_arguments(demo)
    demo.set_defaults(handler=_demo.run)

    primitives = commands.add_parser(
        "primitives",
        help="list the JAX primitives taylax supports (generated from the rule table)",
        description="Print the supported-primitive list that the README shows.",
    )
    primitives.add_argument(
        "--write-readme",
        metavar="PATH",
        nargs="?",
        const="README.md",
        default=None,
        help="replace the list between the README's primitives markers (default README.md)",
    )
    primitives.set_defaults(handler=_primitives)

    from ._diagnostics import _explain

    explain = commands.add_parser(
        "explain",
        help="run a Python script and report why its jitted functions traced or compiled",
        description="Run SCRIPT (with ARGS) under taylax.watch() and print, per jitted "
        "function, its calls, traces, compiles, the time lost and the cause of each "
        "recompile. Options go before SCRIPT.",
    )
    _explain.add_arguments(explain)
    explain.set_defaults(handler=_explain.run_from_args)
    return parser


def _primitives(args: argparse.Namespace) -> int:
    from ._coverage import primitive_coverage_markdown

    text = primitive_coverage_markdown()
    if args.write_readme is None:
        print(text)
        return 0
    path = pathlib.Path(args.write_readme)
    try:
        readme = path.read_text(encoding="utf-8")
    except OSError as error:
        print(
            f"taylax primitives: cannot read --write-readme {str(path)!r} "
            f"({error.strerror or error}). Run it from the repository root, where README.md "
            "is, or pass the README's path: taylax primitives --write-readme PATH.",
            file=sys.stderr,
        )
        return 1
    start, end = "<!-- primitives:start -->", "<!-- primitives:end -->"
    if start not in readme or end not in readme:
        print(
            f"taylax primitives: {path} has no `{start}` ... `{end}` markers to write the "
            "list between; add them where the list belongs.",
            file=sys.stderr,
        )
        return 1
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}", encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``taylax`` command line.

    Args:
      argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
      The exit status: 0 on success.

    Example:
      >>> main(["demo", "--quick", "--out", "/tmp/demo.png"])  # doctest: +SKIP
      0
    """
    args = _build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
