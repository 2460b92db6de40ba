"""The series kernels, and every elementwise rule on a full series (not only along a line).

Applying a function directly to `x + s v` hands its rule a degree-1 series, which
takes the closed form along a line. Composing it after an inner function
(`f(0.6 + 0.4 sin(x))`) hands it a series of full degree, which exercises the
recurrences (push-form loops, composition, chunking).
"""

import contextlib
import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import mpmath
import numpy as np
import pytest

import taylax
from reference import (
    all_equations,
    assert_series_close,
    nested_jvp_derivatives,
    xla_cpu_only,
)
from taylax import _programs, _series
from taylax._count import count_equations
from taylax._rules import _control

# These tests pin the programs the CPU policy emits, whatever the backend.
pytestmark = pytest.mark.usefixtures("cpu_policy")


def inner(x):
    return 0.6 + 0.4 * jnp.sin(x)


OUTER = {
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "asinh": jnp.arcsinh,
    "acosh": lambda y: jnp.arccosh(1 + y),
    "atanh": jnp.arctanh,
    "sqrt": jnp.sqrt,
    "rsqrt": jax.lax.rsqrt,
    "cbrt": jnp.cbrt,
    "pow_2.5": lambda y: y**2.5,
    "pow_-1.5": lambda y: y**-1.5,
    "integer_pow_7": lambda y: y**7,
    "integer_pow_-3": lambda y: y**-3,
    "reciprocal": lambda y: 1 / y,
    "square": jnp.square,
    "erf": jsp.erf,
    "erfc": jsp.erfc,
    "erf_inv": jsp.erfinv,
    "lgamma": jsp.gammaln,
    "digamma": jsp.digamma,
    "polygamma_2": lambda y: jsp.polygamma(2, y),
    "atan2": lambda y: jnp.arctan2(y, 1.5 - y),
    "div": lambda y: jnp.sin(y) / (1 + y),
    "mul": lambda y: y * jnp.exp(y),
    "abs_complex": lambda y: jnp.abs(y * (1 + 2j)),
}


def check_full_series(name: str, order: int) -> None:
    outer = OUTER[name]

    def f(x):
        return outer(inner(x))

    x = jnp.array([0.3, -0.7, 1.2])
    v = jnp.array([1.0, -0.5, 0.8])
    assert_series_close(taylax.derivatives(f, order)(x, v), nested_jvp_derivatives(f, x, v, order))


@pytest.mark.parametrize("name", sorted(OUTER))
def test_rule_on_full_series(name):
    check_full_series(name, 6)


# The recurrences run unrolled up to the CPU policy's `unroll_max_order` (`rows_max_order` on inputs
# with rows of their own) and as loops above it. The table above runs unrolled (order 6);
# these rules also run through their loops (forced at order 5 by setting both thresholds
# to 0; a different order, so no cached program is reused).
LOOP_CASES = (
    "exp",
    "sin",
    "tanh",
    "log",
    "sqrt",
    "pow_2.5",
    "reciprocal",
    "div",
    "atan",
    "mul",
    "erf_inv",
    "atan2",
)


@pytest.mark.parametrize("name", LOOP_CASES)
def test_rule_on_full_series_through_loops(name, emission):
    emission(unroll_max_order=0, rows_max_order=0)
    check_full_series(name, 5)


# Inputs that are low-degree polynomials in the seed run their recurrences unrolled up to
# `UNROLL_LOW_DEGREE_MAX_ORDER` (and as loops above it). Nested jvp cannot reach these
# orders; the references are mpmath's Taylor coefficients in 60-digit arithmetic.
LOW_DEGREE = {
    "exp(-t^2/2)": (lambda t: jnp.exp(-(t**2) / 2), lambda t: mpmath.exp(-(t**2) / 2)),
    "1/(1+t^2)": (lambda t: 1 / (1 + t**2), lambda t: 1 / (1 + t**2)),
    "cos(3t)/(1+t^2)": (
        lambda t: jnp.cos(3 * t) / (1 + t**2),
        lambda t: mpmath.cos(3 * t) / (1 + t**2),
    ),
    "sqrt(1+t^2)": (lambda t: jnp.sqrt(1 + t**2), lambda t: mpmath.sqrt(1 + t**2)),
    "sin(t^2)": (lambda t: jnp.sin(t**2), lambda t: mpmath.sin(t**2)),
    # log and log1p divide by their argument, which keeps its own (low) degree.
    "log(1+t^2)": (lambda t: jnp.log(1 + t**2), lambda t: mpmath.log(1 + t**2)),
    "log1p(t^2+t^3/4)": (
        lambda t: jnp.log1p(t * t + t**3 / 4),
        lambda t: mpmath.log(1 + t**2 + t**3 / 4),
    ),
    # So do powers and the integrals (atan, acosh, erf: `y' = g(x) x'`).
    "(1+t^2)^1.5": (lambda t: (1 + t * t) ** 1.5, lambda t: (1 + t**2) ** 1.5),
    "atan(t^2)": (lambda t: jnp.arctan(t * t), lambda t: mpmath.atan(t**2)),
    # Singularities far from both points: `atan2(t^2, 1 + t)` at -1.3 and `erfinv(t / 2)`
    # read 4e-14 of the largest coefficient past order 15, in the forms before the
    # current ones too.
    "atan2(t^2, 3+t)": (
        lambda t: jnp.arctan2(t * t, 3 + t),
        lambda t: mpmath.atan2(t**2, 3 + t),
    ),
    "erfinv(t/3)": (lambda t: jsp.erfinv(t / 3), lambda t: mpmath.erfinv(t / 3)),
    "acosh(2+t^2)": (lambda t: jnp.arccosh(2 + t * t), lambda t: mpmath.acosh(2 + t**2)),
    "erf(t^2/2)": (lambda t: jsp.erf(t * t / 2), lambda t: mpmath.erf(t**2 / 2)),
    "sqrt(1+t^2) exp(sin t)": (
        lambda t: jnp.sqrt(1 + t**2) * jnp.exp(jnp.sin(t)),
        lambda t: mpmath.sqrt(1 + t**2) * mpmath.exp(mpmath.sin(t)),
    ),
}


