"""Rules for elementwise arithmetic: +, -, *, /, powers, roots, abs, max/min, selection."""

from __future__ import annotations

import operator

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat, _policy, _rare, _series
from .._interpret import register_rule, row_readers, taylor_rules
from .._pass import read_row_by_row
from .._series import Series
from ._common import aligned, defconstant, defelementwise_linear, over_element_chunks, weighted_sum

for _p in (lax.add_p, lax.sub_p, lax.neg_p, lax.copy_p):
    defelementwise_linear(_p)


def _defsum(prim, negate_right: bool) -> None:
    """`x + y` / `x - y` that touches only the rows both operands have.

    The rows above the lower degree (a bias added to a matmul's series, `1 + t^2`) are the
    higher operand's own: they are passed through, not added to padded zeros, so XLA can
    forward them (a slice of the result is the operand's row, not a new sum).
    """

    linear = taylor_rules[prim]  # `defelementwise_linear`'s: operands of one degree

    def rule(order, x, y):
        if x.degree == y.degree:
            return linear(order, x, y)
        low = min(x.degree, y.degree)
        shape = jnp.broadcast_shapes(x.shape, y.shape)
        top, flip = (x, False) if x.degree > y.degree else (y, negate_right)
        rest = lax.slice_in_dim(top.coeffs, low + 1, top.degree + 1)
        if top.shape != shape:
            rest = jnp.broadcast_to(_series.lift(rest, len(shape)), rest.shape[:1] + shape)
        rows = prim.bind(*aligned((x, y), low))
        return Series(jnp.concatenate([rows, -rest if flip else rest]))

    register_rule(prim)(rule)


_defsum(lax.add_p, negate_right=False)
_defsum(lax.sub_p, negate_right=True)


@register_rule(lax.reduce_precision_p)
def _reduce_precision(order, x, **params):
    # Its jvp rounds the tangent, so nested jvp rounds every derivative x^(k): round k! x_k,
    # not the normalized coefficient x_k = x^(k)/k! (the two differ when x_k is not exact).
    del order
    if x.is_constant:
        return Series.constant(lax.reduce_precision_p.bind(x.primal, **params))
    scale = _series.factorials(x.degree, len(x.shape), x.dtype).astype(x.dtype)
    return Series(lax.reduce_precision_p.bind(x.coeffs * scale, **params) / scale)


# Affine arithmetic with concrete scalars keeps a line's direction known as a number
# (`3 t + 1` from the seed `t`: direction 3), so closed forms along it multiply by
# constants instead of computing powers of the direction (see `_series.along_line`).


def _direction(x: Series):
    """A series' constant direction: 0 for a constant, None when not known."""
    if x.is_constant:
        return 0
    return _series.line_direction(x.coeffs) if x.degree == 1 else None


def _marked(out: Series, direction) -> Series:
    if direction is not None and out.degree == 1:
        _series.mark_line(out.coeffs, direction)
    return out


def _with_separate_rows(out: Series, xs) -> Series:
    """Mark `out`, an elementwise linear function of `xs`, as having rows of its own
    (`_series.has_separate_rows`) when every input with a series has them: row k of the
    result reads only row k of each input."""
    if not out.is_constant and all(
        x.is_constant or _series.has_separate_rows(x.coeffs) for x in xs
    ):
        _series.mark_separate_rows(out.coeffs)
    return out


def _known_rows(x: Series) -> list | None:
    """A series' rows when they are known (`_series.known_rows`; a constant's is its primal)."""
    return [x.primal] if x.is_constant else _series.known_rows(x.coeffs)


def by_rows(row_op, xs) -> Series | None:
    """`row_op` applied to each row of inputs whose rows are all known, else None.

    The result's rows are known too, so a chain of sums and negations of closed forms
    (`1 + t^2`, `-t^2 / 2`) reaches its readers as rows, never as stacked copies.
    `row_op` takes None for a row past an input's degree (a zero).
    """
    rows = [_known_rows(x) for x in xs]
    if any(r is None for r in rows) or all(x.is_constant for x in xs):
        return None
    count = max(len(r) for r in rows)
    out = [row_op(*(r[k] if k < len(r) else None for r in rows)) for k in range(count)]
    return Series(_series.stack_rows(out))


