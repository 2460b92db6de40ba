"""Products of stacked series (Cauchy products): sums of row products at low orders,
shifted sums of stacks above (a few equations per coefficient of the lower-degree
factor), as the emission policy says."""

from __future__ import annotations

import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _policy
from ._coeffs import Array, degree_of, lift, pad_degree
from ._identity import ArrayMarks
from ._marks import computed_once, opaque_one
from ._rows import has_separate_rows, known_rows, rows_of, stack_rows_as


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
            return stack_rows_as([a0 * r for r in known], shape, jnp.result_type(a, b))
        return pad_degree(a * b, degree) if db > degree else a * b
    separate = has_separate_rows(a) and has_separate_rows(b)
    if degree <= product_rows_max_order(by_rows or separate):
        # A padded operand under vmap is a (N, 2K+1) array whose pad XLA:CPU fuses with
        # its producer into a slow kernel, and the shifted slices of the coefficient axis
        # are the minor axis. Rows read the operands' coefficients directly, at the cost
        # of O(K^2) products in the program, hence a bound on the order
        # (docs/EMISSION.md, "Rows").
        shape = jnp.broadcast_shapes(a.shape[1:], b.shape[1:])
        return stack_rows_as(cauchy_rows(a, b, degree), shape, jnp.result_type(a, b))
    if a.ndim == 1 and _policy.current().scalar_products_as_dots:
        # Scalar series: one matrix-vector product with b's Toeplitz table. A dot is a
        # kernel of its own, which bounds the expressions XLA fuses in a large program.
        table = toeplitz(b, degree + 1, da + 1)
        if not _policy.current().guarded_products:
            return lax.dot_general(table, a, (((1,), (0,)), ((), ())))
        # The table's zeros meet every `a_i` (see `finite_part`). Six equations per
        # product: a fifth more in a large program, hence the policy's choice
        # (docs/EMISSION.md, "Overflow").
        a, poison = finite_part(a, degree)
        return lax.dot_general(table, a, (((1,), (0,)), ((), ()))) + poison
    terms = min(da, degree) + 1
    if b.ndim == 1 and b in _SHIFTED_SUMS:
        # A scalar series, under `vmap` a (points, K + 1) stack: its zero-padded copy is
        # the minor axis, and XLA:CPU fused the pad with the shifted sum that makes `b`,
        # computing it again per element: `cos(t)^3` at K = 24 took 125 of 206 ms of
        # kernels. In a buffer, `b` is computed once (values computed once are the
        # policy's `mark_values`; docs/EMISSION.md, "Rows"). Other stacks (a loop's)
        # are buffers already.
        b = computed_once(b, opaque_one(b))
    return shifted_sum(lambda i: lax.index_in_dim(a, i, keepdims=True), terms, b, degree)


def shifted_sum(row: Callable[[int], Array], terms: int, c: Array, degree: int) -> Array:
    """`sum_{i < terms} row(i) (s^i c)` truncated at `degree`; `row(i)` has a leading
    unit axis. The shifts are slices of one zero-padded copy of `c`:
    `s^i c = padded[n-i : n-i+degree+1]`.

    Under `vmap` XLA:CPU writes that copy as an (N, 2K+1) buffer, a sizeable part of a
    high-order pass's time; a pad of a slice per term instead ran no faster
    (docs/EMISSION.md, "Rows").

    The rows below `i` of a term are the pad's zeros: they are selected, not multiplied,
    so that an overflowed `row(i)` (`inf * 0`) leaves the rows below `i` exact, the
    primal too. The masks are constants, two equations per term (docs/EMISSION.md,
    "Overflow").
    """
    n = terms - 1
    pads = [(n, max(0, degree - degree_of(c)), 0)] + [(0, 0, 0)] * (c.ndim - 1)
    padded = lax.pad(c, jnp.zeros((), c.dtype), pads)
    orders = np.arange(degree + 1).reshape((degree + 1,) + (1,) * (c.ndim - 1))
    out, zeros = None, None
    for i in range(terms):
        term = row(i) * lax.slice_in_dim(padded, n - i, n - i + degree + 1)
        if i:
            zeros = jnp.zeros_like(term) if zeros is None else zeros
            term = lax.select(jnp.broadcast_to(orders >= i, term.shape), term, zeros)
        out = term if out is None else out + term
    return _SHIFTED_SUMS.mark(out)


