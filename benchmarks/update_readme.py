"""Write the README's benchmark summary from `benchmarks/results/taylor.json`.

Run after `make bench`: `python benchmarks/update_readme.py`. The summary is a
compact view of the full tables in `benchmarks/results/taylor.md`.
"""

from __future__ import annotations

import json
import pathlib
import sys

from taylax._benchmark import format_ratio, format_time

ROOT = pathlib.Path(__file__).resolve().parents[1]
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
TITLES = {
    "scalar": "(a) `f(t) = 0.3*sin(t)*t**10`, k-th derivative at t = 1.1",
    "mlp": "(b) 3-layer tanh MLP (width 64, batch 256) along a random direction",
}


def _value(result, key):
    if result is None or result.get("status") != "ok":
        return None
    return result.get(key)


def _shown(result, key, fmt):
    if result is None:
        return "—"
    value = result.get(key)
    if value is not None and (result.get("status") == "ok" or key == "equations"):
        return fmt(value)
    return result.get("status", "—")


def _pair(ours, theirs, key: str) -> str:
    shown = f"{_shown(ours, key, format_time)} / {_shown(theirs, key, format_time)}"
    return f"{shown} ({format_ratio(_value(ours, key), _value(theirs, key))})"


def summary(payload: dict) -> str:
    by_key = {(r["case"], r["contender"], r["order"]): r for r in payload["results"]}
    cases = sorted({r["case"] for r in payload["results"]}, key=list(TITLES).index)
    meta = payload.get("meta", {})
    lines = [
        f"jax {meta.get('jax', '?')}, {meta.get('cpus', '?')} CPUs, float64, measured "
        f"{str(meta.get('date', '?'))[:10]}. Ratios are taylax / jet (below 1: taylax wins).",
    ]
    for case in cases:
        orders = sorted({r["order"] for r in payload["results"] if r["case"] == case})
        lines += [
            "",
            TITLES.get(case, case),
            "",
            "| order | equations taylax / jet / nested jvp | first call taylax / jet (ratio) "
            "| steady state taylax / jet (ratio) | nested jvp first call / steady |",
            "|---:|---|---|---|---|",
        ]
        for order in orders:
            t, j, n = (by_key.get((case, c, order)) for c in ("taylax", "jet", "nested_jvp"))

            def count(x):
                return f"{x:,}"

            equations = " / ".join(_shown(r, "equations", count) for r in (t, j, n))

            first, steady = _pair(t, j, "first_call_s"), _pair(t, j, "steady_s")
            nested = (
                f"{_shown(n, 'first_call_s', format_time)} / {_shown(n, 'steady_s', format_time)}"
            )
            lines.append(f"| {order} | {equations} | {first} | {steady} | {nested} |")
    return "\n".join(lines)


def main() -> int:
    payload = json.loads((ROOT / "benchmarks/results/taylor.json").read_text())
    readme = ROOT / "README.md"
    text = readme.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{summary(payload)}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
