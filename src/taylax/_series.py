"""The stacked series type and the Taylor arithmetic kernels.

A value `x(s) = x_0 + x_1 s + ... + x_K s^K` of shape `S` is ONE array of
shape `(d+1, *S)` with `d <= K`: index 0 is the primal, the coefficients are
normalized (`x_k = x^(k)(0) / k!`) and every coefficient above `d` is known to
be zero. Constants have `d = 0` (and are stored unstacked), a seed `x + s v`
has `d = 1`; products add degrees. This static knowledge is what makes
constants and seeds cost nothing extra.

The kernels below work on stacked arrays. None of them unrolls over the order:
products are one gather and one contraction, and the recurrences that define
nonlinear functions run as one `lax.fori_loop` over `k`, so the number of
equations emitted does not grow with `K`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


class Series:
    """Truncated Taylor series of one array value.

    Holds either the stacked coefficients `(d+1, *shape)` or, for a constant,
    just the primal; each form is derived from the other on demand (and then
    cached) so that constants never emit stacking equations unless a rule needs
    them stacked.
    """

    __slots__ = ("_coeffs", "_primal")

    def __init__(self, coeffs: Array | None = None, *, primal: Array | None = None):
        if coeffs is None and primal is None:
            raise ValueError("Internal error: a Series needs coefficients or a primal.")
        self._coeffs = coeffs
        self._primal = primal

    @classmethod
    def constant(cls, x) -> Series:
        return cls(primal=x)

    @property
    def degree(self) -> int:
        return 0 if self._coeffs is None else self._coeffs.shape[0] - 1

    @property
    def is_constant(self) -> bool:
        return self.degree == 0

    @property
    def primal(self) -> Array:
        if self._primal is None:
            self._primal = lax.index_in_dim(self._coeffs, 0, keepdims=False)
        return self._primal

    @property
    def coeffs(self) -> Array:
        if self._coeffs is None:
            self._coeffs = jnp.asarray(self._primal)[None]
        return self._coeffs

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self._primal if self._coeffs is None else self._coeffs[0]))

    @property
    def dtype(self):
        src = self._primal if self._coeffs is None else self._coeffs
        return jnp.result_type(src)

    def __repr__(self) -> str:
        return f"Series(degree={self.degree}, shape={self.shape}, dtype={self.dtype})"


# --------------------------------------------------------------------------
# Shape helpers
# --------------------------------------------------------------------------


def degree_of(c: Array) -> int:
    return c.shape[0] - 1


def pad_degree(c: Array, degree: int) -> Array:
    """Pad with known-zero coefficients (or truncate) to exactly `degree`."""
    extra = degree - degree_of(c)
    if extra == 0:
        return c
    config = [(0, extra, 0)] + [(0, 0, 0)] * (c.ndim - 1)
    return lax.pad(c, jnp.zeros((), c.dtype), config)


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
    real = np.finfo(jnp.dtype(dtype)).dtype if jnp.issubdtype(dtype, np.inexact) else dtype
    return np.arange(degree + 1, dtype=real).reshape((degree + 1,) + (1,) * ndim)


def real_dtype(dtype):
    return jnp.finfo(dtype).dtype


def factorials(degree: int, ndim: int, dtype) -> np.ndarray:
    values = np.array([float(math.factorial(k)) for k in range(degree + 1)])
    return values.astype(real_dtype(dtype)).reshape((degree + 1,) + (1,) * ndim)


def zeros_series(shape, dtype, degree: int) -> Array:
    return jnp.zeros((degree + 1,) + tuple(shape), dtype)


def with_primal(c: Array, primal: Array) -> Array:
    """Replace coefficient 0 (the primal) of a stacked series."""
    return lax.dynamic_update_index_in_dim(c, primal.astype(c.dtype), 0, 0)


def stack_primal(primal: Array, rest: Array) -> Array:
    """Stack a primal in front of coefficients 1..d."""
    return lax.concatenate([jnp.asarray(primal, rest.dtype)[None], rest], 0)


# --------------------------------------------------------------------------
# Products
# --------------------------------------------------------------------------


def toeplitz(b: Array, rows: int, cols: int) -> Array:
    """`T[k, i] = b_{k-i}` (zero outside `0 <= k-i <= deg b`), shape `(rows, cols, *S)`."""
    db = degree_of(b)
    k = np.arange(rows)[:, None]
    i = np.arange(cols)[None, :]
    diff = k - i
    index = np.where((diff >= 0) & (diff <= db), diff + 1, 0).astype(np.int32)
    padded = shift(b, 1, db + 1)  # row 0 is a zero row
    rest = padded.shape[1:]
    dnums = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(2, 2 + len(rest))),
        collapsed_slice_dims=(0,),
        start_index_map=(0,),
    )
    return lax.gather(
        padded,
        index[..., None],
        dnums,
        slice_sizes=(1,) + tuple(rest),
        mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )


def cauchy(a: Array, b: Array, order: int) -> Array:
    """Elementwise product of two stacked series, truncated at `order`.

    `c_k = sum_{i} a_i b_{k-i}`. Scalar series broadcast like lax does.
    """
    ndim = max(a.ndim, b.ndim) - 1
    a, b = lift(a, ndim), lift(b, ndim)
    da, db = degree_of(a), degree_of(b)
    degree = min(da + db, order)
    if da > db:
        a, b, da, db = b, a, db, da
    if da == 0:
        return pad_degree(a * b, degree) if db > degree else a * b
    if da <= 2:
        # Low-degree factors (seeds, squares of seeds): a few shifted products.
        out = None
        for i in range(da + 1):
            if i > degree:
                break
            term = lax.index_in_dim(a, i, keepdims=True) * shift(b, i, degree)
            out = term if out is None else out + term
        return out
    table = toeplitz(b, degree + 1, da + 1)  # (degree+1, da+1, *S)
    a = a[: degree + 1] if da > degree else a
    return jnp.sum(a[None] * table[:, : a.shape[0]], axis=1)


def cauchy_bilinear(op: Callable[[Array, Array], Array], a: Array, b: Array, order: int) -> Array:
    """Cauchy product for any bilinear `op` (matmul, convolution, ...)."""
    da, db = degree_of(a), degree_of(b)
    degree = min(da + db, order)
    if da == 0:
        return jax.vmap(lambda bk: op(a[0], bk))(b[: degree + 1])
    if db == 0:
        return jax.vmap(lambda ak: op(ak, b[0]))(a[: degree + 1])
    a = a[: degree + 1]
    table = toeplitz(b, degree + 1, a.shape[0])

    def row(t_k):
        return jnp.sum(jax.vmap(op)(a, t_k), axis=0)

    return jax.vmap(row)(table)


def derivative_series(c: Array) -> Array:
    """Series of `dx/ds`: `(x')_m = (m+1) x_{m+1}`, degree one lower."""
    d = degree_of(c)
    if d == 0:
        return jnp.zeros_like(c)
    return c[1:] * orders(d, c.ndim - 1, c.dtype)[1:]


def integrate(g: Array, y0: Array, degree: int) -> Array:
    """Series `y` with `y_0 = y0` and `y' = g`: `y_k = g_{k-1} / k`."""
    g = pad_degree(g, degree - 1)
    rest = g / orders(degree, g.ndim - 1, g.dtype)[1:]
    return stack_primal(y0, rest)


# --------------------------------------------------------------------------
# Recurrences: one fori_loop over k, constant program size in the order
# --------------------------------------------------------------------------


def reversed_window_source(u: Array, order: int) -> Array:
    """`u` reversed and zero-padded so `window` can read `u_{m-j}` for j = 0..order."""
    pad = [(0, order + 1, 0)] + [(0, 0, 0)] * (u.ndim - 1)
    return lax.pad(lax.rev(u, (0,)), jnp.zeros((), u.dtype), pad)


def window(source: Array, length: int, m, order: int) -> Array:
    """`w_j = u_{m-j}` for j = 0..order (zero where `m-j` is out of range).

    `source` comes from `reversed_window_source(u, order)` and `length` is
    `u.shape[0]`.
    """
    return lax.dynamic_slice_in_dim(source, length - 1 - m, order + 1, axis=0)


def conv_at(source: Array, length: int, y: Array, m, order: int):
    """`sum_j u_{m-j} y_j`: coefficient `m` of the product `u * y`."""
    return jnp.sum(window(source, length, m, order) * y, axis=0)


def self_conv_at(y: Array, m, order: int):
    """Coefficient `m` of `y * y` for a carry `y` that is still being filled."""
    return conv_at(reversed_window_source(y, order), order + 1, y, m, order)


def set_coeff(c: Array, value, k) -> Array:
    return lax.dynamic_update_index_in_dim(c, value.astype(c.dtype), k, 0)


def get_coeff(c: Array, k) -> Array:
    return lax.dynamic_index_in_dim(c, k, 0, keepdims=False)


def _as(k, dtype):
    return lax.convert_element_type(k, real_dtype(dtype))


def fori(order: int, body, init):
    """Run `body(k, carry)` for k = 1..order (a scan: reverse-mode differentiable)."""
    if order < 1:
        return init
    return lax.fori_loop(1, order + 1, body, init)


def _fresh(primal: Array, order: int, dtype) -> Array:
    out = jnp.zeros((order + 1,) + jnp.shape(primal), dtype)
    return set_coeff(out, jnp.asarray(primal), 0)


def linear_ode(x: Array, y0s: Sequence[Array], matrix, order: int) -> list[Array]:
    """Solve `Y' = x' * (M Y)` for a small constant matrix `M` (exp, sin/cos, sinh/cosh).

    `y_k = (1/k) sum_j M (x' * y)_{k-1}`.
    """
    x = pad_degree(x, order)
    dtype = jnp.result_type(x, *y0s)
    u = derivative_series(x).astype(dtype)
    source = reversed_window_source(u, order)
    ys = [_fresh(y0, order, dtype) for y0 in y0s]

    def body(k, ys):
        convs = [conv_at(source, order, y, k - 1, order) for y in ys]
        kk = _as(k, dtype)
        new = []
        for i, y in enumerate(ys):
            total = None
            for j, conv in enumerate(convs):
                if matrix[i][j] == 0:
                    continue
                term = conv if matrix[i][j] == 1 else matrix[i][j] * conv
                total = term if total is None else total + term
            new.append(set_coeff(y, total / kk, k))
        return new

    return fori(order, body, ys)


def riccati(x: Array, y0: Array, c0, c1, c2, order: int) -> Array:
    """Solve `y' = x' (c0 + c1 y + c2 y^2)` (tanh, tan, logistic)."""
    x = pad_degree(x, order)
    dtype = jnp.result_type(x, y0)
    u = derivative_series(x).astype(dtype)
    source = reversed_window_source(u, order)
    y = _fresh(y0, order, dtype)
    p = _fresh(c0 + c1 * y0 + c2 * y0 * y0, order, dtype)

    def body(k, carry):
        y, p = carry
        y_k = conv_at(source, order, p, k - 1, order) / _as(k, dtype)
        y = set_coeff(y, y_k, k)
        p_k = c2 * self_conv_at(y, k, order)
        if c1 != 0:
            p_k = p_k + c1 * y_k
        return y, set_coeff(p, p_k, k)

    return fori(order, body, (y, p))[0]


def divide(a: Array, b: Array, order: int, q0: Array | None = None) -> Array:
    """`q = a / b`: `q_k = (a_k - sum_{j<k} b_{k-j} q_j) / b_0`."""
    if degree_of(b) == 0:
        out = a / b
        return out if q0 is None else with_primal(out, q0)
    ndim = max(a.ndim, b.ndim) - 1
    a, b = lift(a, ndim), lift(b, ndim)
    shape = jnp.broadcast_shapes(a.shape[1:], b.shape[1:])
    dtype = jnp.result_type(a, b)
    a = jnp.broadcast_to(pad_degree(a, order), (order + 1,) + shape).astype(dtype)
    b = jnp.broadcast_to(pad_degree(b, order), (order + 1,) + shape).astype(dtype)
    b0 = b[0]
    q = _fresh(a[0] / b0 if q0 is None else q0, order, dtype)
    source = reversed_window_source(b, order)

    def body(k, q):
        return set_coeff(q, (get_coeff(a, k) - conv_at(source, order + 1, q, k, order)) / b0, k)

    return fori(order, body, q)


def sqrt(x: Array, y0: Array, order: int) -> Array:
    """`y = sqrt(x)`: `y_k = (x_k - sum_{0<i<k} y_i y_{k-i}) / (2 y_0)`."""
    x = pad_degree(x, order)
    y = _fresh(y0, order, x.dtype)
    two_y0 = 2 * y0

    def body(k, y):
        return set_coeff(y, (get_coeff(x, k) - self_conv_at(y, k, order)) / two_y0, k)

    return fori(order, body, y)


def power(x: Array, p, y0: Array, order: int) -> Array:
    """`y = x ** p` for an exponent `p` without a series, by the recurrence

    `k x_0 y_k = p sum_j (k-j) x_{k-j} y_j - sum_j j x_{k-j} y_j`.
    Divides by `x_0`: callers handle `x_0 = 0` separately (see `compose`).
    """
    x = pad_degree(x, order)
    dtype = jnp.result_type(x, y0)
    ndim = x.ndim - 1
    ks = orders(order, ndim, dtype)
    jx_source = reversed_window_source((ks * x).astype(dtype), order)
    x_source = reversed_window_source(x.astype(dtype), order)
    x0 = x[0]
    y = _fresh(y0, order, dtype)

    def body(k, y):
        a = conv_at(jx_source, order + 1, y, k, order)
        b = conv_at(x_source, order + 1, ks * y, k, order)
        return set_coeff(y, (p * a - b) / (_as(k, dtype) * x0), k)

    return fori(order, body, y)


def compose(x: Array, taylor_coeffs: Array, order: int) -> Array:
    """`y = sum_m d_m (x - x_0)^m` (Faa di Bruno by Horner's rule).

    `taylor_coeffs[m] = f^(m)(x_0) / m!`, stacked `(order+1, *S)`. Exact where
    the recurrences would divide by zero; O(order^3) so used only there.
    """
    x = pad_degree(x, order)
    dtype = jnp.result_type(x, taylor_coeffs)
    delta = with_primal(x, jnp.zeros_like(x[0])).astype(dtype)
    table = toeplitz(delta, order + 1, order + 1)
    d = jnp.broadcast_to(taylor_coeffs, (order + 1,) + x.shape[1:]).astype(dtype)
    acc = _fresh(get_coeff(d, order), order, dtype)

    def body(i, acc):
        m = order - i
        product = jnp.sum(table * acc[None], axis=1)
        return product.at[0].add(get_coeff(d, m))

    return fori(order, body, acc)


def exp_like_power_coeffs(p, x0: Array, order: int) -> Array:
    """`binom(p, m) x0^(p-m)` for m = 0..order, the way nested jvp computes it.

    Nested `jvp` of `pow(x, p)` multiplies `p (p-1) ... (p-m+1)` into
    `pow(x, p-m)`; we do the same so that `x**2.0` at 0 gives the same
    zeros and nans.
    """
    ndim = jnp.ndim(x0)
    dtype = jnp.result_type(x0)
    ms = orders(order, ndim, dtype)
    p = jnp.asarray(p, dtype)
    falling = jnp.cumprod(jnp.concatenate([jnp.ones((1,) + jnp.shape(p), dtype), (p - ms)[:-1]]), 0)
    return falling / factorials(order, ndim, dtype) * lax.pow(x0, p - ms)