def _add_rows(a, b):
    return b if a is None else a if b is None else a + b


def _sub_rows(a, b):
    return a if b is None else -b if a is None else a - b


def _keeps_lines(prim, combine, row_op) -> None:
    linear = taylor_rules[prim]

    def rule(order, *xs, **params):
        directions = [_direction(x) for x in xs]
        out = by_rows(row_op, xs)
        if out is None:
            out = _with_separate_rows(linear(order, *xs, **params), xs)
        return _marked(out, None if None in directions else combine(*directions))

    register_rule(prim)(rule)


_keeps_lines(lax.add_p, operator.add, _add_rows)
_keeps_lines(lax.sub_p, operator.sub, _sub_rows)
_keeps_lines(lax.neg_p, operator.neg, operator.neg)


def _scaled_direction(x: Series, y: Series, scale):
    """The direction of `x op y` for a line `x` and a concrete scalar constant `y`."""
    if not y.is_constant:
        return None
    d, c = _direction(x), _series.concrete_scalar(y.primal)
    return None if d is None or c is None else scale(d, c)


for _p in (lax.sign_p, lax.floor_p, lax.ceil_p, lax.round_p, lax.stop_gradient_p, lax.nextafter_p):
    defconstant(_p)


@register_rule(lax.convert_element_type_p)
def _convert_element_type(order, x, **params):
    del order
    return Series(lax.convert_element_type_p.bind(x.coeffs, **params))


def _stacked_pair(x: Series, y: Series):
    ndim = max(len(x.shape), len(y.shape))
    return _series.lift(x.coeffs, ndim), _series.lift(y.coeffs, ndim)


def _product(order, x, y, by_rows=False):
    a, b = _stacked_pair(x, y)
    return Series(_series.cauchy(a, b, order, by_rows))


@register_rule(lax.mul_p)
def _mul(order, x, y, **params):
    # A shifted sum streams its operands once: it needs no chunking on large arrays.
    direction = _scaled_direction(x, y, operator.mul)
    if direction is None:
        direction = _scaled_direction(y, x, operator.mul)
    out = _product(order, x, y, by_rows=read_row_by_row())
    if x.is_constant or y.is_constant:
        out = _with_separate_rows(out, (x, y))
    return _marked(out, direction)


@register_rule(lax.square_p)
def _square(order, x, **params):
    return _mul(order, x, x)


def one_minus_square_rule(primitive):
    """The rule of an elementwise `1 - x^2` primitive: the series of `x * x`, negated, with
    the primitive's own value as the primal (its rounding may differ from `1 - x*x`)."""

    def rule(order, x, **params):
        square = _square(order, x)
        return Series(_series.with_primal(-square.coeffs, primitive.bind(x.primal, **params)))

    return rule


# Reported for JAX 0.11-0.12 but defined at no tag this was checked against (0.10.2, 0.11.0,
# main of 2026-08-08): registered only where the running JAX has it (docs/JAX_VERSIONS.md).
_one_minus_square_p = _compat.find_primitive("one_minus_square")
if _one_minus_square_p is not None:
    register_rule(_one_minus_square_p)(one_minus_square_rule(_one_minus_square_p))


def _quotient(order, x, y):
    a, b = _stacked_pair(x, y)
    q0 = lax.div(_series.shielded(x.primal), _series.shielded(y.primal))
    return Series(_series.divide(a, b, order, q0=q0))


_quotient_chunked = over_element_chunks(_quotient)


@register_rule(lax.div_p)
def _div(order, x, y, **params):
    # A constant denominator is one division per coefficient; a series one is a recurrence.
    if not y.is_constant:
        return _quotient_chunked(order, x, y)
    direction = _scaled_direction(x, y, lambda d, c: d / c if c else None)
    out = by_rows(lambda a, _: _series.shielded(a) / y.primal, (x, y))
    return _marked(_quotient(order, x, y) if out is None else out, direction)


