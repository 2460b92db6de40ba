"""Rules for transcendental functions, each from the ODE it satisfies.

* exp, sin/cos, sinh/cosh: linear systems `Y' = x' M Y`;
* tanh, logistic, tan: from exp and sin/cos by division (no overflow);
* log, inverse trigonometric and hyperbolic functions, erf, atan2:
  `y' = g(x) x'` with `g` built from series arithmetic, then integrated;
* lgamma, digamma: composition with derivatives known in closed form (polygamma);
* erf_inv: its inverse-function ODE `y' = x' sqrt(pi)/2 exp(y^2)`.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat, _pass, _series
from .._interpret import register_rule, taylor_rules
from .._pass import read_row_by_row
from .._series import Array, Series
from . import _riccati_lines
from ._arithmetic import log_series
from ._common import LineMaxOrder, line_coefficients, line_reaches, over_element_chunks


def _full(x: Series, order: int):
    return _series.pad_degree(x.coeffs, order)


def _cycle(values, weights: np.ndarray) -> Array:
    """Row k is `values[k % len(values)] weights[k]`, as one elementwise expression (a
    broadcast of the stacked cycle, a reshape and a product: it fuses into its readers).
    """
    cycle = jnp.stack(values)
    rows = len(weights)
    reps = -(-rows // len(values))
    shape = cycle.shape
    tiled = lax.broadcast_in_dim(cycle, (reps,) + shape, tuple(range(1, len(shape) + 1)))
    tiled = lax.reshape(tiled, (reps * shape[0],) + shape[1:])[:rows]
    return tiled * jnp.asarray(weights.reshape((rows,) + (1,) * (len(shape) - 1)), tiled.dtype)


def _cycle_rows(values, weights: np.ndarray) -> Array:
    """`_cycle` row by row (for `_series.rows_wanted` orders): a reader of row k multiplies one
    buffer by a number (`_series.known_rows`), with no stacked copy in between. Past the rows
    XLA:CPU fuses as a concatenate, the stack itself is `_cycle`'s one expression."""
    rows = [_series.times_number(values[k % len(values)], w) for k, w in enumerate(weights)]
    if len(rows) <= _series.fused_concat_max_operands():
        return _series.stack_rows(rows)
    return _series.with_known_rows(_cycle(values, weights), rows)


def _scaled(values, order: int, scale: float = 1.0):
    """Stack `values[k % len(values)] scale^k / k!` for k = 0..order (derivative cycles)."""
    magnitudes = _series.inverse_factorials(order, 0, jnp.result_type(*values), scale)
    if _series.rows_wanted(order):
        return _cycle_rows(values, magnitudes.ravel())
    return _cycle(values, magnitudes.ravel())


def _trig_cycle(sin0, cos0, index: int, order: int, scale: float = 1.0):
    """`d^k/dx^k sin` (index 0) or `cos` (index 1) at `x0`, times `scale^k / k!`, for
    k = 0..order.

    Row k is `sin` or `cos` times a signed `scale^k / k!`. Where `_series.rows_wanted`, row
    by row (`_cycle_rows`). Otherwise `A_k sin + B_k cos` with constant vectors (one of
    the two 0 at each k): a few equations at any order, one elementwise kernel in its
    readers' layout. Real only (complex sin and cos take `_scaled`): sin and cos are
    bounded, so the zero weights never meet an inf.
    """
    magnitudes = _series.inverse_factorials(order, 0, np.float64, scale).ravel()
    # phase (index + k) % 4 is sin, cos, -sin, -cos
    signed = np.array([1.0 if (index + k) % 4 < 2 else -1.0 for k in range(order + 1)])
    signed *= magnitudes
    if _series.rows_wanted(order):
        values = (sin0, cos0) if index == 0 else (cos0, sin0)
        return _cycle_rows(values, signed)
    weights = np.zeros((2, order + 1))
    for k in range(order + 1):
        weights[(index + k) % 2, k] = signed[k]
    shape = (order + 1,) + (1,) * jnp.ndim(sin0)
    dtype = jnp.result_type(sin0)
    a = jnp.asarray(weights[0].reshape(shape), dtype)
    b = jnp.asarray(weights[1].reshape(shape), dtype)
    return a * sin0[None] + b * cos0[None]