def assert_matches_mpmath(f, exact, x0: float | complex, order: int) -> None:
    """taylax's Taylor coefficients of `f` at `x0` (real or complex) against mpmath's in
    60-digit arithmetic."""
    if isinstance(x0, complex):
        convert, point, args = complex, mpmath.mpc(x0), (jnp.asarray(x0), jnp.asarray(1.0 + 0j))
    else:
        convert, point, args = float, mpmath.mpf(x0), (x0, 1.0)
    with mpmath.workdps(60):
        primal, coeffs = taylax.taylor(f, order)(*args)
        series = mpmath.taylor(exact, point, order)
        np.testing.assert_allclose(convert(primal), convert(series[0]), rtol=1e-15)
        want = [convert(c) for c in series[1:]]
    # Relative to the largest coefficient so far: the products and recurrences cancel
    # terms of that size (measured: at most 5e-16).
    for k in range(order):
        scale = max(abs(w) for w in want[: k + 1])
        assert abs(convert(coeffs[k]) - want[k]) <= 1e-14 * scale, (x0, k + 1)


@pytest.mark.parametrize("order", [12, 32, 40])
@pytest.mark.parametrize("name", sorted(LOW_DEGREE))
def test_low_degree_recurrences_match_mpmath(name, order):
    for x0 in (0.7, -1.3):
        assert_matches_mpmath(*LOW_DEGREE[name], x0, order)


@pytest.mark.parametrize("log", [lambda t: jnp.log(1 + t * t), lambda t: jnp.log1p(t * t)])
def test_log_of_a_low_degree_argument_is_linear_in_the_order(log):
    # The argument keeps its degree (2): coefficient k of its division sums two terms, so
    # the products grow linearly in K and no loop appears up to the low-degree bound
    # (zero-padded to K rows it summed k: 142 products at K = 16, a loop at 32). The
    # integration's rows add one product per order (`_series.integrate`: 68 at K = 16).
    # Orders past `primal_once_max_order`: up to it the primal's mark adds a product
    # (`_series.once`).
    muls = {
        k: taylax.equation_counts(jax.make_jaxpr(taylax.derivatives(log, k))(0.3))
        for k in (16, 24, 32)
    }
    assert all(counts.get("while", 0) == 0 for counts in muls.values())
    assert muls[32]["mul"] - muls[24]["mul"] == muls[24]["mul"] - muls[16]["mul"]
    assert muls[16]["mul"] <= 5 * 16


def test_erf_inv_runs_unrolled_and_loops_past_the_unrolled_orders():
    # It ran its recurrence in a loop at every order: a `scan` over (points, K + 1)
    # stacks under vmap, 11.6x jet at K = 8 (docs/EMISSION.md, "Stacks under vmap").
    def counts(k):
        return taylax.equation_counts(jax.make_jaxpr(taylax.derivatives(jsp.erfinv, k))(0.3))

    unrolled = taylax.CPU.unroll_max_order
    assert counts(8).get("scan", 0) == 0 and counts(unrolled).get("scan", 0) == 0
    assert counts(unrolled + 1).get("scan", 0) == 1


def test_atan2_along_a_line_is_linear_in_the_order():
    # Its arguments keep their own degree (1 and 2): padded to full degree, the products
    # and the division summed k terms per coefficient (536 equations at K = 8, not 139).
    def f(t):
        return jnp.arctan2(t, 1 + t * t)

    # Orders past `primal_once_max_order`, as for the log above.
    muls = {
        k: taylax.equation_counts(jax.make_jaxpr(taylax.derivatives(f, k))(0.3))["mul"]
        for k in (16, 24, 32)
    }
    assert muls[32] - muls[24] == muls[24] - muls[16]
    assert muls[16] <= 8 * 16


def _summed_exps(t):
    # A sum by a small dot: a stacked series, not rows of its own (`jnp.sum` of the
    # exponentials' known rows sums each row, and its rows are known too).
    return jnp.exp(t * jnp.asarray([0.5, -0.25])) @ jnp.ones(2)


def _summed_exps_mp(t):
    return mpmath.exp(t / 2) + mpmath.exp(-t / 4)