def _div_reads_rows(eqn, operand: int, order: int, others_constant: bool) -> bool:
    """A division reads its numerator one row per coefficient (`_series.divide`) when the
    numerator's rows are buffers of their own and the denominator is of low degree or
    has such rows too: a product read only here then gives its rows as such, at the
    orders where `_series.product_rows_max_order` keeps rows for such products alone."""
    del eqn, others_constant
    return (
        operand == 0
        and _series.product_rows_max_order(False) < order <= _series.product_rows_max_order()
    )


row_readers[lax.div_p] = _div_reads_rows


def integer_power(c, n: int, order: int):
    """`c ** n` for a Python integer `n` by repeated squaring of series (exact at 0)."""
    if n == 0:
        return jnp.ones_like(c[:1])
    result = None
    base = c
    m = abs(n)
    while m:
        if m & 1:
            result = base if result is None else _series.cauchy(result, base, order)
        m >>= 1
        if m:
            base = _series.cauchy(base, base, order)
    if n < 0:
        return _series.divide(jnp.ones_like(result[:1]), result, order)
    return result


def _pow_taylor_coeffs(p, x0, order: int, integer_exponent: bool):
    """`binom(p, m) x0^(p-m)`; integer-dtype exponents select exact zeros where the
    falling factorial vanishes, as JAX's pow jvp does for them."""
    d = _series.exp_like_power_coeffs(p, x0, order)
    if integer_exponent:
        shape = jnp.broadcast_shapes(jnp.shape(x0), jnp.shape(p))
        binom = _series.binomials(p, order, shape, jnp.result_type(x0))
        d = jnp.where(binom == 0, 0, d)
    return d


def power_line_coeffs(p, x0, primal, order: int, integer_exponent: bool = False):
    """`f^(k)(x0)/k!` for `f = x**p`, computed as nested jvp computes it."""
    if isinstance(p, int) and p >= 0:
        # A polynomial of degree n: coefficients past n are known zeros (no 0 * inf),
        # and the short result keeps later products cheap.
        d = _series.exp_like_power_coeffs(p, x0, min(int(p), order))
    else:
        d = _pow_taylor_coeffs(p, x0, order, integer_exponent)
    return _series.with_primal(d, primal)


@over_element_chunks
def _integer_pow_general(order, x, *, y):
    out = integer_power(x.coeffs, y, order)
    return Series(_series.with_primal(out, lax.integer_pow(x.primal, y)))


@register_rule(lax.integer_pow_p)
def _integer_pow(order, x, *, y):
    if x.degree == 1:
        y0 = lax.integer_pow(x.primal, y)
        d = power_line_coeffs(int(y), x.primal, y0, order, integer_exponent=True)
        return Series(_series.along_line(x.coeffs, d, order))
    return _integer_pow_general(order, x, y=y)


def _root_line_coeffs(p, x0, y0, order: int):
    """`binom(p, k) y0 / x0^k`: defined wherever the root is (cbrt of a negative number)."""
    shape, dtype = jnp.shape(x0), jnp.result_type(x0)
    powers = _series.powers(x0, order, sign=-1)
    rows = _series.known_rows(powers)
    if rows is not None:
        # Row by row, each times its binomial as a number (as `_log_line` does, and why).
        binom = _series.binomial_numbers(p, order)
        return _series.stack_rows_as(
            [_series.times_number(r, b) * y0 for r, b in zip(rows, binom)], shape, dtype
        )
    binom = _series.binomials(p, order, shape, dtype)
    return binom * powers * y0[None]


