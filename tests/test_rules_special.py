"""Special functions and the remaining `jax.lax` primitives against nested `jax.jvp`.

Every case feeds the primitive a full series (a nonlinear function of the input) unless it
says otherwise, at orders 1 and 6 (the order-6 result holds 0..6), float64 (none of these
primitives accepts complex numbers). Integer, boolean and random-bit primitives are checked
to carry no series: the program around them differentiates as nested jvp does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from jax import lax
from jax.ad_checkpoint import checkpoint_name

import taylax
from reference import assert_series_close, check_against_oracle, direction, oracle

ORDERS = (1, 6)

POS = np.array([0.4, 1.1, 2.3, 3.7])  # inside (0, inf), away from 0
UNIT = np.array([0.15, 0.4, 0.55, 0.8])  # inside (0, 1)
BESSEL = np.array([-7.5, -1.2, -0.3, 0.0, 0.6, 2.0, 31.0])
# With ties: x[0] == x[6] (scatter-max of sin(x[0]) onto itself and sin(x[6]) onto index 0).
MIXED = np.array([0.9, -0.4, 0.3, 1.2, 0.2, -1.0, 0.9, 2.6])


class Case(NamedTuple):
    name: str
    fn: Callable
    x: np.ndarray
    per_point: bool = True  # elementwise: compare every point with its own scale


def _maxpool(y):
    return lax.reduce_window(y, -jnp.inf, lax.max, (3,), (1,), "VALID")


def _incomplete_gamma(x):
    return (
        lax.igamma(jnp.full_like(x, 1.7), x),  # a seed: degree 1
        lax.igamma(jnp.full_like(x, 0.6), x * (1 + 0.2 * jnp.sin(x))),
        jsp.gammaincc(2.5, x * jnp.exp(0.1 * x)),
    )


def _incomplete_beta(x):
    return jsp.betainc(2.0, 3.5, x), jsp.betainc(0.7, 1.4, x * (1 - 0.2 * jnp.sin(x)))


def _bessel(x):
    return (
        lax.bessel_i0e(x),
        lax.bessel_i1e(x),
        lax.bessel_i0e(x + 0.2 * jnp.sin(x) * x),
        jnp.exp(jsp.i1e(x * (1 + 0.1 * jnp.cos(x)))),
    )


def _scatter_extrema(x):
    # Update 0 ties with the operand; updates 0, 2 and 4 all land on index 0.
    hi = jnp.sin(x[:3]).at[jnp.array([0, 1, 0, 2, 0])].max(jnp.sin(x[jnp.array([0, 4, 5, 2, 6])]))
    lo = jnp.cos(x[:4]).at[jnp.array([3, 1, 3])].min(x[4:] * jnp.cos(x[4:]))
    return jnp.exp(hi), lo


def _approx_top_k(x):
    top = lax.approx_max_k(jnp.sin(x[:7]) * x[:7], 3)[0]
    bottom = lax.approx_min_k((x * jnp.cos(x)).reshape(2, 4), 2)[0]
    return jnp.exp(top), jnp.sin(bottom)


def _pooling_derivatives(x):
    y = jnp.sin(2 * x)
    # jvp of max pooling binds select_and_gather_add(tangent, operand); its vjp binds
    # select_and_scatter_add(cotangent, operand).
    tangent = jax.jvp(_maxpool, (y,), (jnp.cos(x) * x,))[1]
    cotangent = jax.vjp(_maxpool, y)[1](jnp.exp(x[:6]))[0] * x
    return tangent, cotangent, jnp.sin(checkpoint_name(jnp.exp(x) * x, "h"))


def _argmax_pair(a, b):
    pick = a[0] >= b[0]
    return jnp.where(pick, a[0], b[0]), jnp.where(pick, a[1], b[1])


def _sum_and_product(a, b):
    return a[0] + b[0], a[1] * b[1]


def _general_reduce(x, index_dtype=np.float64):
    y = (jnp.sin(x) * x).reshape(2, 3)  # axis 1 is odd: the tree pads with the initial values
    total, product = lax.reduce((y, jnp.exp(y)), (0.0, 1.0), _sum_and_product, (0,))
    # A variadic (value, index) reduction, as argmax-like code writes it. JAX's own jvp
    # needs a float index, so the table case uses one; an integer index is checked below.
    index = lax.broadcasted_iota(index_dtype, (2, 3), 1)
    if index_dtype == np.float64:
        index = index + 0 * y
    best, where = lax.reduce((jnp.cos(y), index), (-jnp.inf, index_dtype(0)), _argmax_pair, (1,))
    return total, product, best * where


def _general_reduce_window(x):
    """`reduce_window` with reducers JAX has no dedicated primitive for (a generic one)."""
    y = (jnp.sin(x) * x + 1.5).reshape(2, 4)
    # Product pooling, strided, padded with the initial value, base and window dilation.
    product = lax.reduce_window(
        y,
        1.0,
        lax.mul,
        (2, 2),
        (1, 2),
        ((0, 1), (1, 0)),
        base_dilation=(1, 2),
        window_dilation=(1, 1),
    )
    soft = lax.reduce_window(y, 0.0, lambda a, b: a + b + 0.1 * a * b, (1, 3), (1, 1), "SAME")
    # A variadic (value, index) window argmax, with a float index (as JAX's jvp needs).
    index = lax.broadcasted_iota(jnp.float64, (2, 4), 1) + 0 * y
    best, where = lax.reduce_window(
        (jnp.cos(y), index), (-jnp.inf, 0.0), _argmax_pair, (1, 2), (1, 1), "VALID"
    )
    return product, soft, best * where


CASES = [
    Case("incomplete_gamma", _incomplete_gamma, POS),
    Case("incomplete_beta", _incomplete_beta, UNIT),
    # x = 0 takes JAX's constant 1/2 slope for i1e.
    Case("bessel", _bessel, BESSEL),
    # Not elementwise: compared as a whole.
    Case("scatter_max_min", _scatter_extrema, MIXED[:7], per_point=False),
    Case("approx_top_k", _approx_top_k, MIXED, per_point=False),
    Case("pooling_and_checkpoint_name", _pooling_derivatives, MIXED, per_point=False),
    Case("general_reduce", _general_reduce, np.linspace(-1.3, 1.7, 6), per_point=False),
    Case(
        "general_reduce_window",
        _general_reduce_window,
        np.linspace(-1.1, 1.6, 8),
        per_point=False,
    ),
]

CASES_BY_NAME = {c.name: c for c in CASES}


@pytest.mark.parametrize("name", list(CASES_BY_NAME))
def test_rule_against_nested_jvp(name):
    case = CASES_BY_NAME[name]
    v = direction(name, case.x.shape, np.float64)
    check_against_oracle(case.fn, case.x, v, ORDERS, per_point=case.per_point, context=name)


def test_general_reduce_with_an_integer_operand():
    case = CASES_BY_NAME["general_reduce"]
    v = direction(case.name, case.x.shape, np.float64)
    expected = oracle(case.fn, case.x, v, 6)[2]  # the float-index version, shared oracle
    actual = taylax.derivatives(lambda x: _general_reduce(x, np.int32)[2], 6)(case.x, v)
    assert_series_close(actual, expected)


# --------------------------------------------------------------------------------------------
# Derivatives JAX defines only at first order, or not at all.
# --------------------------------------------------------------------------------------------


def test_igamma_in_a_matches_jax_at_first_order_and_refuses_beyond():
    # JAX's jvp in `a` uses igamma_grad_a, which has no derivative: order 1 only.
    def f(x):
        return lax.igamma(1.0 + x * x, jnp.exp(x))

    x, v = POS, direction("igamma_a", POS.shape, np.float64)
    check_against_oracle(f, x, v, 1, per_point=True, context="igamma in a")
    with pytest.raises(NotImplementedError, match="`a` must not depend"):
        taylax.derivatives(f, 2)(x, v)


def test_betainc_in_a_refuses_like_jax():
    with pytest.raises(NotImplementedError, match="`b` must not depend"):
        taylax.derivatives(lambda x: jsp.betainc(x + 1.0, 2.0, 0.4 + 0 * x), 1)(UNIT, UNIT)


def test_lax_zeta_in_q_against_mpmath():
    # lax.zeta has no JAX derivative: the reference is mpmath's numerical differentiation of
    # s -> zeta(3, q(x + s v)) in 30-digit arithmetic.
    import mpmath

    mpmath.mp.dps = 30

    def inner(x):
        return x * (1 + 0.1 * x)

    x = POS + 0.5
    v = direction("lax_zeta", x.shape, np.float64)
    expected = np.array(
        [
            [
                float(mpmath.diff(lambda s, xi=xi, vi=vi: mpmath.zeta(3, inner(xi + s * vi)), 0, k))
                for xi, vi in zip(map(mpmath.mpf, x), map(mpmath.mpf, v))
            ]
            for k in range(7)
        ]
    )
    f = lambda x: lax.zeta(jnp.full_like(x, 3.0), inner(x))  # noqa: E731
    for order in ORDERS:
        actual = np.asarray(taylax.derivatives(f, order)(x, v))
        for i in range(x.size):
            assert_series_close(actual[:, i], expected[: order + 1, i], context=f"x={x[i]}")


def test_lax_zeta_in_x_raises():
    with pytest.raises(NotImplementedError, match="with respect to `q` only"):
        taylax.derivatives(lambda x: lax.zeta(x + 2.0, jnp.full_like(x, 1.5)), 1)(POS, POS)


# --------------------------------------------------------------------------------------------
# Integer, boolean and random-bit primitives carry no series.
# --------------------------------------------------------------------------------------------


def _random_part(x):
    """Random bits and keys, bit operations on `x`, and booleans: all integer-valued."""
    key = jax.random.key(7)
    noise = jax.random.uniform(jax.random.fold_in(key, 3), x.shape)
    k1, _ = jax.random.split(key)
    bits = jax.random.bits(k1, x.shape, jnp.uint32)
    _, raw = lax.rng_bit_generator(jnp.zeros((4,), jnp.uint32), x.shape, dtype=jnp.uint32)
    as_int = lax.bitcast_convert_type(x, jnp.int64)
    ints = (
        lax.population_count(as_int)
        + lax.clz(as_int)
        + lax.shift_right_logical(as_int, jnp.int64(60))
        + (as_int & 7)
        + (bits >> 30).astype(jnp.int64)
        + (raw >> 31).astype(jnp.int64)
    )
    flags = jnp.all(x > -5.0) & jnp.any(x > 1.0) & jnp.logical_xor(x > 0, x > 2)
    return noise, ints.astype(x.dtype), flags, jnp.argmax(x)


def _program(x, parts):
    noise, ints, flags, index = parts
    return jnp.where(flags, jnp.sin(x), jnp.cos(x)) * x[index] * ints + noise * jnp.exp(x)


def test_integer_boolean_and_random_primitives_carry_no_series():
    x = np.array([0.3, 1.7, -0.8, 2.6])
    v = direction("no-series", x.shape, np.float64)
    jaxpr = str(jax.make_jaxpr(_random_part)(x))
    for name in ("population_count", "clz", "reduce_and", "reduce_or", "random_bits",
                 "rng_bit_generator", "bitcast_convert_type", "argmax"):  # fmt: skip
        assert name in jaxpr, name
    # The oracle sees the integer-valued parts as the constants they are (running the PRNG
    # op by op under nested jvp is slow); taylax traces them with the program.
    parts = jax.tree.map(np.asarray, _random_part(x))
    expected = oracle(lambda x: _program(x, parts), x, v, 6)
    for order in ORDERS:
        actual = taylax.derivatives(lambda x: _program(x, _random_part(x)), order)(x, v)
        assert_series_close(actual, expected[: order + 1], context=f"order {order}")


# --------------------------------------------------------------------------------------------
# Gamma samples as functions of the shape parameter (implicit reparametrization).
# --------------------------------------------------------------------------------------------

_KEY = jax.random.key(3)


def _gamma_samples(x):
    return jax.random.gamma(_KEY, 1.5 + jnp.sin(x))


def _loggamma_samples(x):
    return jax.random.loggamma(_KEY, 0.7 + x * x)


def test_gamma_sample_in_its_shape_parameter():
    # Each order is one Taylor pass of JAX's sample derivative (loops inside): order 3 here,
    # order 6 and log space in the slow run.
    x, v = np.array([0.3, -0.8]), np.array([1.0, 0.5])
    check_against_oracle(_gamma_samples, x, v, (3,), context="gamma")


@pytest.mark.slow
@pytest.mark.parametrize("fn", [_gamma_samples, _loggamma_samples], ids=["gamma", "loggamma"])
def test_gamma_samples_at_order_6(fn):
    x, v = np.array([0.3, -0.8, 1.2]), np.array([1.0, 0.5, -0.7])
    check_against_oracle(fn, x, v, (6,), context=fn.__name__)
