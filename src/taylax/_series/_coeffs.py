"""Stacked coefficient arrays: degrees, padding, shifts, exact factorial scales, and
the indexed reads and writes that loops over coefficients use.

A value `x(s) = x_0 + x_1 s + ... + x_K s^K` of shape `S` is ONE array of shape
`(d+1, *S)` with `d <= K`: index 0 is the primal, the coefficients are normalized
(`x_k = x^(k)(0) / k!`) and every coefficient above `d` is known to be zero.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


def degree_of(c: Array) -> int:
    return c.shape[0] - 1


def pad_degree(c: Array, degree: int) -> Array:
    """Pad with known-zero coefficients (or truncate) to exactly `degree`."""
    extra = degree - degree_of(c)
    if extra == 0:
        return c
    config = [(0, extra, 0)] + [(0, 0, 0)] * (c.ndim - 1)
    return lax.pad(c, jnp.zeros((), c.dtype), config)


def pad_degree_low(c: Array) -> Array:
    """Prepend one zero coefficient: `r_0 = 0`, `r_k = c_{k-1}`."""
    return shift(c, 1, degree_of(c) + 1)


def shift(c: Array, by: int, degree: int) -> Array:
    """Multiply by `s**by` and truncate to `degree`: `r_k = c_{k-by}`."""
    high = degree - by - degree_of(c)
    config = [(by, high, 0)] + [(0, 0, 0)] * (c.ndim - 1)
    return lax.pad(c, jnp.zeros((), c.dtype), config)


def lift(c: Array, ndim: int) -> Array:
    """Give a stacked scalar series trailing unit axes so it broadcasts like a scalar."""
    missing = ndim - (c.ndim - 1)
    if missing <= 0:
        return c
    return lax.broadcast_in_dim(c, c.shape[:1] + (1,) * missing, (0,))


def orders(degree: int, ndim: int, dtype) -> np.ndarray:
    """`[0, 1, ..., degree]` shaped to broadcast against a stacked array."""
    real = real_dtype(dtype) if jnp.issubdtype(dtype, np.inexact) else dtype
    return np.arange(degree + 1, dtype=real).reshape((degree + 1,) + (1,) * ndim)


def real_dtype(dtype):
    return jnp.finfo(dtype).dtype


def factorials(degree: int, ndim: int, dtype) -> np.ndarray:
    """`k!` for k = 0..degree in `dtype`'s real type (inf past its range, never an error)."""
    values = np.array([float(math.factorial(k)) if k <= 170 else np.inf for k in range(degree + 1)])
    with np.errstate(over="ignore"):
        return values.astype(real_dtype(dtype)).reshape((degree + 1,) + (1,) * ndim)


def exact_float(q: Fraction) -> float:
    """`q` correctly rounded to float64: `inf` (signed) above its range, 0 below it."""
    try:
        return float(q)
    except OverflowError:
        return math.copysign(math.inf, q)


def inverse_factorials(degree: int, ndim: int, dtype, scale: float = 1.0) -> np.ndarray:
    """`scale^k / k!` for k = 0..degree in `dtype`'s real type, each from the exact
    rational: 0 only where the value is below the dtype's range (`1/34!` in float32 is,
    `32^34 / 34!` is not)."""
    base = Fraction(scale)
    values = np.array([exact_float(base**k / math.factorial(k)) for k in range(degree + 1)])
    with np.errstate(over="ignore", under="ignore"):
        return values.astype(real_dtype(dtype)).reshape((degree + 1,) + (1,) * ndim)


def derivative_scale(order: int, dtype) -> float:
    """The factor `h` by which a pass for derivatives up to `order` stretches its line.

    Derivatives `f^(k) = k! y_k` come from normalized coefficients `y_k = f^(k)/k!`, which
    leave a narrow dtype long before the derivatives do: `1/34!` is below float32's range
    and `35!` above it, so `exp`'s 35th derivative (1.35) would read as `0 * inf`. Along
    `x + h s v` the coefficients are `f^(k) h^k / k!` instead. With `h = (K!)^(1/K)` (the
    geometric mean of 1..K) the top one equals the derivative and the others are within
    `h^k / k! <= e^h` of theirs, so they are representable wherever the derivatives are
    (up to that factor, which is why `h` is capped at `0.9 log(max)`: float16 10,
    float32 80, float64 638).

    1 (no scaling) while `K!` is far inside the dtype's range, so low orders are
    untouched. Raises nothing; `scale_shortfall` says when the cap costs range.
    """
    if order <= 1 or not jnp.issubdtype(dtype, np.inexact):
        return 1.0
    log_max = math.log(float(jnp.finfo(dtype).max))
    log_factorial = math.lgamma(order + 1)
    if log_factorial <= log_max / 4:
        return 1.0
    return float(min(math.exp(log_factorial / order), 0.9 * log_max))