def univariate(prim, line_coeffs, general, line_max_order: LineMaxOrder = None):
    """Register `prim` with a closed form along a line and an ODE rule otherwise.

    `line_coeffs(x0, order, scale=1.0)` gives `f^(k)(x0) scale^k / k!` stacked; it
    serves inputs of degree 1 (seeds and affine functions of them) with no recurrence
    at all, up to `line_max_order` when the closed form is only accurate that far (a
    number, or a function of the dtype giving one: `_common.line_reaches`).
    `general(order, x)` handles everything else, chunk by chunk on large arrays.

    A line whose direction is a known number takes the closed form at any order (the
    direction is folded into `scale`, so `1/k!` never stands alone). A direction known
    only at run time multiplies `f^(k)/k!` by its powers; past the orders where `1/k!`
    is safely inside the dtype's range the recurrence, which never forms it, is used.
    """
    general = over_element_chunks(general)
    line_coefficients[prim] = (line_coeffs, line_max_order)

    def rule(order, x, **params):
        if x.degree == 1 and line_reaches(line_max_order, order, x.dtype):
            known = _series.line_direction(x.coeffs) is not None
            if known or _series.derivative_scale(order, x.dtype) == 1.0:
                line = functools.partial(line_coeffs, x.primal, order)
                return Series(_series.mark_separate_rows(_series.along_line(x.coeffs, line, order)))
        return general(order, x)

    register_rule(prim)(rule)


def _exp_general(order, x):
    (y,) = _series.linear_ode(x.coeffs, [lax.exp(x.primal)], [[1]], order)
    return Series(y)


def _exp2_general(order, x):
    z = x.coeffs * jnp.asarray(math.log(2.0), _series.real_dtype(x.dtype))
    (y,) = _series.linear_ode(z, [lax.exp2(x.primal)], [[1]], order)
    return Series(y)


def _expm1_general(order, x):
    (y,) = _series.linear_ode(x.coeffs, [lax.exp(x.primal)], [[1]], order)
    return Series(_series.with_primal(y, lax.expm1(x.primal)))


univariate(
    lax.exp_p, lambda x0, k, scale=1.0: _scaled([_series.once(lax.exp(x0))], k, scale), _exp_general
)
univariate(
    lax.exp2_p,
    lambda x0, k, scale=1.0: _scaled([_series.once(lax.exp2(x0))], k, scale * math.log(2.0)),
    _exp2_general,
)
univariate(
    lax.expm1_p,
    lambda x0, k, scale=1.0: _series.with_primal(
        _scaled([_series.once(lax.exp(x0))], k, scale), _series.once(lax.expm1(x0))
    ),
    _expm1_general,
)


def sin_cos(x0):
    """`(sin x0, cos x0)`, each evaluated once per element by XLA.

    XLA:CPU counts real sin and cos as cheap, so it copies them into every kernel that
    reads them, and a Taylor rule reads them once per coefficient: the copies cost more
    than the rest of the arithmetic. `_series.computed_once` makes XLA compute them once.

    Both come from one marked complex value `cos x0 + i sin x0`: in one expression LLVM
    evaluates them with one `sincos`, at little more than the cost of one, and one kernel
    writes both (docs/EMISSION.md, "Values computed once"). It is built from `cos` and
    `sin` themselves, not as `exp(i x0)`: where the mark is lowered as the value (low
    orders under `vmap`), XLA's complex `exp` left a select on `x0 == 0` in the sine that
    kept LLVM from vectorizing the kernel that writes the output: `cosh(t) cos(t)` at
    K = 2 ran 3.4x slower (docs/EMISSION.md, "Output kernels under vmap").
    A pass that compiles into one kernel (`_series.one_kernel_pass`) needs no mark: there
    LLVM vectorizes `sin` and `cos` across points and evaluates each once.
    """
    if jnp.issubdtype(jnp.result_type(x0), np.complexfloating):
        return lax.sin(x0), lax.cos(x0)  # complex sin and cos count as expensive already
    if _pass.one_kernel_pass():  # evaluated once per point by the pass's one kernel
        return lax.sin(x0), lax.cos(x0)
    one = _series.opaque_one(x0)
    if jnp.result_type(x0) not in (np.float32, np.float64):  # no complex type of their own
        return _series.computed_once(lax.sin(x0), one), _series.computed_once(lax.cos(x0), one)
    cis = _series.computed_once(lax.complex(lax.cos(x0), lax.sin(x0)), one)
    return lax.imag(cis), lax.real(cis)