def _root(prim, p):
    @over_element_chunks
    def general(order, x, **params):
        y0 = prim.bind(x.primal, **params)
        if p == 0.5 and x.degree > _policy.current().unroll_max_degree and _series.unrolled(order):
            # A series of full degree: the square's folded sum (`_series.square_root`).
            return Series(_series.square_root(x.coeffs, y0, order))
        return Series(_series.power(x.coeffs, p, y0, order))

    def rule(order, x, **params):
        if x.degree == 1:
            y0 = prim.bind(x.primal, **params)
            d = _root_line_coeffs(p, x.primal, y0, order)
            return Series(_series.along_line(x.coeffs, _series.with_primal(d, y0), order))
        return general(order, x, **params)

    register_rule(prim)(rule)


_root(lax.sqrt_p, 0.5)
_root(lax.rsqrt_p, -0.5)
_root(lax.cbrt_p, 1.0 / 3.0)


def _power_series(c, p, y0, order: int, integer_exponent: bool = False):
    """`x ** p` for an exponent without a series.

    Uses the O(K^2) recurrence where `x_0 != 0` and, only when some `x_0 == 0`,
    composition with `binom(p, m) x_0^(p-m)`, which reproduces nested jvp
    exactly there (zeros, then nan/inf past the order where the power stops
    being smooth). `x` keeps its own degree: over a polynomial of low degree both sum
    a few terms per coefficient (`_series.unrolled`).
    """
    c = c[: order + 1]
    x0 = c[0]
    recurrence = _series.power(c, p, y0, order)
    if order == 0:
        return recurrence

    def composed(c, y0):
        d = _pow_taylor_coeffs(p, c[0], order, integer_exponent)
        return _series.with_primal(_series.compose(c, d, order), y0)

    # The composition, O(K^3), only when some element is 0, also under `vmap` (`_rare`).
    out = _rare.where_any(x0 == 0, composed, recurrence, [c, y0])
    if _series.known_rows(recurrence) is None:
        return out
    # The conditional's output is a buffer whose rows are read as cheaply as the
    # recurrence's were: readers that ask for rows (a product) keep taking them
    # (docs/EMISSION.md, "Rows of a rare side").
    return _series.with_known_rows(out, _series.rows_of(out, out.shape[0]))


@register_rule(lax.pow_p)
def _pow(order, x, y, **params):
    if y.is_constant and x.degree == 1:
        # A float exponent follows nested jvp even where it is integer-valued: its jvp,
        # y * x**(y-1), turns into 0 * inf = nan at x = 0 past order y (x**2.0 at 0
        # gives 0, 0, 2, nan, ...). Integer-dtype exponents select exact zeros instead.
        y0 = lax.pow(x.primal, y.primal)
        p = y.primal
        integer_exponent = jnp.issubdtype(jnp.result_type(p), np.integer)
        d = power_line_coeffs(
            _exponent_as(p, x.dtype),
            jnp.broadcast_to(x.primal, jnp.shape(y0)),
            y0,
            order,
            integer_exponent,
        )
        return Series(_series.along_line(_series.lift(x.coeffs, len(jnp.shape(y0))), d, order))
    return _pow_general(order, x, y)


def _exponent_as(p, dtype):
    """The exponent in `dtype`: a Python number, rounded to `dtype`, where it is a
    concrete real scalar (the power rules then take one `pow` and products:
    `_series.real_exponent_powers`); else an array. A cast inside the trace would
    make even a literal exponent a tracer."""
    value = _series.concrete_scalar(p)
    if value is None or isinstance(value, complex) or jnp.issubdtype(dtype, np.complexfloating):
        return jnp.asarray(p).astype(dtype)
    return float(np.asarray(value, dtype=dtype))