@pytest.mark.parametrize("x0", [0.7, -1.3, 0.4 + 0.3j])
@pytest.mark.parametrize("order", [12, taylax.CPU.rows_max_order])
def test_products_and_divisions_in_rows_match_mpmath(order, x0):
    # Factors with rows of their own (a recurrence's, a closed form's): the product is
    # row sums and the division reads them one per coefficient (`_series.has_separate_rows`).
    def exp_mp(t):
        return mpmath.exp(-(t**2) / 2)

    assert_matches_mpmath(
        damped_wave, lambda t: exp_mp(t) * mpmath.cos(3 * t) / (1 + t**2), x0, order
    )

    # A stacked factor: read only by the division, the product is still row sums
    # (`_series.cauchy(by_rows=True)`); read elsewhere too, one shifted sum, and the division
    # multiplies it by the reciprocal's rows.
    def read_once(t):
        return jnp.exp(-(t**2) / 2) * _summed_exps(t) / (1 + t**2)

    def read_twice(t):
        p = jnp.exp(-(t**2) / 2) * _summed_exps(t)
        return p / (1 + t**2) + p

    assert_matches_mpmath(
        read_once, lambda t: exp_mp(t) * _summed_exps_mp(t) / (1 + t**2), x0, order
    )
    assert_matches_mpmath(
        read_twice,
        lambda t: exp_mp(t) * _summed_exps_mp(t) * (1 / (1 + t**2) + 1),
        x0,
        order,
    )

    if order > _series.product_rows_max_order():
        return  # products past order 4 are shifted sums off XLA:CPU (tested below)

    def shifted_sums(f):  # the (2K+1)-row pad of a shifted sum's operand
        jaxpr = jax.make_jaxpr(taylax.derivatives(f, order))(0.3)
        return [e for e in all_equations(jaxpr) if e.outvars[0].aval.shape == (2 * order + 1,)]

    assert not shifted_sums(damped_wave)
    assert not shifted_sums(read_once)
    assert shifted_sums(read_twice)


@pytest.mark.parametrize("order", [6, 8, 12, taylax.CPU.rows_max_order])
def test_products_past_the_policys_row_orders_are_shifted_sums(order):
    # `_series.product_rows_max_order`: row sums up to it (16 under the CPU policy, 32
    # under the GPU's: measured on an H200, docs/EMISSION.md, "Fourth run"); past it one
    # shifted sum, and the division no longer asks its numerator for rows. The
    # coefficients do not change. Programs are cached per policy.
    def f(t):
        return jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)

    def shifted_sums(policy):  # the (2K+1)-row pad of a shifted sum's operand
        with taylax.emission_policy(policy):
            assert _series.product_rows_max_order() == policy.product_rows_max_order
            jaxpr = jax.make_jaxpr(taylax.derivatives(f, order))(0.3)
        return [e for e in all_equations(jaxpr) if e.outvars[0].aval.shape == (2 * order + 1,)]

    assert not shifted_sums(taylax.CPU)
    assert not shifted_sums(taylax.GPU)
    stacked = dataclasses.replace(
        taylax.GPU, name="stacked", product_rows_max_order=4, stacked_product_rows_max_order=4
    )
    assert shifted_sums(stacked)

    def exact(t):
        return mpmath.exp(-(t**2) / 2) * mpmath.cos(3 * t) / (1 + t**2)

    for x0 in (0.7, 0.4 + 0.3j):
        assert_matches_mpmath(f, exact, x0, order)


@pytest.mark.parametrize("order", [12, 24])
def test_full_numerator_over_low_degree_denominator_complex_matches_mpmath(order):
    # Above order 8 a closed-form numerator is read one row per coefficient (`_series.divide`).
    assert_matches_mpmath(*LOW_DEGREE["cos(3t)/(1+t^2)"], 0.4 + 0.3j, order)


@pytest.mark.parametrize("x0", [20.0, -20.0, 35.0])
@pytest.mark.parametrize("order", [3, 8])
def test_saturated_tanh_keeps_its_digits(x0, order, emission):
    # Where tanh saturates, 1 - tanh^2 is 0 in float64 but sech^2 = 4e / (1 + e)^2 with
    # e = exp(-2|x|) keeps every digit (the Riccati recurrence, and the line form).
    assert_matches_mpmath(
        lambda t: jnp.tanh(t + jnp.sin(t)), lambda t: mpmath.tanh(t + mpmath.sin(t)), x0, order
    )
    assert_matches_mpmath(jnp.tanh, mpmath.tanh, x0, order)
    # Read only by a matmul taking one row at a time: the Riccati rows are left unmarked.
    emission(row_dots_min_bytes=0)
    weights = jnp.asarray([0.25, 0.75])
    assert_matches_mpmath(
        lambda t: jnp.tanh((t + jnp.sin(t)) * jnp.ones(2)) @ weights,
        lambda t: mpmath.tanh(t + mpmath.sin(t)),
        x0,
        order,
    )


@pytest.mark.parametrize("x0", [40.0, -40.0, -100.0, 0.3])
@pytest.mark.parametrize("order", [1, 3, 8])
def test_saturated_logistic_keeps_its_digits(x0, order):
    # logistic' = y (1 - y) is 0 in float64 where y nears 1; s (1 - s) with
    # s = logistic(-|x|) keeps every digit on both sides (the Riccati recurrence).
    assert_matches_mpmath(jax.nn.sigmoid, lambda t: 1 / (1 + mpmath.exp(-t)), x0, order)
    if abs(x0) < 50:  # past it, rounding t + sin t alone moves e^-|t| by more than 1e-14
        assert_matches_mpmath(
            lambda t: jax.nn.sigmoid(t + jnp.sin(t)),
            lambda t: 1 / (1 + mpmath.exp(-(t + mpmath.sin(t)))),
            x0,
            order,
        )


# Full-degree inputs (a function of sin t) run their recurrences above the unrolled orders
# by blocks of `taylax.CPU.recurrence_block` rows: division, powers, exp and tanh (exp and a
# division there). Order 33 ends inside a block of 4, orders 12 and 40 on a boundary.
FULL_DEGREE = {
    "exp(sin t)": (lambda t: jnp.exp(jnp.sin(t)), lambda t: mpmath.exp(mpmath.sin(t))),
    "1/(2+sin t)": (lambda t: 1 / (2 + jnp.sin(t)), lambda t: 1 / (2 + mpmath.sin(t))),
    "(2+sin t)^2.5": (lambda t: (2 + jnp.sin(t)) ** 2.5, lambda t: (2 + mpmath.sin(t)) ** 2.5),
    "tanh(sin t)": (lambda t: jnp.tanh(jnp.sin(t)), lambda t: mpmath.tanh(mpmath.sin(t))),
}


