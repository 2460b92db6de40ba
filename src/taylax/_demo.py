"""``taylax demo``: taylax against ``jax.experimental.jet`` and nested ``jax.jvp``.

Three parts, each measurement in a fresh Python process (``python -c`` with a short
program of public names), so that no trace or compile cache is shared and a first call
costs what a user's first call costs:

1. the derivatives of ``0.3*sin(t)*t**10`` at a few orders: the jaxpr equations each
   contender emits and its first call (trace + compile + run of ``jax.jit``);
2. the steady state of ``jax.jit(jax.vmap(...))`` of the same derivatives over a batch;
3. a jitted user recursion of nested derivatives, ``taylax.jacfwd`` against ``jax.jacfwd``:
   first calls (``benchmarks/bench_derivative.py`` also counts the emitted equations).

Tables go to the terminal (rich) and plots to PNG files (matplotlib): the ``demo`` extra.
The benchmark suite (``make bench``, ``benchmarks/``) measures the same and more.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ._argtypes import bounded

# What each size measures: first-call orders, nested jvp's highest order, the steady
# state's orders, batch size and timed calls, and the recursion depths of taylax.jacfwd and
# jax.jacfwd (whose program triples with every level: a minute at k = 9, several at 10).
# The default finishes in about a minute on 2 cores: every fresh process costs about a
# second before it measures anything, so their number stays small.
_COLUMNS = ("orders", "nested_max_order", "batch_orders", "points", "repeats")
_COLUMNS += ("recursion_ks", "jacfwd_ks")
_ORDERS_TO_100 = (2, 4, 6, 8, 10, 15, 20, 30, 40, 60, 100)
SIZES: dict[str, dict[str, Any]] = {
    size: dict(zip(_COLUMNS, row))
    for size, row in {
        "default": ((4, 8, 16), 8, (4, 8), 65_536, 5, (2, 4, 6, 10), (2, 4, 6)),
        "full": (_ORDERS_TO_100, 8, (4, 8, 16), 65_536, 10, (*range(1, 31),), (*range(1, 9),)),
        "quick": ((4,), 4, (2,), 1024, 2, (1, 2), (1,)),
    }.items()
}
CONTENDERS = ("taylax", "jet", "nested_jvp")
# Each contender's label, colour and marker in the plots.
_STYLES = {
    "taylax": ("taylax", "tab:green", "o"),
    "jet": ("jax.experimental.jet", "tab:blue", "s"),
    "nested_jvp": ("nested jax.jvp", "tab:red", "^"),
    "jax": ("jax.jacfwd", "tab:red", "^"),
}

# The worker, `python -c _WORKER PART CONTENDER ...`: a short program of public names. It
# imports taylax before a timed call only when taylax is the contender timed.
_WORKER = """
import json, sys, time
from functools import partial
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
part, contender, *argv = sys.argv[1:]
if contender == "taylax":
    import taylax
def emit(**fields):
    print(json.dumps(fields), flush=True)
def timed(fn, *args):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start
f = lambda t: 0.3 * jnp.sin(t) * t**10
def build(order, every_level):
    if contender == "taylax":
        return taylax.derivatives(f, order)
    if contender == "jet":
        from jax.experimental.jet import jet
        def fn(t, v):
            primal, series = jet(f, (t,), ((v,) + (jnp.zeros_like(v),) * (order - 1),))
            return jnp.stack([primal, *series])
        return fn
    def fn(t, v):
        levels = [f]
        for _ in range(order):
            levels.append(lambda y, h=levels[-1]: jax.jvp(h, (y,), (v,))[1])
        return jnp.stack([g(t) for g in levels]) if every_level else levels[-1](t)
    return fn
def recursion(jacfwd):
    sx = jnp.asarray([[0, 1.0], [1.0, 0]], dtype=complex)
    sy = jnp.asarray([[0, -1j], [1j, 0]], dtype=complex)
    def commutator_herm(a, b):
        c = a @ b
        return c - jnp.swapaxes(c, -1, -2).conj()
    @partial(jax.jit, static_argnames="k")
    def my_func(t, k):
        if k == 0:
            return sx
        x_km1 = lambda t: my_func(t, k - 1)
        return 1j * commutator_herm(jnp.cos(t) * sy, x_km1(t)) + jacfwd(x_km1, holomorphic=True)(t)
    return my_func
