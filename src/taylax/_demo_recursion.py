"""The last part of ``taylax demo``: nested derivatives through a jitted user recursion.

``my_func(t, k)`` (see ``taylax._recursion``) with ``taylax.jacfwd`` and with
``jax.jacfwd``, each first call in a fresh process; a table and a log-scale plot of
first-call time and emitted equations against k. By default a few depths, enough to show
the trend in seconds; ``taylax demo --full`` runs k = 1..30 with ``taylax.jacfwd`` and
k = 1..8 with ``jax.jacfwd``, which stops there because its program triples with every
level (a minute at k = 9, several at 10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _recursion
from ._benchmark import format_ratio, format_time

# The default depths: enough for jax.jacfwd's tripling and taylax.jacfwd's slope to show,
# few enough (one fresh process each, about 2 s before it measures) for the default demo
# to finish in about a minute.
RECURSION_KS = (2, 4, 6, 10)
JACFWD_KS = (2, 4, 6)
FULL_RECURSION_KS = tuple(range(1, 31))
FULL_JACFWD_KS = tuple(range(1, 9))
QUICK_RECURSION_KS = (1, 2)
QUICK_JACFWD_KS = (1,)
_LABELS = {"taylax": "taylax.jacfwd", "jax": "jax.jacfwd"}
_STYLES = {"taylax": ("tab:green", "o"), "jax": ("tab:red", "^")}


def demo_progress(console: Any):
    """The demo's rich progress bar: description, bar, done/total, elapsed time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, transient=False)


def measure_with_progress(
    plan: list[tuple[str, int]], console: Any, timeout_s: float
) -> list[dict[str, Any]]:
    """Runs each (contender, k) of `plan` in a fresh process under a rich progress bar."""
    results = []
    with demo_progress(console) as progress:
        task = progress.add_task("starting", total=len(plan))
        for contender, k in plan:
            progress.update(task, description=f"{_LABELS[contender]}, k = {k}")
            measured = _recursion.measure([k], contender, timeout_s=timeout_s)
            results += measured or [{"contender": contender, "k": k, "status": "error"}]
            progress.advance(task)
    return results


def table(results: list[dict[str, Any]]) -> Any:
    """A rich table: first call and equations per k, with the ratio taylax / jax."""
    from rich.table import Table

    by_key = {(r["contender"], r["k"]): r for r in results}
    out = Table(title="my_func(t, k): first call (trace + compile + run) and equations")
    for name in ("k", "taylax.jacfwd", "jax.jacfwd", "ratio", "eqns taylax", "eqns jax"):
        out.add_column(name, justify="right")

    def first(contender, k):
        r = by_key.get((contender, k))
        return r.get("first_call_s") if r and r.get("status") == "ok" else None

    def cell(contender, k):
        r = by_key.get((contender, k))
        if r is None:
            return "—"
        return format_time(r["first_call_s"]) if r.get("status") == "ok" else r["status"]

    def count(contender, k):
        value = by_key.get((contender, k), {}).get("equations")
        return "—" if value is None else f"{value:,}"

    for k in sorted({r["k"] for r in results}):
        ours, theirs = first("taylax", k), first("jax", k)
        out.add_row(
            str(k),
            cell("taylax", k),
            cell("jax", k),
            format_ratio(ours, theirs),
            count("taylax", k),
            count("jax", k),
        )
    return out


def plot(results: list[dict[str, Any]], out: Path, plt: Any) -> None:
    """First-call time and equations against k, log-scale y, into a PNG."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    panels = (("first_call_s", "first call (s)"), ("equations", "emitted equations"))
    for ax, (key, ylabel) in zip(axes, panels):
        for contender in ("taylax", "jax"):
            color, marker = _STYLES[contender]
            points = sorted(
                (r["k"], r[key])
                for r in results
                if r["contender"] == contender and r.get(key) is not None
            )
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker=marker, color=color, label=_LABELS[contender])
        ax.set_yscale("log")
        ax.set_xlabel("k (nested derivatives)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Jitted recursion X_k = i[H, X_{k-1}] + X_{k-1}': taylax.jacfwd vs jax.jacfwd")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def run(
    console: Any,
    plt: Any,
    out: Path,
    taylax_ks: tuple[int, ...],
    jax_ks: tuple[int, ...],
    timeout_s: float,
) -> list[dict[str, Any]]:
    """Measures, prints the table and writes the plot; returns the results."""
    console.print(
        "[bold]Nested derivatives through a jitted recursion[/bold]: taylax.jacfwd for k in "
        f"{span(taylax_ks)}, jax.jacfwd for k in {span(jax_ks)} (its program triples with "
        "every level), one fresh process per measurement."
    )
    plan = [("jax", k) for k in jax_ks] + [("taylax", k) for k in taylax_ks]
    results = measure_with_progress(plan, console, timeout_s)
    console.print(table(results))
    plot(results, out, plt)
    console.print(f"Wrote {out}.", markup=False)
    return results


def span(ks: tuple[int, ...]) -> str:
    """The depths as text: ``1..30`` for a run of consecutive values, else ``1, 2, 4``."""
    if len(ks) > 2 and list(ks) == list(range(ks[0], ks[-1] + 1)):
        return f"{ks[0]}..{ks[-1]}"
    return ", ".join(map(str, ks))
