"""Rows: stacks whose coefficients are known as separate arrays, so that readers take a
row itself rather than a slice of the stack, and the side tables that remember them.

A *stack* is a series as one array `(d+1, *shape)`; its *rows* are its coefficients.
Five questions about rows, each one function:

- `rows_wanted(order)`: should a rule build its result row by row? (The emission
  policy's choice: `rows_max_order`, `loop_rows_max_order` in loop bodies.)
- `known_rows(c)`: the arrays `c` was stacked from (`stack_rows`), which readers take
  instead of slicing `c`; None for any other stack.
- `has_separate_rows(c)`: can row k of `c` be read without a pass over all of `c`?
  (Stacks of known rows, and closed forms along a line.)
- `has_buffer_rows(c)`: are `c`'s rows buffers that exist anyway (a pass's inputs), so
  that reading them one by one adds no work?
- `taylax._pass.read_row_by_row()`: will the readers of the equation being evaluated
  take its output one row at a time (a network's next layer)?
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _policy
from .._pass import in_loop_body
from ._coeffs import Array, degree_of, derivative_stack, orders, pad_degree, pad_degree_low
from ._identity import ArrayMarks


def with_primal(c: Array, primal: Array) -> Array:
    """Replace coefficient 0 (the primal) of a stacked series.

    A select against the coefficient index, not a `dynamic_update_slice`: it fuses
    into its consumers, and under `vmap` it does not become a scatter. A stack of known
    rows (`known_rows`) is restacked instead, so that its readers keep the rows.
    """
    known = known_rows(c)
    if known is not None:
        return stack_rows_as([primal, *known[1:]], c.shape[1:], c.dtype)
    primal = lax.broadcast_in_dim(jnp.asarray(primal, c.dtype), c.shape, tuple(range(1, c.ndim)))
    first = lax.broadcasted_iota(np.int32, c.shape, 0) == 0
    return lax.select(first, primal, c)


def stack_primal(primal: Array, rest: Array) -> Array:
    """Stack a primal in front of coefficients 1..d (a pad and a select: fusable)."""
    return with_primal(pad_degree_low(rest), primal)


def integrate(g: Array, y0: Array, degree: int) -> Array:
    """Series `y` with `y_0 = y0` and `y' = g`: `y_k = g_{k-1} / k`.

    Row by row where `g`'s rows are known (`known_rows`): one stacked division would
    build `g`'s stack, under `vmap` a (points, coefficients) buffer whose readers take
    its rows as strided columns (docs/EMISSION.md, "Stacks under vmap")."""
    known = known_rows(g)
    if known is not None:
        shape = jnp.broadcast_shapes(g.shape[1:], jnp.shape(y0))
        dtype = jnp.result_type(g, y0)
        zero = jnp.zeros(shape, dtype)
        rows = [y0] + [
            known[k - 1] * (1.0 / k) if k <= len(known) else zero for k in range(1, degree + 1)
        ]
        return stack_rows_as(rows, shape, dtype)
    g = pad_degree(g, degree - 1)
    rest = g / orders(degree, g.ndim - 1, g.dtype)[1:]
    return stack_primal(y0, rest)


def derivative_series(c: Array) -> Array:
    """Series of `dx/ds`: `(x')_m = (m+1) x_{m+1}`, degree one lower; row by row where
    `c`'s rows are known (`known_rows`), else one stacked product (`derivative_stack`)."""
    known = known_rows(c)
    if known is None or len(known) < 2:
        return derivative_stack(c)
    return stack_rows_as(
        [known[m + 1] * float(m + 1) for m in range(len(known) - 1)], c.shape[1:], c.dtype
    )


def sum_series(a: Array, b: Array, sign: float = 1.0) -> Array:
    """`a + sign b` for stacked series of possibly different degrees: row by row where
    both have known rows (`known_rows`), so that no (points, K) stack is built under
    `vmap`; else padded to the higher degree."""
    ra, rb = known_rows(a), known_rows(b)
    if ra is None or rb is None:
        degree = max(degree_of(a), degree_of(b))
        return pad_degree(a, degree) + sign * pad_degree(b, degree)
    rows = []
    for k in range(max(len(ra), len(rb))):
        p = ra[k] if k < len(ra) else None
        q = rb[k] if k < len(rb) else None
        q = None if q is None else (q if sign == 1.0 else sign * q)
        rows.append(q if p is None else p if q is None else p + q)
    return stack_rows(rows)


def scaled_series(c: Array, factor: float, shift: float = 0.0) -> Array:
    """`shift + factor * c` (Python numbers; `shift` added to the primal row only), row by
    row where `c`'s rows are known (`known_rows`): one stacked product is, under `vmap`,
    a (points, k) buffer whose readers take its rows as strided columns."""
    known = known_rows(c)
    if known is None:
        scaled = c if factor == 1.0 else c * factor
        return scaled if shift == 0.0 else with_primal(scaled, shift + factor * c[0])
    rows = [r if factor == 1.0 else r * factor for r in known]
    if shift != 0.0:
        rows[0] = shift + rows[0]
    return stack_rows_as(rows, c.shape[1:], c.dtype)


