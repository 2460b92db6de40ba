"""Values that XLA computes once into a buffer, or fuses into their readers, by size.

A Taylor kernel reads each coefficient once per later coefficient, and XLA:CPU copies
cheap elementwise producers into every kernel that reads them. Marking a value (a
division by an `opaque_one`, which XLA does not copy) makes XLA compute it once into a
buffer the readers share (see `taylax._series.computed_once`). A buffer has a price:
written, read back and, for large arrays, freshly allocated on every call (glibc serves
blocks past its `mmap` threshold afresh, so every page faults on first touch). At low
orders the readers are few and the copies cheap, so above the policy's `unmarked_min_bytes` a mark
costs more than it saves.

The size of a value is known only when the program is lowered: `jax.vmap` batches the
traced program afterwards, so the Taylor rules see one point's shapes. The mark is
therefore a primitive, `taylax_computed_once`, that is lowered as the marking division
or as the value itself once its batched shape is known. It records the shape the pass
traced (`traced_shape`), so that the lowering also knows whether `vmap` batched the value:
at the lowest orders that decides (`stays_marked`).

A mark of kind `"row"` (and its shield, `"row shield"`) is one a rule may leave off: a
recurrence's rows that XLA can recompute in their readers. It is lowered marked only
where the value is also smaller than the policy's `rows_unmarked_min_bytes`: a small
buffer stays in cache and costs less than the recomputation, a large one is a pass over
memory per row (docs/EMISSION.md, "Rows marked by size"). A `"point row"` mark (and its
`"point row shield"`) is the same where `jax.vmap` batched the value after tracing, and is
always lowered marked at the shape the pass traced (a whole array's rows).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _compat, _policy

computed_once_p = _compat.Primitive("taylax_computed_once")


def mark(value, one, *, kind: str, pass_order: int | None):
    """Bind `taylax_computed_once` on `value` with `one` (an `opaque_one`, exactly 1).

    `kind="once"` marks `value` (lowered as `value / one`); `kind="shield"` protects a
    marked value from XLA's division rewrites (lowered as `value * one`); `"row"` and
    `"row shield"` are the same for a value marked only while small, `"point row"` and
    `"point row shield"` for one marked so only where `vmap` batched it (`stays_marked`).
    `pass_order` is the Taylor pass's order (None: always marked).
    """
    if jnp.shape(one) != jnp.shape(value):
        one = jnp.broadcast_to(one, jnp.shape(value))
    shape = tuple(jnp.shape(value))
    return computed_once_p.bind(value, one, kind=kind, pass_order=pass_order, traced_shape=shape)


def unmarked_at_any_size(order: int | None, policy=None) -> bool:
    """Whether no value batched after tracing in a pass of `order` (None: outside a pass)
    is lowered marked (the policy's `mark_values` and `unmarked_any_size_max_order`)."""
    policy = policy or _policy.current()
    if not policy.mark_values:
        return True
    return order is not None and order <= policy.unmarked_any_size_max_order


def stays_marked(aval, order: int | None, policy=None, traced_shape=None, kind="once") -> bool:
    """Whether a value of abstract type `aval` in a pass of `order` is lowered marked:
    always past the policy's `unmarked_max_order`, below it where the value is smaller
    than `unmarked_min_bytes` (a buffer of that size stays in cache).

    At the lowest orders (`unmarked_at_any_size`) the value's shape when the pass traced
    it decides (`traced_shape`; None: unknown). Batched by `jax.vmap` after tracing, it
    is not marked: the pass is one kernel that writes its output point by point, and
    each point's rows share what they read. Lowered at its traced shape, it is marked
    while smaller than `unbatched_unmarked_min_bytes`: the output's rows are then
    written one after another, and unmarked each computed again what they share
    (docs/EMISSION.md, "Values computed once").

    A `"row"` mark (or its shield) is lowered marked only past `unmarked_max_order` and
    where the value is smaller than `rows_unmarked_min_bytes` (None: at every size). A
    `"point row"` mark is one too where `jax.vmap` batched it after tracing, and is
    lowered marked at its traced shape (a whole array's pass)."""
    policy = policy or _policy.current()
    if not policy.mark_values:
        return False
    size = math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    unbatched = traced_shape is not None and tuple(aval.shape) == tuple(traced_shape)
    if kind.startswith(("row", "point row")):
        # Few rows read few buffers: up to `unmarked_max_order` recomputing them cost
        # less at every size (docs/EMISSION.md, "Rows marked by size"). A quotient by a
        # series, whose rows each read every row before them, ran 1.14-1.68x slower
        # unmarked over a whole array ("A quotient by a series").
        least = policy.rows_unmarked_min_bytes
        past_lowest = order is None or order > policy.unmarked_max_order
        if kind.startswith("point row") and unbatched:
            return past_lowest
        return past_lowest and (least is None or size < least)
    if unmarked_at_any_size(order, policy):
        least = policy.unbatched_unmarked_min_bytes
        return unbatched and least is not None and size < least
    if order is None or order > policy.unmarked_max_order:
        return True
    return size < policy.unmarked_min_bytes


def _marked(value, one, *, kind, pass_order, traced_shape):
    del pass_order, traced_shape
    if kind in ("once", "row", "point row"):
        return [value / one]
    if jnp.iscomplexobj(value):  # part by part: `inf * (1 + 0j)` has a nan part
        return [lax.complex(lax.real(value) * one, lax.imag(value) * one)]
    return [value * one]


_lower_marked = _compat.mlir.lower_fun(_marked, multiple_results=True)


def _lower(ctx, value, one, *, kind, pass_order, traced_shape):
    # Lowered for a known platform: its policy decides, unless a user set one.
    policy = _policy.for_lowering(ctx.module_context.platforms)
    if stays_marked(ctx.avals_in[0], pass_order, policy, traced_shape, kind):
        return _lower_marked(
            ctx, value, one, kind=kind, pass_order=pass_order, traced_shape=traced_shape
        )
    return [value]


def _abstract_eval(value, one, **params):
    # The value's own type (its sharding, and the mesh axes it varies over inside
    # `shard_map`: a rebuilt type dropped them, and a collective then rejected the value).
    del one, params
    return value.update(weak_type=False)


def _impl(value, one, **params):
    del one, params
    return value


def _jvp(primals, tangents, **params):
    value, one = primals
    tangent = _compat.ad.instantiate_zeros(tangents[0])
    return computed_once_p.bind(value, one, **params), computed_once_p.bind(tangent, one, **params)


def _transpose(cotangent, value, one, **params):
    del value
    if type(cotangent) is _compat.ad.Zero:
        return [None, None]
    return [computed_once_p.bind(cotangent, one, **params), None]


def _batch(args, dims, **params):
    # `traced_shape` stays the unbatched one: the lowering tells a batched value by it.
    value, one = args
    size = next(jnp.shape(a)[d] for a, d in zip(args, dims) if d is not None)
    value = _compat.batching.bdim_at_front(value, dims[0], size)
    one = _compat.batching.bdim_at_front(one, dims[1], size)
    return computed_once_p.bind(value, one, **params), 0


computed_once_p.def_impl(_impl)
computed_once_p.def_abstract_eval(_abstract_eval)
_compat.mlir.register_lowering(computed_once_p, _lower)
_compat.ad.primitive_jvps[computed_once_p] = _jvp
_compat.ad.primitive_transposes[computed_once_p] = _transpose
_compat.batching.primitive_batchers[computed_once_p] = _batch