@pytest.mark.parametrize("order", [12, 33, 40])
@pytest.mark.parametrize("name", sorted(FULL_DEGREE))
def test_blocked_recurrences_match_mpmath(name, order):
    assert_matches_mpmath(*FULL_DEGREE[name], 0.7, order)


@pytest.mark.parametrize("order", [1, 2, 4, 7])
def test_blocked_recurrences_at_every_block_offset(order, emission):
    # Forced through the blocks at small orders: the last block ends at the order (4) or
    # past it (1, 2, 7; those rows are computed and dropped), against nested jvp.
    emission(unroll_max_order=0, rows_max_order=0)
    for name in ("exp", "div", "pow_2.5", "reciprocal"):
        check_full_series(name, order)


@pytest.mark.parametrize(
    "f",
    [
        lambda z: jnp.exp(jnp.sin(z)),
        lambda z: jnp.cos(jnp.sin(z)),
        lambda z: 1 / (2 + jnp.sin(z)),
        lambda z: (2 + jnp.sin(z)) ** 2.5,
        lambda z: jnp.tanh(jnp.sin(z)),
    ],
    ids=["exp", "cos", "reciprocal", "pow_2.5", "tanh"],
)
def test_blocked_recurrences_complex(f, emission):
    # Complex series through the blocks (row indices are real, rows complex).
    emission(unroll_max_order=0, rows_max_order=0)
    z = jnp.array([0.3 + 0.2j, -0.5 + 0.7j])
    v = jnp.array([1.0 + 0.5j, 0.3 - 1j])
    assert_series_close(taylax.derivatives(f, 6)(z, v), nested_jvp_derivatives(f, z, v, 6))


def test_blocked_recurrence_is_reverse_differentiable_and_flat_in_the_order():
    # d/dt of the 12th derivative is the 13th: reverse mode through the block loop.
    def f(t):
        return jnp.exp(jnp.sin(t)) / (2 + jnp.cos(t))

    grad = jax.grad(taylax.derivative(f, 12))(0.4)
    np.testing.assert_allclose(grad, taylax.derivative(f, 13)(0.4), rtol=1e-12)
    # The block body is the program: 24 more orders add no more than a few equations each.
    counts = {k: count_equations(jax.make_jaxpr(taylax.derivative(f, k))(0.4)) for k in (16, 40)}
    assert counts[40] - counts[16] <= 2 * (40 - 16), counts


def test_chunked_path_matches_unchunked():
    # Above the unrolling threshold, 4096 elements run their loops chunk by chunk; 8 do not.
    order = taylax.CPU.unroll_max_order + 2
    key = jax.random.key(0)
    x = jax.random.uniform(key, (64, 64), minval=-1.0, maxval=1.0)
    v = jax.random.normal(jax.random.key(1), (64, 64))

    def f(x):
        return jnp.tanh(inner(x)) * jnp.log(inner(x))

    big = taylax.derivatives(f, order)(x, v)
    small = jnp.stack(
        [taylax.derivatives(f, order)(x[i, :8], v[i, :8]) for i in range(0, 64, 16)], axis=1
    )
    np.testing.assert_allclose(big[:, ::16, :8], small, rtol=1e-12, atol=1e-12)


# A set: on the CPU the two policy orders are one (16).
@pytest.mark.parametrize(
    "order", sorted({3, taylax.CPU.unroll_max_order, taylax.CPU.rows_max_order})
)
def test_compose_rows_match_the_loop(order):
    # Faa di Bruno in rows (up to `ROWS_MAX_ORDER`) against the loop (above it), truncated:
    # coefficient k reads only d_m for m <= k, so the loop's first rows are the same,
    # non-finite ones included (a power past its smooth order at 0: inf * row = inf or nan).
    loop_order = taylax.CPU.rows_max_order + 1
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(loop_order + 1, 3)))
    x = x.at[0].set(jnp.asarray([0.0, 0.5, -1.0]))
    d = jnp.asarray(rng.normal(size=(loop_order + 1, 3))).at[5:, 0].set(jnp.inf)
    rows = _series.compose(x[: order + 1], d[: order + 1], order)
    loop = _series.compose(x, d, loop_order)[: order + 1]
    np.testing.assert_allclose(rows, loop, rtol=1e-13, atol=1e-13)
    assert np.isnan(rows[order, 0]) == np.isnan(loop[order, 0])
    assert _series.has_separate_rows(rows) and not _series.has_separate_rows(loop)


def test_powers_are_exact_products():
    x = jnp.array([0.0, -2.0, 0.5, 3.0])
    for order in (0, 1, 2, 5, 8, 13):
        want = np.stack([np.asarray(x) ** k for k in range(order + 1)])
        np.testing.assert_allclose(_series.powers(x, order), want, rtol=1e-15)
    with np.errstate(divide="ignore"):
        want = np.stack([np.asarray(x) ** -float(k) for k in range(6)])
    np.testing.assert_allclose(_series.powers(x, 5, sign=-1), want, rtol=1e-15)