def _pair(kind: str, index: int):
    matrix = [[0, 1], [-1, 0]] if kind == "trig" else [[0, 1], [1, 0]]

    def first_second(x0):
        if kind == "trig":
            return sin_cos(x0)
        return _series.once(lax.sinh(x0)), _series.once(lax.cosh(x0))

    def general(order, x):
        ys = _series.linear_ode(x.coeffs, list(first_second(x.primal)), matrix, order, index)
        return Series(ys[index])

    def line(x0, order, scale=1.0):
        a, b = first_second(x0)
        if kind == "trig":
            if not jnp.issubdtype(jnp.result_type(x0), np.complexfloating):
                return _trig_cycle(a, b, index, order, scale)
            cycle = [a, b, -a, -b] if index == 0 else [b, -a, -b, a]
        else:
            cycle = [a, b] if index == 0 else [b, a]
        return _scaled(cycle, order, scale)

    return line, general


univariate(lax.sin_p, *_pair("trig", 0))
univariate(lax.cos_p, *_pair("trig", 1))
univariate(lax.sinh_p, *_pair("hyp", 0))
univariate(lax.cosh_p, *_pair("hyp", 1))


def _tanh(order, x):
    return Series(_series.tanh(x.coeffs, lax.tanh(x.primal), order))


def _logistic(order, x, **params):
    """The Riccati recurrence at unrolled orders (`_series.logistic`: one logistic more for
    an accurate slope, where `(1 + tanh(x / 2)) / 2` took a tanh, an exponential and a
    division besides the logistic itself, and stacked tanh's closed form along a line
    with selects; docs/EMISSION.md, "Recurrences"); past them, and for complex values,
    `(1 + tanh(x / 2)) / 2`."""
    y0 = lax.logistic(x.primal)
    if _series.unrolled(order) and not jnp.iscomplexobj(y0):
        rows_once = not read_row_by_row()
        return Series(_series.logistic(x.coeffs, y0, order, rows_once))
    half = Series(x.coeffs / 2)
    t = taylor_rules[lax.tanh_p](order, half).coeffs
    return Series(_series.with_primal(t / 2, y0))


def _tan(order, x):
    s, c = _series.linear_ode(x.coeffs, list(sin_cos(x.primal)), [[0, 1], [-1, 0]], order)
    return Series(_series.divide(s, c, order, q0=lax.tan(x.primal)))


univariate(lax.tanh_p, _riccati_lines.tanh_line, _tanh, _riccati_lines.tanh_max_order)
_tanh_line_or_general = taylor_rules[lax.tanh_p]


@register_rule(lax.tanh_p)
def _tanh_rule(order, x, **params):
    """The closed form along a line or the recurrence; for a tanh read only row by row
    (a large network's hidden layer), the Riccati rows unmarked (see `_series.tanh_riccati`).

    A row-by-row reader (`_linalg._row_dots`) takes each row as its own buffer, so the
    rows need no marking; the Riccati form is used on a line too, where it fuses as well.
    Figures for tanh MLPs are at `_row_dots`. Chains of tanh (read by products) keep both.
    """
    if _series.unrolled(order) and read_row_by_row():
        return Series(_series.tanh(x.coeffs, lax.tanh(x.primal), order, rows_once=False))
    return _tanh_line_or_general(order, x, **params)


univariate(lax.tan_p, _riccati_lines.tan_line, _tan, _riccati_lines.TAN_MAX_ORDER)
register_rule(lax.logistic_p)(_logistic)


