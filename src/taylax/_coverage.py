"""Which JAX primitives taylax can carry a series through, generated from the rule table.

The README's list of supported primitives is produced by
`primitive_coverage_markdown()` (`python -m taylax.cli primitives`), never
typed by hand; a test checks that the two agree.
"""

from __future__ import annotations

from . import _compat, _rules  # noqa: F401  (_rules registers the built-in rules)
from ._interpret import taylor_rules

_INT_OR_BOOL = "integer or boolean output"
_RANDOM = "PRNG keys and random bits: integer outputs"
_NO_JAX_DERIVATIVE = "JAX itself defines no derivative for it"

# Primitives that cannot carry a series, with the reason. The interpreter evaluates
# integer/boolean/token outputs on primals, so those need no rule; the others have no
# derivative to follow (nested jvp fails on them too) or never appear in a user's jaxpr.
NO_SERIES: dict[str, str] = {
    **dict.fromkeys(
        [
            "eq", "ne", "lt", "le", "gt", "ge", "eq_to", "le_to", "lt_to", "is_finite",
            "and", "or", "not", "xor", "reduce_and", "reduce_or", "reduce_xor",
            "argmax", "argmin", "population_count", "clz", "shift_left",
            "shift_right_arithmetic", "shift_right_logical", "mulhi", "axis_index",
        ],
        _INT_OR_BOOL,
    ),
    **dict.fromkeys(
        [
            "random_bits", "random_seed", "random_split", "random_fold_in", "random_wrap",
            "random_unwrap", "threefry2x32", "rng_bit_generator",
        ],
        _RANDOM,
    ),
    "rng_uniform": "random sampling: " + _NO_JAX_DERIVATIVE,
    "iota": "takes no array inputs: its output is always a constant",
    "empty2": "takes no array inputs: its output is always a constant",
    "create_token": "token output",
    "after_all": "token output",
    "dce_sink": "has no outputs",
    "igamma_grad_a": "igamma's derivative in `a`; " + _NO_JAX_DERIVATIVE,
    "hessenberg": _NO_JAX_DERIVATIVE,
    "householder_product": _NO_JAX_DERIVATIVE,
    "schur": _NO_JAX_DERIVATIVE,
    "tridiagonal": _NO_JAX_DERIVATIVE,
    "select_and_scatter": "general select/scatter functions; " + _NO_JAX_DERIVATIVE,
    "custom_lin": "internal to jax.linearize, never in a user's jaxpr",
    "call": "legacy call primitive, never in a jaxpr JAX 0.10 traces",
    "get": "reads a mutable Ref (jax.new_ref, Pallas): series live in values, not references",
    "swap": "writes a mutable Ref (jax.new_ref, Pallas): series live in values, not references",
}  # fmt: skip

# Primitives that could carry a series but have no rule (yet, or by choice), with why.
NOT_YET: dict[str, str] = {
    "xla_pmap": "`jax.pmap` (exported by jax 0.9 only): use `jax.vmap` or `shard_map`",
}


def coverage() -> dict[str, str]:
    """Map every `jax.lax`/`jax.extend` primitive name to `rule`, a no-series reason, or `todo`.

    **Returns:** a dict from primitive name to its status, sorted by name.

    !!! Example

        ```python
        from taylax._coverage import coverage

        coverage()["sin"]  # "rule"
        ```
    """
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
    """The README section listing supported primitives, generated from the rule table.

    **Returns:** the markdown text (supported, no series needed with reasons, not yet
    supported with what is missing where known).

    !!! Example

        ```python
        from taylax._coverage import primitive_coverage_markdown

        print(primitive_coverage_markdown())
        ```
    """
    table = coverage()
    supported = [n for n, s in table.items() if s == "rule"]
    no_series = [(n, s) for n, s in table.items() if s not in ("rule", "todo")]
    todo = [n for n, s in table.items() if s == "todo"]
    lines = [
        f"**Taylor rules ({len(supported)}):** " + ", ".join(f"`{n}`" for n in supported) + ".",
        "",
        f"**Cannot carry a series ({len(no_series)}):** "
        + ", ".join(f"`{n}` ({s})" for n, s in no_series)
        + ".",
        "",
        f"**Not yet supported ({len(todo)}):** "
        + (
            ", ".join(f"`{n}` ({NOT_YET[n]})" if n in NOT_YET else f"`{n}`" for n in todo) + "."
            if todo
            else "none: every `jax.lax` primitive that can carry a series has a rule."
        )
        + " A primitive without a rule (for example one that a newer JAX or another library "
        "adds) raises `NotImplementedError` naming it when it meets a value that depends on the "
        "input; `taylax.register_rule` adds a rule.",
    ]
    return "\n".join(lines)
