"""Rules for reductions, cumulative reductions and sorting.

Choosers (max, min, sort, top_k) follow the primal: the series of the chosen
element is carried along, with ties averaged exactly as lax's jvp does.
Products use Cauchy products in a tree; cumulative versions use the same
`associative_scan` that JAX's own jvp differentiates.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax import lax

from .. import _series
from .._interpret import register_rule
from .._series import Series
from ._arithmetic import choose, log_series


def _reduce_chooser(prim):
    def rule(order, x, *, axes, **params):
        del order
        z0 = prim.bind(x.primal, axes=axes, **params)
        keep = [1 if i in axes else d for i, d in enumerate(x.shape)]
        location = (x.primal == lax.reshape(z0, keep)).astype(x.dtype)
        counts = jnp.sum(location, axis=axes)
        stacked_axes = tuple(a + 1 for a in axes)
        total = jnp.sum(x.coeffs * location[None], axis=stacked_axes) / counts[None]
        return Series(_series.with_primal(total, z0))

    register_rule(prim)(rule)


_reduce_chooser(lax.reduce_max_p)
_reduce_chooser(lax.reduce_min_p)


@register_rule(lax.reduce_prod_p)
def _reduce_prod(order, x, *, axes, **params):
    c = x.coeffs
    kept = [i for i in range(len(x.shape)) if i not in axes]
    perm = (0,) + tuple(i + 1 for i in kept) + tuple(a + 1 for a in axes)
    c = lax.transpose(c, perm)
    n = 1
    for a in axes:
        n *= x.shape[a]
    c = lax.reshape(c, c.shape[: 1 + len(kept)] + (n,))
    # Pairwise products in a tree: log2(n) levels of Cauchy products.
    while c.shape[-1] > 1:
        if c.shape[-1] % 2:
            one = jnp.zeros(c.shape[:-1] + (1,), c.dtype).at[0].set(1)
            c = lax.concatenate([c, one], c.ndim - 1)
        half = c.shape[-1] // 2
        c = _series.cauchy(c[..., :half], c[..., half:], order)
    out = lax.squeeze(c, (c.ndim - 1,))
    return Series(_series.with_primal(out, lax.reduce_prod_p.bind(x.primal, axes=axes, **params)))


def _cumulative(prim, combine):
    def rule(order, x, *, axis, reverse):
        y0 = prim.bind(x.primal, axis=axis, reverse=reverse)
        out = lax.associative_scan(
            functools.partial(combine, order),
            _series.pad_degree(x.coeffs, order),
            reverse=reverse,
            axis=axis + 1,
        )
        return Series(_series.with_primal(out, y0))

    register_rule(prim)(rule)


def _series_mul(order, a, b):
    return _series.cauchy(a, b, order)


def _series_chooser(select):
    def combine(order, a, b):
        del order
        x, y = Series(a), Series(b)
        return choose(x, y, select(x.primal, y.primal)).coeffs

    return combine


_cumulative(lax.cumprod_p, _series_mul)
_cumulative(lax.cummax_p, _series_chooser(lax.max))
_cumulative(lax.cummin_p, _series_chooser(lax.min))


@register_rule(lax.cumlogsumexp_p)
def _cumlogsumexp(order, x, *, axis, reverse):
    # cumlogsumexp(x) = m + log(cumsum(exp(x - m))) for any m constant along the axis;
    # m = max along the axis keeps exp from overflowing.
    y0 = lax.cumlogsumexp(x.primal, axis=axis, reverse=reverse)
    m = jnp.max(x.primal, axis=axis, keepdims=True)
    shifted = _series.with_primal(_series.pad_degree(x.coeffs, order), x.primal - m)
    (e,) = _series.linear_ode(shifted, [lax.exp(x.primal - m)], [[1]], order)
    total = lax.cumsum(e, axis=axis + 1, reverse=reverse)
    return Series(log_series(total, y0, order))


@register_rule(lax.sort_p)
def _sort(order, *xs, dimension, is_stable, num_keys):
    del order
    primals = [x.primal for x in xs]
    iota = lax.broadcasted_iota(jnp.int32, xs[0].shape, dimension)
    outs = lax.sort_p.bind(
        *primals, iota, dimension=dimension, is_stable=is_stable, num_keys=num_keys
    )
    perm = outs[-1]
    result = []
    for x, sorted_primal in zip(xs, outs[:-1]):
        if x.is_constant:
            result.append(Series.constant(sorted_primal))
            continue
        index = jnp.broadcast_to(perm[None], x.coeffs.shape)
        taken = jnp.take_along_axis(x.coeffs, index, axis=dimension + 1)
        result.append(Series(_series.with_primal(taken, sorted_primal)))
    return result


@register_rule(lax.top_k_p)
def _top_k(order, x, **params):
    del order
    values, indices = lax.top_k_p.bind(x.primal, **params)
    axis = params.get("axis", len(x.shape) - 1)
    index = jnp.broadcast_to(indices[None], (x.degree + 1,) + indices.shape)
    taken = jnp.take_along_axis(x.coeffs, index, axis=axis + 1)
    return [Series(_series.with_primal(taken, values)), Series.constant(indices)]
