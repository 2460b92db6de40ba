"""`erfcx` (real and complex: `wofz`), `dawsn` and `log_ndtr` of `jax.scipy.special` in
one pass (`taylax._rules._own_output`), against nested jvp through JAX's own rules, and
past nested jvp's reach against mpmath."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import mpmath
import numpy as np
import pytest

import taylax
from reference import check_against_oracle, direction, oracle
from test_series import assert_matches_mpmath

ORDERS = tuple(range(7))

# jax 0.9 has neither `erfcx` nor `dawsn`.
needs_erfcx = pytest.mark.skipif(not hasattr(jsp, "erfcx"), reason="this JAX has no erfcx")
needs_dawsn = pytest.mark.skipif(not hasattr(jsp, "dawsn"), reason="this JAX has no dawsn")


def _erfcx(x):
    return jsp.erfcx(x)


def _dawsn(x):
    return jsp.dawsn(x)


# Points where JAX's own rules are well conditioned. Far in the tails (erfcx past 3,
# log_ndtr below -4) the equations cancel (`2 x y ~ 2 / sqrt(pi)`) and nested jvp loses
# digits; there the rules are held to mpmath (`test_tails_match_mpmath`).
CASES = {
    "erfcx": (_erfcx, (-1.3, 0.0, 0.4, 1.5), needs_erfcx),
    "erfcx_series": (lambda x: _erfcx(2 * jnp.sin(x) + x * x), (-1.3, 0.0, 0.4), needs_erfcx),
    "erfcx_complex": (lambda x: _erfcx(x * (1 + 0.5j) + 0.3j), (-1.3, 0.0, 0.4, 1.0), needs_erfcx),
    "erfcx_complex_series": (
        lambda x: _erfcx(jnp.exp(1j * x) * (0.5 + x)),
        (-0.8, 0.2, 1.1),
        needs_erfcx,
    ),
    "dawsn": (_dawsn, (-2.0, 0.0, 0.5, 4.0), needs_dawsn),
    "dawsn_series": (lambda x: _dawsn(jnp.cos(x) * x), (-2.0, 0.0, 0.5, 4.0), needs_dawsn),
    "log_ndtr": (jsp.log_ndtr, (-3.0, -1.0, 0.0, 2.0, 5.0), None),
    "log_ndtr_series": (lambda x: jsp.log_ndtr(jnp.sin(x) - x * x / 4), (-2.0, 0.0, 1.5), None),
    "log_ndtr_broadcast": (
        lambda x: jsp.log_ndtr(x[:, None] * jnp.asarray([1.0, -0.5])),
        (-1.0, 0.7),
        None,
    ),
}


def _case(name):
    f, points, mark = CASES[name]
    return pytest.param(name, marks=mark) if mark else name


@pytest.mark.parametrize("name", [_case(n) for n in sorted(CASES)])
def test_matches_nested_jvp(name):
    f, points, _ = CASES[name]
    x = np.asarray(points)
    check_against_oracle(
        f, x, direction(name, x.shape, x.dtype), ORDERS, per_point=True, context=name
    )


@pytest.mark.parametrize("name", [_case(n) for n in ("erfcx_series", "dawsn_series")])
def test_through_the_loop(name, emission):
    # The recurrence's loop form, forced at every order (a different order from the
    # table's, so no cached program is reused).
    emission(unroll_max_order=0, rows_max_order=0, unroll_low_degree_max_order=0)
    f, points, _ = CASES[name]
    x = np.asarray(points)
    check_against_oracle(f, x, direction(name, x.shape, x.dtype), (5,), per_point=True)


def test_log_ndtr_through_the_loop(emission):
    emission(unroll_max_order=0, rows_max_order=0, unroll_low_degree_max_order=0)
    f, points, _ = CASES["log_ndtr_series"]
    x = np.asarray(points)
    check_against_oracle(f, x, direction("loop", x.shape, x.dtype), (5,), per_point=True)


def _mp_erfcx(t):
    return mpmath.exp(t * t) * mpmath.erfc(t)


# Orders nested jvp cannot reach (its program grows exponentially with the order), against
# mpmath's coefficients in 60-digit arithmetic: unrolled (12), the low-degree bound (32,
# a line) and the loop (40).
HIGH = {
    "erfcx(t)": (_erfcx, _mp_erfcx, (0.4, -1.3), needs_erfcx),
    "erfcx(t^2/2)": (
        lambda t: _erfcx(t * t / 2),
        lambda t: _mp_erfcx(t * t / 2),
        (0.7,),
        needs_erfcx,
    ),
    "dawsn(t)": (
        _dawsn,
        lambda t: mpmath.sqrt(mpmath.pi) / 2 * mpmath.exp(-t * t) * mpmath.erfi(t),
        (0.5, -1.2),
        needs_dawsn,
    ),
    "log_ndtr(t)": (jsp.log_ndtr, lambda t: mpmath.log(mpmath.ncdf(t)), (0.3, 1.5), None),
}


@pytest.mark.parametrize("order", [12, 32, 40])
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=HIGH[n][3]) if HIGH[n][3] else n for n in sorted(HIGH)],
)
def test_high_orders_match_mpmath(name, order):
    f, exact, points, _ = HIGH[name]
    for x0 in points:
        assert_matches_mpmath(f, exact, x0, order)


# Far in the tails, where every forward recurrence (JAX's jvp rules, nested jvp) loses
# about log10(2 x0^2 / k) digits per order k: erfcx(30 + t) had none left at order 6,
# log_ndtr(-30 + t) 6e-2 relative error at order 3 (docs/EMISSION.md, "erfcx in its
# tail"). Each coefficient against mpmath's relative to itself, along a line and composed
# with a polynomial (`_series.compose`); 1.2 sits below the sweep's threshold at order 8.
TAILS = {
    "erfcx(t)": (_erfcx, _mp_erfcx, (1.2, 3.0, 10.0, 30.0, 1e3), needs_erfcx),
    "erfcx(t + t^2/10)": (
        lambda t: _erfcx(t + t * t / 10),
        lambda t: _mp_erfcx(t + t * t / 10),
        (2.0, 30.0),
        needs_erfcx,
    ),
    "log_ndtr(t)": (jsp.log_ndtr, lambda t: mpmath.log(mpmath.ncdf(t)), (-3.0, -10.0, -30.0), None),
    "log_ndtr(t + t^2/10)": (
        lambda t: jsp.log_ndtr(t + t * t / 10),
        lambda t: mpmath.log(mpmath.ncdf(t + t * t / 10)),
        (-6.0, -30.0),
        None,
    ),
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=TAILS[n][3]) if TAILS[n][3] else n for n in sorted(TAILS)],
)
def test_tails_match_mpmath(name):
    f, exact, points, _ = TAILS[name]
    order = 8
    for x0 in points:
        primal, coeffs = taylax.taylor(f, order)(x0, 1.0)
        with mpmath.workdps(60):
            want = [float(c) for c in mpmath.taylor(exact, mpmath.mpf(x0), order)[1:]]
        np.testing.assert_allclose(np.asarray(coeffs), want, rtol=1e-13, err_msg=str(x0))


def _mp_erfcx_recurrence(t, order: int) -> list:
    """erfcx's coefficients 0..order at the mpmath number `t`, by its recurrence run
    forward in 400 digits, which no rounding reaches at these orders."""
    with mpmath.workdps(400):
        want = [_mp_erfcx(t), 2 * t * _mp_erfcx(t) - 2 / mpmath.sqrt(mpmath.pi)]
        for k in range(1, order):
            want.append(2 * (t * want[k] + want[k - 1]) / (k + 1))
        return want


@needs_erfcx
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_erfcx_tail_by_the_loop_matches_mpmath(dtype):
    # Order 40 (past the low-degree bound: the sweep and the forward recurrence loop),
    # against the forward recurrence in 400 digits, which no rounding reaches there.
    order = 40
    # Where float32 runs forward (below 1.05) it loses digits as nested jvp would.
    points = (0.5, 1.2, 2.0, 5.0, 30.0) if dtype == np.float64 else (2.0, 5.0, 30.0)
    for x0 in points:
        primal, coeffs = taylax.taylor(_erfcx, order)(dtype(x0), dtype(1.0))
        want = np.array([float(c) for c in _mp_erfcx_recurrence(mpmath.mpf(x0), order)[1:]])
        got = np.asarray(coeffs, np.float64)
        tiny = np.finfo(dtype).tiny / np.finfo(dtype).eps  # below it, float32 underflows
        kept = np.abs(want) > tiny
        rtol = 1e-12 if dtype == np.float64 else 4e-6
        np.testing.assert_allclose(got[kept], want[kept], rtol=rtol, err_msg=str(x0))


def _mp_erfcx_ratios(z0: complex, order: int) -> np.ndarray:
    """erfcx's coefficients 1..order at `z0` over its value."""
    want = _mp_erfcx_recurrence(mpmath.mpc(z0), order)
    with mpmath.workdps(400):
        return np.array([complex(c / want[0]) for c in want[1:]])