def _log_line(shift_one: bool):
    def line(x0, order, scale=1.0):
        base = 1 + x0 if shift_one else x0
        primal = _series.once(lax.log1p(x0) if shift_one else lax.log(x0))
        # (scale / base)^k, not base^-k times scale^k: each may leave the range alone.
        powers = _series.powers(1 / base if scale == 1.0 else scale / base, order)
        rows = _series.known_rows(powers)
        if rows is not None:
            # Row by row, each over its order as a number: as a stack times constant
            # vectors it was a (points, K) buffer under `vmap`, read per element by the
            # kernel that writes the output (docs/EMISSION.md, "Output kernels under vmap").
            rest = [(r if m % 2 else -r) / m if m > 1 else r for m, r in enumerate(rows[1:], 1)]
            return _series.stack_rows([primal] + rest)
        ms = _series.orders(order, jnp.ndim(x0), x0.dtype)
        signs = jnp.where(ms[1:] % 2 == 1, 1.0, -1.0).astype(x0.dtype)
        rest = signs * powers[1:] / ms[1:]
        return lax.concatenate([jnp.asarray(primal)[None], rest], 0)

    return line


def _log_general(order, x):
    return Series(log_series(x.coeffs, _series.once(lax.log(x.primal)), order))


def _log1p_general(order, x):
    # `x` keeps its own degree, as in `log_series`.
    c = _series.leading_rows(x.coeffs, order + 1)
    g = _series.divide(
        _series.derivative_series(c),
        _series.leading_rows(_series.with_primal(c, 1 + x.primal), order),
        order - 1,
    )
    return Series(_series.integrate(g, _series.once(lax.log1p(x.primal)), order))


univariate(lax.log_p, _log_line(False), _log_general)
univariate(lax.log1p_p, _log_line(True), _log1p_general)


def log2_rule(primitive):
    """The rule of an elementwise base-2 logarithm primitive: `log2(x) = log(x) / log(2)`,
    so the series of `log x` scaled by `1/log 2` (complex `x` too), with the primitive's
    own value as the primal."""
    log_rule = taylor_rules[lax.log_p]

    def rule(order, x, **params):
        log_x = log_rule(order, x)  # params (e.g. an accuracy) only shape the primal
        scale = jnp.asarray(1 / math.log(2.0), _series.real_dtype(x.dtype))
        primal = primitive.bind(x.primal, **params)
        return Series(_series.with_primal(log_x.coeffs * scale, primal))

    return rule


# Reported missing for `expm` on JAX 0.11.2, but defined at no tag this was checked against
# (0.10.2, 0.11.0, main of 2026-08-08: `jnp.log2` is `log(x) / log(2)` there): registered
# only where the running JAX has it (docs/JAX_VERSIONS.md).
_log2_p = _compat.find_primitive("log2")
if _log2_p is not None:
    register_rule(_log2_p)(log2_rule(_log2_p))


def integral(x: Series, g, y0, order: int) -> Series:
    """`y = y0 + integral of g dx`: `y' = g x'`.

    `x` keeps its own degree here and in the rules that call this: over a polynomial
    of low degree (`atan(t^2)`) the products and recurrences sum a few terms per
    coefficient, where a zero-padded `x` would sum k."""
    c = _series.leading_rows(x.coeffs, order + 1)
    dg = _series.cauchy(_series.pad_degree(g, order - 1), _series.derivative_series(c), order - 1)
    return Series(_series.integrate(dg, y0, order))


def _one_plus(sign_one: float, sign_sq: float, c, order: int):
    """`sign_one + sign_sq * x^2` as a series."""
    return _series.scaled_series(_series.cauchy(c, c, order), sign_sq, sign_one)


def _rsqrt_of(w, order: int):
    return _series.power(w, -0.5, lax.rsqrt(w[0]), order)


def _inverse_trig(prim, sign_one, sign_sq, kind, scale=1.0):
    def rule(order, x, **params):
        y0 = _series.once(prim.bind(x.primal, **params))
        if order == 0:
            return Series.constant(y0)
        c = _series.leading_rows(x.coeffs, order)
        w = _one_plus(sign_one, sign_sq, c, order - 1)
        if kind == "rsqrt":
            g = _rsqrt_of(w, order - 1)
        else:
            g = _series.divide(jnp.ones_like(w[:1]), w, order - 1)
        return integral(x, scale * g if scale != 1.0 else g, y0, order)

    register_rule(prim)(over_element_chunks(rule))


_inverse_trig(lax.asin_p, 1.0, -1.0, "rsqrt")
_inverse_trig(lax.acos_p, 1.0, -1.0, "rsqrt", scale=-1.0)
_inverse_trig(lax.atan_p, 1.0, 1.0, "recip")
_inverse_trig(lax.asinh_p, 1.0, 1.0, "rsqrt")
_inverse_trig(lax.atanh_p, 1.0, -1.0, "recip")


