"""The stacked series type and the Taylor arithmetic kernels.

A value `x(s) = x_0 + x_1 s + ... + x_K s^K` of shape `S` is ONE array of
shape `(d+1, *S)` with `d <= K`: index 0 is the primal, the coefficients are
normalized (`x_k = x^(k)(0) / k!`) and every coefficient above `d` is known to
be zero. Constants have `d = 0` (and are stored unstacked), a seed `x + s v`
has `d = 1`; products add degrees. This static knowledge is what makes
constants and seeds cost nothing extra.

The kernels below work on stacked arrays. Products are sums of row products at low
orders and shifted sums above (a few equations per coefficient of the lower-degree
factor). The recurrences that define nonlinear functions run unrolled at low orders
(and at higher ones where the known factor has a low degree: a few terms per
coefficient), and above as one `lax.fori_loop` over blocks of a few coefficients. Where
each form is taken is the emission policy's choice (`policy()`, `taylax._policy`), per
platform.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import operator
import weakref
from collections.abc import Callable, Sequence
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _once, _policy

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
            known = known_rows(self._coeffs)
            if known is not None:
                # Rules divide by primals (log, powers, quotients): see `shielded`.
                self._primal = shielded(known[0])
            else:
                self._primal = lax.index_in_dim(self._coeffs, 0, keepdims=False)
        return self._primal

    @property
    def coeffs(self) -> Array:
        if self._coeffs is None:
            self._coeffs = jnp.asarray(self._primal)[None]
        return self._coeffs

    @property
    def shape(self) -> tuple[int, ...]:
        # From the static shape: indexing a traced array would emit equations.
        if self._coeffs is None:
            return tuple(np.shape(self._primal))
        return tuple(self._coeffs.shape[1:])

    @property
    def dtype(self):
        src = self._primal if self._coeffs is None else self._coeffs
        return jnp.result_type(src)

    def __repr__(self) -> str:
        try:
            return f"Series(degree={self.degree}, shape={self.shape}, dtype={self.dtype})"
        except Exception:  # e.g. a leaked tracer: never fail inside an error message
            return "Series(<unavailable>)"


# --------------------------------------------------------------------------
# Shape helpers
# --------------------------------------------------------------------------


def opaque_one(source: Array) -> Array:
    """An array of ones shaped like `source` that XLA cannot fold to the constant 1.

    `1 + 0 [source == source]`: the comparison is false for nan, so XLA cannot assume
    it, and `0 y` is not folded for floats. Exactly 1 for every value of `source`.
    """
    dtype = jnp.result_type(source)
    real = real_dtype(dtype) if jnp.issubdtype(dtype, np.inexact) else jnp.float32
    same = lax.convert_element_type(source == source, real)
    return 1 + jnp.zeros((), real) * same


def computed_once(value: Array, one: Array) -> Array:
    """`value` unchanged, marked so that XLA computes it once instead of in every reader.

    XLA copies cheap elementwise producers (sin, cos, products and sums) into each kernel
    that reads them, and a Taylor kernel reads a coefficient once per later coefficient:
    the copies make it O(K^3). XLA does not copy an expensive producer such as a
    division, so `value / one` (with `one = opaque_one(...)`, exactly 1) is computed
    once into a buffer that the readers share. A reader that divides by it or into it
    must take it through `shielded`. Large values in passes of low order stay unmarked
    (`taylax._once`: decided when the program is lowered, from the batched shape), and
    so does every value of a pass that compiles into one kernel (`one_kernel_pass`).
    """
    if one_kernel_pass():
        return value
    one = one.astype(jnp.result_type(value))
    out = _once.mark(value, one, kind="once", pass_order=pass_order())
    _ONCE[id(out)] = out
    return out


# Outputs of `computed_once`, by id (an entry dies with its array).
_ONCE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def shielded(x: Array) -> Array:
    """`x` unchanged, as an operand of a division that keeps `computed_once` intact.

    XLA rewrites `(a / b) / c` into `a / (b c)` and `c / (a / b)` into `(c b) / a`,
    which moves a `computed_once` value's own computation (`a`) into the dividing
    kernel: `cos t / (2 + sin t)` computed cos twice, 1.3-1.4x slower at orders 2-8.
    A product with `opaque_one` (exactly 1) is not a division; it alone is copied into
    the reader (for complex values part by part: `inf * (1 + 0j)` has a nan part). Other
    values are returned as they are; where the value is lowered unmarked, so is this.
    """
    if _ONCE.get(id(x)) is not x:
        return x
    return _once.mark(x, opaque_one(x), kind="shield", pass_order=pass_order())


# The order of the Taylor pass being traced (`pass_order`), per thread and context.
_PASS_ORDER: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "taylax_pass_order", default=None
)


# Whether the pass being traced compiles into one kernel (`taylax._one_kernel`).
_ONE_KERNEL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "taylax_one_kernel", default=False
)


@contextlib.contextmanager
def taylor_pass(order: int, one_kernel: bool = False):
    """Mark the rules run inside as part of a Taylor pass of `order` (`pass_order`);
    `one_kernel`: the pass keeps no value in a buffer (`one_kernel_pass`)."""
    token = _PASS_ORDER.set(order)
    one_kernel_token = _ONE_KERNEL.set(one_kernel)
    try:
        yield
    finally:
        _ONE_KERNEL.reset(one_kernel_token)
        _PASS_ORDER.reset(token)


def one_kernel_pass() -> bool:
    """Whether the pass now being traced compiles into one kernel, with no value marked
    `computed_once` (`taylax._one_kernel.fits_one_kernel`)."""
    return _ONE_KERNEL.get()


def pass_order() -> int | None:
    """The order of the Taylor pass now being traced, or None outside one (`taylor_pass`)."""
    return _PASS_ORDER.get()


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


def binomials(p, order: int, shape, dtype) -> Array:
    """`binom(p, m)` for m = 0..order as a product of ratios `(p - j) / (j + 1)`: the
    falling factorial over `m!` would overflow both (float32 past m = 34) for a value
    that is at most of the size of `p^m`. Computed in float64 when `p` is concrete."""
    try:
        concrete = np.asarray(p, dtype=np.result_type(np.float64, dtype))
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        concrete = None  # a tracer: compute it in the program
    if concrete is not None:
        js = np.arange(order).reshape((order,) + (1,) * concrete.ndim)
        out = np.cumprod(
            np.concatenate([np.ones((1,) + concrete.shape), (concrete[None] - js) / (js + 1)]), 0
        )
        out = out.reshape((order + 1,) + (1,) * (len(shape) - concrete.ndim) + concrete.shape)
        return jnp.broadcast_to(jnp.asarray(out, dtype), (order + 1,) + tuple(shape))
    js = np.arange(order, dtype=real_dtype(dtype)).reshape((order,) + (1,) * len(shape))
    p = jnp.broadcast_to(jnp.asarray(p, dtype), shape)
    ratios = (p[None] - js) / (js + 1)
    return jnp.cumprod(jnp.concatenate([jnp.ones((1,) + tuple(shape), dtype), ratios]), 0)


def zeros_series(shape, dtype, degree: int) -> Array:
    return jnp.zeros((degree + 1,) + tuple(shape), dtype)


def with_primal(c: Array, primal: Array) -> Array:
    """Replace coefficient 0 (the primal) of a stacked series.

    A select against the coefficient index, not a `dynamic_update_slice`: it fuses
    into its consumers, and under `vmap` it does not become a scatter. A stack of known
    rows (`known_rows`) is restacked instead, so that its readers keep the rows.
    """
    known = known_rows(c)
    if known is not None:
        return _stack_rows([primal, *known[1:]], c.shape[1:], c.dtype)
    primal = lax.broadcast_in_dim(jnp.asarray(primal, c.dtype), c.shape, tuple(range(1, c.ndim)))
    first = lax.broadcasted_iota(np.int32, c.shape, 0) == 0
    return lax.select(first, primal, c)


def stack_primal(primal: Array, rest: Array) -> Array:
    """Stack a primal in front of coefficients 1..d (a pad and a select: fusable)."""
    return with_primal(pad_degree_low(rest), primal)


# --------------------------------------------------------------------------
# Products
# --------------------------------------------------------------------------


def toeplitz(b: Array, rows: int, cols: int) -> Array:
    """`T[k, i] = b_{k-i}` (zero outside `0 <= k-i <= deg b`), shape `(rows, cols, *S)`.

    Built by the skew trick, with reshapes and slices only (no gather): `cols` copies of
    `w` (`b` zero-padded to length `n`), flattened and cut to `cols * (n - 1)` elements,
    read back as `(cols, n - 1)`, hold `w[k - i]` in row `i`, column `k`.
    """
    db = degree_of(b)
    rest = b.shape[1:]
    n = max(rows, db + 1) + cols
    w = pad_degree(b, n - 1)  # (n, *S)
    copies = lax.broadcast_in_dim(w, (cols, n) + rest, tuple(range(1, 2 + len(rest))))
    flat = lax.reshape(copies, (cols * n,) + rest)[: cols * (n - 1)]
    skewed = lax.reshape(flat, (cols, n - 1) + rest)[:, :rows]
    return jnp.swapaxes(skewed, 0, 1)


def cauchy(a: Array, b: Array, order: int, by_rows: bool = False) -> Array:
    """Elementwise product of two stacked series, truncated at `order`.

    `c_k = sum_{i} a_i b_{k-i}`. Up to degree `product_rows_max_order(...)`, one sum of row
    products per coefficient, stacked: XLA fuses the rows with their producers into the
    kernel that writes `c`. Above it, a shifted sum `c = sum_i a_i * (s^i b)`, one
    broadcast product of a slice and a pad per coefficient of the lower-degree factor,
    which XLA fuses into one loop kernel that streams both operands once; under `vmap`
    it stays elementwise. Scalar series broadcast like lax does. The program grows
    linearly in the lower degree above the unrolled range (a few equations per
    coefficient).

    On XLA:CPU the row sums go on to `rows_max_order` for a product read one row at a
    time (`by_rows`) and for two factors with rows of their own (`has_separate_rows`).
    """
    ndim = max(a.ndim, b.ndim) - 1
    a, b = lift(a, ndim), lift(b, ndim)
    da, db = degree_of(a), degree_of(b)
    degree = min(da + db, order)
    if da > db:
        a, b, da, db = b, a, db, da
    if da == 0:
        known = known_rows(b)
        if known is not None and db <= degree:
            # A factor of degree 0 times known rows: known rows (see `known_rows`).
            a0 = lax.index_in_dim(a, 0, keepdims=False)
            shape = jnp.broadcast_shapes(a.shape[1:], b.shape[1:])
            return _stack_rows([a0 * r for r in known], shape, jnp.result_type(a, b))
        return pad_degree(a * b, degree) if db > degree else a * b
    separate = has_separate_rows(a) and has_separate_rows(b)
    if degree <= product_rows_max_order(by_rows or separate):
        # A padded operand under vmap is a (N, 2K+1) array whose pad XLA:CPU fuses with
        # its producer into a slow kernel, and the shifted slices of the coefficient axis
        # are the minor axis. Rows read the operands' coefficients directly. Rows against
        # the shifted sum at orders 2-8 (three elementwise chains, N = 4,096 to 1M, one
        # process): 0.57-0.95x; at order 12 0.42-1.1x, at 16 1.0-1.6x, hence the bound.
        shape = jnp.broadcast_shapes(a.shape[1:], b.shape[1:])
        return _stack_rows(cauchy_rows(a, b, degree), shape, jnp.result_type(a, b))
    if a.ndim == 1 and policy().scalar_products_as_dots:
        # Scalar series: one matrix-vector product with b's Toeplitz table. A dot is a
        # kernel of its own, which bounds the expressions XLA fuses in a large program.
        table = toeplitz(b, degree + 1, da + 1)
        return lax.dot_general(table, a, (((1,), (0,)), ((), ())))
    terms = min(da, degree) + 1
    return _shifted_sum(lambda i: lax.index_in_dim(a, i, keepdims=True), terms, b, degree)


def _shifted_sum(row: Callable[[int], Array], terms: int, c: Array, degree: int) -> Array:
    """`sum_{i < terms} row(i) (s^i c)` truncated at `degree`; `row(i)` has a leading
    unit axis. The shifts are slices of one zero-padded copy of `c`:
    `s^i c = padded[n-i : n-i+degree+1]`.

    Under `vmap` XLA:CPU writes that copy as an (N, 2K+1) buffer (the damped wave at
    K = 32 and 1M points: 180 of about 600 ms per call under the profiler). A pad of a
    slice per term instead ran no faster (36.2 against 33.3 ms at 65,536 points, 622
    against 601 ms at 1M).
    """
    n = terms - 1
    pads = [(n, max(0, degree - degree_of(c)), 0)] + [(0, 0, 0)] * (c.ndim - 1)
    padded = lax.pad(c, jnp.zeros((), c.dtype), pads)
    out = None
    for i in range(terms):
        term = row(i) * lax.slice_in_dim(padded, n - i, n - i + degree + 1)
        out = term if out is None else out + term
    return out


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
# Recurrences: loops over k, constant program size in the order
# --------------------------------------------------------------------------


def _starts(x: Array, k) -> list:
    return [k] + [0] * (x.ndim - 1)


def set_coeff(c: Array, value, k) -> Array:
    """`c[k] = value` (k may be traced; it is known to be in range, so no index fix-up)."""
    value = jnp.asarray(value, c.dtype)
    if value.ndim < c.ndim:
        value = lax.broadcast_in_dim(value, (1,) + c.shape[1:], tuple(range(1, c.ndim)))
    return lax.dynamic_update_slice(c, value, _starts(c, k), allow_negative_indices=False)


def get_coeff(c: Array, k, keepdims: bool = False) -> Array:
    """`c[k]` for a possibly traced, in-range `k`."""
    out = lax.dynamic_slice(c, _starts(c, k), (1,) + c.shape[1:], allow_negative_indices=False)
    return out if keepdims else lax.squeeze(out, (0,))


def slice_rows(c: Array, start, size: int) -> Array:
    return lax.dynamic_slice(
        c, _starts(c, start), (size,) + c.shape[1:], allow_negative_indices=False
    )


def _as(k, dtype):
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


# The recurrences below are written in "push" form: once coefficient m of the
# unknown is known, its contribution to every later coefficient is added to an
# accumulator with one fused elementwise update. The "pull" form (a dot over
# the known coefficients for each new one) reduces along the coefficient axis,
# which XLA:CPU runs an order of magnitude slower for arrays.


def policy():
    """The emission policy in force (`taylax._policy.current`): every choice below of rows
    or stacks, unrolled or looped, reads it; its measurements are in docs/EMISSION.md."""
    return _policy.current()


def product_rows_max_order(read_by_rows: bool = True) -> int:
    """Up to which order a product is a sum of row products (`cauchy`): the policy's
    `product_rows_max_order` for a product read row by row or whose two factors have
    rows of their own (`read_by_rows`), `stacked_product_rows_max_order` for the others.
    Past it, a shifted sum of stacks (a few equations per coefficient)."""
    p = policy()
    return p.product_rows_max_order if read_by_rows else p.stacked_product_rows_max_order


def unrolled(order: int, degree: int | None = None, separate_rows: bool = False) -> bool:
    """Whether a recurrence of `order` whose known factor has `degree` (and, with
    `separate_rows`, rows of its own: `has_separate_rows`) runs unrolled: up to the
    policy's `unroll_max_order` (`loop_unroll_max_order` in a loop body), up to
    `rows_max_order` for rows of their own, and up to
    `unroll_low_degree_max_order` where the factor's degree is at most
    `unroll_max_degree` (a coefficient then sums a few terms: linear in the order)."""
    p = policy()
    limit = p.loop_unroll_max_order if in_loop_body() else p.unroll_max_order
    if order <= limit or (separate_rows and order <= p.rows_max_order):
        return True
    low = degree is not None and degree <= p.unroll_max_degree
    return low and order <= p.unroll_low_degree_max_order


def _rows(c: Array, count: int) -> list[Array]:
    """The first `count` coefficients of a stacked array, as a list (None past its degree).

    The rows it was stacked from where they are known (`known_rows`), else slices."""
    known = known_rows(c)
    if known is not None:
        rows = list(known[:count])
    else:
        rows = [lax.index_in_dim(c, k, keepdims=False) for k in range(min(count, c.shape[0]))]
    return rows + [None] * (count - len(rows))


def row(c: Array, k: int) -> Array | None:
    """Coefficient `k` of the stacked `c`: the row it was stacked from where known
    (`known_rows`), else a slice; None past its degree (a known zero)."""
    return _rows(c, k + 1)[k]


def _dot_rows(pairs, op: Callable[[Array, Array], Array] = operator.mul) -> Array | None:
    """`sum op(u, v)` over the pairs, skipping pairs with a None (a known zero); None if
    every pair has one."""
    total = None
    for u, v in pairs:
        if u is None or v is None:
            continue
        term = op(u, v)
        total = term if total is None else total + term
    return total


def cauchy_rows(a: Array, b: Array, degree: int, op=operator.mul) -> list[Array]:
    """Rows 0..degree of the Cauchy product of the stacked `a` and `b` under a bilinear
    `op` (a product by default): `c_k = sum_{i <= k} op(a_i, b_{k-i})`, each from the
    operands' rows (the known rows where there are: `known_rows`)."""
    a_rows, b_rows = _rows(a, degree + 1), _rows(b, degree + 1)
    return [
        _dot_rows(((a_rows[i], b_rows[k - i]) for i in range(k + 1)), op) for k in range(degree + 1)
    ]