@pytest.mark.parametrize("p", [10, 3, 0, -1, -4])
def test_integer_exponent_powers_match_pow(p):
    # x0^(p-m) for m = 0..order; at 0 the negative exponents are inf, as pow gives.
    x0 = jnp.array([0.0, -1.5, 0.7, 2.0])
    order = 6
    got = _series.integer_exponent_powers(x0, p, order)
    want = jax.lax.pow(jnp.broadcast_to(x0, (order + 1, 4)), (p - jnp.arange(order + 1.0))[:, None])
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_cauchy_matches_polynomial_product():
    a = np.array([1.0, 2.0, -1.0, 0.5, 3.0])
    b = np.array([0.5, -1.0, 4.0])
    want = np.convolve(a, b)[:6]
    got = _series.cauchy(jnp.asarray(a), jnp.asarray(b), 5)
    np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("order", [1, 2, 8, 9, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_cauchy_row_and_shifted_sum_forms_match_convolution(order, dtype):
    # Row products up to order 8 (`UNROLL_MAX_ORDER`), a shifted sum above: both sides of
    # the switch, factors of equal and of different degrees, per point (a batch of 3).
    rng = np.random.default_rng(order)

    def series(degree):
        c = rng.standard_normal((degree + 1, 3))
        return c + 1j * rng.standard_normal(c.shape) if dtype is np.complex128 else c

    for da, db in [(order, order), (1, order), (order, 2), (order + 3, order)]:
        a, b = series(da), series(db)
        got = _series.cauchy(jnp.asarray(a), jnp.asarray(b), order)
        want = np.stack([np.convolve(a[:, n], b[:, n])[: order + 1] for n in range(3)], axis=1)
        assert got.shape == (min(da + db, order) + 1, 3)
        np.testing.assert_allclose(got, want[: got.shape[0]], rtol=1e-13, atol=1e-13)


def test_divide_inverts_cauchy():
    a = jnp.array([1.0, 2.0, -1.0, 0.5, 3.0, 1.0])
    b = jnp.array([2.0, -1.0, 0.25, 0.0, 1.0, -2.0])
    q = _series.divide(a, b, 5)
    np.testing.assert_allclose(_series.cauchy(q, b, 5), a, rtol=1e-13, atol=1e-13)


def test_degrees_are_tracked():
    seed = taylax.Series(jnp.array([1.0, 1.0]))
    assert seed.degree == 1
    assert taylax.Series.constant(3.0).degree == 0
    square = _series.cauchy(seed.coeffs, seed.coeffs, 10)
    assert _series.degree_of(square) == 2
    assert _series.degree_of(_series.cauchy(square, square, 3)) == 3


# What XLA makes of the emitted programs, pinned by the compiled HLO (deterministic for a
# given XLA; timings are not asserted anywhere in the tests). `benchmarks/bench_batched.py`
# measures what these structures buy.


def _compiled_module(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def _count_ops(hlo: str, opcode: str) -> int:
    return len(re.findall(rf"= \S+ {opcode}\(", hlo))


def damped_wave(t):
    return jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)


def test_batched_chain_has_no_loops_tables_or_pow():
    # Unrolled recurrences, shifted-sum products and powers by products: straight-line
    # kernels, no while loop, no (N, K+1, K+1) table, no pow, no reduce-window.
    order = taylax.CPU.unroll_max_order
    t = jnp.linspace(0.5, 1.5, 256)
    hlo = _compiled_module(jax.vmap(taylax.derivatives(damped_wave, order)), t)
    assert "while" not in hlo
    for opcode in ("power", "reduce-window", "dot", "gather", "scatter"):
        assert _count_ops(hlo, opcode) == 0, opcode
    assert f"[256,{order + 1},{order + 1}]" not in hlo


def test_low_degree_recurrences_run_unrolled_and_grow_linearly():
    # Above `UNROLL_MAX_ORDER`, recurrences whose known factor is a low-degree polynomial in
    # the seed (exp(-t^2/2), 1/(1 + t^2)) still run unrolled: no while loop, and the program
    # grows by the same number of equations per order (min(k, degree) terms per row).
    order = 2 * taylax.CPU.unroll_max_order
    t = jnp.linspace(0.5, 1.5, 256)
    hlo = _compiled_module(jax.vmap(taylax.derivatives(damped_wave, order)), t)
    assert "while" not in hlo
    # (From above `ROWS_MAX_ORDER`: up to it the product over 1 + t^2 is row sums.)
    counts = {
        k: count_equations(jax.make_jaxpr(taylax.derivatives(damped_wave, k))(0.3))
        for k in (18, 25, taylax.CPU.unroll_low_degree_max_order)
    }
    assert taylax.CPU.unroll_low_degree_max_order == 32 and taylax.CPU.rows_max_order < 18
    assert counts[32] - counts[25] == counts[25] - counts[18], counts
    # Past `UNROLL_LOW_DEGREE_MAX_ORDER` the loops take over again (XLA's compile time grows
    # faster than the unrolled program).
    looped = jax.make_jaxpr(
        taylax.derivatives(damped_wave, taylax.CPU.unroll_low_degree_max_order + 1)
    )
    assert taylax.equation_counts(looped(0.3)).get("scan", 0) > 0


def test_transcendentals_are_computed_once_per_element():
    # XLA:CPU copies cheap producers (real sin and cos) into every kernel that reads them;
    # `_series.computed_once` keeps each to one evaluation per element, for all K+1 coefficients.
    def f(t):
        return jnp.sin(t) * jnp.cos(2 * t) * jnp.exp(jnp.sin(t))

    t = jnp.linspace(0.5, 1.5, 256)
    hlo = _compiled_module(jax.vmap(taylax.derivatives(f, taylax.CPU.unroll_max_order)), t)
    # sin(t) twice in the program (CSE merges it in the jaxpr only within one rule).
    assert _count_ops(hlo, "sine") <= 2
    assert _count_ops(hlo, "cosine") <= 2
    assert _count_ops(hlo, "exponential") == 1


def _stacked_intermediates(hlo: str, points: int, coefficients: int) -> list[str]:
    """Instructions of the entry computation, other than its root, that write a
    (points, coefficients) array: a stacked series that XLA materialized."""
    entry = hlo.split("\nENTRY", 1)[1]
    shape = re.compile(rf"= \w+\[{points},{coefficients}\]")
    return [line for line in entry.splitlines() if "ROOT" not in line and shape.search(line)]


@pytest.mark.parametrize(
    "f",
    [
        lambda t: 0.3 * jnp.sin(t) * t**10,
        damped_wave,
        lambda t: (1 - t**3) * jnp.cos(t) / 4 - jnp.exp(2 * t),
    ],
    ids=["seed-function", "damped-wave", "polynomial-trig-exp"],
)
def test_closed_forms_reach_their_readers_as_rows(f):
    # Under vmap a stacked series is a (points, coefficients) array built by a
    # concatenate along its minor axis, which XLA:CPU always materializes: a reader of
    # one row would read (and the program allocate) the whole stack. Closed forms along
    # the seed, powers, and sums, negations and constant multiples of them keep their
    # rows (`_series.known_rows`), so only the output is stacked.
    order, points = 4, 256
    t = jnp.linspace(0.5, 1.5, points)
    hlo = _compiled_module(jax.vmap(taylax.derivatives(f, order)), t)
    assert _stacked_intermediates(hlo, points, order + 1) == []
    assert _stacked_intermediates(hlo, points, 2) == []  # the seed itself


def _most_kernels(hlo: str) -> int:
    """Fusions of the computation that has the most of them (a loop's body, here)."""
    return max(part.count(" fusion(") for part in re.split(r"\n(?=\S)", hlo))


@xla_cpu_only
def test_loop_bodies_keep_linear_operations_on_stacks(monkeypatch):
    # Outside loops a sum of stacks of rows stacks its own rows (under vmap the rows
    # then fuse into the output). In a loop body every row would be a kernel of its own
    # per step, so stacks stay stacks there (`taylax._pass.in_loop_body`), with the same values.
    def euler(y):
        def step(i, y):
            return jnp.stack([y[0] + 0.01 * y[1], y[1] + 0.01 * (jnp.cos(y[1]) - jnp.sin(y[0]))])

        return jax.lax.fori_loop(0, 10, step, y)

    y0, v = jnp.array([0.4, -0.2]), jnp.array([0.7, -0.3])

    def kernels_and_value():
        _programs._PROGRAMS.clear()  # trace the Taylor pass again
        fn = jax.jit(lambda y: taylax.derivatives(euler, 8)(y, v))
        return _most_kernels(fn.lower(y0).compile().as_text()), fn(y0)

    in_loops, value = kernels_and_value()
    # The loop's body traced as if it were not one (`taylax._pass.loop_body` never entered).
    monkeypatch.setattr(_control, "loop_body", contextlib.nullcontext)
    stacked_rows, same_value = kernels_and_value()
    _programs._PROGRAMS.clear()
    np.testing.assert_array_equal(value, same_value)
    assert in_loops < stacked_rows, (in_loops, stacked_rows)


def test_divisions_keep_computed_once_values_once(stacked_derivatives):
    # XLA rewrites `(a / b) / c` into `a / (b c)`; a `_series.computed_once` value divided
    # by (cos as the numerator here, the primal of the quotient) would be recomputed in
    # the dividing kernel without `_series.shielded`.
    def f(t):
        return jnp.cos(t) / (2 + jnp.sin(t)) + 1 / jnp.cos(t)

    t = jnp.linspace(0.5, 1.5, 256)
    for order in (2, taylax.CPU.unroll_max_order):
        hlo = _compiled_module(jax.vmap(taylax.derivatives(f, order)), t)
        assert _count_ops(hlo, "sine") == 1, order
        assert _count_ops(hlo, "cosine") == 1, order


@pytest.mark.parametrize("order", [20, 32])
def test_a_numerator_without_rows_is_split_past_order_16(emission, order):
    """Past `split_numerator_min_order` a numerator stacked by a loop (exp's recurrence
    past order 16) over a low-degree denominator is split into rows computed once, and
    the quotient's recurrence reads them: no product with the reciprocal, whose shifted
    sum was one slow kernel under `vmap`. Both forms give the same derivatives."""

    def f(t):
        return jnp.exp(jnp.cos(t)) / (1 + t**2) ** 2

    t = jnp.linspace(0.1, 0.9, 16)

    def shifted_pads(fn):
        closed = jax.make_jaxpr(fn)(t, jnp.ones_like(t))
        return [
            e
            for e in all_equations(closed)
            if e.primitive.name == "pad" and e.outvars[0].aval.shape[-1] == 2 * order + 1
        ]

    d = jax.vmap(taylax.derivatives(f, order))
    split = d(t, jnp.ones_like(t))
    assert taylax.CPU.split_numerator_min_order <= order
    assert not shifted_pads(d)
    emission(split_numerator_min_order=None)
    assert shifted_pads(d)
    np.testing.assert_allclose(split, d(t, jnp.ones_like(t)), rtol=1e-12, atol=0)


def test_a_shifted_sum_reads_a_scalar_product_from_a_buffer():
    """Past the products' rows a product of scalar series is a shifted sum over a padded
    copy of one factor; where that factor is itself such a product (`cos(t)^3` by
    squaring), it is computed once first. Under `vmap` XLA:CPU fused the pad with the
    product that makes it, computing it again per element (docs/EMISSION.md, "Rows")."""
    order = 24

    def f(t):
        return jnp.cos(t) ** 3

    closed = jax.make_jaxpr(taylax.derivatives(f, order))(0.5, 1.0)
    producers = {v: e for e in all_equations(closed) for v in e.outvars}
    padded = [
        producers[e.invars[0]].primitive.name
        for e in all_equations(closed)
        if e.primitive.name == "pad" and e.outvars[0].aval.shape == (2 * order + 1,)
    ]
    assert "taylax_computed_once" in padded
    # cos^3 = (3 cos t + cos 3t) / 4: its derivatives in closed form.
    t = np.linspace(0.1, 0.9, 8)
    got = jax.vmap(taylax.derivatives(f, order))(jnp.asarray(t), jnp.ones(8))
    for k in (0, 1, 12, 24):
        want = (3 * np.cos(t + k * np.pi / 2) + 3.0**k * np.cos(3 * t + k * np.pi / 2)) / 4
        np.testing.assert_allclose(got[:, k], want, rtol=1e-10, atol=1e-10 * 3.0**k)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128])