def scale_shortfall(order: int, dtype) -> float:
    """`log(K! / h^K)` for `h = derivative_scale(order, dtype)`: how far below the
    order-K derivative its coefficient lies (0 unless the cap on `h` binds). Past half
    the dtype's log range, derivatives of entire functions (exp, sin) at the top orders
    underflow to 0 although they are representable."""
    h = derivative_scale(order, dtype)
    return max(math.lgamma(order + 1) - order * math.log(h), 0.0)


def check_order_for_dtype(order: int, dtype, api: str) -> None:
    """Raise when no line scale keeps an order-`order` pass in `dtype`'s range (see
    `scale_shortfall`): float16 past order 29, float32 and bfloat16 past 254, float64
    past 2058."""
    if not jnp.issubdtype(dtype, np.inexact):
        return
    half_range = math.log(float(jnp.finfo(dtype).max)) / 2
    if scale_shortfall(order, dtype) > half_range:
        limit = order
        while limit > 1 and scale_shortfall(limit, dtype) > half_range:
            limit -= 1
        name = jnp.dtype(dtype).name
        raise ValueError(
            f"{api}: order {order} is past what one Taylor pass can carry in {name} "
            f"(up to order {limit}): the derivatives of functions such as exp would "
            f"underflow to 0 although they are representable. Use float64 inputs (with "
            f"jax.config.update('jax_enable_x64', True)) or an order of at most {limit}."
        )


def _frexp(q: Fraction) -> tuple[float, int]:
    """`q = m 2^e` with `|m|` in [1, 2) rounded to float64 (`m = 0` for 0), exactly."""
    if q == 0:
        return 0.0, 0
    e = abs(q.numerator).bit_length() - q.denominator.bit_length()
    m = q / Fraction(2) ** e
    if abs(m) < 1:
        m, e = m * 2, e - 1
    return float(m), e


def times_exact(d: Array, factors) -> Array:
    """`d_k * factors_k` along the leading axis (or `d * factors` for one factor), for
    exact rational factors that may lie far outside the dtype's range.

    Each factor is applied as its mantissa (correctly rounded) and then powers of two
    within the dtype's exponent range, so no step overflows or underflows unless the
    result does: each partial product lies between `d_k` and the result (`2^400 / 100!`
    times a float32 value is fine although neither factor is).
    """
    single = isinstance(factors, Fraction | int)
    parts = [_frexp(Fraction(f)) for f in ([factors] if single else factors)]
    shape = () if single else (len(parts),) + (1,) * (d.ndim - 1)
    dtype = real_dtype(jnp.result_type(d))
    mantissas = np.array([m for m, _ in parts]).reshape(shape)
    exponents = np.array([e for _, e in parts], np.int64).reshape(shape)
    out = d * jnp.asarray(mantissas, dtype)
    limit = int(jnp.finfo(dtype).maxexp) - 2
    first = True
    while np.any(exponents):
        step = np.clip(exponents, -limit, limit)
        if not first:
            # XLA reassociates `(x c1) c2` into `x (c1 c2)`, out of range here.
            out = lax.optimization_barrier(out)
        out = out * jnp.asarray(np.exp2(step), dtype)
        exponents = exponents - step
        first = False
    return out


def times_powers(d: Array, scale) -> Array:
    """`d_k scale^k` along the leading axis, for a concrete scalar `scale`, without
    forming `scale^k` (see `times_exact`)."""
    if isinstance(scale, complex) or not math.isfinite(scale):
        values = np.asarray([scale**k for k in range(d.shape[0])])
        return d * jnp.asarray(values.reshape((-1,) + (1,) * (d.ndim - 1)), jnp.result_type(d))
    base = Fraction(scale)
    return times_exact(d, [base**k for k in range(d.shape[0])])


def binomial_numbers(p, order: int) -> np.ndarray:
    """`binom(p, m)` for m = 0..order (the leading axis) and a concrete `p` (a number or a
    NumPy array), as the running product of `(p - j) / (j + 1)` in NumPy (`binomials`)."""
    p = np.asarray(p)
    js = np.arange(order).reshape((order,) + (1,) * p.ndim)
    return np.cumprod(np.concatenate([np.ones((1,) + p.shape), (p[None] - js) / (js + 1)]), 0)