def _derivative_rows(x: Array, dtype, order: int) -> tuple[list, list]:
    """The rows `x_k` and `j x_j` (the coefficients of `x'`, shifted by one) up to `order`."""
    xs = _rows(x.astype(dtype), order + 1)
    jx = [None] + [None if xs[j] is None else xs[j] * float(j) for j in range(1, order + 1)]
    return xs, jx


def _stack_rows(rows: list[Array], shape, dtype) -> Array:
    """Stack `rows` (broadcast to `shape`, cast to `dtype`), remembering them (`known_rows`)."""
    rows = [jnp.broadcast_to(jnp.asarray(r, dtype), shape) for r in rows]
    return with_known_rows(jnp.stack(rows), rows)


def stack_rows(rows: list[Array]) -> Array:
    """`_stack_rows` for rows of one shape and dtype (they broadcast against each other)."""
    shape = jnp.broadcast_shapes(*(jnp.shape(r) for r in rows))
    return _stack_rows(rows, shape, jnp.result_type(*rows))


def with_known_rows(stacked: Array, rows: list[Array]) -> Array:
    """`stacked` (equal to `jnp.stack(rows)`), remembering `rows` as its rows (`known_rows`).

    For closed forms whose stack XLA should fuse into its readers: a concatenate of more
    than `fused_concat_max_operands()` rows is not fused, and each of its rows becomes a
    kernel of its own. Readers of a row still take the row itself.
    """
    stacked = jnp.asarray(stacked)
    mark_separate_rows(stacked)
    key = id(stacked)
    _ROW_LISTS[key] = rows
    weakref.finalize(stacked, _ROW_LISTS.pop, key, None)
    return stacked


