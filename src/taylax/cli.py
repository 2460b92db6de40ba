"""The ``taylax`` command line: ``taylax demo`` and ``taylax bench``.

``taylax demo`` computes the derivatives of ``0.3*sin(t)*t**10`` at increasing
orders with taylax, ``jax.experimental.jet`` and nested ``jax.jvp``, each
measurement in a fresh process, and shows the equations that each emits and
the time of its first call (trace + compile + run) in a table and a plot. Then
it runs a jitted user recursion of nested derivatives with ``taylax.jacfwd``
and ``jax.jacfwd`` (``taylax._demo_recursion``), with its own table and plot.
It needs the ``demo`` extra: ``pip install 'taylax[demo]'``.

``taylax bench`` runs the full benchmark suite (see ``taylax._benchmark``) and
writes markdown and JSON results.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _benchmark, _demo_recursion

__all__ = ["main"]

_DEMO_ORDERS = (2, 4, 6, 8, 10, 15, 20, 30, 40, 60, 100)
_QUICK_ORDERS = (2, 4)
_LABELS = {"taylax": "taylax", "jet": "jax.experimental.jet", "nested_jvp": "nested jax.jvp"}
_STYLES = {"taylax": ("tab:green", "o"), "jet": ("tab:blue", "s"), "nested_jvp": ("tab:red", "^")}


def _demo_modules() -> tuple[Any, Any] | None:
    """Imports rich and matplotlib (Agg backend), or prints how to install them."""
    try:
        import matplotlib
        import rich  # noqa: F401
    except ImportError as error:
        print(
            f"taylax demo needs the optional package {error.name!r}, which is not installed. "
            "Install the demo extra with: pip install 'taylax[demo]'",
            file=sys.stderr,
        )
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import rich.console

    return rich.console.Console(), plt


def _plan(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The (contender, order) runs of the demo, before the jet budget cuts any."""
    return [
        (contender, order)
        for order in args.orders
        for contender in _benchmark.CONTENDERS
        if contender != "nested_jvp" or order <= args.nested_max_order
    ]


def _run_demo_measurements(args: argparse.Namespace, console: Any) -> list[dict[str, Any]]:
    plan = _plan(args)
    results: list[dict[str, Any]] = []
    jet_left = args.jet_budget
    with _demo_recursion.demo_progress(console) as progress:
        task = progress.add_task("starting", total=len(plan))
        for contender, order in plan:
            progress.update(task, description=f"{_LABELS[contender]}, order {order}")
            if contender == "jet" and jet_left <= 0:
                result = _benchmark.skipped(
                    "scalar",
                    contender,
                    order,
                    f"over the time budget of {args.jet_budget:g} s for jet (--jet-budget)",
                )
            else:
                timeout = min(args.timeout, jet_left) if contender == "jet" else args.timeout
                result = _benchmark.run_one(
                    "scalar",
                    contender,
                    order,
                    timeout_s=timeout,
                    steady=False,
                    count_on_timeout=True,
                )
                if contender == "jet":
                    jet_left -= result["wall_s"]
                    if result["status"] == "timeout":
                        jet_left = 0.0
            results.append(result)
            progress.advance(task)
    return results


def _result_tables(results: list[dict[str, Any]], caption: str) -> list[Any]:
    """Two rich tables, equations and first-call time, with the ratios of taylax to others."""
    from rich.table import Table

    by_key = {(r["contender"], r["order"]): r for r in results}
    orders = sorted({r["order"] for r in results})
    metrics = (
        ("jaxpr equations (recursive count)", "equations", lambda n: f"{n:,}"),
        ("first call: trace + compile + run of jax.jit", "first_call_s", _benchmark.format_time),
    )
    tables = []
    for title, key, fmt in metrics:
        table = Table(title=title, caption=caption)
        table.add_column("order", justify="right")
        for contender in _benchmark.CONTENDERS:
            table.add_column(contender, justify="right")
        for other in ("jet", "nested_jvp"):
            table.add_column(f"taylax/{other}", justify="right")
        for order in orders:
            cells = [by_key.get((c, order)) for c in _benchmark.CONTENDERS]
            mine = by_key.get(("taylax", order)) or {}
            ratios = [
                _benchmark.format_ratio(mine.get(key), (by_key.get((o, order)) or {}).get(key))
                for o in ("jet", "nested_jvp")
            ]
            table.add_row(str(order), *(_text(r, key, fmt) for r in cells), *ratios)
        tables.append(table)
    return tables


def _text(result: dict[str, Any] | None, key: str, fmt: Any) -> str:
    if result is None:
        return "—"
    if result.get(key) is not None:
        return fmt(result[key])
    return "skipped" if result["status"] == "skipped" else result["status"]