def binomials(p, order: int, shape, dtype) -> Array:
    """`binom(p, m)` for m = 0..order as a product of ratios `(p - j) / (j + 1)`: the
    falling factorial over `m!` would overflow both (float32 past m = 34) for a value
    that is at most of the size of `p^m`. Computed in float64 when `p` is concrete."""
    try:
        concrete = np.asarray(p, dtype=np.result_type(np.float64, dtype))
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        concrete = None  # a tracer: compute it in the program
    if concrete is not None:
        out = binomial_numbers(concrete, order)
        out = out.reshape((order + 1,) + (1,) * (len(shape) - concrete.ndim) + concrete.shape)
        return jnp.broadcast_to(jnp.asarray(out, dtype), (order + 1,) + tuple(shape))
    js = np.arange(order, dtype=real_dtype(dtype)).reshape((order,) + (1,) * len(shape))
    p = jnp.broadcast_to(jnp.asarray(p, dtype), shape)
    ratios = (p[None] - js) / (js + 1)
    return jnp.cumprod(jnp.concatenate([jnp.ones((1,) + tuple(shape), dtype), ratios]), 0)


def zeros_series(shape, dtype, degree: int) -> Array:
    return jnp.zeros((degree + 1,) + tuple(shape), dtype)


def derivative_stack(c: Array) -> Array:
    """Series of `dx/ds`: `(x')_m = (m+1) x_{m+1}`, degree one lower, as one stacked
    product (`taylax._series.derivative_series` keeps known rows)."""
    d = degree_of(c)
    if d == 0:
        return jnp.zeros_like(c)
    return c[1:] * orders(d, c.ndim - 1, c.dtype)[1:]


def row_start(x: Array, k) -> list:
    return [k] + [0] * (x.ndim - 1)


def set_coeff(c: Array, value, k) -> Array:
    """`c[k] = value` (k may be traced; it is known to be in range, so no index fix-up)."""
    value = jnp.asarray(value, c.dtype)
    if value.ndim < c.ndim:
        value = lax.broadcast_in_dim(value, (1,) + c.shape[1:], tuple(range(1, c.ndim)))
    return lax.dynamic_update_slice(c, value, row_start(c, k), allow_negative_indices=False)


def get_coeff(c: Array, k, keepdims: bool = False) -> Array:
    """`c[k]` for a possibly traced, in-range `k`."""
    out = lax.dynamic_slice(c, row_start(c, k), (1,) + c.shape[1:], allow_negative_indices=False)
    return out if keepdims else lax.squeeze(out, (0,))


def slice_rows(c: Array, start, size: int) -> Array:
    return lax.dynamic_slice(
        c, row_start(c, start), (size,) + c.shape[1:], allow_negative_indices=False
    )


def as_real(k, dtype):
    return lax.convert_element_type(k, real_dtype(dtype))


def fori(order: int, body, init):
    """Run `body(k, carry)` for k = 1..order (a scan: reverse-mode differentiable)."""
    if order < 1:
        return init
    return lax.fori_loop(1, order + 1, body, init)


def fresh(primal: Array, order: int, dtype) -> Array:
    """A series with coefficient 0 `primal` and the rest zero, stacked to `order`."""
    return pad_degree(jnp.asarray(primal, dtype)[None], order)


def forward_source(u: Array, order: int, offset: int) -> Array:
    """`u` zero-padded so `push_window(..., m)` reads `w_k = u_{k-m-offset}`, k = 0..order."""
    length = u.shape[0]
    tail = max(0, order + 1 - length)
    pad = [(order + 1, tail, 0)] + [(0, 0, 0)] * (u.ndim - 1)
    return lax.pad(u, jnp.zeros((), u.dtype), pad)


def push_window(source: Array, m, order: int, offset: int) -> Array:
    return slice_rows(source, order + 1 - m - offset, order + 1)


def reversed_window_source(u: Array, order: int) -> Array:
    """`u` reversed and zero-padded so `window` can read `u_{m-j}` for j = 0..order."""
    pad = [(0, order + 1, 0)] + [(0, 0, 0)] * (u.ndim - 1)
    return lax.pad(lax.rev(u, (0,)), jnp.zeros((), u.dtype), pad)


def conv_at(source: Array, length: int, y: Array, m, order: int):
    """`sum_j u_{m-j} y_j`: coefficient `m` of the product `u * y`."""
    w = slice_rows(source, length - 1 - m, order + 1)
    return jnp.sum(w * y, axis=0)


def self_conv_at(y: Array, m, order: int):
    """Coefficient `m` of `y * y` for a carry `y` that is still being filled."""
    return conv_at(reversed_window_source(y, order), order + 1, y, m, order)
