"""Helpers that make most Taylor rules one line."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _policy
from .._compat import Primitive
from .._interpret import register_rule
from .._series import Series, lift, pad_degree, unrolled, with_primal


def is_inexact(x: Series) -> bool:
    return jnp.issubdtype(x.dtype, np.inexact)


def common_degree(xs: Sequence[Series]) -> int:
    return max(x.degree for x in xs)


def aligned(xs: Sequence[Series], degree: int | None = None) -> list:
    """Stacked coefficients of `xs`, padded to one degree and broadcast to one shape."""
    degree = common_degree(xs) if degree is None else degree
    shape = jnp.broadcast_shapes(*[x.shape for x in xs])
    out = []
    for x in xs:
        c = pad_degree(x.coeffs, degree)
        if x.shape != shape:
            c = lift(c, len(shape))
            c = jnp.broadcast_to(c, (degree + 1,) + tuple(shape))
        out.append(c)
    return out


def primals(xs: Sequence[Series]) -> list:
    return [x.primal for x in xs]


def bind_primal(primitive: Primitive, xs: Sequence[Series], params: dict):
    return primitive.bind(*primals(xs), **params)


# Primitives that are jointly linear in some of their inputs, with the predicate that says
# which (`linear(i, x)` for input `i`). The collapsed multi-direction passes
# (`taylax._collapsed`) apply these to every coefficient at once instead of per direction.
linear_inputs: dict[Primitive, Callable[[int, Series], bool]] = {}

# The order a closed form along a line is accurate to: a number, None for any order, or
# a function of the input's dtype giving one (tanh's basis suits real values only).
LineMaxOrder = int | None | Callable[[np.dtype], int | None]

# Elementwise functions with a closed form along a line: `line_coeffs(x0, order)` gives
# `f^(k)(x0)/k!` for k = 0..order, accurate up to the order given (`line_reaches`).
line_coefficients: dict[Primitive, tuple[Callable, LineMaxOrder]] = {}


def line_reaches(max_order: LineMaxOrder, order: int, dtype) -> bool:
    """Whether a closed form accurate up to `max_order` serves `order` for `dtype`."""
    if callable(max_order):
        max_order = max_order(np.dtype(dtype))
    return max_order is None or order <= max_order


def deflinear(primitive: Primitive, linear: Callable[[int, Series], bool] | None = None) -> None:
    """Register the rule of a primitive that is jointly linear in its inexact inputs.

    Coefficient `k` of the output is the primitive applied to coefficient `k`
    of every linear input (other inputs, such as integer indices, are used as
    they are). The coefficient axis is added with `jax.vmap`, so the
    primitive's own batching rule decides how.
    """
    linear = linear or (lambda i, x: is_inexact(x))
    linear_inputs[primitive] = linear

    def rule(order, *xs, **params):
        del order
        which = [linear(i, x) for i, x in enumerate(xs)]
        degree = max(x.degree for x, w in zip(xs, which) if w)
        stacked = [pad_degree(x.coeffs, degree) if w else x.primal for x, w in zip(xs, which)]
        in_axes = [0 if w else None for w in which]
        out = jax.vmap(lambda *a: primitive.bind(*a, **params), in_axes=in_axes)(*stacked)
        if primitive.multiple_results:
            return [Series(o) for o in out]
        return Series(out)

    register_rule(primitive)(rule)


def defelementwise_linear(primitive: Primitive) -> None:
    """Register an elementwise primitive linear in all inputs: bind on stacked arrays."""
    linear_inputs[primitive] = lambda i, x: is_inexact(x)

    def rule(order, *xs, **params):
        del order
        return Series(primitive.bind(*aligned(xs), **params))

    register_rule(primitive)(rule)


def defconstant(primitive: Primitive) -> None:
    """Register a piecewise-constant primitive: its series is its primal (nested jvp gives 0)."""

    def rule(order, *xs, **params):
        del order
        out = bind_primal(primitive, xs, params)
        if primitive.multiple_results:
            return [Series.constant(o) for o in out]
        return Series.constant(out)

    register_rule(primitive)(rule)


def weighted_sum(xs: Sequence[Series], weights: Sequence, primal) -> Series:
    """`out_k = sum_i w_i x_{i,k}` for k >= 1 with weights fixed by the primals."""
    stacked = aligned(xs)
    total = None
    for c, w in zip(stacked, weights):
        term = c * jnp.asarray(w, c.dtype)[None]
        total = term if total is None else total + term
    return Series(with_primal(total, primal))


# Elementwise rules whose recurrences sweep the whole (order+1, *shape) state once
# per coefficient are memory-bound on large arrays. On XLA:CPU, running them on chunks
# of the elements that fit in cache (one `lax.map`) keeps the state in cache from one
# coefficient to the next (docs/EMISSION.md, "Chunks"); the policy's `element_chunk` is
# the target number of stacked elements per chunk (None on platforms where the loop
# only serializes the work, as on GPUs).
def chunk_size(order: int, element_chunk: int) -> int:
    target = max(64, element_chunk // (order + 1))
    return 1 << (target.bit_length() - 1)


def over_element_chunks(rule):
    """Run an elementwise rule chunk by chunk over its elements when they are many.

    The rule must treat every element independently (no reductions across
    elements) and return one `Series`.
    """

    def wrapped(order, *xs, **params):
        shape = tuple(jnp.broadcast_shapes(*[x.shape for x in xs]))
        size = int(np.prod(shape)) if shape else 1
        element_chunk = _policy.current().element_chunk
        # Unrolled recurrences are straight-line elementwise code: nothing to chunk.
        if element_chunk is None or unrolled(order) or all(x.is_constant for x in xs):
            return rule(order, *xs, **params)
        width = chunk_size(order, element_chunk)
        if size < 2 * width:
            return rule(order, *xs, **params)
        count = -(-size // width)
        padded = count * width

        def split(x: Series):
            c = jnp.broadcast_to(x.coeffs, (x.degree + 1,) + shape)
            c = c.reshape(x.degree + 1, size)
            if padded > size:
                # Pad with ones: a harmless point for every elementwise function here.
                c = jnp.concatenate([c, jnp.ones((x.degree + 1, padded - size), c.dtype)], 1)
            return c.reshape(x.degree + 1, count, width).transpose(1, 0, 2)

        def one_chunk(chunks):
            return rule(order, *[Series(c) for c in chunks], **params).coeffs

        out = lax.map(one_chunk, [split(x) for x in xs])
        out = out.transpose(1, 0, 2).reshape(out.shape[1], padded)[:, :size]
        return Series(out.reshape((out.shape[0],) + shape))

    return wrapped


def pad_for_window(x, pad_value, padding, base_dilation, lead: int = 0):
    """`x` dilated and padded with `pad_value` as `reduce_window` does, behind `lead`
    axes it leaves alone (a coefficient axis)."""
    config = [(0, 0, 0)] * lead + [(lo, hi, b - 1) for (lo, hi), b in zip(padding, base_dilation)]
    return lax.pad(x, jnp.asarray(pad_value, x.dtype), config)


def window_output_shape(
    shape, *, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    """The shape `reduce_window` (and `select_and_gather_add`) give an operand of `shape`."""
    out = []
    for d, w, st, (lo, hi), b, wd in zip(
        shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
    ):
        padded = (d - 1) * b + 1 + lo + hi if d else lo + hi
        extent = (w - 1) * wd + 1
        out.append(max(0, (padded - extent) // st + 1) if padded >= extent else 0)
    return tuple(out)