@register_rule(lax.acosh_p)
@over_element_chunks
def _acosh(order, x, **params):
    """`acosh' = 1 / (sqrt(x - 1) sqrt(x + 1))`, each root a series of its own.

    Not `1 / sqrt(x^2 - 1)`: equal for real x > 1, but that root has a branch cut along
    the whole imaginary axis, where acosh has none, and gives every coefficient the
    wrong sign for complex x in the left half-plane (JAX 0.10's own derivative rule does
    too; 0.11's is right). Near x = 1 the product also keeps the digits that `x^2 - 1`
    cancels.
    """
    y0 = _series.once(lax.acosh_p.bind(x.primal, **params))
    if order == 0:
        return Series.constant(y0)
    c = _series.leading_rows(x.coeffs, order)
    roots = [_rsqrt_of(_series.with_primal(c, c[0] + shift), order - 1) for shift in (-1.0, 1.0)]
    return integral(x, _series.cauchy(roots[0], roots[1], order - 1), y0, order)


@register_rule(lax.atan2_p)
@over_element_chunks
def _atan2(order, y, x, **params):
    """`atan2(y, x)' = (x y' - y x') / (x^2 + y^2)`, integrated. Each argument keeps its
    own degree and rows: along a line (`atan2(t, 1 + t^2)`) the products and the
    division sum a few terms per coefficient, where arguments padded to full degree
    summed k, and stacks under `vmap` became (points, K) buffers."""
    z0 = _series.once(lax.atan2(y.primal, x.primal))
    ndim = len(jnp.shape(z0))
    cy = _series.leading_rows(_series.lift(y.coeffs, ndim), order + 1)
    cx = _series.leading_rows(_series.lift(x.coeffs, ndim), order + 1)
    low = order - 1
    lx, ly = _series.leading_rows(cx, order), _series.leading_rows(cy, order)
    num = _series.sum_series(
        _series.cauchy(lx, _series.derivative_series(cy), low),
        _series.cauchy(ly, _series.derivative_series(cx), low),
        -1.0,
    )
    den = _series.sum_series(_series.cauchy(lx, lx, low), _series.cauchy(ly, ly, low), 1.0)
    g = _series.divide(num, den, low)
    return Series(_series.integrate(g, z0, order))


def _erf_like(prim, sign):
    def rule(order, x, **params):
        y0 = _series.once(prim.bind(x.primal, **params))
        if order == 0:
            return Series.constant(y0)
        c = _series.leading_rows(x.coeffs, order)
        z = _series.scaled_series(_series.cauchy(c, c, order - 1), -1.0)
        (e,) = _series.linear_ode(
            z, [_series.once(lax.exp(-x.primal * x.primal))], [[1]], order - 1
        )
        return integral(x, (sign * 2 / math.sqrt(math.pi)) * e, y0, order)

    register_rule(prim)(over_element_chunks(rule))


_erf_like(lax.erf_p, 1.0)
_erf_like(lax.erfc_p, -1.0)


@register_rule(lax.erf_inv_p)
@over_element_chunks
def _erf_inv(order, x, **params):
    """Row by row at unrolled orders (`_series.erf_inv`); past them, `y' = x' c w` with
    `w = exp(q)`, `q = y^2`, all filled one coefficient per step of a loop."""
    y0 = lax.erf_inv(x.primal)
    # Not the low-degree bound of `unrolled`: `q` and `w` have full degree whatever `x`'s,
    # so each of their rows sums k terms even along a line.
    if order and _series.unrolled(order):
        return Series(_series.erf_inv(x.coeffs, y0, order))
    c = _full(x, order)
    scale = math.sqrt(math.pi) / 2
    u_source = _series.reversed_window_source(_series.derivative_series(c), order)
    ms = _series.orders(order, c.ndim - 1, c.dtype)
    y = _series.fresh(y0, order, c.dtype)
    q = _series.fresh(y0 * y0, order, c.dtype)
    w = _series.fresh(lax.exp(y0 * y0), order, c.dtype)

    def body(k, carry):
        y, q, w = carry
        kk = lax.convert_element_type(k, _series.real_dtype(c.dtype))
        y = _series.set_coeff(y, scale * _series.conv_at(u_source, order, w, k - 1, order) / kk, k)
        q = _series.set_coeff(q, _series.self_conv_at(y, k, order), k)
        dq_source = _series.reversed_window_source(ms * q, order)
        w = _series.set_coeff(w, _series.conv_at(dq_source, order + 1, w, k, order) / kk, k)
        return y, q, w

    return Series(_series.fori(order, body, (y, q, w))[0])