timed(jax.jit(lambda a: a + 1.0), jnp.zeros(()))  # the backend starts outside the timings
if part == "first":
    order, mode = int(argv[0]), argv[1]
    fn, t, v = build(order, False), jnp.float64(1.1), jnp.float64(1.0)
    if mode == "time":
        emit(first_call_s=timed(jax.jit(fn), t, v))
    import taylax
    emit(equations=sum(taylax.equation_counts(jax.make_jaxpr(fn)(t, v)).values()))
elif part == "batch":
    points, repeats = int(argv[0]), int(argv[1])
    t, v = jnp.linspace(0.5, 1.5, points), jnp.ones(points)
    for order in map(int, argv[2].split(",")):
        batched = jax.jit(jax.vmap(build(order, True)))
        timed(batched, t, v)
        timed(batched, t, v)
        emit(order=order, steady_s=min(timed(batched, t, v) for _ in range(repeats)))
else:
    my_func = recursion(taylax.jacfwd if contender == "taylax" else jax.jacfwd)
    k, t = int(argv[0]), jnp.asarray(1.0, dtype=complex)
    emit(first_call_s=timed(lambda t: my_func(t, k), t))
"""


def _spawn(argv: list[str], timeout_s: float) -> tuple[list[dict], str, str | None]:
    """Runs a worker; returns its JSON lines, a status and the reason if not ok."""
    command = [sys.executable, "-c", _WORKER, *argv]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        out, status, reason = proc.stdout, "ok", None
    except subprocess.TimeoutExpired as error:
        out, status = error.stdout or "", "timeout"
        reason = f"exceeded the time limit of {timeout_s:.3g} s"
    if status == "ok" and proc.returncode != 0:
        # The exception's line, not the note JAX adds after the traceback.
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        status, reason = "error", next((x for x in reversed(lines) if "Error" in x), lines[-1])
    out = out.decode() if isinstance(out, bytes) else out
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")], status, reason


def _measure(console: Any, plan: list[tuple[str, Any]], one, what: str) -> list[dict]:
    """Runs `one(contender, x)` for each (contender, x) of `plan` under a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    results = []
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("starting", total=len(plan))
        for contender, x in plan:
            text = ", ".join(map(str, x)) if isinstance(x, list) else x
            progress.update(task, description=f"{_STYLES[contender][0]}, {what} {text}")
            results += one(contender, x)
            progress.advance(task)
    return results


def _first_calls(args: argparse.Namespace, console: Any) -> list[dict[str, Any]]:
    jet_left = args.jet_budget

    def one(contender: str, order: int) -> list[dict[str, Any]]:
        nonlocal jet_left
        row: dict[str, Any] = {"contender": contender, "order": order, "limit_s": args.timeout}
        if contender == "jet" and jet_left <= 0:
            reason = f"over jet's time budget of {args.jet_budget:g} s (--jet-budget)"
            return [{**row, "status": "skipped", "reason": reason}]
        timeout = min(args.timeout, jet_left) if contender == "jet" else args.timeout
        start = time.perf_counter()
        fields, status, reason = _spawn(["first", contender, str(order), "time"], timeout)
        if status == "timeout":  # how large the program was: tracing alone is much cheaper
            fields, _, _ = _spawn(["first", contender, str(order), "count"], timeout)
        if contender == "jet":
            jet_left = 0.0 if status == "timeout" else jet_left - (time.perf_counter() - start)
        row.update({k: v for line in fields for k, v in line.items()}, limit_s=timeout)
        return [{**row, "status": status, "reason": reason}]

    top = args.nested_max_order
    plan = [(c, k) for k in args.orders for c in CONTENDERS if c != "nested_jvp" or k <= top]
    return _measure(console, plan, one, "order")


def _batch(args: argparse.Namespace, console: Any) -> list[dict[str, Any]]:
    """One process per contender, every order in it (nested jvp stacks its levels)."""

    def one(contender: str, orders: list[int]) -> list[dict[str, Any]]:
        argv = [str(args.points), str(args.repeats), ",".join(map(str, orders))]
        rows, status, reason = _spawn(["batch", contender, *argv], args.timeout)
        done = {r["order"]: {"status": "ok", "reason": None, **r} for r in rows}
        # An order the worker never reported: the process timed out or failed before it.
        lost = {"status": "error" if status == "ok" else status, "reason": reason}
        return [{"contender": contender, "order": k, **done.get(k, lost)} for k in orders]

    top = args.nested_max_order
    plan = [
        (c, [k for k in args.batch_orders if c != "nested_jvp" or k <= top]) for c in CONTENDERS
    ]
    return _measure(console, [(c, ks) for c, ks in plan if ks], one, "batch, orders")


