"""Rules for bilinear primitives: `dot_general` and `conv_general_dilated`.

With one constant operand they are linear (one batched call, or one per row); with two
series operands the Cauchy product is one call per pair of rows for large products up to
the policy's `pair_dots_max_degree`, every pair's product summed along skewed rows for
small ones, else one batched call over a Toeplitz table.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .. import _policy, _series
from .._interpret import register_rule, row_readers
from .._series import Series


def _per_coefficient(prim):
    """The Cauchy product of a bilinear primitive as one call of it per coefficient pair."""

    def rule(order, a, b, **params):
        def op(x, y):
            return prim.bind(x, y, **params)

        return Series(_series.cauchy_bilinear(op, a.coeffs, b.coeffs, order))

    return rule


_dot_general_per_coefficient = _per_coefficient(lax.dot_general_p)
register_rule(lax.conv_general_dilated_p)(_per_coefficient(lax.conv_general_dilated_p))


@register_rule(lax.dot_general_p)
def _dot_general(order, a, b, *, dimension_numbers, **params):
    """Cauchy product of two stacked series under `dot_general`, `c_k = sum_{i + j = k}
    dot(a_i, b_j)`.

    Linear in a constant operand: the series' coefficient axis is one more free dimension
    of one call (one call per row for a series with large rows: `_row_dots`). Two series:
    one call per pair of rows for a large product up to the policy's
    `pair_dots_max_degree` (`_pair_dots`); every pair's product and a skew sum for a small
    one (`_skew_product`); else one call over a Toeplitz table (`_table_product`).
    """
    if params.get("out_sharding") is not None:
        # An output sharding names the output's own axes: keep one call per coefficient.
        return _dot_general_per_coefficient(
            order, a, b, dimension_numbers=dimension_numbers, **params
        )
    (ac, bc), (ab, bb) = dimension_numbers
    degree = min(a.degree + b.degree, order)
    x, y = a.coeffs[: degree + 1], b.coeffs[: degree + 1]
    if (a.degree == 0) != (b.degree == 0):
        series = b if a.degree == 0 else a
        if _takes_row_dots(series.shape, series.dtype, degree):
            return Series(_row_dots(a, b, degree, dimension_numbers, params))
    if a.degree and b.degree:
        if _takes_pair_dots(a, b, degree, dimension_numbers):
            return Series(_pair_dots(a, b, degree, dimension_numbers, params))
        if _product_work(x, b, degree, bc, bb) <= _policy.current().small_product:
            return Series(_skew_product(x, y, degree, dimension_numbers, params))
        return Series(_table_product(x, y, degree, dimension_numbers, params))
    # Linear in the series operand: its coefficient axis is one more free dimension.
    if a.degree == 0:
        x, free_at = x[0], len(ab) + len(_split_dims(x.ndim - 1, ac, ab))
        dims = ((ac, tuple(d + 1 for d in bc)), (ab, tuple(d + 1 for d in bb)))
    else:
        y, free_at = y[0], len(ab)
        dims = ((tuple(d + 1 for d in ac), bc), (tuple(d + 1 for d in ab), bb))
    (_, y_contract), (_, y_batch) = dims
    work = math.prod(x.shape) * math.prod(
        y.shape[d] for d in _split_dims(y.ndim, y_contract, y_batch)
    )
    if work <= _policy.current().small_product:
        out = _dot_general_by_multiply(x, y, dimension_numbers=dims, **params)
    else:
        out = lax.dot_general(x, y, dims, **params)
    return Series(jnp.moveaxis(out, free_at, 0))


def _table_product(x: Array, y: Array, degree: int, dimension_numbers, params) -> Array:
    """`c_k = sum_i dot(x_i, T[k, i])` over the Toeplitz table `T[k, i] = y_{k-i}`, as one
    `dot_general`, for a large product of two series: `x`'s coefficient axis contracted
    with the table's column axis, and the table's row axis a free dimension moved to the
    front.

    The table's zeros above its diagonal meet every row of `x`: an overflowed `x_i`
    (`inf * 0`) would put NaN in the rows below `i`, the primal too. So the dot takes
    `x` with its non-finite entries as 0 and adds their poison (`_series.finite_part`;
    docs/EMISSION.md, "Overflow").
    """
    (ac, bc), (ab, bb) = dimension_numbers
    b_free = len(_split_dims(y.ndim - 1, bc, bb))
    table = _series.toeplitz(y, degree + 1, x.shape[0])  # (rows, cols, *b.shape)
    free_at = len(ab) + len(_split_dims(x.ndim - 1, ac, ab))
    dims = (
        ((0, *(d + 1 for d in ac)), (1, *(d + 2 for d in bc))),
        (tuple(d + 1 for d in ab), tuple(d + 2 for d in bb)),
    )
    x, poison = _series.finite_part(x, degree, summed=ac)
    out = lax.dot_general(x, table, dims, **params)
    out = out + _as_product(poison, ac, ab, b_free).astype(out.dtype)
    return jnp.moveaxis(out, free_at, 0)


def _product_work(x: Array, b: Series, degree: int, bc, bb) -> int:
    """Multiply-adds of the product of `x` (the rows of `a`) with every row of `b` up to
    `degree`, the measure the policy's `small_product` bounds: a table's or every pair's."""
    b_free = _split_dims(len(b.shape), bc, bb)
    return math.prod(x.shape) * (degree + 1) * math.prod(b.shape[d] for d in b_free)