def _erfcx_ratios(z0: complex, order: int) -> np.ndarray:
    primal, coeffs = taylax.taylor(_erfcx, order)(jnp.asarray(z0), jnp.asarray(1.0 + 0j))
    return np.asarray(coeffs) / complex(primal)


@needs_erfcx
@pytest.mark.parametrize("order", [8, 40])
def test_complex_erfcx_tail_matches_mpmath(order):
    # JAX's complex erfcx (the Faddeeva function of `i z`) loses digits by the same
    # recurrence where it decays like 1 / z: 4e-2 at 10 + 5i, order 8, before the sweep.
    # Ratios to the value, so that JAX's own primal error (2e-13 at 10i) stays out.
    # Order 40 runs the loops.
    points = (3 + 3j, 10 + 5j, 10j, -3 + 10j, 30 + 0.1j, 2 - 8j)
    if order == 40:
        points = (3 + 3j, 10 + 5j, -3 + 20j, 30 + 0.1j, 2 - 8j)
    for z0 in points:
        # At order 40 as the real loop's test: rounding over the longer sweep.
        rtol = 1e-13 if order == 8 else 1e-12
        np.testing.assert_allclose(
            _erfcx_ratios(z0, order), _mp_erfcx_ratios(z0, order), rtol=rtol, err_msg=str(z0)
        )


