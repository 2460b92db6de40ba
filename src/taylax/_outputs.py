"""How a pass's output series become the arrays `taylor`, `derivatives` and `jet` return.

Each output series is either split into its primal and its coefficients 1..K
(`output_pair`, `taylor` and `jet`) or kept as one stack of coefficients 0..K
(`output_stack`, `derivatives`), scaled into derivatives by `to_derivatives`. How the
stack is formed decides the kernels XLA writes it with: a long pass computes each row
into a buffer of its own (`long_pass_rows`), and on the CPU the coefficients of a scalar
output under `jax.vmap` are selected row by row (`selected_rows`), as are the
derivatives of one between the policy's orders (`selected_derivatives`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _policy
from ._fallback import DerivativeFactors
from ._series import (
    Series,
    factorials,
    known_rows,
    pad_degree,
    stack_rows_as,
    times_exact,
    times_number,
    with_known_rows,
)


def output_pair(o: Series, aval, order: int, select: bool = False):
    """(primal, coefficients 1..order) of an output series, shaped and typed like `aval`.

    A constant output (a Python number, an integer or boolean value) has zero coefficients
    of its own dtype: its derivatives are zero, as `jax.jacfwd` gives for integer outputs.
    With `select` the coefficients of a scalar output are `selected_rows` where the
    policy asks for them.
    """
    primal = jnp.broadcast_to(jnp.asarray(o.primal, aval.dtype), aval.shape)
    if o.is_constant or not jnp.issubdtype(aval.dtype, jnp.inexact):
        return primal, jnp.zeros((order, *aval.shape), aval.dtype)
    highest = _policy.current().selected_coefficients_max_order
    rows = _scalar_rows(o, aval, order, 1, highest) if select else None
    if rows is not None:
        return primal, selected_rows(rows[1:], aval.dtype)
    return primal, pad_degree(o.coeffs, order)[1:]


def _scalar_rows(o: Series, aval, order: int, lowest: int, highest: int | None):
    """The known rows 0..order of a scalar output series where `lowest <= order <=
    highest` (a policy's bound; None: no order), else None."""
    if aval.shape != () or o.is_constant or highest is None or not lowest <= order <= highest:
        return None
    rows = known_rows(o.coeffs)
    return rows if rows is not None and len(rows) == order + 1 else None


def _times_factorials(rows: list, order: int, dtype, first: int = 0) -> list:
    """Rows `first..order` each times its factorial as a number: a stack times a constant
    vector reads that vector per element under `vmap` ((points, K + 1), the points
    leading), and LLVM then left the kernel that writes the output unvectorized
    (docs/EMISSION.md, "Output kernels under vmap")."""
    factors = factorials(order, 0, dtype)[first:].astype(dtype)
    return [times_number(r, f) for r, f in zip(rows, factors)]


def selected_derivatives(o: Series, aval, order: int):
    """Derivatives 0..order of a scalar output series as `selected_rows`, each row times its
    factorial as a number, where the policy selects them at this order
    (`selected_derivatives_min_order <= order <= selected_derivatives_max_order`) and the
    rows are known; else None.

    Past `stacked_output_max_order` the stack of `derivatives` had been the primal and the
    coefficients concatenated and scaled by a constant vector of factorials: under
    `jax.vmap`, a kernel that wrote the `(points, K + 1)` output one row at a time and
    computed there the last products of the rows (for cos-exp-div-tanh at K = 8 the
    pass's largest kernel, 1,039 us per call summed over two threads; selected, 282).
    Selected, the output is written a point at a time (docs/EMISSION.md, "Outputs beside
    other outputs"). On a JAX without the `stack` primitive (0.9) the pass's own stack
    under `vmap` is a concatenate that XLA:CPU writes row by row, and the CPU policy
    selects from order 2.
    """
    policy = _policy.current()
    lowest, highest = policy.selected_derivatives_min_order, policy.selected_derivatives_max_order
    rows = _scalar_rows(o, aval, order, lowest, highest)
    if rows is None:
        return None
    return selected_rows(_times_factorials(rows, order, aval.dtype), aval.dtype)


def selected_rows(rows: list, dtype) -> jnp.ndarray:
    """`jnp.stack(rows)` of scalar rows as a chain of selects on the coefficient index,
    remembering the rows (`known_rows`).

    Under `jax.vmap` a stack of per-point scalars is a concatenate with the points minor,
    transposed to `(points, K)`. XLA:CPU writes that transpose in one kernel with the rows'
    expressions, a point's rows together (each `sin` once per point, vectorized over
    points), only where the stack is the program's sole result. Beside another result
    (`taylor`'s primal, or a user's `(f(x), d(x))`) the transposing copy is not fused:
    the concatenate becomes a kernel of one loop per row, each recomputing what the rows
    share (four vectorized `sin` calls where one did at K = 4), and a copy follows.
    The selects are elementwise on the `(points, K)` array: one loop over points in any
    program (docs/EMISSION.md, "Outputs beside other outputs").
    """
    rows = [jnp.asarray(r, dtype) for r in rows]
    index = lax.iota(np.int32, len(rows))
    out = jnp.broadcast_to(rows[0], (len(rows),))
    for k, row in enumerate(rows[1:], 1):
        out = jnp.where(index == k, row, out)
    return with_known_rows(out, rows)


def output_stack(o: Series, aval, order: int):
    """Coefficients 0..order of an output series as one `(order + 1, *aval.shape)` array.

    The primal stays the row it is in the pass instead of being split off and
    concatenated back: under `jax.vmap` the coefficient axis leads and the batch axis
    follows, and a concatenate of a primal batched at 0 with coefficients batched at 1
    transposes the coefficients first (docs/EMISSION.md, "Rows").
    """
    if o.is_constant or not jnp.issubdtype(aval.dtype, jnp.inexact):
        primal, coeffs = output_pair(o, aval, order)
        return lax.concatenate([primal[None], coeffs], 0)
    c = pad_degree(o.coeffs, order).astype(aval.dtype)
    return jnp.broadcast_to(c, (order + 1, *aval.shape))


def to_derivatives(c, order: int, scale: float, exact: bool = False, first: int = 1):
    """`k! c_k / scale^k` for the stacked coefficients `c_first..c_K` of a pass along
    `scale` times the direction: the derivatives along the direction. `exact` multiplies
    by the exact rationals (`k!` may be past the dtype's range) instead of rounded
    constants."""
    if scale == 1.0 and not exact:
        rows = known_rows(c)
        if rows is not None:
            rows = _times_factorials(rows, order, c.dtype, first)
            return stack_rows_as(rows, jnp.shape(c)[1:], c.dtype)
        factors = factorials(order, 0, c.dtype)[first:].astype(c.dtype)
        return c * factors.reshape((-1,) + (1,) * (c.ndim - 1))
    return times_exact(c, DerivativeFactors(order, scale, first).values())


def materialized_rows(o: Series, aval, order: int, pad_to: int | None = None):
    """Coefficients 0..order of an output, each row computed into a buffer of its own (an
    optimization barrier) and then stacked (the policy's `output_rows_apart_min_order`);
    None where the rows are not known (`known_rows`) and nothing is padded.

    With `pad_to` (a long pass, the policy's `output_rows_apart_min_equations`) the rows
    are read off the output's stack where they are not known, and go behind the barrier
    as one flat concatenate padded with constant elements to `pad_to` operands, sliced
    and reshaped after it: XLA:CPU drops the barrier before fusion but fuses no
    concatenate of more than `fused_concat_max_operands` operands, so each row stays a
    kernel of its own. Fused with the stack, the rows' shared expressions were
    recomputed once per row (docs/EMISSION.md, "Output rows on the CPU")."""
    rows = None if o.is_constant else known_rows(o.coeffs)
    if rows is None:
        if pad_to is None or o.is_constant:
            return None
        stack = output_stack(o, aval, order)
        rows = [stack[k] for k in range(order + 1)]
    rows = [
        jnp.zeros(aval.shape, aval.dtype) if k >= len(rows) else rows[k] for k in range(order + 1)
    ]
    rows = [jnp.broadcast_to(jnp.asarray(r, aval.dtype), aval.shape) for r in rows]
    if pad_to is None:
        return jnp.stack(lax.optimization_barrier(rows))
    # One flat concatenate, padded with single elements: padding rows of the output's
    # shape cost a whole array's traffic each on large arrays. Distinct constants: equal
    # ones became one `pad` in XLA's simplifier, and the stack was fused again.
    size = math.prod(aval.shape)
    padding = [jnp.full((1,), k + 2, aval.dtype) for k in range(pad_to - len(rows))]
    flat = lax.optimization_barrier(jnp.concatenate([r.reshape(-1) for r in rows] + padding))
    return flat[: (order + 1) * size].reshape(order + 1, *aval.shape)


def long_pass_rows(o: Series, aval, order: int):
    """Coefficients 0..order of a long pass's output, each row a kernel of its own: the
    padded concatenate of `materialized_rows`, one operand more than XLA:CPU fuses."""
    return materialized_rows(o, aval, order, _policy.current().fused_concat_max_operands + 1)


def output_pairs(outs, jaxpr, order: int, long: bool, select: bool = False) -> list:
    """`output_pair` of each output series (with `select`); a long pass's inexact outputs
    with their rows computed apart and padded (`long_pass_rows`)."""
    pairs = []
    for o, v in zip(outs, jaxpr.outvars):
        rows = None
        if long and jnp.issubdtype(v.aval.dtype, jnp.inexact):
            rows = long_pass_rows(o, v.aval, order)
        pairs.append(output_pair(o, v.aval, order, select) if rows is None else (rows[0], rows[1:]))
    return pairs
