"""The ``taylax`` command line: ``taylax demo``, ``bench``, ``primitives`` and ``explain``.

``taylax demo`` shows the headline in about a minute, each measurement in a fresh
process: (1) the derivatives of ``0.3*sin(t)*t**10`` at a few orders with taylax,
``jax.experimental.jet`` and nested ``jax.jvp``: the equations each emits and the time
of its first call (trace + compile + run), (2) the steady state of
``jax.jit(jax.vmap(...))`` of the same derivatives over a batch of 65,536 points, and
(3) a jitted user recursion of nested derivatives with ``taylax.jacfwd`` and
``jax.jacfwd`` (``taylax._demo_recursion``); tables, and plots written as PNG files.
``taylax demo --full`` runs the full sweeps (orders up to 100, recursion depths up to
30; several minutes). It needs the ``demo`` extra: ``pip install 'taylax[demo]'``.

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
from ._argtypes import bounded

__all__ = ["main"]

# What each demo size measures: first-call orders, nested jvp's highest order, the
# steady-state orders and batch size, and the recursion depths of taylax.jacfwd and
# jax.jacfwd. The default is chosen to finish in about a minute on 2 cores.
_SIZES: dict[str, dict[str, Any]] = {
    "default": {
        "orders": (4, 8, 16),
        "nested_max_order": 8,
        "batch_orders": (4, 8),
        "points": 65_536,
        "repeats": 5,
        "recursion_ks": _demo_recursion.RECURSION_KS,
        "jacfwd_ks": _demo_recursion.JACFWD_KS,
    },
    "full": {
        "orders": (2, 4, 6, 8, 10, 15, 20, 30, 40, 60, 100),
        "nested_max_order": 8,
        "batch_orders": (4, 8, 16),
        "points": 65_536,
        "repeats": 10,
        "recursion_ks": _demo_recursion.FULL_RECURSION_KS,
        "jacfwd_ks": _demo_recursion.FULL_JACFWD_KS,
    },
    "quick": {
        "orders": (4,),
        "nested_max_order": 4,
        "batch_orders": (2,),
        "points": 1024,
        "repeats": 2,
        "recursion_ks": _demo_recursion.QUICK_RECURSION_KS,
        "jacfwd_ks": _demo_recursion.QUICK_JACFWD_KS,
    },
}
_DEMO_ORDERS = _SIZES["default"]["orders"]
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


def _run_batch(args: argparse.Namespace, console: Any) -> list[dict[str, Any]]:
    """The steady state on a batch: one fresh process per contender, every order in it."""
    results: list[dict[str, Any]] = []
    with _demo_recursion.demo_progress(console) as progress:
        task = progress.add_task("starting", total=len(_benchmark.CONTENDERS))
        for contender in _benchmark.CONTENDERS:
            progress.update(task, description=f"{_LABELS[contender]}, batch")
            orders = [
                k
                for k in args.batch_orders
                if contender != "nested_jvp" or k <= args.nested_max_order
            ]
            if orders:
                results += _benchmark.run_batch(
                    contender,
                    orders,
                    points=args.points,
                    repeats=args.repeats,
                    timeout_s=args.timeout,
                )
            progress.advance(task)
    return results


def _batch_table(results: list[dict[str, Any]], args: argparse.Namespace) -> Any:
    """A rich table of the steady state on the batch, with the ratios of taylax to others."""
    from rich.table import Table

    by_key = {(r["contender"], r["order"]): r for r in results}
    table = Table(
        title=f"steady state: jax.jit(jax.vmap(...)) over N = {args.points:,} points, "
        f"best of {args.repeats} calls",
        caption="every contender returns all derivatives 0..K (nested jvp stacks its levels)",
    )
    table.add_column("order", justify="right")
    for contender in _benchmark.CONTENDERS:
        table.add_column(contender, justify="right")
    for other in ("jet", "nested_jvp"):
        table.add_column(f"taylax/{other}", justify="right")
    for order in sorted({r["order"] for r in results}):
        cells = [by_key.get((c, order)) for c in _benchmark.CONTENDERS]
        mine = (by_key.get(("taylax", order)) or {}).get("steady_s")
        ratios = [
            _benchmark.format_ratio(mine, (by_key.get((o, order)) or {}).get("steady_s"))
            for o in ("jet", "nested_jvp")
        ]
        table.add_row(
            str(order), *(_text(r, "steady_s", _benchmark.format_time) for r in cells), *ratios
        )
    return table


def _plot(results: list[dict[str, Any]], batch: list[dict[str, Any]], out: Path, plt: Any) -> None:
    """Plots equations, first-call time and batch steady state versus order into a PNG."""
    from matplotlib.ticker import MaxNLocator

    panels = [
        (results, "equations", "jaxpr equations (recursive)"),
        (results, "first_call_s", "first call (s)"),
    ]
    if batch:
        points = batch[0]["points"]
        panels.append((batch, "steady_s", f"steady state on {points:,} points (s)"))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels), 4.2), constrained_layout=True
    )
    for ax, (rows, key, ylabel) in zip(axes, panels):
        for contender in _benchmark.CONTENDERS:
            color, marker = _STYLES[contender]
            points = sorted(
                (r["order"], r[key])
                for r in rows
                if r["contender"] == contender and r.get(key) is not None
            )
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker=marker, color=color, label=_LABELS[contender])
            timeouts = [
                (r["order"], r["limit_s"])
                for r in rows
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
    size = "full" if args.full else "quick" if args.quick else "default"
    for name, value in _SIZES[size].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    start = time.perf_counter()
    console.print(
        "[bold]taylax demo[/bold]: the k-th derivative of 0.3*sin(t)*t**10, one fresh process "
        "per measurement (first call = trace + compile + run of jax.jit)."
        + ("" if args.full else " `taylax demo --full` runs the full sweeps (minutes).")
    )
    results = _run_demo_measurements(args, console) if args.orders else []
    caption = (
        f"nested jvp up to order {args.nested_max_order} (--nested-max-order), "
        f"jet within {args.jet_budget:g} s in all (--jet-budget)"
    )
    if results:
        for table in _result_tables(results, caption):
            console.print(table)
    batch = _run_batch(args, console) if args.batch_orders else []
    if batch:
        console.print(_batch_table(batch, args))
    for result in results + batch:
        if result["status"] not in ("ok", "skipped"):
            console.print(
                f"{result['contender']} at order {result['order']}"
                f"{' (batch)' if result['case'] == 'batch' else ''}: {result['status']}, "
                f"{result['reason']}",
                markup=False,
            )
    out = Path(args.out)
    if results or batch:
        _plot(results, batch, out, plt)
        console.print(f"Wrote {out}.", markup=False)
    results += batch
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


# argparse types (argparse names the flag in errors).
_positive_float = bounded(float, 0, strict=True, what="a number of seconds", example="60")
_non_negative_float = bounded(float, 0, what="a number of seconds", example="90")


def _int_at_least(minimum: int):
    """argparse type: an integer >= `minimum`."""
    return bounded(int, minimum)


def _depth_list(text: str) -> tuple[int, ...]:
    """argparse type of the recursion depths: comma-separated integers >= 1 (may be empty)."""
    try:
        return _benchmark._int_list(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated depths >= 1 such as 1,2,4 (or '' to skip), but got {text!r}."
        ) from None


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
    demo.add_argument("--out", default="taylax_demo.png", help="where to write the plot (PNG)")
    size = demo.add_mutually_exclusive_group()
    size.add_argument(
        "--full",
        action="store_true",
        help="the full sweeps: orders up to 100, recursion depths up to 30 (several minutes)",
    )
    size.add_argument("--quick", action="store_true", help="one small order of each part (seconds)")
    demo.add_argument(
        "--orders",
        type=_benchmark._int_list,
        default=None,
        help="comma-separated first-call orders (default "
        f"{','.join(map(str, _DEMO_ORDERS))}; --full: "
        f"{','.join(map(str, _SIZES['full']['orders']))}; empty: skip)",
    )
    demo.add_argument(
        "--nested-max-order",
        type=_int_at_least(0),
        default=None,
        help="run nested jvp up to this order (default 8, or 4 with --quick)",
    )
    demo.add_argument(
        "--jet-budget",
        type=_non_negative_float,
        default=90.0,
        help="seconds that jet's first calls may use in all; later orders are skipped (default 90)",
    )
    demo.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        help="time limit of one run (one process), in seconds (default 120)",
    )
    demo.add_argument(
        "--batch-orders",
        type=_benchmark._int_list,
        default=None,
        help="comma-separated orders of the steady state on a batch (default 4,8; "
        "--full: 4,8,16; empty: skip)",
    )
    demo.add_argument(
        "--points",
        type=_int_at_least(1),
        default=None,
        help="the batch size N of the steady state (default 65536)",
    )
    demo.add_argument(
        "--repeats",
        type=_int_at_least(1),
        default=None,
        help="timed calls per order of the steady state, the best is shown (default 5)",
    )
    demo.add_argument(
        "--recursion-ks",
        type=_depth_list,
        default=None,
        help="depths k of the jitted recursion for taylax.jacfwd (default "
        f"{_demo_recursion.span(_demo_recursion.RECURSION_KS)}; --full: "
        f"{_demo_recursion.span(_demo_recursion.FULL_RECURSION_KS)}; empty: skip)",
    )
    demo.add_argument(
        "--jacfwd-ks",
        type=_depth_list,
        default=None,
        help="depths k of the jitted recursion for jax.jacfwd (default "
        f"{_demo_recursion.span(_demo_recursion.JACFWD_KS)}; --full: "
        f"{_demo_recursion.span(_demo_recursion.FULL_JACFWD_KS)}; empty: skip)",
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