def test_shielded_values_are_unchanged(dtype):
    # `shielded` returns the computed-once value exactly, infinities, nans and signed
    # zeros included (a complex product with 1 + 0j would turn an infinite part's
    # partner into nan: it multiplies part by part).
    values = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1.5]
    if dtype == jnp.complex128:
        values = [complex(np.inf, 0.0), complex(1.0, -np.inf), complex(-0.0, 2.0), 1.5 + 0.5j]
    x = jnp.asarray(values, dtype)

    def once(x):
        return _series.computed_once(x, _series.opaque_one(x))

    before = np.asarray(jax.jit(once)(x))
    after = np.asarray(jax.jit(lambda x: _series.shielded(once(x)))(x))
    np.testing.assert_array_equal(after, before)
    assert np.array_equal(np.signbit(after.real), np.signbit(before.real))
    if dtype == jnp.float64:
        np.testing.assert_array_equal(after, np.asarray(x))


def test_powers_by_rows_equal_the_stacked_ones():
    # Up to `ROWS_MAX_ORDER` powers are built row by row, above by stacked doubling: the
    # same products, so the same values, bit for bit.
    x = jnp.array([0.7, -1.3, 0.0, 2.5])
    low, high = taylax.CPU.rows_max_order, taylax.CPU.rows_max_order + 4
    for sign in (1, -1):
        rows = _series.powers(x, low, sign)
        assert (
            _series.known_rows(rows) is not None
            and _series.known_rows(_series.powers(x, high, sign)) is None
        )
        np.testing.assert_array_equal(rows, _series.powers(x, high, sign)[: low + 1])
    for p in (-3, 0, 2, 10):
        rows = _series.integer_exponent_powers(x, p, low)
        np.testing.assert_array_equal(rows, _series.integer_exponent_powers(x, p, high)[: low + 1])
        # The binomials by rows are exact integers rounded once (`binomials` multiplies
        # rounded ratios above): within an ulp or two.
        np.testing.assert_allclose(
            _series.exp_like_power_coeffs(p, x, low),
            _series.exp_like_power_coeffs(p, x, high)[: low + 1],
            rtol=4 * np.finfo(np.float64).eps,
        )