@needs_erfcx
@pytest.mark.parametrize("order", [8, 16])
def test_complex_erfcx_across_the_plane_matches_mpmath(order):
    # Each point takes the sweep (reflected left of the axis: `2 exp(z^2) - erfcx(-z)`)
    # or the forward recurrence, whichever a model of both errors favours. Before: the
    # sweep near the axis's right (5.2e-7 at 1.6 exp(70i), order 8), the forward
    # recurrence far left (7.1e-2 at 12 exp(120i)). 15 degrees or more off the imaginary
    # axis the largest error is 4.0e-10 up to order 24 (`python benchmarks/erfcx_tail.py`,
    # the complex grid); closer, from |z| near 4 to 8, both methods lose digits, as
    # nested jvp does (docs/EMISSION.md, "Complex erfcx").
    for r in (1.6, 2.5, 4.0, 6.0, 12.0):
        for degrees in (0, 40, 70, 110, 140, 175):
            z0 = complex(r * np.exp(1j * np.deg2rad(degrees)))
            np.testing.assert_allclose(
                _erfcx_ratios(z0, order),
                _mp_erfcx_ratios(z0, order),
                rtol=1e-9,
                err_msg=f"{r} exp({degrees}i)",
            )


@needs_erfcx
def test_complex_erfcx_matches_mpmath():
    # JAX's complex erfcx (`wofz`) is itself accurate to about 1e-15, so the coefficients
    # are compared relative to the largest so far, the value included.
    x0, order = 0.3 + 0.6j, 16
    primal, coeffs = taylax.taylor(_erfcx, order)(jnp.asarray(x0), jnp.asarray(1.0 + 0j))
    with mpmath.workdps(60):
        want = [complex(c) for c in mpmath.taylor(_mp_erfcx, mpmath.mpc(x0), order)]
    got = [complex(primal)] + [complex(c) for c in coeffs]
    for k in range(order + 1):
        scale = max(abs(w) for w in want[: k + 1])
        assert abs(got[k] - want[k]) <= 1e-14 * scale, k


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(_erfcx, marks=needs_erfcx),
        pytest.param(lambda x: _erfcx(1j * x), marks=needs_erfcx),
        pytest.param(_dawsn, marks=needs_dawsn),
        jsp.log_ndtr,
    ],
)
def test_one_pass_not_one_per_order(f):
    # JAX's rules read the function's own output: followed as written, each order's
    # tangent called the function again one order lower (K + 1 custom_jvp calls).
    for k in (2, 8):
        counts = taylax.equation_counts(jax.make_jaxpr(taylax.derivatives(f, k))(0.3))
        assert counts["custom_jvp_call"] <= 2, (k, counts)