def fused_concat_max_operands() -> int:
    """How many rows a stack may have and still be fused into its readers (the policy's
    `fused_concat_max_operands`: XLA:CPU's limit on a fused concatenate)."""
    return policy().fused_concat_max_operands


def leading_rows(c: Array, count: int) -> Array:
    """`c[:count]`, keeping the known rows (`known_rows`) of `c`."""
    if c.shape[0] <= count:
        return c
    known = known_rows(c)
    if known is None:
        return c[:count]
    return _stack_rows(known[:count], c.shape[1:], c.dtype)


def mark_buffer_rows(c: Array) -> Array:
    """Record that the known rows of `c` are buffers that exist anyway (a pass's inputs
    `x` and `v`), not expressions a reader would compute: see `has_buffer_rows`."""
    _BUFFER_ROWS[id(c)] = c
    return c


def has_buffer_rows(c: Array) -> bool:
    """Whether `mark_buffer_rows` recorded `c`: a reduction of its rows one by one would
    only add kernels (each row read once either way, nothing recomputed)."""
    return _BUFFER_ROWS.get(id(c)) is c


_BUFFER_ROWS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def known_rows(c: Array) -> list[Array] | None:
    """The rows `c` was stacked from by `_stack_rows` (this very array), or None.

    Readers that take row k of a series use the row itself, not a slice of the stack:
    under `vmap` the stack is a (points, coefficients) array, a concatenate along the
    minor axis, which XLA:CPU always materializes; a slice of it reads that buffer,
    whereas the row's own few products fuse into the reader. A stack no reader takes
    whole is then never built. In loop bodies only up to the policy's `loop_rows_max_order`
    (`in_loop_body`).
    """
    if in_loop_body() and degree_of(c) > policy().loop_rows_max_order:
        return None
    return _ROW_LISTS.get(id(c)) if has_separate_rows(c) else None