def _polygamma_coeffs(x0, first, order: int, primal):
    """`d_m = polygamma(first + m - 1, x0) / m!` for m >= 1, `d_0 = primal`.

    `first` is 0 (lgamma), or 1 or more (may be an array broadcast against `x0`). With
    `polygamma(j, x) = (-1)^(j+1) j! zeta(j+1, x)`, `d_m = (-1)^(first+m) Gamma(first+m)/m!
    zeta(first+m, x0)`, the ratio a product of `(first+j-1)/j`: `polygamma(m, x0)` and
    `m!` each overflow float32 past m = 34, their ratio does not.
    """
    dtype = jnp.result_type(x0)
    if isinstance(first, int) and first == 0:
        # lgamma: d_m = (digamma's d_{m-1}) / m.
        if order == 0:
            return jnp.asarray(primal, dtype)[None]
        g = _polygamma_coeffs(x0, 1, order - 1, lax.digamma(x0))
        ms = _series.orders(order, jnp.ndim(x0), dtype)[1:]
        return jnp.concatenate([jnp.asarray(primal, dtype)[None], g / ms], 0)
    shape = jnp.shape(x0)
    js = _series.orders(order, len(shape), dtype)[1:]  # 1..order
    s = jnp.broadcast_to(jnp.asarray(first, dtype), shape)
    steps = -(s[None] + js - 1) / js  # -(first + j - 1) / j
    factor = jnp.where(jnp.fmod(s, 2) == 1, -1.0, 1.0).astype(dtype)  # (-1)^first
    if not (isinstance(first, int) and first == 1):
        factor = factor * jnp.exp(lax.lgamma(s))  # Gamma(first)
    values = jnp.cumprod(steps, 0) * factor[None]
    values = values * lax.zeta(s[None] + js, jnp.broadcast_to(x0, (order,) + shape))
    return jnp.concatenate([jnp.asarray(primal, dtype)[None], values], 0)


def _by_taylor_coeffs(prim, taylor_coeffs):
    """Register `prim` from `taylor_coeffs(x0, order) = f^(m)(x0)/m!`, known in closed form:
    along a line directly, otherwise by composition."""

    def line(x0, order, scale=1.0):
        d = taylor_coeffs(x0, order)
        if abs(scale) > 1 and order >= 2:
            # Past order 1 these are zeta values, never 0: a 0 is an underflow that the
            # scale would turn into a silent 0 where the result overflows. Say nan.
            m = _series.orders(order, d.ndim - 1, _series.real_dtype(d.dtype))
            d = jnp.where((d == 0) & (m >= 2), jnp.nan, d)
        return _series.times_powers(d, scale)

    univariate(
        prim,
        line,
        lambda order, x: Series(_series.compose(x.coeffs, taylor_coeffs(x.primal, order), order)),
    )


_by_taylor_coeffs(lax.lgamma_p, lambda x0, k: _polygamma_coeffs(x0, 0, k, lax.lgamma(x0)))
_by_taylor_coeffs(lax.digamma_p, lambda x0, k: _polygamma_coeffs(x0, 1, k, lax.digamma(x0)))


@register_rule(lax.polygamma_p)
def _polygamma(order, n, x, **params):
    if not n.is_constant:
        raise NotImplementedError(
            "taylax differentiates `polygamma(n, x)` with respect to `x` only; the order `n` "
            "must not depend on the differentiated input."
        )
    x0 = x.primal
    n0 = jnp.broadcast_to(n.primal, jnp.shape(x0)).astype(x0.dtype)
    d = _polygamma_coeffs(x0, n0 + 1, order, lax.polygamma(n0, x0))
    if x.degree == 1:
        return Series(_series.along_line(x.coeffs, d, order))
    return Series(_series.compose(x.coeffs, d, order))
