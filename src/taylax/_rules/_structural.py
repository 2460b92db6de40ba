"""Rules for structural and linear primitives: coefficient k maps to coefficient k.

Most are registered with `deflinear`, which adds the coefficient axis with
`jax.vmap` so the primitive's own batching rule is reused. The most frequent
ones are written directly on the stacked array to keep the emitted program
small.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .. import _compat, _once, _one_way
from .._interpret import register_rule, taylor_rules
from .._series import Series, has_buffer_rows, pad_degree, with_primal
from ._arithmetic import by_rows
from ._common import (
    defelementwise_linear,
    deflinear,
    linear_inputs,
    pad_for_window,
    window_output_shape,
)

for _p in (lax.real_p, lax.imag_p, lax.conj_p, lax.complex_p):
    defelementwise_linear(_p)

for _p in (
    lax.gather_p,
    lax.scatter_p,
    lax.scatter_add_p,
    lax.scatter_sub_p,
    lax.dynamic_slice_p,
    lax.dynamic_update_slice_p,
    lax.pad_p,
    lax.split_p,
    lax.reduce_window_sum_p,
    lax.squeeze_p,
    lax.rev_p,
    lax.slice_p,
):
    deflinear(_p)

for _name in ("tile_p", "stack_p", "unstack_p"):
    if hasattr(lax, _name):
        deflinear(getattr(lax, _name))


@register_rule(lax.broadcast_in_dim_p)
def _broadcast_in_dim(order, x, *dyn, shape, broadcast_dimensions, sharding):
    del order
    if dyn:
        raise NotImplementedError("taylax does not support dynamic shapes in broadcast_in_dim.")
    c = x.coeffs
    return Series(
        lax.broadcast_in_dim(
            c, (c.shape[0],) + tuple(shape), (0,) + tuple(d + 1 for d in broadcast_dimensions)
        )
    )


@register_rule(lax.reshape_p)
def _reshape(order, x, *dyn, new_sizes, dimensions, sharding):
    del order, sharding
    if dyn or dimensions is not None:
        return jax.vmap(
            lambda c: lax.reshape_p.bind(
                c, *dyn, new_sizes=new_sizes, dimensions=dimensions, sharding=None
            )
        )(x.coeffs)
    c = x.coeffs
    return Series(lax.reshape(c, (c.shape[0],) + tuple(new_sizes)))


@register_rule(lax.transpose_p)
def _transpose(order, x, *, permutation):
    del order
    return Series(lax.transpose(x.coeffs, (0,) + tuple(p + 1 for p in permutation)))


@register_rule(lax.concatenate_p)
def _concatenate(order, *xs, dimension):
    del order
    degree = max(x.degree for x in xs)
    return Series(lax.concatenate([pad_degree(x.coeffs, degree) for x in xs], dimension + 1))


@register_rule(lax.reduce_sum_p)
def _reduce_sum(order, x, *, axes, out_sharding):
    del order, out_sharding
    return Series(
        lax.reduce_sum_p.bind(x.coeffs, axes=tuple(a + 1 for a in axes), out_sharding=None)
    )


@register_rule(lax.cumsum_p)
def _cumsum(order, x, *, axis, reverse):
    del order
    return Series(lax.cumsum_p.bind(x.coeffs, axis=axis + 1, reverse=reverse))


def _keeps_rows(prim) -> None:
    """Wrap the rule of a primitive linear in its one operand: an operand whose rows are
    known (`known_rows`) is mapped row by row, and the result's rows are known too.

    Applied to the stack, the primitive reads it whole, so XLA builds the stack, a
    concatenate that computes each row's producers again for every row (an exponential
    once per coefficient); row by row, each row's producers fuse into its reader. Rows
    that are buffers already (the pass's inputs, `ks.has_buffer_rows`) are summed
    stacked: nothing is recomputed there, and one by one they only add kernels
    (docs/EMISSION.md, "Rows").
    """
    stacked = taylor_rules[prim]

    def rule(order, x, *rest, **params):
        by_row = None
        if not rest and not has_buffer_rows(x.coeffs):
            by_row = by_rows(lambda r: prim.bind(r, **params), [x])
        return stacked(order, x, *rest, **params) if by_row is None else by_row

    register_rule(prim)(rule)


for _p in (lax.reduce_sum_p, lax.cumsum_p):
    _keeps_rows(_p)


@register_rule(lax.scatter_mul_p)
def _scatter_mul(order, operand, indices, updates, **params):
    if updates.is_constant:
        out = jax.vmap(
            lambda c: lax.scatter_mul_p.bind(c, indices.primal, updates.primal, **params)
        )(operand.coeffs)
        return Series(out)
    if not params.get("unique_indices", False):
        raise NotImplementedError(
            "taylax supports `scatter_mul` (x.at[i].multiply(u)) with updates `u` that depend "
            "on the input only when the indices are unique; pass `unique_indices=True` to "
            "`.at[...].multiply` if they are, or build the product with `*` instead."
        )
    from .._series import cauchy

    # x.at[i].multiply(u) == x * m with m = ones.at[i].set(u): m's coefficient 0 is
    # scatter(ones, i, u_0), its coefficient k >= 1 is scatter(zeros, i, u_k).
    scatter_params = dict(params, update_jaxpr=None)
    base = pad_degree(jnp.ones((1,) + operand.shape, operand.dtype), updates.degree)
    multiplier = jax.vmap(lambda b, u: lax.scatter_p.bind(b, indices.primal, u, **scatter_params))(
        base, updates.coeffs
    )
    return Series(cauchy(operand.coeffs, multiplier, order))


@register_rule(lax.reduce_window_max_p)
def _reduce_window_max(order, x, **params):
    return _window_chooser(lax.reduce_window_max_p, lax.gt, -jnp.inf, x, params)


@register_rule(lax.reduce_window_min_p)
def _reduce_window_min(order, x, **params):
    return _window_chooser(lax.reduce_window_min_p, lax.lt, jnp.inf, x, params)


def _window_chooser(prim, better, pad_value, x, params):
    y0 = prim.bind(x.primal, **params)
    chosen = _chosen(x.primal, x.coeffs, better, pad_value, y0.shape, params)
    return Series(with_primal(chosen, y0))


# JAX's derivative of max and min pooling (what `jax.jvp` of one binds): linear in the
# tangents, while the operand only chooses.
linear_inputs[lax.select_and_gather_add_p] = lambda i, x: i == 0


@register_rule(lax.select_and_gather_add_p)
def _select_and_gather_add(order, tangents, operand, *, select_prim, **params):
    del order
    choices = {lax.ge_p: (lax.gt, -jnp.inf), lax.le_p: (lax.lt, jnp.inf)}
    if select_prim not in choices:
        raise NotImplementedError(
            f"taylax supports `select_and_gather_add` with select_prim `ge` or `le` (max or "
            f"min pooling), not `{select_prim}`."
        )
    out_shape = window_output_shape(operand.shape, **params)
    better, pad_value = choices[select_prim]
    return Series(_chosen(operand.primal, tangents.coeffs, better, pad_value, out_shape, params))


def _chosen(values, coeffs, better, pad_value, out_shape, params):
    """`coeffs` (a coefficient axis in front of `values`' shape) at the element that each
    window of `values` chooses: the first maximal (`better = lax.gt`) or minimal
    (`lax.lt`) one in row-major window order. At ties that is one valid choice among
    several: XLA leaves the order of a window's reduction open, and JAX's own jvp on the
    CPU chooses the same element in most windows but not all (a (2, 3) window with
    strides (2, 3), say).

    Exact on every backend: JAX's own `select_and_gather_add` packs value and tangent into
    one 64-bit word off the CPU, keeping 32 bits of each float64. The window is separable,
    so the choice runs axis by axis, last axis first (row-major ties), each by doubling:
    `O(log w)` selects per axis of window `w`.
    """
    if 0 in out_shape:
        return jnp.zeros((coeffs.shape[0], *out_shape), coeffs.dtype)
    padding, dilation = params["padding"], params["base_dilation"]
    values = pad_for_window(values, pad_value, padding, dilation)
    coeffs = pad_for_window(coeffs, 0, padding, dilation, lead=1)
    for axis in reversed(range(values.ndim)):
        window = (
            params["window_dimensions"][axis],
            params["window_dilation"][axis],
            params["window_strides"][axis],
        )
        values, coeffs = _choose_along(values, coeffs, axis, out_shape[axis], window, better)
    return coeffs


def _choose_along(values, coeffs, axis, count, window, better):
    """The `count` positions `i * stride` along `axis`, each holding the element chosen
    among `i * stride + j * dilation` for `j < size` (`window = (size, dilation,
    stride)`): blocks of 1, 2, 4, ... elements, then two overlapping blocks for `size`;
    the last step is taken at the strided positions only. A later block wins only if
    `better` strictly, so ties keep the first element."""
    size, dilation, stride = window
    offsets = []  # where each step's later block starts
    span = 1
    while 2 * span <= size:
        offsets.append(span * dilation)
        span *= 2
    if span < size:
        offsets.append((size - span) * dilation)
    if not offsets:  # one element along this axis: only the stride
        return _cut(values, axis, 0, count, stride), _cut(coeffs, axis + 1, 0, count, stride)
    for n, offset in enumerate(offsets):
        last = n == len(offsets) - 1
        length, step = (count, stride) if last else (values.shape[axis] - offset, 1)
        v1, v2 = (_cut(values, axis, start, length, step) for start in (0, offset))
        c1, c2 = (_cut(coeffs, axis + 1, start, length, step) for start in (0, offset))
        take = better(v2, v1)
        values, coeffs = jnp.where(take, v2, v1), jnp.where(take[None], c2, c1)
    return values, coeffs


def _cut(a, axis, start, length, step):
    """`length` elements of `a` along `axis` from `start`, `step` apart."""
    return lax.slice_in_dim(a, start, start + (length - 1) * step + 1, step, axis=axis)


defelementwise_linear(_compat.add_any_p)
deflinear(lax.fft_p)


@register_rule(_compat.device_put_p)
def _device_put(order, *xs, **params):
    del order
    outs = _compat.device_put_p.bind(
        *[x.primal if x.is_constant else x.coeffs for x in xs], **params
    )
    return [Series.constant(o) if x.is_constant else Series(o) for o, x in zip(outs, xs)]


@register_rule(lax.optimization_barrier_p)
def _optimization_barrier(order, *xs, **params):
    del order
    outs = lax.optimization_barrier_p.bind(
        *[x.primal if x.is_constant else x.coeffs for x in xs], **params
    )
    return [Series.constant(o) if x.is_constant else Series(o) for o, x in zip(outs, xs)]


# The identity on every coefficient; the refused mode still meets its refusal.
for _p in (_one_way.forward_only_p, _one_way.reverse_only_p):
    defelementwise_linear(_p)


@register_rule(_once.computed_once_p)
def _computed_once(order, x, one, **params):
    # The identity on every coefficient: each stays marked as the primal was.
    del order
    if x.is_constant:
        return Series.constant(_once.computed_once_p.bind(x.primal, one.primal, **params))
    ones = jnp.broadcast_to(one.primal, x.coeffs.shape)
    return Series(_once.computed_once_p.bind(x.coeffs, ones, **params))
