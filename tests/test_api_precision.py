"""Derivatives at every order a dtype can hold, against exact references in mpmath.

The references are closed forms (or, for tanh and the logistic function, the Riccati
recurrence in 60-digit arithmetic), not nested jvp, which cannot reach these orders. A
value is compared where the dtype can hold it; where it cannot (above the largest
finite value) the result must be inf or nan, never a finite number or a silent 0. The
tolerance is `growth * (k + 1)` ulps of the dtype relative to the value, or to its
neighbours' geometric mean at a sign change (where the value passes near 0 and its
absolute error is set by the neighbours' size).
"""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from jax import lax

import taylax

mpmath.mp.dps = 60


def _tanh_coefficients(x0, order):
    """Normalized coefficients of tanh(x0 + s): `(k+1) t_{k+1} = [k = 0] - sum t_j t_{k-j}`."""
    t = [mpmath.tanh(x0)]
    for k in range(order):
        t.append(((1 if k == 0 else 0) - sum(t[j] * t[k - j] for j in range(k + 1))) / (k + 1))
    return t


def exact_derivatives(name: str, x0: float, order: int) -> list:
    """`f^(k)(x0)` for k = 0..order in 60-digit arithmetic."""
    x = mpmath.mpf(x0)
    fact = mpmath.factorial
    if name == "exp":
        return [mpmath.exp(x)] * (order + 1)
    if name == "sin":
        return [mpmath.sin(x + k * mpmath.pi / 2) for k in range(order + 1)]
    if name == "exp2":
        return [mpmath.power(2, x) * mpmath.log(2) ** k for k in range(order + 1)]
    if name == "exp(0.1x)":
        a = mpmath.mpf(0.1)  # the float64 nearest 0.1, as the program has it
        return [a**k * mpmath.exp(a * x) for k in range(order + 1)]
    if name == "x exp(x)":
        return [(x + k) * mpmath.exp(x) for k in range(order + 1)]
    if name == "sqrt":
        half = mpmath.mpf(1) / 2
        return [mpmath.binomial(half, k) * fact(k) * x ** (half - k) for k in range(order + 1)]
    if name == "log":
        rest = [(-1) ** (k + 1) * fact(k - 1) / x**k for k in range(1, order + 1)]
        return [mpmath.log(x), *rest]
    if name == "lgamma":
        return [mpmath.loggamma(x)] + [mpmath.polygamma(k - 1, x) for k in range(1, order + 1)]
    if name == "digamma":
        return [mpmath.polygamma(k, x) for k in range(order + 1)]
    if name == "tanh":
        return [c * fact(k) for k, c in enumerate(_tanh_coefficients(x, order))]
    if name == "logistic":  # (1 + tanh(x/2)) / 2
        t = _tanh_coefficients(x / 2, order)
        return [
            (mpmath.mpf(1) / 2 if k == 0 else 0) + c * fact(k) / 2 ** (k + 1)
            for k, c in enumerate(t)
        ]
    raise KeyError(name)


# name: (function, point, growth). Entire functions keep about an ulp per order; those with
# a nearby singularity grow faster through their recurrences (the same in float64).
FUNCTIONS = {
    "exp": (jnp.exp, 0.3, 1),
    "sin": (jnp.sin, 0.3, 1),
    "exp2": (jnp.exp2, 0.3, 1),
    "exp(0.1x)": (lambda x: jnp.exp(0.1 * x), 1.0, 1),
    "x exp(x)": (lambda x: x * jnp.exp(x), 0.3, 1),
    "sqrt": (jnp.sqrt, 0.7, 4),
    "log": (jnp.log, 2.0, 4),
    "lgamma": (lax.lgamma, 3.0, 4),
    "digamma": (lax.digamma, 3.0, 4),
    "tanh": (jnp.tanh, 0.3, 16),
    "logistic": (jax.nn.sigmoid, 0.3, 16),
}