# Whether a loop body is being traced (per thread and context, like JAX's own trace state).
_IN_LOOP_BODY: contextvars.ContextVar[bool] = contextvars.ContextVar("in_loop_body", default=False)


@contextlib.contextmanager
def loop_body():
    """Mark the rules run inside as the body of a loop (`in_loop_body`)."""
    token = _IN_LOOP_BODY.set(True)
    try:
        yield
    finally:
        _IN_LOOP_BODY.reset(token)


def in_loop_body() -> bool:
    """Whether the rules now running trace the body of a `while` or `scan` (`loop_body`).

    There, past the policy's `loop_rows_max_order`, stacks stay stacks: closed forms and powers are
    built stacked (`rows_wanted`) and readers slice them (no `known_rows`). A stack of
    rows is a concatenate whose rows XLA:CPU computes as kernels of their own, and a
    linear operation on rows stacks its result's rows again; a loop runs each of those
    kernels once per step, where a stack's few vector operations fuse into one. RK4
    along a direction at order 8 (100 steps, unvmapped) ran 136 kernels per step with
    rows against 83, 1.2-1.3x slower; vmapped over 4,096 initial values, 1.23x slower.
    """
    return _IN_LOOP_BODY.get()


def rows_wanted(order: int) -> bool:
    """Whether closed forms and powers of `order` are built row by row (`known_rows`):
    up to the policy's `rows_max_order`, and in loop bodies up to `loop_rows_max_order`."""
    p = policy()
    limit = p.loop_rows_max_order if in_loop_body() else p.rows_max_order
    return order <= limit


# Stacked arrays whose rows XLA reads without a pass over the whole stack: rows stacked
# from their own buffers (a slice of the stack is the buffer) and closed forms along a
# line (a row is recomputed from the primal's few buffers). Under `vmap` a row of any
# other stack is a column of a (points, coefficients) array, which costs a pass over all
# of it: recurrences that read `a_k` for each k ask this first (see `divide`).
_SEPARATE_ROWS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
# The rows of stacks built by `_stack_rows`, by id of the stack (see `known_rows`); an
# entry dies with its stack.
_ROW_LISTS: dict[int, list] = {}


def mark_separate_rows(c: Array) -> Array:
    """Record that the rows of the stacked array `c` can be read one at a time cheaply."""
    _SEPARATE_ROWS[id(c)] = c
    return c


def has_separate_rows(c: Array) -> bool:
    """Whether `mark_separate_rows` recorded `c` (this very array, not an equal one)."""
    return _SEPARATE_ROWS.get(id(c)) is c


# Above the unrolled range, recurrences run by blocks of the policy's `recurrence_block`
# rows: a `lax.fori_loop` over blocks whose body computes its rows unrolled and then adds
# the block's contributions to every later row of an accumulator, so the loop sweeps the
# stacked state once per block instead of once per row. The order is rounded up to whole
# blocks, so the body is the whole program: its size does not depend on the order.
def recurrence_block() -> int:
    """Rows per step of a blocked recurrence (the policy's `recurrence_block`)."""
    return policy().recurrence_block