def test_constant_direction_needs_no_cumulative_product():
    # A constant direction inside jit once made XLA constant-fold a reduce-window over
    # (K, N) for minutes; powers are products now, and nothing in the program is a
    # cumulative product or a pow.
    def f(t):
        return 0.3 * jnp.sin(t) * t**10

    jaxpr = jax.make_jaxpr(lambda t: taylax.derivatives(f, 16)(t, jnp.ones_like(t)))(
        jnp.linspace(0.5, 1.5, 64)
    )
    counts = taylax.equation_counts(jaxpr)
    for name in ("cumprod", "cumsum", "reduce_window", "pow"):
        assert counts.get(name, 0) == 0, (name, counts)


def test_product_is_a_shifted_sum_linear_in_the_degree():
    def product_jaxpr(degree):
        a = jnp.ones((degree + 1, 8))
        return jax.make_jaxpr(lambda a, b: _series.cauchy(a, b, degree))(a, a)

    # Above order 8 (rows below it: at most 45 products, a bounded cost).
    small, large = product_jaxpr(16), product_jaxpr(32)
    # No Toeplitz table: every intermediate has the operands' rank (K+1, 8).
    assert all(v.aval.ndim <= 2 for e in large.jaxpr.eqns for v in e.outvars)
    # A few equations per coefficient of the lower-degree factor: two slices, the
    # product, the sum, and the constant mask's broadcast and select that keep the pad's
    # zeros out of the product (an overflow there would be `inf * 0`).
    grow = len(large.jaxpr.eqns) - len(small.jaxpr.eqns)
    assert 0 < grow <= 6 * (32 - 16), grow