def excess_primal_ulps(f, x0, want0, dtype) -> float:
    """How many ulps past correct rounding the backend's own `f(x0)` is off.

    Every coefficient starts from the primal and keeps its relative error, so the
    tolerances count what taylax adds on top of it. Most functions here are within an
    ulp on XLA:CPU (0 extra); float32 lgamma at 3 is off by 2.9 ulps there and by 14 on
    an H200.
    """
    got = float(np.asarray(f(jnp.asarray(x0, dtype))).astype(np.float64))
    eps = float(jnp.finfo(dtype).eps)
    return max(0.0, abs(got - float(want0)) / (eps * abs(float(want0))) - 1.0)


def assert_matches_where_representable(
    got, want, dtype, growth, context="", extra_ulps=0.0, first_order=0
):
    """`got[i]` against `want[i]`, the coefficient of order `first_order + i`."""
    info = jnp.finfo(dtype)
    eps, tiny, big = float(info.eps), float(info.tiny), float(info.max)
    if isinstance(got, list):
        got = np.array([float(np.asarray(g).astype(np.float64)) for g in got])
    got = np.asarray(got).astype(np.float64)
    want = [float(w) for w in want]
    for k, (g, w) in enumerate(zip(got, want), start=first_order):
        where = f"{context} order {k}: got {g!r}, want {w!r}"
        if abs(w) > big:
            assert not np.isfinite(g), where  # not representable: inf or nan
            continue
        if abs(w) < tiny:
            assert abs(g) <= 4 * tiny, where  # underflows as any float operation does
            continue
        i = k - first_order
        neighbours = [abs(want[j]) for j in (i - 1, i + 1) if 0 <= j < len(want)]
        scale = max(abs(w), math.sqrt(math.prod(neighbours)) if len(neighbours) == 2 else 0.0)
        assert abs(g - w) <= (growth * (k + 1) + extra_ulps) * eps * min(scale, big), where


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_float32_every_order_up_to_100(name):
    f, x0, growth = FUNCTIONS[name]
    want = exact_derivatives(name, float(np.float32(x0)), 100)
    got = taylax.derivatives(f, 100)(jnp.float32(x0))
    assert got.dtype == jnp.float32
    extra = excess_primal_ulps(f, x0, want[0], jnp.float32)
    assert_matches_where_representable(got, want, jnp.float32, growth, name, extra)


@pytest.mark.parametrize("name", ["exp", "sin", "exp(0.1x)", "sqrt", "lgamma", "tanh"])
def test_float32_single_order(name):
    f, x0, growth = FUNCTIONS[name]
    for order in (20, 40):
        want = exact_derivatives(name, float(np.float32(x0)), order)[order]
        got = taylax.derivative(f, order)(jnp.float32(x0))
        assert_matches_where_representable([got], [want], jnp.float32, growth * order, name)


@pytest.mark.parametrize("name", ["exp", "sin", "exp(0.1x)", "x exp(x)", "log", "digamma"])
def test_float64_every_order_up_to_250(name):
    f, x0, growth = FUNCTIONS[name]
    want = exact_derivatives(name, x0, 250)
    got = taylax.derivatives(f, 250)(jnp.float64(x0))
    assert_matches_where_representable(got, want, jnp.float64, growth, name)
    assert_matches_where_representable(
        [taylax.derivative(f, 250)(jnp.float64(x0))], want[250:], jnp.float64, 250, name
    )