def _blocked_rows(
    order: int,
    shape,
    dtype,
    y0s: Sequence[Array],
    one: Array,
    mix: Callable[[int, list], Array],
    pair: Callable[[int, Array, Array], Array],
    push: Callable[[Array, object, Array], Array],
    finish: Callable[[Array, Array], Array],
) -> list[Array]:
    """Rows `0..order` of coupled series `y_i` with `y_i[0] = y0s[i]` and, for k >= 1,

    `y_i[k] = finish(k, sum_{m<k} pair(k - m, m, g_i[m]))`, `g_i[m] = mix(i, [y_j[m]])`.

    `pair(j, m, g)` is the contribution of `g` at row `m` to row `m + j` (one row) and
    `push(acc, m, g)` adds it to every row of a stacked accumulator at once. `order` is
    a whole number of blocks (`blocked_span`); `m` is 0 for the first push and traced
    inside the loop, as is `k`.
    """
    n = len(y0s)
    block = recurrence_block()
    y0s = [jnp.broadcast_to(jnp.asarray(y0, dtype), shape) for y0 in y0s]
    ys = [fresh(y0, order, dtype) for y0 in y0s]
    zeros = jnp.zeros((order + 1,) + tuple(shape), dtype)
    accs = [push(zeros, 0, mix(i, y0s)) for i in range(n)]

    def body(b, carry):
        ys, accs = carry
        start = 1 + b * block
        acc_rows = [_rows(slice_rows(acc, start, block), block) for acc in accs]
        rows: list[list] = [[] for _ in range(n)]
        gs: list[list] = [[] for _ in range(n)]
        for r in range(block):
            for i in range(n):
                total = acc_rows[i][r]
                for q in range(r):
                    total = total + pair(r - q, start + q, gs[i][q])
                rows[i].append(computed_once(finish(start + r, total), one))
            for i in range(n):
                gs[i].append(mix(i, [rows[j][r] for j in range(n)]))
        ys = [
            lax.dynamic_update_slice(y, _stack_rows(r, shape, dtype), _starts(y, start))
            for y, r in zip(ys, rows)
        ]
        accs = list(accs)
        for i in range(n):
            for q, g in enumerate(gs[i]):
                accs[i] = push(accs[i], start + q, g)
        return ys, accs

    return lax.fori_loop(0, order // block, body, (ys, accs))[0]


def blocked_span(order: int) -> int:
    """`order` rounded up to whole blocks: the rows past it are computed and dropped."""
    block = recurrence_block()
    return -(-order // block) * block


def _weighted_sum(weights, rows: list[Array]) -> Array | None:
    """`sum_j weights[j] rows[j]` over the non-zero constant weights (a row of `M Y`)."""
    total = None
    for weight, row in zip(weights, rows):
        if weight == 0:
            continue
        term = row if weight == 1 else row * float(weight)
        total = term if total is None else total + term
    return total


def linear_ode(x: Array, y0s: Sequence[Array], matrix, order: int) -> list[Array]:
    """Solve `Y' = x' (M Y)` for a small constant matrix `M` (exp, sin/cos, sinh/cosh).

    `k y_k = sum_{m<k} u_{k-1-m} (M y)_m` with `u = x'`.
    """
    if unrolled(order, degree_of(x), has_separate_rows(x)):
        return _linear_ode_unrolled(x, y0s, matrix, order)
    dtype = jnp.result_type(x, *y0s)
    shape = jnp.broadcast_shapes(x.shape[1:], *[jnp.shape(y0) for y0 in y0s])
    span = blocked_span(order)
    x = jnp.broadcast_to(pad_degree(x, span), (span + 1,) + shape).astype(dtype)
    xs, jx = _derivative_rows(x, dtype, recurrence_block() - 1)
    source = forward_source(derivative_series(x), span, 1)
    ys = _blocked_rows(
        span,
        shape,
        dtype,
        y0s,
        opaque_one(xs[0]),
        mix=lambda i, rows: _weighted_sum(matrix[i], rows),
        pair=lambda j, m, g: jx[j] * g,
        push=lambda acc, m, g: acc + push_window(source, m, span, 1) * g[None],
        finish=lambda k, total: total / _as(k, dtype),
    )
    return [y[: order + 1] for y in ys]


def _linear_ode_unrolled(x: Array, y0s: Sequence[Array], matrix, order: int) -> list[Array]:
    dtype = jnp.result_type(x, *y0s)
    shape = jnp.broadcast_shapes(x.shape[1:], *[jnp.shape(y0) for y0 in y0s])
    xs, jx = _derivative_rows(x, dtype, order)
    ys = [[jnp.asarray(y0, dtype)] for y0 in y0s]
    mixed: list[list] = [[] for _ in y0s]  # (M y)_m per output
    one = opaque_one(xs[0])

    for k in range(1, order + 1):
        for i in range(len(y0s)):
            mixed[i].append(_weighted_sum(matrix[i], [y[k - 1] for y in ys]))
        new = []
        for i in range(len(y0s)):
            acc = _dot_rows((jx[j], mixed[i][k - j]) for j in range(1, k + 1))
            new.append(
                jnp.zeros(shape, dtype) if acc is None else computed_once(acc / float(k), one)
            )
        for i, value in enumerate(new):
            ys[i].append(value)
    return [_stack_rows(y, shape, dtype) for y in ys]


def divide(a: Array, b: Array, order: int, q0: Array | None = None) -> Array:
    """`q = a / b`: `q_k = (a_k - sum_{j<k} b_{k-j} q_j) / b_0`."""
    if degree_of(b) == 0:
        out = a / b
        return out if q0 is None else with_primal(out, q0)
    ndim = max(a.ndim, b.ndim) - 1
    a, b = lift(a, ndim), lift(b, ndim)
    shape = jnp.broadcast_shapes(a.shape[1:], b.shape[1:])
    dtype = jnp.result_type(a, b)
    if (
        order >= policy().reciprocal_min_order
        and unrolled(order, degree_of(b))
        and degree_of(a) > degree_of(b)
        and not has_separate_rows(a)
    ):
        # Row k of the recurrence reads a_k: under vmap a column of the stacked `a`, one
        # pass over all of it per row, unless `a`'s rows are buffers or closed forms of
        # their own (`has_separate_rows`; cos(3t) over 1 + t^2 at N = 65,536, orders
        # 12 / 16 / 24 / 32, one process: 0.56 / 0.21 / 0.22 / 0.64x this form, and
        # 0.23 / 0.30x for exp(-t^2/2) cos(3t) at 12 / 16 with the product as rows,
        # `rows_max_order`). `a * (1/b)` reads `a` once: the reciprocal's rows
        # come from b's few coefficients, the product is one kernel. Against the product
        # with the reciprocal stacked by selects (cos(3t), exp(sin t), exp(-t^2/2) cos(3t)
        # over 1 + t^2 and sqrt(1 + t^2) sin(t) over 2 + t, orders 12-32, N = 4,096 /
        # 65,536, one process): 0.25-0.90x. `a` is computed once first, marked with ones
        # of its own shape: XLA then keeps it in a buffer. Marked with per-point ones, a
        # product `a` was fused into the pad (or into every row of a stacked form): 2-9x
        # slower at orders 12-32.
        b0 = lax.index_in_dim(b, 0, keepdims=False).astype(dtype)
        reciprocal = _divide_rows(jnp.ones((1,) + shape, dtype), b, order, None, shape, dtype)
        a = a.astype(dtype)
        q = _shifted_sum(
            lambda i: jnp.broadcast_to(reciprocal[i], shape)[None],
            order + 1,
            computed_once(a, opaque_one(a)),
            order,
        )
        return with_primal(q, lax.index_in_dim(a, 0, keepdims=False) / b0 if q0 is None else q0)
    if unrolled(order, degree_of(b), has_separate_rows(a) and has_separate_rows(b)):
        return _stack_rows(_divide_rows(a, b, order, q0, shape, dtype), shape, dtype)
    span = blocked_span(order)
    a = jnp.broadcast_to(pad_degree(a, span), (span + 1,) + shape).astype(dtype)
    b = jnp.broadcast_to(pad_degree(b, span), (span + 1,) + shape).astype(dtype)
    b_rows = _rows(b, recurrence_block())
    source = forward_source(b, span, 0)
    return _blocked_rows(
        span,
        shape,
        dtype,
        [a[0] / b[0] if q0 is None else q0],
        opaque_one(b_rows[0]),
        mix=lambda i, rows: rows[0],
        pair=lambda j, m, q: -(b_rows[j] * q),
        push=lambda acc, m, q: acc - push_window(source, m, span, 0) * q[None],
        finish=lambda k, total: (get_coeff(a, k) + total) / b_rows[0],
    )[0][: order + 1]


def _divide_rows(a: Array, b: Array, order: int, q0, shape, dtype) -> list[Array]:
    """The rows of `a / b`, unrolled: `q_k = (a_k - sum_{j=1..k} b_j q_{k-j}) / b_0`."""
    a_rows = _rows(a.astype(dtype), order + 1)
    b_rows = _rows(b.astype(dtype), order + 1)
    b0 = shielded(b_rows[0])
    q = [shielded(a_rows[0]) / b0 if q0 is None else jnp.asarray(q0, dtype)]
    one = opaque_one(b_rows[0])
    # One division, then products: where the rows stay unmarked (`computed_once`), XLA
    # copies products into their readers but keeps each division in a kernel of its own.
    reciprocal = 1 / b0
    # XLA:CPU keeps a quotient `a / b` with several readers in a kernel of its own but
    # fuses a reciprocal `1 / b` into its readers. At orders where nothing is marked
    # (`_once.unmarked_at_any_size`) the recurrence reads `a_0 (1 / b_0)`, and the
    # exact `a_0 / b_0` is only the primal row: the whole quotient is then one kernel
    # (the damped wave at order 2, 1,048,576 points: 6.3 ms against 11.0 ms).
    q0_read = q[0]
    if _once.unmarked_at_any_size(pass_order()) and a_rows[0] is not None:
        q0_read = shielded(a_rows[0]) * reciprocal
    for k in range(1, order + 1):
        known = _dot_rows((b_rows[j], q0_read if j == k else q[k - j]) for j in range(1, k + 1))
        top = a_rows[k]
        if known is not None:
            top = -known if top is None else top - known
        if top is None:
            q.append(jnp.zeros(shape, dtype))
            continue
        q.append(computed_once(shielded(top) * reciprocal, one))
    return q


def power(x: Array, p, y0: Array, order: int) -> Array:
    """`y = x ** p` for an exponent `p` without a series, by the recurrence

    `k x_0 y_k = sum_{m<k} (p (k-m) - m) x_{k-m} y_m`.
    Divides by `x_0`: callers that need nested jvp's values at `x_0 = 0` use
    `compose` there.
    """
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0), jnp.shape(p))
    if unrolled(order, degree_of(x), has_separate_rows(x)):
        xs = _rows(x.astype(dtype), order + 1)
        x0 = jnp.asarray(xs[0], dtype)
        ys = [jnp.asarray(y0, dtype)]
        one = opaque_one(x0)
        reciprocal = 1 / shielded(x0)  # one division, then products: see `_divide_rows`
        for k in range(1, order + 1):
            terms = []
            for m in range(k):
                j = k - m
                if xs[j] is None:
                    continue
                weight = p * float(j) - float(m)
                terms.append((xs[j], ys[m] * weight))
            acc = _dot_rows(terms)
            ys.append(
                jnp.zeros(shape, dtype)
                if acc is None
                else computed_once(acc * reciprocal * (1 / k), one)
            )
        return _stack_rows(ys, shape, dtype)
    span = blocked_span(order)
    x = jnp.broadcast_to(pad_degree(x, span), (span + 1,) + shape).astype(dtype)
    x_rows = _rows(x, recurrence_block())
    ks = orders(span, len(shape), dtype)
    jx_source = forward_source(ks * x, span, 0)
    x_source = forward_source(x, span, 0)

    def push(acc, m, y_m):
        w = p * push_window(jx_source, m, span, 0) - _as(m, dtype) * push_window(
            x_source, m, span, 0
        )
        return acc + w * y_m[None]

    return _blocked_rows(
        span,
        shape,
        dtype,
        [y0],
        opaque_one(x_rows[0]),
        mix=lambda i, rows: rows[0],
        pair=lambda j, m, y_m: x_rows[j] * (y_m * (p * float(j) - _as(m, dtype))),
        push=push,
        finish=lambda k, total: total / (_as(k, dtype) * x_rows[0]),
    )[0][: order + 1]


