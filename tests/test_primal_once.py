"""A rule's transcendental values are computed once: no row of a pass's output reaches
them except through a `taylax_computed_once` mark (`taylax._series.once`).

Every row of a product reads its factors' primals, so an unmarked `exp x0` was computed
once per output row in the kernel that writes the output (under `jax.vmap`, in scalar
code: docs/EMISSION.md, "Transcendental values computed once")."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import taylax
from reference import assert_series_close, computed_once_marks, nested_jvp_derivatives
from taylax import _compat

pytestmark = pytest.mark.usefixtures("cpu_policy")

ORDER = taylax.CPU.one_kernel_max_order + 2  # past the one-kernel passes, which mark nothing

# Primitives XLA:CPU evaluates as calls of their own (not one instruction).
TRANSCENDENTAL = frozenset(
    "exp exp2 expm1 log log1p sinh cosh asinh acosh atanh atan asin acos atan2 erf erfc".split()
)

FUNCTIONS = {
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log": lambda t: jnp.log(2 + t),
    "log1p": jnp.log1p,
    "log1p of a square": lambda t: jnp.log1p(t * t),
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "acosh": lambda t: jnp.arccosh(2 + t),
    "atanh": lambda t: jnp.arctanh(0.5 * t),
    "atan": jnp.arctan,
    "asin": lambda t: jnp.arcsin(0.5 * t),
    "atan2": lambda t: jnp.arctan2(t, 2 + t),
    "erf": jax.scipy.special.erf,
    "softplus": jax.nn.softplus,
    "sinh of a sine": lambda t: jnp.sinh(jnp.sin(t)),
}


def _pass_jaxpr(f, order):
    """The jaxpr of `derivatives(f, order)`'s pass at a scalar: inside the `jit` and the
    overflow rule's `custom_jvp_call` that wrap it."""
    jaxpr = jax.make_jaxpr(taylax.derivatives(f, order))(0.3).jaxpr
    while len(jaxpr.eqns) == 1:
        inner = [p for p in jaxpr.eqns[0].params.values() if _compat.is_jaxpr(p)]
        if not inner:
            break
        jaxpr = _compat.open_jaxpr(inner[0])
    return jaxpr


# Their bodies are computations of their own: XLA fuses nothing of them into a reader.
CONTROL_FLOW = frozenset({"cond", "while", "scan"})


def _reached_unmarked(jaxpr) -> set[str]:
    """The primitives the outputs reach through no `taylax_computed_once` equation, into
    inlined calls (`jit`, `custom_jvp_call`), not into control flow."""
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    reached, seen = set(), set()
    stack = [v for v in jaxpr.outvars if not isinstance(v, _compat.Literal)]
    while stack:
        eqn = producer.get(stack.pop())
        if eqn is None or id(eqn) in seen:
            continue
        seen.add(id(eqn))
        if eqn.primitive.name == "taylax_computed_once":
            continue
        reached.add(eqn.primitive.name)
        if eqn.primitive.name not in CONTROL_FLOW:
            for sub in _compat.jaxprs_in_params(eqn.params):
                reached |= _reached_unmarked(_compat.open_jaxpr(sub))
        stack.extend(v for v in eqn.invars if not isinstance(v, _compat.Literal))
    return reached


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_products_read_transcendental_values_through_marks(name):
    g = FUNCTIONS[name]
    jaxpr = _pass_jaxpr(lambda t: g(t) * jnp.cos(t), ORDER)
    assert "taylax_computed_once" in taylax.equation_counts(jaxpr)
    assert not _reached_unmarked(jaxpr) & TRANSCENDENTAL


@pytest.mark.parametrize(
    "policy, order",
    [
        (dataclasses.replace(taylax.CPU, primal_once_max_order=None), ORDER),
        (taylax.CPU, taylax.CPU.primal_once_max_order + 1),
        (taylax.CPU, taylax.CPU.unmarked_any_size_max_order),
    ],
    ids=["field None", "past the field", "lowest orders"],
)
def test_unmarked_transcendental_values_are_seen(policy, order):
    # The check itself, and where the marks stop: without them every row reads `exp`.
    with taylax.emission_policy(policy):
        jaxpr = _pass_jaxpr(lambda t: jnp.exp(t) * jnp.cos(t), order)
    assert "exp" in _reached_unmarked(jaxpr)


def test_marked_passes_agree_with_nested_jvp():
    # Marks are the identity: the rule tables over orders 0..6 check every rule's values;
    # this checks a product of two marked factors under `vmap`.
    f = lambda t: jnp.exp(t) * jnp.log1p(t * t)  # noqa: E731
    t = jnp.linspace(-0.8, 0.8, 7)
    got = jax.jit(jax.vmap(taylax.derivatives(f, ORDER)))(t)
    want = nested_jvp_derivatives(f, t, jnp.ones_like(t), ORDER)
    assert_series_close(got.T, want, rtol=1e-12)


