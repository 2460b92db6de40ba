"""Which JAX primitives taylax can carry a series through, generated from the rule table.

The README's list of supported primitives is produced by
`primitive_coverage_markdown()` (`python -m taylax.cli primitives`), never
typed by hand; a test checks that the two agree.
"""

from __future__ import annotations

from . import _compat, _rules  # noqa: F401  (_rules registers the built-in rules)
from ._interpret import taylor_rules

# Primitives whose outputs are integers, booleans or tokens: the interpreter
# evaluates them on primals and they carry no series, so they need no rule.
NO_SERIES: dict[str, str] = {
    **{
        name: "boolean output"
        for name in (
            "eq", "ne", "lt", "le", "gt", "ge", "eq_to", "le_to", "lt_to", "is_finite",
            "and", "or", "not", "xor", "reduce_and", "reduce_or", "reduce_xor",
        )
    },
    **{
        name: "integer output"
        for name in (
            "argmax", "argmin", "iota", "population_count", "clz", "shift_left",
            "shift_right_arithmetic", "shift_right_logical", "mulhi", "axis_index",
        )
    },
    **{
        name: "random bits or keys (no derivative)"
        for name in (
            "random_bits", "random_seed", "random_split", "random_fold_in", "random_wrap",
            "random_unwrap", "rng_bit_generator", "threefry2x32", "rng_uniform",
        )
    },
    "create_token": "token output",
    "after_all": "token output",
}  # fmt: skip


def coverage() -> dict[str, str]:
    """Map every `jax.lax`/`jax.extend` primitive name to `rule`, a no-series reason, or `todo`."""
    supported = {p.name for p in taylor_rules}
    table = {}
    for name in sorted(_compat.all_primitives()):
        if name in supported:
            table[name] = "rule"
        elif name in NO_SERIES:
            table[name] = NO_SERIES[name]
        else:
            table[name] = "todo"
    return table


def primitive_coverage_markdown() -> str:
    """The README section listing supported primitives, generated from the rule table."""
    table = coverage()
    supported = [n for n, s in table.items() if s == "rule"]
    no_series = [(n, s) for n, s in table.items() if s not in ("rule", "todo")]
    todo = [n for n, s in table.items() if s == "todo"]
    lines = [
        f"**Taylor rules ({len(supported)}):** " + ", ".join(f"`{n}`" for n in supported) + ".",
        "",
        f"**No series needed ({len(no_series)}):** "
        + ", ".join(f"`{n}` ({s})" for n, s in no_series)
        + ".",
        "",
        f"**Not yet supported ({len(todo)}):** "
        + ", ".join(f"`{n}`" for n in todo)
        + ". Using one of these on a value that depends on the input raises "
        "`NotImplementedError` naming it; `taylax.register_rule` adds a rule.",
    ]
    return "\n".join(lines)