def _skew_product(x: Array, y: Array, degree: int, dimension_numbers, params) -> Array:
    """`c_k = sum_{i + j = k} dot(x_i, y_j)` for `k <= degree`, stacked, for two series
    whose product is small: every pair's product as one broadcast multiply and sum
    (`P[i, j]`), then row `i` of `P` shifted right by `i` (the skew trick: pad, reshape,
    slice) and the rows summed.

    The shift pads with zeros that are added, never multiplied, so an overflowed `x_i`
    reaches only the orders from `i` on, with no mask to select the products above a
    Toeplitz table's diagonal away: three equations fewer per product, and fewer for
    XLA to compile (the nested recursion is made of such products).
    """
    (ac, bc), (ab, bb) = dimension_numbers
    dims = (
        (tuple(d + 1 for d in ac), tuple(d + 1 for d in bc)),
        (tuple(d + 1 for d in ab), tuple(d + 1 for d in bb)),
    )
    pairs = _dot_general_by_multiply(x, y, dimension_numbers=dims, **params)
    # `dot_general` lays out (*batch, rows of x, *x free, rows of y, *y free).
    nb, rows, cols = len(ab), x.shape[0], y.shape[0]
    at_y = nb + 1 + len(_split_dims(x.ndim - 1, ac, ab))
    # lax rather than jnp throughout: this runs once per product while a derivative is
    # lowered, and jnp's wrappers cost that first call more than the operations do.
    others = [d for d in range(pairs.ndim) if d not in (nb, at_y)]
    pairs = lax.transpose(pairs, (nb, at_y, *others))  # (rows, cols, *out)
    rest = pairs.shape[2:]
    width = rows + cols - 1
    zero = np.zeros((), pairs.dtype)
    padded = lax.pad(pairs, zero, [(0, 0, 0), (0, rows, 0)] + [(0, 0, 0)] * len(rest))
    flat = lax.slice_in_dim(lax.reshape(padded, (rows * (cols + rows),) + rest), 0, rows * width)
    skewed = lax.reshape(flat, (rows, width) + rest)  # row i holds P[i, k - i] at k
    return lax.reduce(lax.slice_in_dim(skewed, 0, degree + 1, axis=1), zero, lax.add, (0,))


def _as_product(poison: Array, ac, ab, b_free: int) -> Array:
    """A factor's poison rows, summed over the contracted axes `ac` (where the dot sums),
    laid out as the dot over the table lays out its output, `(*batch, *a_free, rows,
    *b_free)`: broadcast over `b`'s free axes, so that each NaN reaches exactly the
    outputs its entry of `a` reaches."""
    kept = [d for d in range(poison.ndim - 1 + len(ac)) if d not in ac]
    a_free = [d for d in kept if d not in ab]
    poison = jnp.transpose(poison, (*(kept.index(d) + 1 for d in (*ab, *a_free)), 0))
    return lax.expand_dims(poison, tuple(range(poison.ndim, poison.ndim + b_free)))