# Recurrences whose rows are left for XLA to recompute in their readers, by the policy
# field that bounds it (docs/EMISSION.md, "Only the wanted rows of sin/cos" and "tanh's
# rows unmarked, and sqrt's", "A quotient's rows by size"): sin's recurrence reads cos's
# rows (`partner_..._min_order`: from the field's order), tanh's, the logistic's, sqrt's and
# a quotient's read their own (`..._max_order`: up to it; a quotient by a series of full
# degree has a field of its own).
UNMARKED = {
    "sin of exp": (lambda t: jnp.sin(jnp.exp(t)), "partner_rows_unmarked_min_order"),
    "cos of a product": (lambda t: jnp.cos(jnp.cos(t) * t), "partner_rows_unmarked_min_order"),
    "cosh of sin": (lambda t: jnp.cosh(jnp.sin(t)) * t, "partner_rows_unmarked_min_order"),
    "tanh of log1p": (lambda t: jnp.tanh(jnp.log1p(t * t)), "riccati_rows_unmarked_max_order"),
    "tanh of a product": (
        lambda t: jnp.tanh(jnp.sin(t) * t) * jnp.exp(t),
        "riccati_rows_unmarked_max_order",
    ),
    "logistic of sin": (
        lambda t: jax.nn.sigmoid(jnp.sin(t) * t),
        "riccati_rows_unmarked_max_order",
    ),
    "sqrt of a product": (lambda t: jnp.sqrt(2 + jnp.exp(t) * t), "root_rows_unmarked_max_order"),
    "sqrt of tanh of log1p": (
        lambda t: jnp.sqrt(1.5 + jnp.tanh(jnp.log1p(t * t))),
        "root_rows_unmarked_max_order",
    ),
    "a quotient by a series": (
        lambda t: jnp.sin(t) / (2 + jnp.exp(t) * t),
        "series_quotient_rows_unmarked_max_order",
    ),
    "tan of sin": (lambda t: jnp.tan(jnp.sin(t)), "series_quotient_rows_unmarked_max_order"),
    "a quotient by a polynomial": (
        lambda t: jnp.exp(t) / (1 + t * t),
        "quotient_rows_unmarked_max_order",
    ),
    "cos of a quotient": (
        lambda t: jnp.cos(jnp.exp(0.3 * t) / (2 + t**3)),
        "quotient_rows_unmarked_max_order",
    ),
}


def _marks(f, order, policy, kind="once") -> int:
    """How many `taylax_computed_once` marks of `kind` the pass of `f` holds."""
    with taylax.emission_policy(policy):
        jaxpr = _pass_jaxpr(f, order)
    return computed_once_marks(jaxpr, kind)


@pytest.mark.parametrize("name", list(UNMARKED))
def test_rows_are_unmarked_where_the_field_says(name):
    # At the field's bound the K rows 1..K go to no buffer that is kept at every size:
    # sin's partner rows to none at all, the Riccati, root and quotient rows to a mark
    # lowered only while small (`test_once.py`). One order outside it they are all kept.
    f, field = UNMARKED[name]
    order = getattr(taylax.CPU, field)
    outside = order - 1 if field.endswith("_min_order") else order + 1
    marked = dataclasses.replace(taylax.CPU, **{field: None})
    by_size = 0 if field == "partner_rows_unmarked_min_order" else order
    # A quotient by a series leaves its rows to XLA only at one point under vmap.
    row = "point row" if field.startswith("series") else "row"
    assert _marks(f, order, taylax.CPU) == _marks(f, order, marked) - order
    assert _marks(f, order, taylax.CPU, row) == _marks(f, order, marked, row) + by_size
    assert _marks(f, outside, taylax.CPU) == _marks(f, outside, marked)
    assert _marks(f, outside, taylax.CPU, row) == _marks(f, outside, marked, row)


def test_a_quotient_by_a_series_is_bounded_by_the_pass_order():
    # `log` divides at one order less than its pass: at the field's bound its rows 1..K-1
    # are marked only while small, in a pass one order past it all are kept.
    f = lambda t: jnp.log(2 + jnp.sin(t))  # noqa: E731
    field = "series_quotient_rows_unmarked_max_order"
    order = getattr(taylax.CPU, field)
    marked = dataclasses.replace(taylax.CPU, **{field: None})
    row = "point row"
    assert _marks(f, order, taylax.CPU, row) == _marks(f, order, marked, row) + order - 1
    assert _marks(f, order + 1, taylax.CPU) == _marks(f, order + 1, marked)
    assert _marks(f, order + 1, taylax.CPU, row) == _marks(f, order + 1, marked, row)


# Row marks lowered as the values at every size: seven points would keep them buffers.
ROWS_UNMARKED = dataclasses.replace(taylax.CPU, name="rows-unmarked", rows_unmarked_min_bytes=0)


@pytest.mark.parametrize("name", list(UNMARKED))
@pytest.mark.parametrize("order", [5, 8])
def test_unmarked_rows_agree_with_nested_jvp(name, order):
    # Nested jvp's program grows exponentially in the order: 8 stays quick.
    f = UNMARKED[name][0]
    t = jnp.linspace(-0.8, 0.8, 7)
    with taylax.emission_policy(ROWS_UNMARKED):
        got = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)
    want = nested_jvp_derivatives(f, t, jnp.ones_like(t), order)
    assert_series_close(got.T, want, rtol=1e-12)


@pytest.mark.parametrize("name", list(UNMARKED))
def test_unmarked_rows_agree_with_marked_ones_at_the_field(name):
    # At the field's bound (up to 12) against the marked rows, which the rule tables check.
    f, field = UNMARKED[name]
    order = getattr(taylax.CPU, field)
    t = jnp.linspace(-0.8, 0.8, 7)
    with taylax.emission_policy(ROWS_UNMARKED):
        got = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)
    with taylax.emission_policy(dataclasses.replace(taylax.CPU, **{field: None})):
        want = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)
    assert_series_close(got, want, rtol=1e-12)


def test_row_marks_follow_the_lowered_size():
    # The rows of tanh at K = 8 under vmap: buffers over a few points, values over many.
    f, order = UNMARKED["tanh of log1p"][0], taylax.CPU.riccati_rows_unmarked_max_order
    least = taylax.CPU.rows_unmarked_min_bytes // 8
    d = jax.jit(jax.vmap(taylax.derivatives(f, order)))

    def divisions(points):
        return d.lower(jax.ShapeDtypeStruct((points,), jnp.float64)).as_text().count("divide")

    assert divisions(least - 1) >= divisions(least) + order
