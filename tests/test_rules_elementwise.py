"""Elementwise Taylor rules against the nested-jvp oracle.

Each case is a function applied elementwise to a 1-d batch of test points; every point is
compared on its own (its own tolerance scale) against `jax.jvp` nested k times along a fixed
pseudo-random direction.  Orders 0, 1, 2 and 6 for every case (the order-6 result holds orders
0..6), order 10 for cheap smooth unary functions, float64 always and complex128 where the
primitive accepts complex numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from jax import lax

import taylax
from reference import (
    all_equations,
    assert_series_close,
    case_params,
    check_against_oracle,
    direction,
    entry_kernels,
    oracle,
    xla_cpu_only,
)
from taylax._emitted import emitted_jaxpr

BASE_ORDERS = (0, 1, 2, 6)
HIGH_ORDER = 10


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    points: tuple  # real test points (a batch, axis 0)
    cpoints: tuple | None = None  # complex test points, None where the primitive is real-only
    order10: bool = False  # also check order 10 (only for cheap smooth unary functions)
    per_point: bool = True  # False: fn is not elementwise, compare the whole output
    reference: Callable | None = None  # what the oracle differentiates (default fn)


C3 = (0.3 + 0.4j, -0.7 + 0.2j, 1.1 - 0.5j)
POS = (0.4, 1.3, 2.7)
ANY = (-1.3, 0.2, 0.9)
UNIT = (-0.7, 0.1, 0.6)


@jax.custom_jvp
def _tanh_reading_its_output(x):
    return jnp.tanh(x)


# The rule's tangent reads the rule's own primal output, which then needs its series.
_tanh_reading_its_output.defjvp(
    lambda p, t: ((y := _tanh_reading_its_output(p[0])), (1 - y * y) * t[0])
)


@jax.custom_jvp
def _sin_with_effect(x):
    return jnp.sin(x)


@_sin_with_effect.defjvp
def _sin_with_effect_jvp(p, t):
    # An effect in the rule: the rule is followed whole, so that it happens once.
    jax.debug.callback(lambda: None)
    return jnp.sin(p[0]), jnp.cos(p[0]) * t[0]


def _sg_mix(x):
    return jnp.sin(x + lax.stop_gradient(x * x))


CASES = [
    # ---- arithmetic --------------------------------------------------------------------------
    Case("add", lambda x: x + jnp.exp(x), ANY, C3),
    Case("add_const", lambda x: jnp.sin(x) + 2.5, ANY, C3),
    Case("sub", lambda x: jnp.sin(x) - x * x, ANY, C3),
    Case("sub_const_first", lambda x: 1.5 - jnp.exp(x), ANY, C3),
    # Operands of different degrees and shapes: only the rows both have are summed, the
    # rest are the higher operand's, broadcast (and negated when it is subtracted).
    Case("add_const_bcast", lambda x: jnp.sin(x)[:, None] + jnp.arange(2.0), ANY, C3),
    Case(
        "add_scalar_series", lambda x: jnp.sum(jnp.sin(x)) + 0.5 * x * x, ANY, C3, per_point=False
    ),
    Case(
        "sub_from_const_array",
        lambda x: jnp.arange(3.0) - jnp.sum(jnp.exp(x)),
        ANY,
        C3,
        per_point=False,
    ),
    Case("sub_line", lambda x: 2.0 * x - jnp.sin(x), ANY, C3),
    Case("mul", lambda x: jnp.sin(x) * jnp.exp(x), ANY, C3),
    Case("mul_const", lambda x: 3.0 * jnp.sin(x), ANY, C3),
    Case("div", lambda x: jnp.exp(x) / (1.5 + jnp.sin(x)), ANY, C3),
    Case("div_const_num", lambda x: 2.0 / (1.5 + jnp.sin(x)), ANY, C3),
    Case("div_const_den", lambda x: jnp.sin(x) / 3.0, ANY, C3),
    Case("neg", lambda x: -jnp.exp(x), ANY, C3),
    Case("rem_fmod", lambda x: jnp.fmod(jnp.exp(x), 0.7), (-1.3, 0.2, 0.9, 1.5)),
    Case("rem_series_divisor", lambda x: lax.rem(2.5 + x, 0.7 + 0.1 * jnp.sin(x)), ANY),
    Case("rem_negative", lambda x: lax.rem(-3.0 * jnp.exp(x), 0.8), ANY),
    Case("remainder", lambda x: jnp.remainder(jnp.sin(3.0 * x), 0.4), ANY),
    # ---- powers -----------------------------------------------------------------------------
    Case("pow_float_exponent", lambda x: x**2.5, POS, C3),
    Case("pow_negative_float_exponent", lambda x: x**-1.7, POS, C3),
    Case("pow_int_valued_float_exponent", lambda x: lax.pow(x, 3.0), (-2.0, -0.5, 0.5, 1.5)),
    Case("pow_int_valued_float_exponent_neg", lambda x: lax.pow(x, -2.0), (-2.0, -0.5, 1.5)),
    Case("pow_array_exponent", lambda x: x ** jnp.array([1.5, 2.0, -0.5]), POS),
    Case("pow_input_exponent", lambda x: x ** jnp.sin(x), POS, C3),
    Case("pow_x_x", lambda x: x**x, POS),
    Case("pow_const_base", lambda x: 2.0**x, ANY, C3),
    # lax's jvp in the exponent replaces a zero base's log by log(1): zeros, not nan.
    Case("pow_zero_base", lambda x: jnp.power(0.0, x) + x, (0.5, 1.3, 2.0)),
    Case("pow_2.0_at_0", lambda x: lax.pow(x, 2.0), (0.0, 0.8)),
    Case("pow_2.5_at_0", lambda x: lax.pow(x, 2.5), (0.0, 0.8)),
    Case("pow_0.5_at_0", lambda x: lax.pow(x, 0.5), (0.0,)),
    # Non-integer exponents along a line: one `pow` and products (`_series.real_exponent_powers`).
    Case("pow_2.5_below_0", lambda x: lax.pow(x, 2.5), (-1.5, -0.3)),
    Case("pow_-1.5_far_from_1", lambda x: x**-1.5, (1e-200, 1e-30, 1e30, 1e200)),
    # Half-integer anchors of that table are square roots (`_series.half_integer_power`).
    Case("pow_2.5_far_from_1", lambda x: x**2.5, (1e-130, 1e-30, 1e30, 1e120)),
    Case("pow_-2.5_far_from_1", lambda x: x**-2.5, (1e-120, 1e-30, 1e30, 1e130)),
    Case("pow_1.5_at_0_and_below", lambda x: x**1.5, (0.0, -0.7, 0.3)),
    Case("pow_20.5", lambda x: x**20.5, (0.0, 0.4, 3.0, 1e20)),
    Case("integer_pow_3", lambda x: x**3, (-2.0, 0.0, 0.7), C3, order10=True),
    Case("integer_pow_2_of_series", lambda x: jnp.sin(x) ** 2, ANY, C3),
    Case("integer_pow_5", lambda x: lax.integer_pow(jnp.exp(x) - 1.0, 5), ANY, C3),
    Case("integer_pow_neg1", lambda x: x**-1, (-2.0, 0.7, 1.9), C3),
    Case("integer_pow_neg2", lambda x: x**-2, (-2.0, 0.7, 1.9), C3, order10=True),
    Case("integer_pow_neg3", lambda x: lax.integer_pow(x, -3), (-2.0, 0.7, 1.9), C3),
    Case("integer_pow_neg_at_0", lambda x: x**-2, (0.0,)),
    Case("integer_pow_0", lambda x: lax.integer_pow(x, 0) * jnp.sin(x), ANY),
    Case("integer_pow_1", lambda x: lax.integer_pow(jnp.sin(x), 1), ANY),
    # ---- roots / exponentials / logs --------------------------------------------------------
    Case("sqrt", jnp.sqrt, (0.3, 1.7, 4.0), C3),
    Case("sqrt_at_0", jnp.sqrt, (0.0,)),
    Case("rsqrt", lax.rsqrt, (0.3, 1.7, 4.0), C3),
    Case("cbrt", jnp.cbrt, (-2.0, 0.3, 1.7)),
    Case("square", jnp.square, ANY, C3),
    Case("square_of_series", lambda x: jnp.square(jnp.sin(x)), ANY, C3),
    Case("reciprocal", jnp.reciprocal, (-2.0, 0.7, 1.9), C3),
    Case("exp", jnp.exp, ANY, C3, order10=True),
    Case("exp2", jnp.exp2, ANY, C3, order10=True),
    Case("expm1", jnp.expm1, (-1.3, 1e-3, 0.9), C3, order10=True),
    Case("log", jnp.log, (0.3, 1.7, 4.0), C3, order10=True),
    Case("log_at_0", jnp.log, (0.0,)),
    Case("log1p", jnp.log1p, (-0.6, 1e-3, 2.0), C3, order10=True),
    # ---- trigonometric / hyperbolic ---------------------------------------------------------
    Case("sin", jnp.sin, ANY, C3, order10=True),
    Case("cos", jnp.cos, ANY, C3, order10=True),
    Case("tan", jnp.tan, (-1.2, 0.2, 0.9), C3),
    Case("sinh", jnp.sinh, ANY, C3, order10=True),
    Case("cosh", jnp.cosh, ANY, C3, order10=True),
    Case("tanh", jnp.tanh, ANY, C3),
    Case("asin", jnp.arcsin, UNIT, C3),
    Case("acos", jnp.arccos, UNIT, C3),
    Case("atan", jnp.arctan, ANY, C3),
    Case("asinh", jnp.arcsinh, (-1e10, -1.3, 0.2, 0.9), C3),
    # JAX 0.10 differentiates complex acosh as `1 / sqrt(x^2 - 1)`, the wrong sign in the
    # left half-plane (-0.7 + 0.9j here); the oracle takes the principal branch's own
    # formula, whose log and square roots JAX differentiates right.
    Case(
        "acosh",
        jnp.arccosh,
        (1.2, 2.0, 5.0),
        (1.3 + 0.4j, -0.7 + 0.9j, 2.0 - 0.5j, -1.5 - 0.2j),
        reference=lambda x: jnp.log(x + jnp.sqrt(x + 1) * jnp.sqrt(x - 1)),
    ),
    Case("atanh", jnp.arctanh, (-0.6, 0.1, 0.8), C3),
    Case("atan2", lambda x: jnp.arctan2(jnp.sin(x), jnp.cos(x) + 2.0), ANY),
    Case("atan2_const_num", lambda x: jnp.arctan2(0.7, x), ANY),
    Case("atan2_second_arg_0", lambda x: jnp.arctan2(x, 0 * x), (-0.5, 0.7, 1.3)),
    Case("atan2_at_0", lambda x: jnp.arctan2(1.0, x), (0.0, 0.4)),
    # ---- special functions ------------------------------------------------------------------
    Case("logistic", jax.nn.sigmoid, (-2.0, 0.3, 4.0), C3),
    Case("erf", jsp.erf, (-1.2, 0.3, 2.0), order10=True),
    Case("erfc", jsp.erfc, (-1.2, 0.3, 2.0)),
    Case("erf_inv", jsp.erfinv, (-0.8, 0.1, 0.6)),
    Case("lgamma", jsp.gammaln, (-1.5, 0.3, 1.7, 4.5)),
    Case("digamma", jsp.digamma, (-1.5, 0.3, 1.7, 4.5)),
    # ---- piecewise: derivatives as nested jvp defines them ------------------------------------
    Case("abs", lambda x: jnp.abs(jnp.sin(x)), (-1.3, 0.7, 2.0)),
    Case("abs_at_0", jnp.abs, (0.0,)),
    Case("abs_of_series_at_0", lambda x: jnp.abs(jnp.sin(x)) * jnp.exp(x), (0.0,)),
    Case("sign", lambda x: jnp.sign(x) * jnp.exp(x), (-1.3, 0.0, 0.9)),
    Case("floor", lambda x: jnp.floor(3.0 * x) * jnp.sin(x), ANY),
    Case("ceil", lambda x: jnp.ceil(3.0 * x) * jnp.sin(x), ANY),
    Case("round_half_even", lambda x: jnp.round(3.0 * x) * jnp.sin(x), ANY),
    Case("round_away", lambda x: lax.round(3.0 * x) + jnp.sin(x), ANY),
    Case("max", lambda x: jnp.maximum(jnp.sin(x), jnp.cos(x)), ANY),
    Case("min", lambda x: jnp.minimum(jnp.sin(x), jnp.cos(x)), ANY),
    Case("max_const", lambda x: jnp.maximum(jnp.exp(x), 1.2), ANY),
    Case("max_tie", lambda x: jnp.maximum(x, 2.0 - x), (1.0,)),
    Case("max_tie_const", lambda x: jnp.maximum(jnp.sin(x), 0.0), (0.0,)),
    Case("min_tie", lambda x: jnp.minimum(x * x, x), (1.0,)),
    Case("min_tie_curved", lambda x: jnp.minimum(jnp.exp(x), 1.0 + jnp.sin(x)), (0.0,)),
    Case("clip", lambda x: jnp.clip(2.0 * jnp.sin(x), -0.5, 0.8), ANY),
    Case("clamp", lambda x: lax.clamp(-0.5, 2.0 * jnp.sin(x), 0.8), ANY),
    Case("clamp_at_bound", lambda x: lax.clamp(-0.5, x, 0.8), (-0.5, 0.8)),
    Case("clamp_series_bounds", lambda x: lax.clamp(jnp.sin(x) - 1.0, x, jnp.cos(x)), ANY),
    Case("select_n_where", lambda x: jnp.where(x > 0, jnp.sin(x), x * x), ANY),
    Case(
        "select_n_int_predicate",
        lambda x: lax.select_n(
            (x > 0).astype(jnp.int32) + (x > 0.5).astype(jnp.int32),
            jnp.exp(x),
            jnp.sin(x),
            x**3,
        ),
        ANY,
    ),
    Case("comparisons", lambda x: (x > 0.5) * jnp.exp(x) + (x <= 0.0) * jnp.sin(x), ANY),
    Case("comparison_eq", lambda x: jnp.where(x == 0.2, 1.0, jnp.cos(x)) * x, ANY),
    Case("integer_cast_index", lambda x: jnp.arange(5.0)[x.astype(int)] * x, (0.3, 1.7, 3.2)),
    Case("integer_cast_roundtrip", lambda x: x.astype(jnp.int32).astype(x.dtype) * x, ANY),
    Case("stop_gradient", lambda x: x * lax.stop_gradient(x), ANY, C3),
    Case("stop_gradient_inside", _sg_mix, ANY, C3),
    # ---- jax.nn (custom_jvp and jit sub-programs) ---------------------------------------------
    Case("relu", jax.nn.relu, (-1.0, 0.5, 2.0)),
    Case("relu_at_0", jax.nn.relu, (0.0,)),
    Case("gelu_tanh", jax.nn.gelu, ANY),
    Case("gelu_erf", lambda x: jax.nn.gelu(x, approximate=False), ANY),
    Case("softplus", jax.nn.softplus, (-2.0, 0.3, 4.0)),
    Case("softplus_at_0", jax.nn.softplus, (0.0,)),
    Case("logaddexp_tie", lambda x: jnp.logaddexp(x, jnp.sin(x)), (0.0, 0.5)),
    Case("silu", jax.nn.silu, (-2.0, 0.3, 4.0)),
    Case("custom_jvp_reads_output", _tanh_reading_its_output, ANY),
    Case("custom_jvp_with_effect", _sin_with_effect, ANY),
    Case("log_softmax", jax.nn.log_softmax, (-0.4, 0.3, 1.1), per_point=False),
    Case("softmax", jax.nn.softmax, (-0.4, 0.3, 1.1), per_point=False),
    Case("logsumexp", jax.nn.logsumexp, (-0.4, 0.3, 1.1), per_point=False),
]

_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "duplicate case names"


@pytest.mark.parametrize("name,dtype", case_params(CASES, lambda c: c.cpoints is not None))
def test_elementwise_rule(name, dtype):
    case = _BY_NAME[name]
    points = case.points if dtype == "float64" else case.cpoints
    x = np.asarray(points, dtype=dtype)
    v = direction(case.name, x.shape, dtype)
    orders = BASE_ORDERS + ((HIGH_ORDER,) if case.order10 else ())
    check_against_oracle(
        case.fn,
        x,
        v,
        orders,
        per_point=case.per_point,
        context=f"{name} [{dtype}]",
        reference=case.reference,
    )


# Scalar inputs: `v` defaults to 1.
SCALAR_CASES = [
    ("sin", jnp.sin, 0.7),
    ("exp_times_x", lambda x: jnp.exp(x) * x, -0.4),
    ("log1p", jnp.log1p, 0.3),
    ("sqrt", jnp.sqrt, 2.0),
    ("complex_exp", jnp.exp, 0.3 + 0.2j),
]


@pytest.mark.parametrize("name,fn,x", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_default_direction(name, fn, x):
    x = np.asarray(x, dtype=np.result_type(x, np.float64))
    expected = oracle(fn, x, None, 6)
    actual = taylax.derivatives(fn, 6)(x)
    assert_series_close(actual, expected, context=f"{name} with default v")


# --------------------------------------------------------------------------------------------
# The oracle and the comparison themselves.
# --------------------------------------------------------------------------------------------


def test_oracle_matches_closed_forms():
    x = np.asarray([0.3, -1.1])
    v = np.asarray([0.7, 1.3])
    k = np.arange(8)[:, None]
    # d^k/ds^k exp(x + s v) = v^k exp(x)
    np.testing.assert_allclose(oracle(jnp.exp, x, v, 7), v**k * np.exp(x), rtol=1e-14)
    # d^k/ds^k sin(x + s v) = v^k sin(x + k pi/2)
    np.testing.assert_allclose(
        oracle(jnp.sin, x, v, 7), v**k * np.sin(x + k * np.pi / 2), rtol=1e-13, atol=1e-15
    )
    # complex x with a real step s: d^k/ds^k (x + s v)^3
    z = np.asarray(0.3 + 0.4j)
    w = np.asarray(0.5 - 1.0j)
    expected = np.asarray([z**3, 3 * z**2 * w, 6 * z * w**2, 6 * w**3, 0.0])
    np.testing.assert_allclose(oracle(lambda t: t**3, z, w, 4), expected, rtol=1e-14)


@pytest.mark.parametrize(
    "f",
    [
        lambda t: jnp.exp(jnp.sin(t)) - 1.0,
        lambda t: 1.5 - jnp.sin(t) * t,
        lambda t: jnp.sin(t) + jnp.asarray([0.5, 2.0]),
        lambda t: t + jnp.sin(t),
    ],
    ids=["minus-constant", "constant-minus", "plus-constant-array", "line-plus-series"],
)
def test_sums_leave_the_rows_only_one_operand_has_alone(f):
    # A bias on a matmul's series, `1 + t^2`: the higher rows are passed through, not
    # added to padded zeros, so XLA can forward them (a slice of the sum is the operand's).
    jaxpr = jax.make_jaxpr(taylax.derivatives(f, 6))(0.3)
    eqns = list(all_equations(jaxpr))
    zero_padded = {
        e.outvars[0]
        for e in eqns
        if e.primitive.name == "pad" and e.params["padding_config"][0][1] > 0
    }
    sums = [e for e in eqns if e.primitive.name in ("add", "sub")]
    variables = [[v for v in e.invars if not isinstance(v, jax.extend.core.Literal)] for e in sums]
    assert sums and not [vs for vs in variables if any(v in zero_padded for v in vs)]


def test_assert_series_close_semantics():
    ref = np.asarray([[1.0, 2.0], [0.0, np.nan], [1e6, 3.0]])
    assert_series_close(ref.copy(), ref)
    # Per-order scale: 1e-10 * max(1, max|ref_k|).
    ok = ref.copy()
    ok[2, 1] += 0.9e-4  # order 2 has scale 1e6 -> tol 1e-4
    ok[1, 0] += 0.9e-10  # order 1 values ~0 -> tol 1e-10
    assert_series_close(ok, ref)
    for k, i, value in [(0, 0, 1.0 + 1e-9), (1, 0, 2e-10), (2, 1, 3.0 + 2e-4)]:
        bad = ref.copy()
        bad[k, i] = value
        with pytest.raises(AssertionError, match=f"order {k}"):
            assert_series_close(bad, ref)
    # nan reference needs a non-finite actual value, and vice versa.
    for k, i, value in [(1, 1, 0.0), (0, 0, np.inf), (2, 0, np.nan)]:
        bad = ref.copy()
        bad[k, i] = value
        with pytest.raises(AssertionError, match="non-finite"):
            assert_series_close(bad, ref)
    inf_ok = ref.copy()
    inf_ok[1, 1] = np.inf
    assert_series_close(inf_ok, ref)
    with pytest.raises(AssertionError, match="shape"):
        assert_series_close(ref[:2], ref)
    with pytest.raises(AssertionError, match="dtype"):
        assert_series_close(ref.astype(np.float32), ref)
    with pytest.raises(AssertionError, match="structure"):
        assert_series_close((ref, ref), ref)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("order", [2, 5, 8])  # order 1 is `jax.jvp`'s (`_elementwise`)
def test_real_sin_and_cos_are_evaluated_once(dtype, order):
    # One `exp(i x)` computed once: LLVM evaluates sin and cos with one `sincos`, in one
    # kernel. XLA's complex exp of an imaginary argument is its real cos and sin exactly.
    # Up to order 4 `sin` alone is one kernel (`taylax._one_kernel`): no mark, the real
    # `sin` and `cos` themselves.
    from taylax._count import iter_equations
    from taylax._once import computed_once_p

    t = jnp.linspace(-40.0, 40.0, 1001, dtype=dtype)
    jaxpr = jax.make_jaxpr(taylax.derivatives(jnp.sin, order))(t[0])
    marks = [e for e in iter_equations(jaxpr) if e.primitive is computed_once_p]
    complex_marks = [jnp.issubdtype(e.outvars[0].aval.dtype, jnp.complexfloating) for e in marks]
    if order <= 4:
        assert not marks
    else:
        assert complex_marks[:1] == [True] and not any(complex_marks[1:])
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(jnp.sin, order)))(t))
    np.testing.assert_array_equal(got[:, 0], np.asarray(jax.jit(jnp.sin)(t)))
    np.testing.assert_array_equal(got[:, 1], np.asarray(jax.jit(jnp.cos)(t)))


# (function, its derivatives at t as a function of k) for the cyclic closed forms.
_CYCLES = {
    "cos": (jnp.cos, lambda t, k: [np.cos(t), -np.sin(t), -np.cos(t), np.sin(t)][k % 4]),
    "sin": (jnp.sin, lambda t, k: [np.sin(t), np.cos(t), -np.sin(t), -np.cos(t)][k % 4]),
    "exp": (jnp.exp, lambda t, k: np.exp(t)),
}


@xla_cpu_only
@pytest.mark.usefixtures("cpu_policy")
@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128])
@pytest.mark.parametrize("name", list(_CYCLES))
def test_closed_form_stack_past_eight_rows_stays_one_expression(name, dtype):
    # XLA:CPU fuses a concatenate of at most 8 rows; a closed form stacked from more
    # compiled to one kernel per row (12 kernels for complex cos at order 9, 18 at 16).
    # Its stack is one broadcast expression instead; readers of a row still take the row.
    fn, _ = _CYCLES[name]
    t = jax.ShapeDtypeStruct((), dtype)
    for order in (9, 16):
        assert entry_kernels(taylax.derivatives(fn, order), t) <= 3, order


@pytest.mark.parametrize("order", [8, 9, 12, 16])
@pytest.mark.parametrize("name", list(_CYCLES))
def test_closed_form_stack_past_eight_rows_matches_the_derivatives(name, order):
    fn, derivative = _CYCLES[name]
    for t in (np.linspace(-3.0, 3.0, 7), np.array([0.5 + 0.25j, -1.0 - 2.0j])):
        got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(fn, order)))(jnp.asarray(t)))
        want = np.stack([derivative(t, k) for k in range(order + 1)], axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_relu_keeps_the_degree_of_its_input():
    # relu's rule is a select of x': its series has the degree of x (1 here) and the rows
    # past it stay known zeros, so the next matmul takes two rows, not K + 1 (it took 7).
    # Large enough for dots (small products are elementwise products and sums).
    w1, w2 = jnp.full((64, 64), 0.1), jnp.full((64, 32), 0.1)
    f = lambda x: jax.nn.relu(x @ w1) @ w2  # noqa: E731
    x, v = jnp.linspace(-1.0, 1.0, 1024).reshape(16, 64), jnp.ones((16, 64))
    jaxpr = emitted_jaxpr(taylax.derivatives(f, 6), x, v)
    dots = [e for e in all_equations(jaxpr) if e.primitive is lax.dot_general_p]
    assert [e.invars[0].aval.shape for e in dots] == [(2, 16, 64), (2, 16, 64)]
    check_against_oracle(f, x, v, BASE_ORDERS, per_point=False)


@xla_cpu_only
@pytest.mark.parametrize(
    "name,fn,kernels",
    [
        # logistic's Riccati recurrence: one kernel (through (1 + tanh(x / 2)) / 2, six).
        ("silu", jax.nn.silu, 1),
        # x^3 along a line times the direction's powers row by row: two kernels (four).
        ("gelu_tanh", jax.nn.gelu, 2),
    ],
)
def test_activation_along_a_direction_argument_fuses(name, fn, kernels, emission):
    # With the direction an argument, closed forms along the line are products of rows
    # (`ks.along_line`), not a stacked product that XLA materializes and slices. Counted
    # without the marks a whole-array pass of order 2 puts on small values (each a buffer
    # by design: `unbatched_unmarked_min_bytes`), so that the count says what fuses.
    emission(unbatched_unmarked_min_bytes=None)
    points = jax.ShapeDtypeStruct((65536,), jnp.float64)
    order2 = taylax.derivatives(fn, 2)
    assert entry_kernels(lambda x, v: order2(x, v), points, points) == kernels


@xla_cpu_only
def test_tanh_along_a_direction_argument_at_order_1_is_one_kernel():
    # Its closed form along the line as rows `[tanh(x), sech^2(x) v]`: one kernel, as
    # nested jvp's. As one stacked polynomial (with a select for row 0) XLA wrote tanh
    # and the slope to buffers of their own first: three kernels.
    points = jax.ShapeDtypeStruct((65536,), jnp.float64)
    order1 = taylax.derivatives(jnp.tanh, 1)
    assert entry_kernels(lambda x, v: order1(x, v), points, points) == 1


def test_values_read_only_under_stop_gradient_carry_no_series():
    # softmax and logsumexp subtract stop_gradient(max(x)): the max's series (its ties
    # counted, its rows chosen) was computed and then dropped. Now the program is the one
    # for the max of a constant.
    x = jnp.asarray(np.linspace(-1.0, 1.0, 12).reshape(3, 4))
    v = direction("stop_gradient_max", x.shape, "float64")
    f = lambda x: jnp.exp(x - lax.stop_gradient(jnp.max(x, -1, keepdims=True)))  # noqa: E731
    g = lambda x: jnp.exp(x - jnp.max(lax.stop_gradient(x), -1, keepdims=True))  # noqa: E731

    def equations(h):
        return len(list(all_equations(emitted_jaxpr(taylax.derivatives(h, 4), x, v))))

    assert equations(f) == equations(g)
    check_against_oracle(f, x, v, BASE_ORDERS, per_point=False)