def _recursion(args: argparse.Namespace, console: Any) -> list[dict[str, Any]]:
    def one(contender: str, k: int) -> list[dict[str, Any]]:
        rows, status, reason = _spawn(["recursion", contender, str(k)], args.timeout)
        fields = rows[0] if rows else {}
        row = {"contender": contender, "order": k, "status": status, "reason": reason}
        return [{**row, **fields, "limit_s": args.timeout}]

    plan = [("jax", k) for k in args.jacfwd_ks] + [("taylax", k) for k in args.recursion_ks]
    return _measure(console, plan, one, "k =")


def _format_time(seconds: float | None) -> str:
    """A duration with three significant digits and a unit, e.g. ``12.3 ms``; ``—`` if None."""
    if seconds is None:
        return "—"
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-6:.3g} µs"


def _table(title: str, results: list[dict], key: str, fmt, names: dict, caption=None) -> Any:
    """Rows per order (or depth); one column per contender of `names` (taylax first), then
    taylax's ratio to each other contender."""
    from rich.table import Table

    by_key = {(r["contender"], r["order"]): r for r in results}
    table = Table(title=title, caption=caption)
    mine, *others = names.values()
    for name in ("order" if mine == "taylax" else "k", mine, *others):
        table.add_column(name, justify="right")
    for other in others:
        table.add_column(f"{mine}/{other}", justify="right")
    for order in sorted({r["order"] for r in results}):
        cells = [by_key.get((c, order)) or {} for c in names]
        texts = [fmt(c[key]) if c.get(key) is not None else c.get("status", "—") for c in cells]
        ours = cells[0].get(key)
        ratios = [
            f"{ours / c[key]:.3g}×" if ours is not None and c.get(key) else "—" for c in cells[1:]
        ]
        table.add_row(str(order), *texts, *ratios)
    return table