@over_element_chunks
def _pow_general(order, x, y):
    y0 = lax.pow(x.primal, y.primal)
    ndim = len(jnp.shape(y0))
    if y.is_constant:
        p = y.primal
        integer_exponent = jnp.issubdtype(jnp.result_type(p), np.integer)
        p = _exponent_as(p, x.dtype)
        c = jnp.broadcast_to(_series.lift(x.coeffs, ndim), (x.degree + 1,) + jnp.shape(y0))
        return Series(_power_series(c, p, y0, order, integer_exponent))
    # x ** y = exp(y log x) when the exponent carries a series. For a constant base 0,
    # lax's jvp in y uses log(1) = 0 (`_replace_zero`): 0 ** y has zero derivatives in y,
    # not nan. (A base series through 0 keeps the nan of its singular log: nested jvp's
    # derivatives in x there are powers of 0 that no finite rule reproduces.)
    if x.is_constant:
        base = jnp.where(x.primal == 0, jnp.ones_like(x.primal), x.primal)
        log_x = lax.log(base)[None]
    else:
        log_x = log_series(_series.lift(x.coeffs, ndim), lax.log(x.primal), order)
    z = _series.cauchy(_series.lift(y.coeffs, ndim), _series.lift(log_x, ndim), order)
    (out,) = _series.linear_ode(z, [y0], [[1]], order)
    return Series(out)


def log_series(c, y0, order: int):
    """`log(x)`: `y' = x' / x`.

    `x` keeps its own degree: over a polynomial of low degree (`log(1 + t^2)`) the
    division sums a few terms per coefficient (`_series.unrolled`), where a zero-padded
    divisor would sum k (docs/EMISSION.md, "The log1p chain at K = 16")."""
    c = _series.leading_rows(c, order + 1)
    g = _series.divide(_series.derivative_series(c), _series.leading_rows(c, order), order - 1)
    return _series.integrate(g, y0, order)


def _balanced_eq(x, z, y):
    # Matches lax's max/min jvp: weight 1 where x alone attains z, 1/2 on ties.
    return jnp.where(x == z, 1.0, 0.0) / jnp.where(y == z, 2.0, 1.0)


def choose(x: Series, y: Series, z) -> Series:
    """The series of `max`/`min(x, y)` whose primal is `z`: weights fixed by the primals."""
    a, b = x.primal, y.primal
    return weighted_sum([x, y], [_balanced_eq(a, z, b), _balanced_eq(b, z, a)], z)


def _chooser(prim):
    def rule(order, x, y, **params):
        del order
        return choose(x, y, prim.bind(x.primal, y.primal))

    register_rule(prim)(rule)


_chooser(lax.max_p)
_chooser(lax.min_p)


@register_rule(lax.clamp_p)
def _clamp(order, lo, x, hi, **params):
    del order
    a, b, c = lo.primal, x.primal, hi.primal
    weights = [(a > b) & (a < c), (b > a) & (b < c), c < b]
    return weighted_sum([lo, x, hi], weights, lax.clamp(a, b, c))


@register_rule(lax.select_n_p)
def _select_n(order, which, *cases, **params):
    del order
    stacked = aligned(cases)
    pred = which.primal
    if jnp.ndim(pred):
        pred = lax.broadcast_in_dim(pred, stacked[0].shape, tuple(range(1, stacked[0].ndim)))
    return Series(lax.select_n(pred, *stacked))


@over_element_chunks
def _complex_abs(order, x):
    re, im = lax.real(x.coeffs), lax.imag(x.coeffs)
    s = _series.cauchy(re, re, order) + _series.cauchy(im, im, order)
    return Series(_series.power(s, 0.5, lax.abs(x.primal), order))


@register_rule(lax.abs_p)
def _abs(order, x, **params):
    if jnp.issubdtype(x.dtype, np.complexfloating):
        return _complex_abs(order, x)
    # Real abs is linear with a sign fixed by the primal (lax's jvp: +1 at 0).
    sign = jnp.where(x.primal >= 0, 1, -1).astype(x.dtype)
    return Series(_series.with_primal(x.coeffs * sign[None], lax.abs(x.primal)))


@register_rule(lax.rem_p)
def _rem(order, x, y, **params):
    del order
    q = lax.div(x.primal, y.primal)
    trunc = lax.sign(q) * lax.floor(lax.abs(q))
    return weighted_sum([x, y], [jnp.ones_like(trunc), -trunc], lax.rem(x.primal, y.primal))
