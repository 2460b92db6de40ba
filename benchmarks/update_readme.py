"""Write the benchmark summaries of `docs/benchmarks.md` from `benchmarks/results/*.json`.

Run after `make bench` (which runs it last): `python benchmarks/update_readme.py`. Each
summary replaces the text between a pair of markers on that page (`<!-- bench:start -->`
and `<!-- bench:end -->`, and `bench-programs`, `bench-derivative`, `bench-batched`,
`bench-layers`, `bench-operators`), from `taylor.json`, `programs.json`,
`derivative.json`, `batched.json`, `layers.json` and `operators.json`; a results file
that is missing leaves its section as it is (`taylor.json` is required). The summaries
are compact views of the full tables in `benchmarks/results/*.md`. (The script keeps
its name from when these tables were in the README, which now links to that page.)
"""

from __future__ import annotations

import json
import pathlib
import sys

from harness import format_ratio, format_time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
PROGRAMS_START, PROGRAMS_END = "<!-- bench-programs:start -->", "<!-- bench-programs:end -->"
DERIVATIVE_START, DERIVATIVE_END = (
    "<!-- bench-derivative:start -->",
    "<!-- bench-derivative:end -->",
)
# The depths shown on docs/benchmarks.md (the full table is in benchmarks/results/derivative.md).
DERIVATIVE_KS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 20, 25, 30)
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


PROGRAM_TITLES = {
    "rk4": "(c) RK4 in `fori_loop` (forced pendulum, 100 steps), along a direction in (y0, t0)",
    "solve": "(d) `jnp.linalg.solve(A + t*B, b)`, 32x32, along t",
}


def programs_summary(payload: dict) -> str:
    """The whole-program cases (`benchmarks/bench_programs.py`): taylax vs nested jvp."""
    by_key = {(r["case"], r["contender"], r["order"]): r for r in payload["results"]}
    cases = sorted({r["case"] for r in payload["results"]}, key=list(PROGRAM_TITLES).index)
    meta = payload.get("meta", {})
    lines = [
        f"Whole programs that `jax.experimental.jet` cannot run (jax {meta.get('jax', '?')}, "
        f"{meta.get('cpus', '?')} CPUs, float64, measured {str(meta.get('date', '?'))[:10]}; "
        "`benchmarks/results/programs.md`). Ratios are taylax / nested jvp (below 1: taylax wins).",
    ]
    for case in cases:
        orders = sorted({r["order"] for r in payload["results"] if r["case"] == case})
        lines += [
            "",
            PROGRAM_TITLES.get(case, case),
            "",
            "| order | equations taylax / nested jvp | first call taylax / nested jvp (ratio) "
            "| steady state taylax / nested jvp (ratio) |",
            "|---:|---|---|---|",
        ]
        for order in orders:
            t, n = (by_key.get((case, c, order)) for c in ("taylax", "nested_jvp"))

            def count(x):
                return f"{x:,}"

            equations = " / ".join(_shown(r, "equations", count) for r in (t, n))
            first, steady = _pair(t, n, "first_call_s"), _pair(t, n, "steady_s")
            lines.append(f"| {order} | {equations} | {first} | {steady} |")
    return "\n".join(lines)


def derivative_summary(payload: dict) -> str:
    """The jitted recursion (`benchmarks/bench_derivative.py`): taylax.jacfwd vs jax.jacfwd."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_derivative import headline, table

    meta = payload.get("meta", {})
    shown = dict(payload, results=[r for r in payload["results"] if r["k"] in DERIVATIVE_KS])
    lines = [
        "(e) A user recursion of nested derivatives with `jax.jit` at every level, "
        "`X_k(t) = i[H(t), X_{k-1}(t)] + X_{k-1}'(t)` (`benchmarks/recursion.py`), written with "
        f"`taylax.jacfwd` against `jax.jacfwd` (jax {meta.get('jax', '?')}, "
        f"{meta.get('cpus', '?')} CPUs, complex128, "
        f"measured {str(meta.get('date', '?'))[:10]}; `benchmarks/results/derivative.md`; "
        "jax.jacfwd stops at k = 8, where its program has tripled eight times):",
        "",
        *headline(payload),
        "",
        table(shown),
    ]
    return "\n".join(lines)


BATCHED_START, BATCHED_END = "<!-- bench-batched:start -->", "<!-- bench-batched:end -->"


def batched_summary(payload: dict) -> str:
    """Batched steady state (`benchmarks/bench_batched.py`): the page's compact view."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_batched import readme_summary

    return readme_summary(payload)


LAYERS_START, LAYERS_END = "<!-- bench-layers:start -->", "<!-- bench-layers:end -->"


def layers_summary(payload: dict) -> str:
    """Common layers (`benchmarks/bench_layers.py`): the page's table."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_layers import readme_summary

    return readme_summary(payload)


OPERATORS_START, OPERATORS_END = "<!-- bench-operators:start -->", "<!-- bench-operators:end -->"


def operators_summary(payload: dict) -> str:
    """Differential operators (`benchmarks/bench_operators.py`): the page's compact view."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_operators import readme_summary

    return readme_summary(payload)


def _replace_between(text: str, start: str, end: str, body: str) -> str:
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def main() -> int:
    payload = json.loads((ROOT / "benchmarks/results/taylor.json").read_text())
    text = _replace_between(PAGE.read_text(), START, END, summary(payload))
    programs = ROOT / "benchmarks/results/programs.json"
    if programs.exists() and PROGRAMS_START in text:
        text = _replace_between(
            text, PROGRAMS_START, PROGRAMS_END, programs_summary(json.loads(programs.read_text()))
        )
    derivative = ROOT / "benchmarks/results/derivative.json"
    if derivative.exists() and DERIVATIVE_START in text:
        text = _replace_between(
            text,
            DERIVATIVE_START,
            DERIVATIVE_END,
            derivative_summary(json.loads(derivative.read_text())),
        )
    batched = ROOT / "benchmarks/results/batched.json"
    if batched.exists() and BATCHED_START in text:
        text = _replace_between(
            text, BATCHED_START, BATCHED_END, batched_summary(json.loads(batched.read_text()))
        )
    layers = ROOT / "benchmarks/results/layers.json"
    if layers.exists() and LAYERS_START in text:
        text = _replace_between(
            text, LAYERS_START, LAYERS_END, layers_summary(json.loads(layers.read_text()))
        )
    operators = ROOT / "benchmarks/results/operators.json"
    if operators.exists() and OPERATORS_START in text:
        text = _replace_between(
            text,
            OPERATORS_START,
            OPERATORS_END,
            operators_summary(json.loads(operators.read_text())),
        )
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