def _plot(panels: list[tuple], out: Path, title: str, xlabel: str, plt: Any, names=None) -> None:
    """One log-scale panel per (results, key, ylabel); a timeout is an x at its limit."""
    from matplotlib.ticker import MaxNLocator

    size = (max(5.5 * len(panels), 8.0), 4.2)
    fig, axes = plt.subplots(1, len(panels), figsize=size, squeeze=False)
    for ax, (results, key, ylabel) in zip(axes[0], panels):
        for contender in dict.fromkeys(r["contender"] for r in results):
            label, color, marker = _STYLES[contender]
            label = (names or {}).get(contender, label)
            mine = [r for r in results if r["contender"] == contender]
            points = sorted((r["order"], r[key]) for r in mine if r.get(key) is not None)
            if points:
                ax.plot(*zip(*points), marker=marker, color=color, label=label)
            over = [(r["order"], r["limit_s"]) for r in mine if r["status"] == "timeout"]
            if over and key != "equations":
                ax.scatter(*zip(*over), marker="x", s=70, color=color, label="timeout (> limit)")
        ax.set(yscale="log", xlabel=xlabel, ylabel=ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.set_layout_engine("constrained")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Runs ``taylax demo`` with parsed :func:`add_arguments` options.

    Args:
      args: the parsed options; those left ``None`` take the values of the chosen size.

    Returns:
      The exit status: 1 if the demo extra is missing or a measurement failed with an
      error (timeouts and skips are part of the story), else 0.
    """
    try:
        import matplotlib
        import rich.console
    except ImportError as error:
        print(
            f"taylax demo needs the optional package {error.name!r}, which is not installed. "
            "Install the demo extra with: pip install 'taylax[demo]'",
            file=sys.stderr,
        )
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    console = rich.console.Console()
    for name, value in SIZES["full" if args.full else "quick" if args.quick else "default"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    start, out = time.perf_counter(), Path(args.out)
    console.print(
        "[bold]taylax demo[/bold]: the k-th derivative of 0.3*sin(t)*t**10, one fresh process "
        "per measurement (first call = trace + compile + run of jax.jit)."
        + ("" if args.full else " `taylax demo --full` runs the full sweeps (minutes).")
    )
    first = _first_calls(args, console) if args.orders else []
    names = {c: c for c in CONTENDERS}
    caption = (
        f"nested jvp up to order {args.nested_max_order} (--nested-max-order), "
        f"jet within {args.jet_budget:g} s in all (--jet-budget)"
    )
    if first:
        count = "jaxpr equations (recursive count)"
        console.print(_table(count, first, "equations", "{:,}".format, names, caption))
        call = "first call: trace + compile + run of jax.jit"
        console.print(_table(call, first, "first_call_s", _format_time, names, caption))
    batch = _batch(args, console) if args.batch_orders else []
    if batch:
        title = (
            f"steady state: jax.jit(jax.vmap(...)) over N = {args.points:,} points, "
            f"best of {args.repeats} calls"
        )
        note = "every contender returns all derivatives 0..K (nested jvp stacks its levels)"
        console.print(_table(title, batch, "steady_s", _format_time, names, note))
    panels = [(first, "equations", "jaxpr equations (recursive)")] if first else []
    panels += [(first, "first_call_s", "first call (s)")] if first else []
    panels += [(batch, "steady_s", f"steady state on {args.points:,} points (s)")] if batch else []
    if panels:
        title = "d^k/dt^k of 0.3*sin(t)*t**10: taylax vs jet vs nested jvp"
        _plot(panels, out, title, "derivative order", plt)
        console.print(f"Wrote {out}.", markup=False)
    recursion = []
    if args.recursion_ks or args.jacfwd_ks:
        recursion = _recursion(args, console)
        title = "Nested derivatives through a jitted recursion X_k = i[H, X_{k-1}] + X_{k-1}'"
        names = {"taylax": "taylax.jacfwd", "jax": "jax.jacfwd"}
        note = "first call (trace + compile + run); jax.jacfwd's program triples with every k"
        console.print(_table(title, recursion, "first_call_s", _format_time, names, note))
        path = out.with_name(f"{out.stem}_recursion{out.suffix}")
        title = "First call of a jitted recursion of k derivatives: taylax.jacfwd vs jax.jacfwd"
        panel = (recursion, "first_call_s", "first call (s)")
        _plot([panel], path, title, "k (depth)", plt, names)
        console.print(f"Wrote {path}.", markup=False)
    failed = [r for r in first + batch + recursion if r["status"] not in ("ok", "skipped")]
    for r in failed:
        console.print(f"{r['contender']}, {r['order']}: {r['status']}, {r['reason']}", markup=False)
    console.print(f"{time.perf_counter() - start:.0f} s in all.", markup=False)
    return 1 if any(r["status"] == "error" for r in failed) else 0


def _int_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated integers >= 1; empty skips that part of the demo."""
    return tuple(bounded(int, 1)(part) for part in text.split(",") if part.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the options of ``taylax demo`` to ``parser``; each overrides the chosen size.

    Args:
      parser: the ``demo`` sub-parser.
    """
    default, full = SIZES["default"], SIZES["full"]
    parser.add_argument("--out", default="taylax_demo.png", help="where to write the plot (PNG)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--full",
        action="store_true",
        help="the full sweeps: orders up to 100, recursion depths up to 30 (several minutes)",
    )
    size.add_argument("--quick", action="store_true", help="one small order of each part (seconds)")

    def sizes(name: str) -> str:
        spans = [",".join(map(str, ks)) for ks in (default[name], full[name])]
        if len(full[name]) > 2 and full[name] == tuple(range(1, full[name][-1] + 1)):
            spans[1] = f"1..{full[name][-1]}"  # the full depths
        return f"default {spans[0]}; --full: {spans[1]}; empty: skip"

    seconds = {"what": "a number of seconds", "example": "90"}
    options = (
        ("--orders", _int_list, None, f"first-call orders ({sizes('orders')})"),
        ("--nested-max-order", bounded(int, 0), None, "nested jvp up to this order (default 8)"),
        ("--batch-orders", _int_list, None, f"steady-state orders ({sizes('batch_orders')})"),
        ("--points", bounded(int, 1), None, "the steady state's batch size N (default 65536)"),
        ("--repeats", bounded(int, 1), None, "timed calls per batch order, best shown (default 5)"),
        ("--recursion-ks", _int_list, None, f"taylax.jacfwd's depths ({sizes('recursion_ks')})"),
        ("--jacfwd-ks", _int_list, None, f"jax.jacfwd's depths ({sizes('jacfwd_ks')})"),
        (
            "--jet-budget",
            bounded(float, 0, **seconds),
            90.0,
            "seconds that jet's first calls may take in all; later orders are skipped (default 90)",
        ),
        (
            "--timeout",
            bounded(float, 0, strict=True, **seconds),
            120.0,
            "time limit of one measurement (one process), in seconds (default 120)",
        ),
    )
    for flag, kind, value, text in options:
        parser.add_argument(flag, type=kind, default=value, help=text)