@pytest.mark.parametrize("order", [8, 10, 11, 13, 14, 15, 16])
def test_float64_tanh_along_a_line_across_the_real_line(order):
    # Along a line tanh's coefficients are polynomials in sech^2 (times tanh) up to order
    # 14, then the recurrence. In powers of tanh itself they cancel where tanh saturates
    # and failed this from order 8 (1,564 ulps per order at 10; benchmarks/
    # tanh_line_bases.py); the tolerance is the module's for tanh. The reference runs one
    # order past the top, whose neighbour it is where the top passes near 0.
    xs = np.array([*np.linspace(-6.0, 6.0, 25), 7.0, -9.0, 12.0, -18.0])
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(jnp.tanh, order)))(jnp.asarray(xs)))
    growth = FUNCTIONS["tanh"][2]
    for x, row in zip(xs, got):
        want = [c * mpmath.factorial(k) for k, c in enumerate(_tanh_coefficients(x, order + 1))]
        assert_matches_where_representable(row, want, jnp.float64, growth, f"x={x}")


@pytest.mark.parametrize(
    "dtype, order", [(jnp.float16, 9), (jnp.bfloat16, 40)], ids=["float16", "bfloat16"]
)
@pytest.mark.parametrize("name", ["exp", "sin", "log", "lgamma", "tanh"])
def test_half_precision(dtype, order, name):
    f, x0, growth = FUNCTIONS[name]
    x = jnp.asarray(x0, dtype)
    want = exact_derivatives(name, float(np.asarray(x, np.float64)), order)
    got = taylax.derivatives(f, order)(x)
    assert got.dtype == dtype
    assert_matches_where_representable(got, want, dtype, growth, name)
    top = taylax.derivative(f, order)(x)
    assert_matches_where_representable([top], want[order:], dtype, growth * order, name)


def test_the_reported_cases():
    # float32 exp past order 33 used to read [1.35, 0, nan, ...].
    d = np.asarray(taylax.derivatives(jnp.exp, 40)(jnp.float32(0.3)))
    np.testing.assert_allclose(d[30:], np.exp(np.float32(0.3)), rtol=4e-7)
    # A short direction used to underflow at order 20 (true value 1.1e-20, representable).
    got = taylax.derivative(lambda x: jnp.exp(0.1 * x), 20)(jnp.float32(1.0))
    np.testing.assert_allclose(got, 0.1**20 * np.exp(0.1), rtol=4e-6)
    # float16 sin at order 9 used to be inf.
    got = taylax.derivative(jnp.sin, 9)(jnp.float16(0.5))
    np.testing.assert_allclose(float(got), math.cos(0.5), rtol=2e-3)
    # float64 past order 170 used to raise OverflowError from float(k!).
    np.testing.assert_allclose(taylax.derivative(jnp.exp, 171)(0.3), math.exp(0.3), rtol=1e-15)
    y0, terms = taylax.jet(jnp.exp, (0.3,), ([1.0] + [0.0] * 199,))
    np.testing.assert_allclose(terms[-1], math.exp(0.3), rtol=1e-14)


def _power_coefficients(p):
    return lambda x, order: [mpmath.binomial(p, k) * x ** (p - k) for k in range(order + 1)]


def _polygamma_coefficients(first):
    def coefficients(x, order):
        head = [mpmath.loggamma(x)] if first == 0 else [mpmath.digamma(x)]
        rest = [
            mpmath.polygamma(first + k - 1, x) / mpmath.factorial(k) for k in range(1, order + 1)
        ]
        return head + rest

    return coefficients


@pytest.mark.parametrize(
    "fn, exact",
    [
        (jnp.sqrt, _power_coefficients(mpmath.mpf(1) / 2)),
        (jnp.cbrt, _power_coefficients(mpmath.mpf(1) / 3)),
        (lambda x: x**0.5, _power_coefficients(mpmath.mpf(1) / 2)),
        (lax.rsqrt, _power_coefficients(-mpmath.mpf(1) / 2)),
        (lax.lgamma, _polygamma_coefficients(0)),
        (lax.digamma, _polygamma_coefficients(1)),
    ],
    ids=["sqrt", "cbrt", "pow", "rsqrt", "lgamma", "digamma"],
)
def test_float32_taylor_coefficients_past_order_34(fn, exact):
    # Normalized coefficients f^(k)/k! (powers of 1/0.7): used to be nan from k! overflowing.
    want = exact(mpmath.mpf(float(np.float32(0.7))), 40)
    _, got = taylax.taylor(fn, 40)(jnp.float32(0.7), jnp.float32(1.0))
    extra = excess_primal_ulps(fn, 0.7, want[0], jnp.float32)
    # The module's tolerance at the coefficients' own orders 30..40. XLA:CPU lands within
    # 4 ulps of every one; an H200 puts rsqrt's coefficient 30 at 4.1.
    assert_matches_where_representable(
        got[29:], want[30:], jnp.float32, 4, "taylor", extra, first_order=30
    )