def _plot(results: list[dict[str, Any]], out: Path, plt: Any) -> None:
    """Plots equations and first-call time versus order (log-scale y) into a PNG."""
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    panels = (("equations", "jaxpr equations (recursive)"), ("first_call_s", "first call (s)"))
    for ax, (key, ylabel) in zip(axes, panels):
        for contender in _benchmark.CONTENDERS:
            color, marker = _STYLES[contender]
            points = sorted(
                (r["order"], r[key])
                for r in results
                if r["contender"] == contender and r.get(key) is not None
            )
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker=marker, color=color, label=_LABELS[contender])
            timeouts = [
                (r["order"], r["limit_s"])
                for r in results
                if r["contender"] == contender and r["status"] == "timeout" and key != "equations"
            ]
            if timeouts:
                xs, ys = zip(*timeouts)
                ax.scatter(
                    xs, ys, marker="x", s=70, color=color, label=f"{contender}: timeout (> limit)"
                )
        ax.set_yscale("log")
        ax.set_xlabel("derivative order")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("d^k/dt^k of 0.3*sin(t)*t**10: taylax vs jet vs nested jvp")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _demo(args: argparse.Namespace) -> int:
    modules = _demo_modules()
    if modules is None:
        return 1
    console, plt = modules
    if args.orders is None:
        args.orders = _QUICK_ORDERS if args.quick else _DEMO_ORDERS
    if args.nested_max_order is None:
        args.nested_max_order = 4 if args.quick else 8
    start = time.perf_counter()
    console.print(
        "[bold]taylax demo[/bold]: the k-th derivative of 0.3*sin(t)*t**10, one fresh process "
        "per measurement (first call = trace + compile + run of jax.jit)."
    )
    results = _run_demo_measurements(args, console)
    caption = (
        f"nested jvp up to order {args.nested_max_order} (--nested-max-order), "
        f"jet within {args.jet_budget:g} s in all (--jet-budget)"
    )
    for table in _result_tables(results, caption):
        console.print(table)
    for result in results:
        if result["status"] not in ("ok", "skipped"):
            console.print(
                f"{result['contender']} at order {result['order']}: {result['status']}, "
                f"{result['reason']}",
                markup=False,
            )
    out = Path(args.out)
    _plot(results, out, plt)
    console.print(f"Wrote {out}.", markup=False)
    quick = args.quick
    if args.recursion_ks is None:
        args.recursion_ks = (
            _demo_recursion.QUICK_RECURSION_KS if quick else _demo_recursion.RECURSION_KS
        )
    if args.jacfwd_ks is None:
        args.jacfwd_ks = _demo_recursion.QUICK_JACFWD_KS if quick else _demo_recursion.JACFWD_KS
    if args.recursion_ks or args.jacfwd_ks:
        results += _demo_recursion.run(
            console,
            plt,
            out.with_name(f"{out.stem}_recursion{out.suffix}"),
            args.recursion_ks,
            args.jacfwd_ks,
            args.timeout,
        )
    console.print(f"{time.perf_counter() - start:.0f} s in all.", markup=False)
    # Timeouts and skips are part of the story; an error is a failure.
    return 1 if any(r["status"] == "error" for r in results) else 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taylax", description="Taylor-mode higher-order derivatives for JAX."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="compare taylax, jet and nested jvp on a scalar function (needs taylax[demo])",
        description="Compare taylax, jax.experimental.jet and nested jax.jvp on the k-th "
        "derivative of 0.3*sin(t)*t**10: equations emitted and first-call time.",
    )
    demo.add_argument("--out", default="taylax_demo.png", help="where to write the plot (PNG)")
    demo.add_argument("--quick", action="store_true", help="small orders only (a few seconds)")
    demo.add_argument(
        "--orders",
        type=_benchmark._int_list,
        default=None,
        help=f"comma-separated orders (default {','.join(map(str, _DEMO_ORDERS))})",
    )
    demo.add_argument(
        "--nested-max-order",
        type=int,
        default=None,
        help="run nested jvp up to this order (default 8, or 4 with --quick)",
    )
    demo.add_argument(
        "--jet-budget",
        type=float,
        default=90.0,
        help="seconds that jet may use in all; later orders are skipped (default 90)",
    )
    demo.add_argument(
        "--timeout", type=float, default=120.0, help="time limit of one run, in seconds"
    )
    demo.add_argument(
        "--recursion-ks",
        type=_benchmark._int_list,
        default=None,
        help="depths k of the jitted recursion for taylax.jacfwd (default 1..30; empty: skip)",
    )
    demo.add_argument(
        "--jacfwd-ks",
        type=_benchmark._int_list,
        default=None,
        help="depths k of the jitted recursion for jax.jacfwd (default 1..8; empty: skip)",
    )
    demo.set_defaults(handler=_demo)

    bench = commands.add_parser(
        "bench",
        help="run the benchmark suite and write markdown and JSON results",
        description="Benchmark taylax against jax.experimental.jet and nested jax.jvp "
        "(first call, steady state, equations), each run in a fresh process.",
    )
    _benchmark.add_arguments(bench, default_out_dir="benchmarks/results")
    bench.set_defaults(handler=_benchmark.run_from_args)

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
    readme = path.read_text()
    start, end = "<!-- primitives:start -->", "<!-- primitives:end -->"
    if start not in readme or end not in readme:
        print(f"{path} has no `{start}` ... `{end}` markers to write the list between.")
        return 1
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}")
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