def rows_of(c: Array, count: int) -> list[Array]:
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
    return rows_of(c, k + 1)[k]


def stack_rows_as(rows: list[Array], shape, dtype) -> Array:
    """Stack `rows` (broadcast to `shape`, cast to `dtype`), remembering them (`known_rows`)."""
    rows = [jnp.broadcast_to(jnp.asarray(r, dtype), shape) for r in rows]
    return with_known_rows(jnp.stack(rows), rows)


def stack_rows(rows: list[Array]) -> Array:
    """`stack_rows_as` for rows of one shape and dtype (they broadcast against each other)."""
    shape = jnp.broadcast_shapes(*(jnp.shape(r) for r in rows))
    return stack_rows_as(rows, shape, jnp.result_type(*rows))


def with_known_rows(stacked: Array, rows: list[Array]) -> Array:
    """`stacked` (equal to `jnp.stack(rows)`), remembering `rows` as its rows (`known_rows`).

    For closed forms whose stack XLA should fuse into its readers: a concatenate of more
    than `fused_concat_max_operands()` rows is not fused, and each of its rows becomes a
    kernel of its own. Readers of a row still take the row itself.
    """
    stacked = jnp.asarray(stacked)
    mark_separate_rows(stacked)
    return _ROW_LISTS.mark(stacked, rows)


def fused_concat_max_operands() -> int:
    """How many rows a stack may have and still be fused into its readers (the policy's
    `fused_concat_max_operands`: XLA:CPU's limit on a fused concatenate)."""
    return _policy.current().fused_concat_max_operands


def leading_rows(c: Array, count: int) -> Array:
    """`c[:count]`, keeping the known rows (`known_rows`) of `c`."""
    if c.shape[0] <= count:
        return c
    known = known_rows(c)
    if known is None:
        return c[:count]
    return stack_rows_as(known[:count], c.shape[1:], c.dtype)


def mark_buffer_rows(c: Array) -> Array:
    """Record that the known rows of `c` are buffers that exist anyway (a pass's inputs
    `x` and `v`), not expressions a reader would compute: see `has_buffer_rows`."""
    return _BUFFER_ROWS.mark(c)


def has_buffer_rows(c: Array) -> bool:
    """Whether `mark_buffer_rows` recorded `c`: a reduction of its rows one by one would
    only add kernels (each row read once either way, nothing recomputed)."""
    return c in _BUFFER_ROWS


_BUFFER_ROWS = ArrayMarks()


def known_rows(c: Array) -> list[Array] | None:
    """The rows `c` was stacked from by `stack_rows_as` (this very array), or None.

    Readers that take row k of a series use the row itself, not a slice of the stack:
    under `vmap` the stack is a (points, coefficients) array, a concatenate along the
    minor axis, which XLA:CPU always materializes; a slice of it reads that buffer,
    whereas the row's own few products fuse into the reader. A stack no reader takes
    whole is then never built. In loop bodies only up to the policy's `loop_rows_max_order`
    (`in_loop_body`).
    """
    if in_loop_body() and degree_of(c) > _policy.current().loop_rows_max_order:
        return None
    return _ROW_LISTS.get(c) if has_separate_rows(c) else None


def rows_wanted(order: int) -> bool:
    """Whether closed forms and powers of `order` are built row by row (`known_rows`):
    up to the policy's `rows_max_order`, and in loop bodies up to `loop_rows_max_order`."""
    p = _policy.current()
    limit = p.loop_rows_max_order if in_loop_body() else p.rows_max_order
    return order <= limit


# Stacked arrays whose rows XLA reads without a pass over the whole stack: rows stacked
# from their own buffers (a slice of the stack is the buffer) and closed forms along a
# line (a row is recomputed from the primal's few buffers). Under `vmap` a row of any
# other stack is a column of a (points, coefficients) array, which costs a pass over all
# of it: recurrences that read `a_k` for each k ask this first (see `divide`).
_SEPARATE_ROWS = ArrayMarks()


# Stacks built by `stack_rows_as`, with their rows (see `known_rows`).
_ROW_LISTS = ArrayMarks()


def mark_separate_rows(c: Array) -> Array:
    """Record that the rows of the stacked array `c` can be read one at a time cheaply."""
    return _SEPARATE_ROWS.mark(c)


def has_separate_rows(c: Array) -> bool:
    """Whether `mark_separate_rows` recorded `c` (this very array, not an equal one)."""
    return c in _SEPARATE_ROWS
