"""Rules for transcendental functions, each from the ODE it satisfies.

* exp, sin/cos, sinh/cosh: linear systems `Y' = x' M Y`;
* tan, tanh, logistic: Riccati equations `y' = x' (c0 + c1 y + c2 y^2)`;
* log, inverse trigonometric and hyperbolic functions, erf, atan2:
  `y' = g(x) x'` with `g` built from series arithmetic, then integrated;
* lgamma, digamma: composition with derivatives known in closed form (polygamma);
* erf_inv: its inverse-function ODE `y' = x' sqrt(pi)/2 exp(y^2)`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from .. import _series as ks
from .._interpret import register_rule
from .._series import Series
from ._arithmetic import log_series


def _full(x: Series, order: int):
    return ks.pad_degree(x.coeffs, order)


@register_rule(lax.exp_p)
def _exp(order, x, **params):
    (y,) = ks.linear_ode(x.coeffs, [lax.exp(x.primal)], [[1]], order)
    return Series(y)


@register_rule(lax.exp2_p)
def _exp2(order, x, **params):
    z = x.coeffs * jnp.asarray(math.log(2.0), ks.real_dtype(x.dtype))
    (y,) = ks.linear_ode(z, [lax.exp2(x.primal)], [[1]], order)
    return Series(y)


@register_rule(lax.expm1_p)
def _expm1(order, x, **params):
    (y,) = ks.linear_ode(x.coeffs, [lax.exp(x.primal)], [[1]], order)
    return Series(ks.with_primal(y, lax.expm1(x.primal)))


def _pair(kind: str, index: int):
    matrix = [[0, 1], [-1, 0]] if kind == "trig" else [[0, 1], [1, 0]]
    first, second = (lax.sin, lax.cos) if kind == "trig" else (lax.sinh, lax.cosh)

    def rule(order, x, **params):
        ys = ks.linear_ode(x.coeffs, [first(x.primal), second(x.primal)], matrix, order)
        return Series(ys[index])

    return rule


register_rule(lax.sin_p)(_pair("trig", 0))
register_rule(lax.cos_p)(_pair("trig", 1))
register_rule(lax.sinh_p)(_pair("hyp", 0))
register_rule(lax.cosh_p)(_pair("hyp", 1))


def _riccati(prim, c0, c1, c2):
    def rule(order, x, **params):
        return Series(ks.riccati(x.coeffs, prim.bind(x.primal), c0, c1, c2, order))

    register_rule(prim)(rule)


_riccati(lax.tan_p, 1, 0, 1)
_riccati(lax.tanh_p, 1, 0, -1)
_riccati(lax.logistic_p, 0, 1, -1)


@register_rule(lax.log_p)
def _log(order, x, **params):
    return Series(log_series(x.coeffs, lax.log(x.primal), order))


@register_rule(lax.log1p_p)
def _log1p(order, x, **params):
    c = _full(x, order)
    g = ks.divide(ks.derivative_series(c), ks.with_primal(c, 1 + x.primal)[:order], order - 1)
    return Series(ks.integrate(g, lax.log1p(x.primal), order))


def _integral(x: Series, g, y0, order: int) -> Series:
    """`y = y0 + integral of g dx`: `y' = g x'`."""
    c = _full(x, order)
    dg = ks.cauchy(ks.pad_degree(g, order - 1), ks.derivative_series(c), order - 1)
    return Series(ks.integrate(dg, y0, order))


def _one_plus(sign_one: float, sign_sq: float, c, order: int):
    """`sign_one + sign_sq * x^2` as a series."""
    sq = ks.cauchy(c, c, order)
    return ks.with_primal(sign_sq * sq, sign_one + sign_sq * sq[0])


def _rsqrt_of(w, order: int):
    return ks.power(w, -0.5, lax.rsqrt(w[0]), order)


def _inverse_trig(prim, sign_one, sign_sq, kind, scale=1.0):
    def rule(order, x, **params):
        y0 = prim.bind(x.primal)
        if order == 0:
            return Series.constant(y0)
        c = _full(x, order - 1)
        w = _one_plus(sign_one, sign_sq, c, order - 1)
        if kind == "rsqrt":
            g = _rsqrt_of(w, order - 1)
        else:
            g = ks.divide(jnp.ones_like(w[:1]), w, order - 1)
        return _integral(x, scale * g if scale != 1.0 else g, y0, order)

    register_rule(prim)(rule)


_inverse_trig(lax.asin_p, 1.0, -1.0, "rsqrt")
_inverse_trig(lax.acos_p, 1.0, -1.0, "rsqrt", scale=-1.0)
_inverse_trig(lax.atan_p, 1.0, 1.0, "recip")
_inverse_trig(lax.asinh_p, 1.0, 1.0, "rsqrt")
_inverse_trig(lax.acosh_p, -1.0, 1.0, "rsqrt")
_inverse_trig(lax.atanh_p, 1.0, -1.0, "recip")


@register_rule(lax.atan2_p)
def _atan2(order, y, x, **params):
    z0 = lax.atan2(y.primal, x.primal)
    ndim = len(jnp.shape(z0))
    cy = ks.pad_degree(ks.lift(y.coeffs, ndim), order)
    cx = ks.pad_degree(ks.lift(x.coeffs, ndim), order)
    low = order - 1
    num = ks.cauchy(cx[:order], ks.derivative_series(cy), low) - ks.cauchy(
        cy[:order], ks.derivative_series(cx), low
    )
    den = ks.cauchy(cx[:order], cx[:order], low) + ks.cauchy(cy[:order], cy[:order], low)
    g = ks.divide(num, den, low)
    return Series(ks.integrate(g, z0, order))


def _erf_like(prim, sign):
    def rule(order, x, **params):
        y0 = prim.bind(x.primal)
        if order == 0:
            return Series.constant(y0)
        c = _full(x, order - 1)
        z = -ks.cauchy(c, c, order - 1)
        (e,) = ks.linear_ode(z, [lax.exp(-x.primal * x.primal)], [[1]], order - 1)
        return _integral(x, (sign * 2 / math.sqrt(math.pi)) * e, y0, order)

    register_rule(prim)(rule)


_erf_like(lax.erf_p, 1.0)
_erf_like(lax.erfc_p, -1.0)


@register_rule(lax.erf_inv_p)
def _erf_inv(order, x, **params):
    # y' = x' * c * w with w = exp(q), q = y^2, all filled one coefficient per step.
    c = _full(x, order)
    y0 = lax.erf_inv(x.primal)
    scale = math.sqrt(math.pi) / 2
    u_source = ks.reversed_window_source(ks.derivative_series(c), order)
    ms = ks.orders(order, c.ndim - 1, c.dtype)
    y = ks._fresh(y0, order, c.dtype)
    q = ks._fresh(y0 * y0, order, c.dtype)
    w = ks._fresh(lax.exp(y0 * y0), order, c.dtype)

    def body(k, carry):
        y, q, w = carry
        kk = lax.convert_element_type(k, ks.real_dtype(c.dtype))
        y = ks.set_coeff(y, scale * ks.conv_at(u_source, order, w, k - 1, order) / kk, k)
        q = ks.set_coeff(q, ks.self_conv_at(y, k, order), k)
        dq_source = ks.reversed_window_source(ms * q, order)
        w = ks.set_coeff(w, ks.conv_at(dq_source, order + 1, w, k, order) / kk, k)
        return y, q, w

    return Series(ks.fori(order, body, (y, q, w))[0])


def _polygamma_coeffs(x0, first_n: int, order: int, primal):
    """`d_m = polygamma(m - 1 + first_n, x0) / m!` for m >= 1, `d_0 = primal`."""
    ndim = jnp.ndim(x0)
    ms = ks.orders(order, ndim, x0.dtype)
    n = jnp.broadcast_to(ms[1:] - 1 + first_n, (order,) + jnp.shape(x0)).astype(x0.dtype)
    values = lax.polygamma(n, jnp.broadcast_to(x0, n.shape))
    values = values / ks.factorials(order, ndim, x0.dtype)[1:]
    return jnp.concatenate([jnp.asarray(primal)[None], values], 0)


@register_rule(lax.lgamma_p)
def _lgamma(order, x, **params):
    y0 = lax.lgamma(x.primal)
    d = _polygamma_coeffs(x.primal, 0, order, y0)
    return Series(ks.compose(x.coeffs, d, order))


@register_rule(lax.digamma_p)
def _digamma(order, x, **params):
    y0 = lax.digamma(x.primal)
    d = _polygamma_coeffs(x.primal, 1, order, y0)
    return Series(ks.compose(x.coeffs, d, order))