def test_jet_and_other_directions_at_high_order():
    x = jnp.float32(0.3)
    for v in (0.5, 3.0):
        want = [math.exp(0.3) * v**k for k in range(41)]
        got = taylax.derivatives(jnp.exp, 40)(x, jnp.float32(v))
        assert_matches_where_representable(got, want, jnp.float32, 2, f"v={v}")
    want = exact_derivatives("sqrt", float(np.float32(0.7)), 40)
    y0, terms = taylax.jet(
        jnp.sqrt, (jnp.float32(0.7),), ([jnp.float32(1.0)] + [jnp.float32(0.0)] * 39,)
    )
    assert_matches_where_representable([y0, *terms], want, jnp.float32, 4, "jet")


def test_nested_and_jitted_derivatives_at_high_order():
    x = jnp.float32(0.3)
    inner = taylax.derivative(jnp.exp, 20)
    got = taylax.derivative(inner, 20)(x)
    np.testing.assert_allclose(got, np.exp(np.float32(0.3)), rtol=4e-6)
    # A jitted function holding a derivative, differentiated again: exp(t) exp(t) = exp(2t).
    g = jax.jit(lambda t: jnp.exp(t) * taylax.derivative(jnp.exp, 5)(t))
    got = taylax.derivative(g, 30)(x)
    np.testing.assert_allclose(got, 2.0**30 * np.exp(0.6), rtol=3e-5)


def test_values_past_the_range_are_inf_or_nan_never_zero():
    assert not np.isfinite(taylax.derivative(jnp.sqrt, 40)(jnp.float32(0.3)))
    assert not np.isfinite(taylax.derivative(lax.lgamma, 100)(jnp.float32(3.0)))
    assert not np.isfinite(taylax.derivatives(jnp.tanh, 100)(jnp.float32(0.3))[-1])


def test_an_order_past_what_the_dtype_can_carry_raises():
    with pytest.raises(ValueError, match=r"order 300 is past .* float32 \(up to order 254\)"):
        taylax.derivative(jnp.exp, 300)(jnp.float32(0.3))
    with pytest.raises(ValueError, match=r"order 40 is past .* float16 .*float64"):
        taylax.derivatives(jnp.sin, 40)(jnp.float16(0.3))


def test_unscaled_fallback_per_point_under_vmap():
    # 1/(1.2 - t) in float32 at order 100: its derivatives k!/r^(k+1) (r = 1.2 - t) overflow
    # the pass along the stretched line (h = 38, coefficients (h/r)^k) from order 25 at
    # r = 1, where the unscaled pass still has them; far from the pole (r = 4.2) nothing
    # overflows. Batched and alone, each point keeps its own merge.
    def f(t):
        return 1 / (1.2 - t)

    points = [np.float32(0.2), np.float32(-3.0)]
    batched = jax.vmap(taylax.derivatives(f, 100))(jnp.asarray(points), jnp.ones(2, jnp.float32))
    for i, t in enumerate(points):
        r = mpmath.mpf(1.2) - mpmath.mpf(float(t))
        want = [mpmath.factorial(k) / r ** (k + 1) for k in range(101)]
        alone = taylax.derivatives(f, 100)(t)
        for got in (batched[i], alone):
            assert_matches_where_representable(got, want, jnp.float32, 4, f"t={t}")