def square_root(x: Array, y0: Array, order: int) -> Array:
    """`y = sqrt(x)` from `y^2 = x`: `y_k = (x_k - sum_{0<i<k} y_i y_{k-i}) / (2 y_0)`.

    The sum is folded by its symmetry, about k/2 products for row k where `power`'s
    recurrence takes k: for a series of full degree (`sqrt(1 + tanh(log1p t^2))` at
    K = 16: 304 against about 100 products). Over a polynomial of low degree `power`
    sums fewer (min(k, degree) terms), so callers keep it there. Unrolled only (`unrolled`).
    """
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0))
    xs = _rows(x.astype(dtype), order + 1)
    one = opaque_one(xs[0])
    # y_0 once: every row reads it, and XLA would recompute the root in each.
    ys = [computed_once(jnp.asarray(y0, dtype), one)]
    reciprocal = 1 / (2 * shielded(ys[0]))  # one division, then products (`_divide_rows`)
    for k in range(1, order + 1):
        folded = _dot_rows((ys[i], ys[k - i]) for i in range(1, (k + 1) // 2))
        square = 2 * folded if folded is not None else None
        if k % 2 == 0:
            middle = ys[k // 2] * ys[k // 2]
            square = middle if square is None else square + middle
        top = xs[k]
        if square is not None:
            top = -square if top is None else top - square
        ys.append(jnp.zeros(shape, dtype) if top is None else computed_once(top * reciprocal, one))
    return _stack_rows(ys, shape, dtype)


def tanh(x: Array, y0: Array, order: int, rows_once: bool = True) -> Array:
    """`tanh(x) = s (1 - e) / (1 + e)` with `e = exp(-2 s x)`, `s = sign(x_0)`: no overflow.

    Unrolled (small orders), its Riccati equation instead: `y' = z x'` with
    `z = 1 - y^2`, one recurrence instead of an exponential and a division
    (`rows_once`: see `_tanh_riccati`).
    """
    if unrolled(order):
        return _tanh_riccati(x, y0, order, rows_once)
    x = pad_degree(x, order)
    sign = jnp.where(x[0] >= 0, 1, -1).astype(x.dtype)
    z = -2 * sign * x
    (e,) = linear_ode(z, [lax.exp(z[0])], [[1]], order)
    num = with_primal(-e, 1 - e[0])
    den = with_primal(e, 1 + e[0])
    q = divide(num, den, order)
    return with_primal(sign * q, y0)


def sech_squared(x0: Array) -> Array:
    """`1 / cosh(x0)^2`, for real `x0` as `4 e / (1 + e)^2` with `e = exp(-2 |x0|)`.

    One exponential instead of cosh's two, and no overflow: `e` underflows to 0 only
    where the result does.
    """
    if jnp.iscomplexobj(x0):
        return 1 / lax.square(lax.cosh(x0))
    e = lax.exp(-2 * lax.abs(x0))
    return 4 * e / lax.square(1 + e)


def logistic_slope(x0: Array) -> Array:
    """`logistic'(x0) = s (1 - s)` with `s = logistic(-|x0|)`, accurate at every `x0`.

    `y0 (1 - y0)` loses its digits where `y0` nears 1; `s <= 1/2` keeps them in `1 - s`,
    and `logistic(x) logistic(-x)` is even in `x`.
    """
    s = lax.logistic(-lax.abs(x0))
    return s * (1 - s)


def logistic(x: Array, y0: Array, order: int, rows_once: bool = True) -> Array:
    """`logistic(x)` from its Riccati equation `y' = z x'`, `z = y - y^2` (unrolled
    orders only: `_riccati`), `z_0` from `logistic_slope` (`rows_once`: see `_riccati`)."""
    return _riccati(x, y0, logistic_slope, 1.0, order, rows_once)


def _tanh_riccati(x: Array, y0: Array, order: int, rows_once: bool = True) -> Array:
    """`tanh(x)` from its Riccati equation `y' = z x'`, `z = 1 - y^2` (`_riccati`).

    `z_0 = 1 - y_0^2` loses all its digits where tanh saturates; `1 / cosh(x_0)^2` keeps
    them (it underflows to 0 only where every coefficient past 0 does).
    """
    return _riccati(x, y0, sech_squared, 0.0, order, rows_once)


def _riccati(x: Array, y0, slope, linear: float, order: int, rows_once: bool) -> Array:
    """`y` with `y' = z x'` and `z = c + linear y - y^2` (`c` a constant), from `y_0` and
    `z_0 = slope(x_0)`: `k y_k = sum_{j=1..k} j x_j z_{k-j}`, and for m >= 1
    `z_m = linear y_m - sum_{i<=m} y_i y_{m-i}`.

    `rows_once=False` leaves the rows past 0 unmarked, for readers that take each row
    as its own buffer (a matmul per row): XLA then fuses each row's few products with
    its neighbours. Read as one stack instead, unmarked rows are recomputed in every
    later row (1.7-6x slower tanh chains at K = 4 / 8).
    """
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0))
    xs, jx = _derivative_rows(x, dtype, order)
    one = opaque_one(xs[0])
    # y_0 too: every later row reads it, and XLA would recompute tanh in each of them.
    ys = [computed_once(jnp.asarray(y0, dtype), one)]
    zs = [computed_once(slope(xs[0]), one)]
    for k in range(1, order + 1):
        acc = _dot_rows((jx[j], zs[k - j]) for j in range(1, k + 1))
        if acc is None:
            ys.append(jnp.zeros(shape, dtype))
        else:
            ys.append(computed_once(acc / float(k), one) if rows_once else acc / float(k))
        if k < order:
            square = _dot_rows((ys[i], ys[k - i]) for i in range(1, (k + 1) // 2))
            square = 2 * square if square is not None else None
            middle = ys[k // 2] * ys[k // 2] if k % 2 == 0 else None
            # (linear - 2 y_0) y_k: one product, as `2 y_0 y_k` alone was for tanh.
            total = (2 * ys[0] - linear) * ys[k] if linear else 2 * ys[0] * ys[k]
            for part in (square, middle):
                total = total if part is None else total + part
            # Not computed once: a few products that XLA fuses into the next row. As
            # buffers they made a tanh MLP (width 128, batch 2048) 1.1-1.75x slower at
            # K = 4, by run (one process, interleaved: 14.8 -> 13.7 ms).
            zs.append(-total)
    return _stack_rows(ys, shape, dtype)


# "Pull" helpers: coefficient m of a product with a series still being filled.
# Used only by rules whose unknown enters nonlinearly (erf_inv).


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


def compose(x: Array, taylor_coeffs: Array, order: int) -> Array:
    """`y_k = sum_{m<=k} d_m ((x - x_0)^m)_k` (Faa di Bruno).

    `taylor_coeffs[m] = d_m = f^(m)(x_0) / m!`, stacked `(order+1, *S)`. Only
    `m <= k` enters coefficient `k`, so a non-finite `d_m` (a power past its
    smooth order at 0) poisons exactly the coefficients nested jvp poisons.
    O(order^3): used only where the recurrences would divide by zero.
    """
    dtype = jnp.result_type(x, taylor_coeffs)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(taylor_coeffs)[1:])
    if order <= policy().rows_max_order:
        return _compose_rows(x, taylor_coeffs, order, shape, dtype)
    x = pad_degree(x, order)
    x = jnp.broadcast_to(x, (order + 1,) + shape).astype(dtype)
    d = jnp.broadcast_to(taylor_coeffs, (order + 1,) + shape).astype(dtype)
    delta = with_primal(x, jnp.zeros(shape, dtype))
    table = toeplitz(delta, order + 1, order + 1)
    ks = orders(order, len(shape), dtype)
    acc = fresh(d[0], order, dtype)

    def body(m, carry):
        acc, power = carry
        term = get_coeff(d, m, keepdims=True) * power
        acc = acc + jnp.where(ks >= _as(m, dtype), term, jnp.zeros_like(term))
        return acc, jnp.sum(table * power[None], axis=1)

    return fori(order, body, (acc, delta))[0]


def _compose_rows(x: Array, taylor_coeffs: Array, order: int, shape, dtype) -> Array:
    """`compose` unrolled: the powers `(x - x_0)^m` as rows, row `k` of the m-th power a
    sum over rows of the (m-1)-th (zero below row m, which is never formed or added).

    About order^3 / 6 products of rows that XLA fuses. The loop's Toeplitz table is a
    batched matmul, a reduce-window and transposes under `vmap`, where `lax.cond` runs
    both branches: `(2 + sin t) ** 2.5` at order 8 over 65,536 points spent 60 of its
    70 ms there.
    """
    deltas = [None] + _rows(x.astype(dtype), order + 1)[1:]
    ds = _rows(jnp.asarray(taylor_coeffs, dtype), order + 1)
    out = [ds[0]] + [None] * order
    power = deltas  # (delta^m)_k for the current m; None where known to be zero
    for m in range(1, order + 1):
        if m > 1:
            power = [None] * m + [
                _dot_rows((deltas[i], power[k - i]) for i in range(1, k - m + 2))
                for k in range(m, order + 1)
            ]
        if ds[m] is None:
            continue
        for k in range(m, order + 1):
            if power[k] is not None:
                term = ds[m] * power[k]
                out[k] = term if out[k] is None else out[k] + term
    return _stack_rows([jnp.zeros(shape, dtype) if r is None else r for r in out], shape, dtype)


# Lines `x_0 + d s` whose direction `d` is a known Python number: the seeds taylax builds
# itself (a derivative's variable, the default direction: d = 1) and what affine
# arithmetic with concrete scalars makes of them (`3 t + 1`: d = 3). `along_line` then
# multiplies by the constants `d^k` (nothing at all for d = 1) instead of computing
# powers of the direction at run time. Keyed by id with a weak reference to the array
# (tracers included): an entry dies with its array.
_LINES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_LINE_DIRECTIONS: dict[int, complex] = {}


def mark_line(c: Array, direction) -> Array:
    """Record that the degree-1 stacked array `c` has the constant direction `direction`."""
    key = id(c)
    _LINES[key] = c
    _LINE_DIRECTIONS[key] = direction
    weakref.finalize(c, _LINE_DIRECTIONS.pop, key, None)
    return c


def line_direction(c: Array):
    """The known constant direction of a degree-1 stacked array, or None."""
    if _LINES.get(id(c)) is not c:
        return None
    return _LINE_DIRECTIONS.get(id(c))


def unit_seed(x0: Array, scale: float = 1.0) -> Array:
    """The stacked seed `x_0 + scale s` (by default direction exactly 1), marked as such
    for `along_line` (`scale` is a `derivative_scale`)."""
    return mark_line(_stack_rows([x0, scale], jnp.shape(x0), jnp.result_type(x0)), scale)


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
        return _stack_rows(rows, shape, taylor_coeffs.dtype)
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
        return _stack_rows(rows, jnp.shape(x), dtype)
    out = lax.concatenate([jnp.ones((1,) + jnp.shape(x), dtype), base[None]], 0)
    while out.shape[0] < order + 1:
        n = out.shape[0]
        top = out[n - 1] * base  # x^n
        out = lax.concatenate([out, out[: order + 1 - n] * top[None]], 0)
    return out


def _integer_valued(p) -> int | None:
    """`p` as a Python int when it is a concrete, real, integer-valued scalar, else None."""
    value = concrete_scalar(p)
    if value is None or isinstance(value, complex) or not math.isfinite(value):
        return None
    return int(value) if value == int(value) else None


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
        return _stack_rows(rows, jnp.shape(x0), dtype)
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
        return _stack_rows(rows, shape, dtype)
    binom = binomials(p, order, shape, dtype)
    steps = jnp.broadcast_to(jnp.asarray(p, dtype), shape)[None] - orders(order, len(shape), dtype)
    base = jnp.broadcast_to(x0, steps.shape).astype(dtype)
    return binom * lax.pow(base, steps)