def _row_dots(a: Series, b: Series, degree: int, dimension_numbers, params) -> Array:
    """One `dot_general` per coefficient row of the series operand, stacked.

    The rows of a series are often separate buffers (one per row of a recurrence): a
    single dot over the stack first copies them into one, which costs once a row no
    longer fits in cache. For small rows a dot kernel per row costs more than the copy
    it saves, hence the policy's `row_dots_min_bytes` (docs/EMISSION.md, "Products of
    series matrices").
    """
    rows = []
    for k in range(degree + 1):
        x = a.coeffs[0] if a.degree == 0 else a.coeffs[k]
        y = b.coeffs[0] if b.degree == 0 else b.coeffs[k]
        rows.append(lax.dot_general(x, y, dimension_numbers, **params))
    return _series.stack_rows(rows)  # rows of their own: readers take them, not slices


def _pair_dots(a: Series, b: Series, degree: int, dimension_numbers, params) -> Array:
    """The Cauchy product of two series as one `dot_general` per pair of rows:
    `c_k = sum_{i <= k} dot(a_i, b_{k - i})`."""

    def dot(x, y):
        return lax.dot_general(x, y, dimension_numbers, **params)

    return _series.stack_rows(_series.cauchy_rows(a.coeffs, b.coeffs, degree, dot))


def _takes_pair_dots(a: Series, b: Series, degree: int, dimension_numbers) -> bool:
    """Whether the Cauchy product of two series under `dot_general` is one dot per pair
    of rows (`_pair_dots`) rather than one dot over a Toeplitz table."""
    (_, bc), (_, bb) = dimension_numbers
    work = math.prod(a.shape) * math.prod(b.shape[d] for d in _split_dims(len(b.shape), bc, bb))
    p = _policy.current()
    return degree <= p.pair_dots_max_degree and work >= p.pair_dots_min_work


def _takes_row_dots(shape, dtype, degree: int) -> bool:
    """Whether a series of `degree` with rows of `shape` times a constant matrix is one
    dot per row (the rule and its `row_readers` entry decide with this one test)."""
    row_bytes = math.prod(shape) * jnp.dtype(dtype).itemsize
    p = _policy.current()
    return degree <= p.row_dots_max_degree and row_bytes >= p.row_dots_min_bytes


def _dot_reads_rows(eqn, operand: int, order: int, others_constant: bool) -> bool:
    """`read_row_by_row` for a `dot_general` whose other operand is constant: the series
    reaching it has a degree of at most `order`."""
    aval = eqn.invars[operand].aval
    return (
        others_constant
        and eqn.params.get("out_sharding") is None
        and _takes_row_dots(aval.shape, aval.dtype, order)
    )


row_readers[lax.dot_general_p] = _dot_reads_rows


def _split_dims(ndim, contract, batch):
    return [d for d in range(ndim) if d not in contract and d not in batch]


def _dot_general_by_multiply(x, y, *, dimension_numbers, preferred_element_type=None, **_):
    """`lax.dot_general` as a broadcast multiply and a sum (same result, fusable)."""
    (xc, yc), (xb, yb) = dimension_numbers
    xf = _split_dims(x.ndim, xc, xb)
    yf = _split_dims(y.ndim, yc, yb)
    xt = lax.transpose(x, (*xb, *xf, *xc))
    yt = lax.transpose(y, (*yb, *yf, *yc))
    nb, nxf, nyf, nc = len(xb), len(xf), len(yf), len(xc)
    xt = lax.expand_dims(xt, tuple(range(nb + nxf, nb + nxf + nyf)))
    yt = lax.expand_dims(yt, tuple(range(nb, nb + nxf)))
    dtype = np.dtype(preferred_element_type or jnp.result_type(x, y))
    prod = xt.astype(dtype) * yt.astype(dtype)
    if not nc:
        return prod
    return lax.reduce(prod, np.zeros((), dtype), lax.add, tuple(range(prod.ndim - nc, prod.ndim)))