@pytest.mark.parametrize(
    "f, points",
    [
        (jsp.log_ndtr, (-2.0, -1.0, 0.0, 0.7, 3.0)),
        pytest.param(_erfcx, (-1.3, 0.0, 0.4, 1.5), marks=needs_erfcx),
        pytest.param(_dawsn, (-1.3, 0.0, 0.4, 1.5), marks=needs_dawsn),
    ],
)
def test_float32_as_accurate_as_nested_jvp(f, points):
    # The equations cancel (log_ndtr at -2 loses 3e-5 of its coefficients in float32,
    # erfcx at 1.5 8e-5), so the bar is nested jvp's own float32 error, per point
    # relative to its largest coefficient.
    x = np.asarray(points)
    want = oracle(f, x, np.ones_like(x), 6)
    got = taylax.derivatives(f, 6)(x.astype(np.float32), np.ones(len(x), np.float32))
    assert got.dtype == np.float32
    nested = oracle(f, x.astype(np.float32), np.ones(len(x), np.float32), 6)
    scale = np.abs(want).max(0)
    ours = np.abs(np.asarray(got, np.float64) - want).max(0) / scale
    theirs = np.abs(np.asarray(nested, np.float64) - want).max(0) / scale
    assert np.all(ours <= 2 * theirs + 1e-6), (ours, theirs)


@needs_erfcx
def test_under_vmap_and_jit():
    x = jnp.linspace(-1.0, 2.0, 7)
    got = jax.jit(jax.vmap(taylax.derivatives(_erfcx, 8)))(x)
    want = oracle(_erfcx, np.asarray(x), np.ones(7), 8)
    np.testing.assert_allclose(np.asarray(got).T, want, rtol=1e-10, atol=1e-12)


def test_unrolled_then_a_loop(cpu_policy):
    # Along a line `erfcx`'s rows sum a few products each (no `y^2`), so they unroll to
    # the low-degree bound; `log_ndtr`'s ratio squares itself, so it loops past
    # `unroll_max_order` (the ratio's series is one order short of the result's).
    def loops(f, k):
        # Past the function's own (JAX's erfcx evaluates a `scan`).
        def count(program):
            counts = taylax.equation_counts(jax.make_jaxpr(program)(0.3))
            return counts.get("scan", 0) + counts.get("while", 0)

        return count(taylax.derivatives(f, k)) - count(f)

    # Past them, log_ndtr loops in its ratio and in its left tail's logarithm, erfcx in
    # the backward sweep's two parts and in the forward recurrence.
    policy = taylax.CPU
    assert loops(jsp.log_ndtr, policy.unroll_max_order + 1) == 0
    assert loops(jsp.log_ndtr, policy.unroll_max_order + 2) == 2
    if hasattr(jsp, "erfcx"):
        assert loops(_erfcx, policy.unroll_low_degree_max_order) == 0
        assert loops(_erfcx, policy.unroll_low_degree_max_order + 1) == 3