@pytest.mark.parametrize("p", [2.0 + 1.0j, 2.0 + 0.0j, 2.5])
def test_exponent_coefficients_for_concrete_non_integer_or_complex_exponents(p):
    # Only a real integer-valued exponent takes the product path; anything else uses pow.
    x0 = jnp.array([0.7 + 0.2j, 1.3 - 0.4j])
    got = _series.exp_like_power_coeffs(np.asarray(p, np.complex128), x0, 4)
    falling = np.cumprod([1.0] + [p - j for j in range(4)])
    want = (falling / [math.factorial(m) for m in range(5)])[:, None]
    steps = (jnp.asarray(p, jnp.complex128) - jnp.arange(5.0))[:, None]
    want = want * jax.lax.pow(jnp.broadcast_to(x0, (5, 2)), steps)
    np.testing.assert_allclose(got, want, rtol=1e-13)


# --------------------------------------------------------------------------------------------
# Range-safe constants for high orders (see `derivative_scale`).
# --------------------------------------------------------------------------------------------


def test_times_exact_applies_factors_outside_the_dtype_range():
    from fractions import Fraction

    x = jnp.asarray([1e-30, -3e-30], jnp.float32)
    factors = [Fraction(2) ** 140, Fraction(math.factorial(40)) / 2**100]
    want = [1e-30 * 2.0**140, -3e-30 * math.factorial(40) / 2**100]
    # Jitted: XLA would fold two constant multiplications into one out-of-range constant.
    got = jax.jit(lambda x: _series.times_exact(x, factors))(x)
    np.testing.assert_allclose(got, want, rtol=2e-7)
    np.testing.assert_array_equal(_series.times_exact(jnp.zeros(2, jnp.float32), factors), [0, 0])


def test_inverse_factorials_and_binomials_stay_in_range():
    # 1/40! is below float32's range; 16^40/40! is not.
    got = _series.inverse_factorials(40, 0, jnp.float32, 16.0)
    want = [16.0**k / math.factorial(k) for k in range(41)]
    np.testing.assert_allclose(got, want, rtol=1e-7)
    assert _series.inverse_factorials(40, 0, jnp.float32)[40] == 0  # a true underflow
    # binom(1/2, m) up to m = 60 in float32: finite, where falling factorial / m! was nan.
    got = _series.binomials(0.5, 60, (), jnp.float32)
    want = [1.0]
    for m in range(60):
        want.append(want[-1] * (0.5 - m) / (m + 1))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.all(np.isfinite(_series.factorials(200, 0, jnp.float64)[:171]))  # no OverflowError


@pytest.mark.parametrize(
    "dtype, unscaled_up_to", [(jnp.float16, 3), (jnp.float32, 12), (jnp.float64, 57)]
)
def test_derivative_scale(dtype, unscaled_up_to):
    assert _series.derivative_scale(unscaled_up_to, dtype) == 1.0
    h = _series.derivative_scale(unscaled_up_to + 1, dtype)
    k = unscaled_up_to + 1
    np.testing.assert_allclose(h, math.factorial(k) ** (1 / k))
    # Capped so that the largest h^k/k! (about e^h) stays representable.
    assert _series.derivative_scale(2000, dtype) <= 0.9 * math.log(float(jnp.finfo(dtype).max))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("p", [2.5, -1.5, 0.5, 20.5, -7.25, 3.7])
def test_real_exponent_powers_are_pows(p, dtype):
    # One `pow` and products instead of a `pow` per row: the same zeros, infinities and
    # NaNs (over- and underflow far from 1, at 0, at infinities, below 0), and values to
    # a few roundings per step from the anchor.
    values = [1e-300, 1e-200, 1e300, 1e200, 1e-30, 1e30, 0.0, -0.0, np.inf, -np.inf, -1.0]
    with np.errstate(over="ignore", under="ignore"):  # float32: 1e300 is inf, 1e-300 0
        x0 = np.asarray(values + [np.nan, 1.0, 0.3, 7.0]).astype(dtype)
    for order in (3, 8):
        exponents = (p - jnp.arange(order + 1.0)).astype(dtype)[:, None]
        want = np.asarray(jax.jit(lambda x, e=exponents: jax.lax.pow(x[None], e))(x0))
        got = np.asarray(jax.jit(lambda x, k=order: _series.real_exponent_powers(x, p, k))(x0))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_array_equal(got == 0, want == 0)
        finite = np.isfinite(want) & (want != 0)
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got[finite], want[finite], rtol=(order + 2) * eps)


@pytest.mark.parametrize("p, pows", [(2.5, 0), (-1.5, 0), (0.5, 0), (-2.5, 0), (20.5, 1), (3.7, 1)])
def test_half_integer_exponent_tables_take_square_roots(p, pows):
    # XLA:CPU calls libm's scalar `pow` per value (docs/EMISSION.md, "Half-integer
    # exponents"): an anchor `x0 ** q`, `q = +-1/2 .. +-5/2`, is a square root and
    # products instead (20.5 at order 8 anchors at 12.5: a `pow`).
    text = jax.jit(lambda x: _series.real_exponent_powers(x, p, 8)).lower(jnp.ones(4)).as_text()
    assert text.count("stablehlo.power") == pows


def test_array_marks_hold_a_fact_for_that_array_only():
    # `_series._identity.ArrayMarks`: a mark and its value belong to one array object,
    # not to equal arrays, and go when the array does.
    import gc

    from taylax._series._identity import ArrayMarks

    marks = ArrayMarks()
    x = marks.mark(jnp.ones(3), "a line")
    y = marks.mark(jnp.zeros(2))
    assert x in marks and marks.get(x) == "a line"
    assert y in marks and marks.get(y) is None
    assert jnp.ones(3) not in marks and marks.get(jnp.ones(3)) is None
    del x
    gc.collect()
    assert not marks._values and len(marks._arrays) == 1
