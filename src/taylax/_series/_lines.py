"""Lines `x_0 + d s` (the seeds a derivative starts from) and closed forms along them:
a function of a line is its Taylor coefficients at `x_0` times `d^k`, with no recurrence."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._coeffs import Array, binomial_numbers, binomials, degree_of, orders, times_powers
from ._identity import ArrayMarks
from ._marks import computed_once, opaque_one
from ._rows import known_rows, leading_rows, rows_wanted, stack_rows_as

# Lines `x_0 + d s` whose direction `d` is a known Python number, with `d`: the seeds
# taylax builds itself (a derivative's variable, the default direction: d = 1) and what
# affine arithmetic with concrete scalars makes of them (`3 t + 1`: d = 3). `along_line`
# then multiplies by the constants `d^k` (nothing at all for d = 1) instead of computing
# powers of the direction at run time.
_LINES = ArrayMarks()


def mark_line(c: Array, direction) -> Array:
    """Record that the degree-1 stacked array `c` has the constant direction `direction`."""
    return _LINES.mark(c, direction)


def line_direction(c: Array):
    """The known constant direction of a degree-1 stacked array, or None."""
    return _LINES.get(c)


def unit_seed(x0: Array, scale: float = 1.0) -> Array:
    """The stacked seed `x_0 + scale s` (by default direction exactly 1), marked as such
    for `along_line` (`scale` is a `derivative_scale`)."""
    return mark_line(stack_rows_as([x0, scale], jnp.shape(x0), jnp.result_type(x0)), scale)


def concrete_scalar(x):
    """`x` as a Python number when it is a concrete scalar (not a tracer), else None."""
    try:
        value = np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None
    if value.ndim or not np.issubdtype(value.dtype, np.number):
        return None
    return value.item()


def along_line(x: Array, taylor_coeffs, order: int) -> Array:
    """`f(x_0 + x_1 s)` for a degree-1 input: `y_k = d_k x_1^k` with `d_k = f^(k)(x_0)/k!`.

    The seed case (and anything affine in it) needs no recurrence at all; a direction
    known as a number needs no powers computed at run time either. `taylor_coeffs` is
    the stacked `d_k`, or a function `scale -> d_k scale^k` for closed forms that would
    leave the dtype's range as `d_k` alone (`1/k!`) but not as `d_k scale^k`.
    """
    direction = line_direction(x)
    if callable(taylor_coeffs):
        if direction is not None and not isinstance(direction, complex):
            return leading_rows(taylor_coeffs(direction), order + 1)
        taylor_coeffs = taylor_coeffs(1.0)
    degree = min(order, degree_of(taylor_coeffs))
    if direction is not None:
        if direction == 1:
            return leading_rows(taylor_coeffs, order + 1)
        return times_powers(taylor_coeffs[: degree + 1], direction)
    x1 = lax.index_in_dim(x, 1, keepdims=False)
    shape = jnp.shape(taylor_coeffs)[1:]
    x1 = jnp.broadcast_to(x1, shape).astype(taylor_coeffs.dtype)
    x1_powers = powers(x1, degree)
    d_rows, power_rows = known_rows(taylor_coeffs), known_rows(x1_powers)
    if d_rows is not None and power_rows is not None:
        # Row by row: the rows reach their readers as products of a few buffers, not as
        # a stacked product that XLA materializes (for `x^3` in tanh-approximate gelu).
        rows = [d * p if k else d for k, (d, p) in enumerate(zip(d_rows, power_rows))]
        return stack_rows_as(rows, shape, taylor_coeffs.dtype)
    return taylor_coeffs * x1_powers


def powers(x: Array, order: int, sign: int = 1) -> Array:
    """`x^(sign k)` for k = 0..order, stacked, by repeated doubling of products.

    `[x^0 .. x^(2n-1)] = [P, P * x^n]` for `P = [x^0 .. x^(n-1)]`: log2(order) steps of
    multiplications, no `pow` (an exp and a log per element) and no cumulative product
    (a reduce-window that XLA constant-folds slowly when `x` is a constant). Exact at
    0 (`0^0 = 1`) and for negative bases.
    """
    dtype = jnp.result_type(x)
    x = jnp.asarray(x, dtype)
    base = x if sign > 0 else 1 / x
    if rows_wanted(order):
        # Row by row (`known_rows`): order products, not log2(order) stacked ones.
        rows = [jnp.ones(jnp.shape(x), dtype)]
        if order > 0:
            rows.append(base)
        while len(rows) < order + 1:
            n = len(rows)
            top = rows[n - 1] * base  # x^n
            rows += [top] + [r * top for r in rows[1 : order + 1 - n]]
        return stack_rows_as(rows, jnp.shape(x), dtype)
    out = lax.concatenate([jnp.ones((1,) + jnp.shape(x), dtype), base[None]], 0)
    while out.shape[0] < order + 1:
        n = out.shape[0]
        top = out[n - 1] * base  # x^n
        out = lax.concatenate([out, out[: order + 1 - n] * top[None]], 0)
    return out


def _finite_real(p) -> float | int | None:
    """`p` as a Python number when it is a concrete, real, finite scalar, else None."""
    value = concrete_scalar(p)
    if value is None or isinstance(value, complex) or not math.isfinite(value):
        return None
    return value


def _integer_valued(p) -> int | None:
    """`p` as a Python int when it is a concrete, real, integer-valued scalar, else None."""
    value = _finite_real(p)
    return None if value is None or value != int(value) else int(value)


def integer_exponent_powers(x0: Array, p: int, order: int) -> Array:
    """`x0^(p-m)` for m = 0..order and an integer `p`, by products (no `pow`).

    Negative exponents divide once (`1/x0`), so `x0 = 0` gives the same infinities
    `pow` gives there.
    """
    dtype = jnp.result_type(x0)
    x0 = jnp.asarray(x0, dtype)
    if rows_wanted(order):
        # Row by row (`known_rows`, as `powers` gives them).
        if p >= 0:
            top = min(p, order)
            scale = lax.integer_pow(x0, p - top) if p > top else None
            rows = known_rows(powers(x0, top))[::-1]  # x0^(top-m)
            if scale is not None:
                rows = [r * scale for r in rows]
            if order > p:
                rows += known_rows(powers(x0, order - p, sign=-1))[1:]  # x0^-1, x0^-2, ...
        else:
            scale = lax.integer_pow(x0, p)
            rows = [r * scale for r in known_rows(powers(x0, order, sign=-1))]
        return stack_rows_as(rows, jnp.shape(x0), dtype)
    parts = []
    if p >= 0:
        top = min(p, order)
        scale = lax.integer_pow(x0, p - top) if p > top else None
        falling = lax.rev(powers(x0, top), (0,))  # x0^(top-m)
        parts.append(falling if scale is None else falling * scale[None])
        if order > p:
            parts.append(powers(x0, order - p, sign=-1)[1:])  # x0^-1, x0^-2, ...
    else:
        parts.append(powers(x0, order, sign=-1) * lax.integer_pow(x0, p)[None])
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, 0)


def _real_non_integer(p) -> float | None:
    """`p` as a Python float when it is a concrete, real, finite, non-integer scalar."""
    value = _finite_real(p)
    return None if value is None or value == int(value) else float(value)


def real_exponent_powers(x0: Array, p: float, order: int) -> Array:
    """`x0^(p-m)` for m = 0..order, a real floating `x0` and a real non-integer `p` known as
    a number: one `pow`, then products, stacked with its rows known.

    The anchor `x0^q`, `q = p - m*` with `m*` the order nearest `p` (clipped to
    0..order), has the exponent nearest 0 in the table: for a finite nonzero `x0` it
    stays in range (`|q| <= 1/2`, or every other exponent is further from 0 on the same
    side). The other rows step away from it by `x0` and by `1 / x0`, each step a value of
    the table, so a row overflows or underflows where `pow`'s does and agrees with it to
    about `|m - m*|` roundings. Where `x0` is 0 or infinite, `pow`'s values there (0 or
    infinity, by the sign of `p - m`) are selected; a negative `x0` gives NaN, as `pow`
    does for a non-integer exponent. With a `pow` per row, `x ** 2.5` along a line at
    K = 8 took 3.3 ms, with this table 0.53 ms (docs/EMISSION.md, "Real exponents").
    """
    dtype = jnp.result_type(x0)
    x0 = jnp.asarray(x0, dtype)
    anchor_order = min(max(round(p), 0), order)
    rows: list = [None] * (order + 1)
    # Computed once: the kernel that writes a pass's output computes what fuses into it
    # once per coefficient, and there the anchor was nine `pow`s again (K = 8).
    anchor = half_integer_power(x0, p - anchor_order)
    if anchor is None:
        anchor = lax.pow(x0, jnp.asarray(p - anchor_order, dtype))
    rows[anchor_order] = computed_once(anchor, opaque_one(x0))
    for m in range(anchor_order - 1, -1, -1):
        rows[m] = rows[m + 1] * x0
    if anchor_order < order:
        reciprocal = 1 / x0
        for m in range(anchor_order + 1, order + 1):
            rows[m] = rows[m - 1] * reciprocal
    # A subnormal `x0` is 0 here where XLA flushes it, as it is to `pow` there.
    zero, infinite = x0 == 0, jnp.isinf(x0)
    inf = jnp.asarray(jnp.inf, dtype)
    out = []
    for m, row in enumerate(rows):
        # pow(+-0, y) is 0 for y > 0 and inf for y < 0; pow(+-inf, y) the reverse (y is
        # never an integer here).
        at_zero, at_inf = (0.0, inf) if p - m > 0 else (inf, 0.0)
        out.append(jnp.where(zero, at_zero, jnp.where(infinite, at_inf, row)))
    return stack_rows_as(out, jnp.shape(x0), dtype)


def half_integer_power(x0: Array, q: float) -> Array | None:
    """`x0 ** q` for `q = +-1/2, +-3/2, +-5/2` by a square root and products (and a
    reciprocal), else None. XLA:CPU computes `pow` by a scalar call of libm, 58 us over
    4,096 float64 values where `1 / (x sqrt(x))` takes 7.6 us (docs/EMISSION.md,
    "Half-integer exponents"). Within 2-3 ulp of the exact power, as `pow` is within 1;
    NaN for a negative `x0` as `pow`. At -0 the root gives -0 where `pow` gives +0, and at
    -inf NaN: callers select those (`real_exponent_powers`) or keep to exponents where
    they agree (`taylax.ode._half_powers`)."""
    n = abs(q) - 0.5
    if n != int(n) or n > 2:
        return None
    value = lax.sqrt(x0)
    for _ in range(int(n)):
        value = value * x0
    return 1 / value if q < 0 else value


def _integer_binomial(p: int, m: int) -> int:
    """`binom(p, m)` for an integer `p` of either sign, exactly."""
    if p >= 0:
        return math.comb(p, m)
    return (-1) ** m * math.comb(m - p - 1, m)


def times_number(row: Array, factor) -> Array:
    """`row * factor` for a Python or NumPy number, in the row's dtype; a factor of
    exactly 1 is skipped (no equation)."""
    if factor == 1:
        return row
    return row * jnp.asarray(factor, jnp.result_type(row))


def exp_like_power_coeffs(p, x0: Array, order: int) -> Array:
    """`binom(p, m) x0^(p-m)` for m = 0..order, the way nested jvp computes it.

    Nested `jvp` of `pow(x, p)` multiplies `p (p-1) ... (p-m+1)` into
    `pow(x, p-m)`; we do the same so that `x**2.0` at 0 gives the same
    zeros and nans.
    """
    dtype = jnp.result_type(x0)
    shape = jnp.broadcast_shapes(jnp.shape(x0), jnp.shape(p))
    integer_p = _integer_valued(p)
    if integer_p is not None:
        # Products instead of one `pow` per coefficient: the same values up to rounding,
        # an order of magnitude cheaper to run. Row by row where `integer_exponent_powers`
        # gives rows (`known_rows`), each times its binomial as a number.
        x0 = jnp.broadcast_to(jnp.asarray(x0, dtype), shape)
        falling = integer_exponent_powers(x0, integer_p, order)
        rows = known_rows(falling)
        if rows is None:
            return binomials(p, order, shape, dtype) * falling
        rows = [times_number(r, float(_integer_binomial(integer_p, m))) for m, r in enumerate(rows)]
        return stack_rows_as(rows, shape, dtype)
    real_p = _real_non_integer(p)
    if real_p is not None and jnp.issubdtype(dtype, np.floating):
        # One `pow` and products instead of one `pow` per coefficient.
        x0 = jnp.broadcast_to(jnp.asarray(x0, dtype), shape)
        rows = known_rows(real_exponent_powers(x0, real_p, order))
        binom = binomial_numbers(real_p, order)
        return stack_rows_as([times_number(r, b) for r, b in zip(rows, binom)], shape, dtype)
    binom = binomials(p, order, shape, dtype)
    steps = jnp.broadcast_to(jnp.asarray(p, dtype), shape)[None] - orders(order, len(shape), dtype)
    base = jnp.broadcast_to(x0, steps.shape).astype(dtype)
    return binom * lax.pow(base, steps)