# Outputs of `shifted_sum`: see `cauchy`.
_SHIFTED_SUMS = ArrayMarks()


def finite_part(a: Array, degree: int, summed: tuple[int, ...] = ()) -> tuple[Array, Array]:
    """`a` with its non-finite entries as 0, and the rows 0..degree of a product's
    poison: NaN from the first non-finite row of each entry on, else 0 (summed over the
    axes `summed` of `a`'s rows, those a product contracts, before the running sum).

    A Toeplitz table's zeros above its diagonal meet every row of the factor `a` in one
    dot, so an overflowed `a_i` (`inf * 0`) would put NaN in the rows below `i`, the
    primal too. Multiplied by the table as 0, it leaves those rows exact; the poison,
    added to the product (reduced as the product reduces `a`), makes the rows from `i`
    on not finite, as they would be (docs/EMISSION.md, "Overflow").
    """
    poison = jnp.sum(a * 0, axis=tuple(d + 1 for d in summed)) if summed else a * 0
    return jnp.where(jnp.isfinite(a), a, 0), running_rows(lax.cumsum(poison, 0), degree)


def running_rows(running: Array, degree: int) -> Array:
    """Rows 0..degree of a running sum over a factor's rows (`row * 0` summed: NaN from
    the first non-finite row on), its last row repeated past the factor's degree: a
    product's row `k` reads every row of the factor up to `k`."""
    extra = degree + 1 - running.shape[0]
    if extra <= 0:
        return running[: degree + 1]
    tail = jnp.broadcast_to(running[-1:], (extra,) + running.shape[1:])
    return lax.concatenate([running, tail], 0)


def cauchy_bilinear(op: Callable[[Array, Array], Array], a: Array, b: Array, order: int) -> Array:
    """Cauchy product for any bilinear `op` (matmul, convolution, ...)."""
    da, db = degree_of(a), degree_of(b)
    degree = min(da + db, order)
    if da == 0:
        return jax.vmap(lambda bk: op(a[0], bk))(b[: degree + 1])
    if db == 0:
        return jax.vmap(lambda ak: op(ak, b[0]))(a[: degree + 1])
    a, poison = finite_part(a[: degree + 1], degree)
    table = toeplitz(b, degree + 1, a.shape[0])

    def row(t_k):
        return jnp.sum(jax.vmap(op)(a, t_k), axis=0)

    # The table's zeros meet every row of `a`: a non-finite entry enters as 0, and
    # `op` with `b_0 * 0` carries its NaN to exactly the outputs it reaches, from its
    # row on (see `finite_part`).
    zero = b[0] * 0
    return jax.vmap(row)(table) + jax.vmap(lambda p: op(p, zero))(poison)


def product_rows_max_order(read_by_rows: bool = True) -> int:
    """Up to which order a product is a sum of row products (`cauchy`): the policy's
    `product_rows_max_order` for a product read row by row or whose two factors have
    rows of their own (`read_by_rows`), `stacked_product_rows_max_order` for the others.
    Past it, a shifted sum of stacks (a few equations per coefficient)."""
    p = _policy.current()
    return p.product_rows_max_order if read_by_rows else p.stacked_product_rows_max_order


def dot_rows(pairs, op: Callable[[Array, Array], Array] = operator.mul) -> Array | None:
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
    a_rows, b_rows = rows_of(a, degree + 1), rows_of(b, degree + 1)
    return [
        dot_rows(((a_rows[i], b_rows[k - i]) for i in range(k + 1)), op) for k in range(degree + 1)
    ]


def derivative_rows(x: Array, dtype, order: int) -> tuple[list, list]:
    """The rows `x_k` and `j x_j` (the coefficients of `x'`, shifted by one) up to `order`."""
    xs = rows_of(x.astype(dtype), order + 1)
    jx = [None] + [None if xs[j] is None else xs[j] * float(j) for j in range(1, order + 1)]
    return xs, jx
