"""Rendering a compile log: a table per function, the reasons, and JSON.

rich is optional: it is imported only when a table is rendered, and a plain-text table is
used when it is not installed.
"""

from __future__ import annotations

import io
import textwrap
from typing import Any

import jax

from ._events import CAUSE_HELP, CAUSES

_HEADERS = ("function", "defined at", "calls seen", "traces", "compiles", "cache hits")
_FOOTNOTE = (
    "calls seen: calls that reached JAX's Python dispatch; repeats served by JAX's C++ "
    "cache cost nothing and are not seen. time lost: tracing + lowering + compiling."
)


def format_seconds(seconds: float) -> str:
    """``1.23 s``, ``45.6 ms`` or ``789 µs``."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def as_dict(log) -> dict[str, Any]:
    """The log as JSON-ready data."""
    return {
        "jax_version": jax.__version__,
        "total_seconds": log.seconds,
        "causes": {cause: CAUSE_HELP[cause] for cause in CAUSES},
        "summary": [s.to_dict() for s in log.summary()],
        "events": [e.to_dict() for e in log.events],
    }


def _rows(log) -> list[list[str]]:
    rows = []
    for s in log.summary():
        causes = ", ".join(f"{cause} ×{n}" for cause, n in _ordered(s.causes))
        rows.append(
            [
                s.function,
                s.location,
                str(s.calls_seen),
                str(s.traces),
                str(s.compiles),
                str(s.cache_hits),
                format_seconds(s.seconds),
                causes or "—",
            ]
        )
    return rows


def _reasons(log) -> list[tuple[str, str, int, str]]:
    """(function, cause, count, detail) for every cause other than a first call."""
    found = []
    for s in log.summary():
        for cause, _ in _ordered(s.causes):
            if cause == "first_call":
                continue
            for detail, n in s.details.get(cause, {}).items():
                found.append((f"{s.function} ({s.location})", cause, n, detail))
    return found


def _ordered(causes: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(causes.items(), key=lambda item: CAUSES.index(item[0]))


def _title(log) -> str:
    compiles = sum(s.compiles for s in log.summary())
    return (
        f"jit compile log: {compiles} compile(s), {format_seconds(log.seconds)} spent "
        "tracing, lowering and compiling"
    )


def rich_renderable(log):
    """A rich renderable (two tables) for the log; needs rich."""
    from rich.console import Group
    from rich.table import Table

    table = Table(title=_title(log), caption=_FOOTNOTE, caption_justify="left")
    for header in _HEADERS:
        first_two = header in _HEADERS[:2]
        table.add_column(header, justify="left" if first_two else "right", no_wrap=first_two)
    table.add_column("time lost", justify="right")
    table.add_column("causes", justify="left", no_wrap=True)
    for row in _rows(log):
        table.add_row(*row[:-1], row[-1].replace(", ", "\n"))  # one cause per line
    reasons = _reasons(log)
    if not reasons:
        return table
    why = Table(title="why it traced or compiled again")
    for header, justify in (("function", "left"), ("cause", "left"), ("×", "right")):
        why.add_column(header, justify=justify)
    why.add_column("detail", justify="left", ratio=1)
    for function, cause, n, detail in reasons:
        why.add_row(function, cause, str(n), detail)
    return Group(table, why)


def render_text(log, *, width: int = 120) -> str:
    """The log's tables as text: with rich if installed, else plain columns."""
    try:
        from rich.console import Console
    except ImportError:
        return _plain(log, width)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(rich_renderable(log))
    return buffer.getvalue().rstrip() + "\n"


def _plain(log, width: int) -> str:
    headers = [*_HEADERS, "time lost", "causes"]
    rows = [headers, *_rows(log)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(headers))]
    lines = [_title(log)]
    for j, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(textwrap.fill(_FOOTNOTE, width))
    reasons = _reasons(log)
    if reasons:
        lines += ["", "why it traced or compiled again:"]
        for function, cause, n, detail in reasons:
            text = f"- {function}: {cause} ×{n}: {detail}"
            lines.append(textwrap.fill(text, width, subsequent_indent="    "))
    return "\n".join(lines) + "\n"
