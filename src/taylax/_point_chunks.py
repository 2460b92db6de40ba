"""Large batches of Taylor passes in chunks of points.

Under `jax.vmap`, a Taylor pass over `N` points writes each value it keeps in a buffer
(`taylax._series.computed_once`) as an `N`-point array. At a million points a chain
of exponentials and quotients keeps temporaries far larger than the caches, which glibc
serves as fresh `mmap` blocks, so every page faults again on every call, and no row of
a recurrence is still in cache when the next row reads it. Run in chunks of the
policy's `chunk_points` points (fewer past its `high_order`; a loop, `jax.lax.scan`),
the same program keeps its buffers in cache and reuses them from chunk to chunk.

`taylax.derivatives` and `taylax.taylor` call their pass through `chunked_call_p` when
their inputs are being batched; its batching rule, which sees the batch size, picks
the loop or the plain vmap. Chunks pay a loop and a copy of each chunk's output, more
than they save for a pass that keeps few buffers (`0.3 sin(t) t^10` keeps 2), so the
loop is taken only where the buffers are large (`chunked_min_bytes`) and many
(`chunked_min_buffers`), and only where the policy has `point_chunks` (XLA:CPU). Past
the policy's `fused_concat_max_operands` the rows of the pass's stacked outputs count as
buffers as well (`_output_row_buffers`). The figures are in docs/EMISSION.md
("Chunks").

Differentiated itself (a `jax.jvp` or `jax.grad` inside the `vmap`), the primitive is the
plain pass: its JVP is the pass's own, so reverse mode transposes ordinary JAX
operations. A `vmap` inside `jax.grad` differentiates the loop like any `lax.scan`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _compat, _policy
from ._count import iter_equations, iter_jaxprs
from ._fallback import fallback_p
from ._once import computed_once_p

chunked_call_p = _compat.Primitive("taylax_chunked_call")
chunked_call_p.multiple_results = True


class PointProgram:
    """A flat function of arrays and its jaxpr (traced when first needed: small batches
    never look at it), hashable by identity (a primitive's parameter)."""

    def __init__(self, fun: Callable, avals):
        self.fun = fun
        self.avals = avals

    @functools.cached_property
    def closed(self):
        return jax.make_jaxpr(self.fun)(*self.avals)

    def __call__(self, *args):
        return self.fun(*args)


def call(fun: Callable, args: list) -> list:
    """`fun(*args)` (flat arrays in, a list of arrays out), run in chunks of points where a
    `jax.vmap` around it batches many points (see the module docstring).

    (`chunked_call_p`'s parameter `points_last` says that the `vmap` around it puts the
    batch axis of every output last, so that chunks are written straight into that
    layout; `taylax._api` binds it so for whole arrays of elementwise functions.)
    """
    if not any(isinstance(a, _compat.BatchTracer) for a in args):
        return list(fun(*args))
    avals = [jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)) for a in args]
    return chunked_call_p.bind(*args, program=PointProgram(fun, avals), points_last=False)


# Primitives that read the batch axis by name: a loop over chunks would hand them a chunk,
# so programs that contain one are batched as one vmap, under the axis' name.
_NAMED_AXIS_PRIMITIVES = frozenset(
    {
        "axis_index",
        "psum",
        "pmax",
        "pmin",
        "ppermute",
        "pgather",
        "all_gather",
        "all_to_all",
        "ragged_all_to_all",
        "psum_invariant",
        "all_gather_invariant",
        "pbroadcast",
        "reduce_scatter",
    }
)


def _keeps(eqn) -> bool:
    """Whether `eqn` keeps its value in a buffer (a `computed_once` mark, not a shield)."""
    return eqn.primitive is computed_once_p and eqn.params["kind"] == "once"


def _is_fallback(eqn) -> bool:
    """Whether `eqn` is the float32 fallback's unscaled pass (not counted: see
    `_chunk_points`)."""
    return eqn.primitive is fallback_p


def buffered_bytes(equations) -> tuple[int, int]:
    """How many real values a pass keeps in buffers (`computed_once`), and their bytes per
    point, from its equations (`taylax._count.iter_equations`). A complex buffer counts as
    two: real `sin` and `cos` share one, `cos x + i sin x` (`_transcendental.sin_cos`)."""
    count, size = 0, 0
    for eqn in equations:
        if _keeps(eqn):
            aval = eqn.outvars[0].aval
            count += 2 if jnp.issubdtype(aval.dtype, jnp.complexfloating) else 1
            size += math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    return count, size


def wide_kernels(program: PointProgram, min_operands: int) -> int:
    """How many kernels of a pass (at one point or over whole arrays: the count is the
    same) read at least `min_operands` of the values it keeps in buffers (`computed_once`).

    Each kept value and each output is one kernel: XLA fuses what lies between kept
    values, so a kernel reads the kept values its computation reaches before another
    one. Over a whole array each operand is a pass over memory; in chunks of points it
    is in cache. (The float32 fallback's pass is left out, as in `_chunk_points`.)"""
    count = 0
    for jaxpr in iter_jaxprs(program.closed, prune=_is_fallback):
        kept = {e.outvars[0] for e in jaxpr.eqns if _keeps(e)}
        if not kept:
            continue
        # The kept values each variable's computation reads, in the jaxpr's order.
        reads: dict = {}
        for eqn in jaxpr.eqns:
            read = set()
            for v in eqn.invars:
                if isinstance(v, _compat.Literal):
                    continue
                read |= {v} if v in kept else reads.get(v, frozenset())
            for out in eqn.outvars:
                reads[out] = frozenset(read)
        for out in jaxpr.outvars:
            if not isinstance(out, _compat.Literal) and out not in kept:
                count += len(reads.get(out, ())) >= min_operands
        count += sum(len(reads[v]) >= min_operands for v in kept)
    return count


def may_run_in_chunks(points: int) -> bool:
    """Whether a `vmap` over `points` points can run in chunks at all under the policy in
    force (`point_chunks`, and at least two of the smallest chunks), before looking at
    its pass."""
    p = _policy.current()
    return p.point_chunks and points >= 2 * p.high_order_chunk_points


def runs_in_chunks(points: int, program: PointProgram) -> bool:
    """Whether a `vmap` of `program` over `points` points runs in chunks of points."""
    return _chunk_points(points, program) is not None


def _chunk_points(points: int, program: PointProgram) -> tuple[int, bool] | None:
    """`(points per chunk, whether the pass is of high order)` for a batch of `points`,
    or None for one vmap."""
    # What chunks save is XLA:CPU's (page faults, cache): the policy says where they pay.
    p = _policy.current()
    if not may_run_in_chunks(points):
        return None
    # The float32 fallback's unscaled pass runs only where the stretched pass overflowed,
    # after its buffers are dead: counted, it doubled the buffers and chunked passes
    # that one vmap runs faster (docs/EMISSION.md, "float32 past order 12").
    equations = list(iter_equations(program.closed, prune=_is_fallback))
    if any(e.primitive.name in _NAMED_AXIS_PRIMITIVES for e in equations):
        return None
    orders = [e.params["pass_order"] for e in equations if e.primitive is computed_once_p]
    if any(order is None or order > p.chunked_max_order for order in orders):
        return None
    high = any(order > p.high_order for order in orders)
    size = p.high_order_chunk_points if high else p.chunk_points
    smallest = p.high_order_chunk_points
    if high and p.high_order_narrow_chunk_points is not None and narrow(program.avals):
        # float32 past order 16 ran 6-21% faster in chunks of 16,384 points than of 8,192,
        # the float64 size (docs/EMISSION.md, "Chunks").
        size = smallest = p.high_order_narrow_chunk_points
    min_bytes = p.high_order_min_bytes if high else p.chunked_min_bytes
    count, per_point = buffered_bytes(equations)
    rows, row_bytes = _output_row_buffers(program.closed, max(orders, default=0), p)
    if rows:
        # Each row written to a buffer of its own is then copied into the stacked output:
        # its bytes count twice. What chunks avoid is XLA:CPU's temporaries past 32 MiB,
        # which glibc maps afresh on every call (docs/EMISSION.md, "Chunks").
        count, per_point = count + rows, per_point + 2 * row_bytes
    if p.chunk_max_bytes is not None:
        # Chunks whose buffers outgrow the cache gain little from the loop: halve them
        # (docs/EMISSION.md, "The log1p chain at K = 16").
        while size > smallest and per_point * size > p.chunk_max_bytes:
            size //= 2
    if points < 2 * size or count < p.chunked_min_buffers or per_point * points < min_bytes:
        return None
    return size, high


def narrow(arrays) -> bool:
    """Whether `arrays` (arrays or avals) hold inexact values and every inexact one is of
    4 bytes or fewer (float32): past `high_order` the policy sizes such passes apart
    (`high_order_narrow_chunk_points`, `elementwise_by_points_narrow_min_bytes`)."""
    dtypes = [jnp.result_type(a) for a in arrays]
    sizes = [d.itemsize for d in dtypes if jnp.issubdtype(d, jnp.inexact)]
    return bool(sizes) and max(sizes) <= 4


def _output_row_buffers(closed, order: int, policy) -> tuple[int, int]:
    """Rows of the pass's stacked outputs that XLA writes to buffers of their own, and
    their bytes per point.

    Past the policy's `fused_concat_max_operands` rows XLA:CPU computes each row of a
    stack as a kernel of its own and copies them into the stack, a fresh buffer per row
    (docs/EMISSION.md, "Chunks"). Only stacks of `order + 1` rows (derivatives) count:
    counted too, `taylax.taylor`'s stacks of `order` rows ran 4-15% slower under `vmap`
    over 262,144 points (a scratch probe, 2026-11-30).
    """
    if order <= policy.fused_concat_max_operands:
        return 0, 0
    rows, size = 0, 0
    for var in closed.outvars:
        aval = var.aval
        if aval.ndim and aval.shape[0] == order + 1 and jnp.issubdtype(aval.dtype, jnp.inexact):
            rows += order
            size += order * math.prod(aval.shape[1:]) * np.dtype(aval.dtype).itemsize
    return rows, size


def _batch(axis_data, args, dims, *, program, points_last):
    if all(d is None for d in dims):
        outs = chunked_call_p.bind(*args, program=program, points_last=points_last)
        return outs, [None] * len(outs)
    points = axis_data.size
    chunking = _chunk_points(points, program)
    if chunking is None:
        # As `jax.vmap` batches the pass, under the enclosing axis' name and size.
        outs = jax.vmap(
            program,
            in_axes=list(dims),
            axis_name=axis_data.name,
            axis_size=axis_data.size,
            spmd_axis_name=axis_data.spmd_name,
            out_axes=-1 if points_last else 0,
        )(*args)
        return list(outs), [o.ndim - 1 if points_last else 0 for o in outs]
    batched = [i for i, d in enumerate(dims) if d is not None]
    moved = [jnp.moveaxis(args[i], dims[i], 0) for i in batched]

    def one_point(point_args):
        full = list(args)
        for i, a in zip(batched, point_args):
            full[i] = a
        return list(program(*full))

    size, high = chunking
    if points_last:
        outs = _in_chunks_last(jax.vmap(one_point), moved, points, size, through_cond=high)
        return outs, [o.ndim - 1 for o in outs]
    outs = _in_chunks(jax.vmap(one_point), moved, points, size, through_cond=high)
    return outs, [0] * len(outs)


def _in_chunks(one_chunk: Callable, args: list, points: int, size: int, through_cond: bool) -> list:
    """`one_chunk` (a function of arrays with a leading point axis) over every `size`
    points of `args` in a loop, then over the points left.

    `through_cond`: each chunk's outputs leave the loop's body through a conditional
    whose predicate XLA cannot evaluate (a chunk's index is never negative). Without it
    XLA fused the last kernel of a high-order pass into the in-place update that stacks
    the chunks, and emitted that fused kernel far slower than the kernel alone. At lower
    orders the conditional's copy of each chunk costs more than it saves, so only
    high-order passes take it (docs/EMISSION.md, "Chunks").
    """
    full = points // size

    def body(carry, xs):
        index, chunk = xs
        outs = one_chunk(chunk)
        if through_cond:
            outs = jax.lax.cond(index >= 0, lambda o: o, _never, outs)
        return carry, outs

    heads = [a[: full * size].reshape((full, size) + a.shape[1:]) for a in args]
    _, stacked = jax.lax.scan(body, None, (jnp.arange(full), heads))
    outs = [y.reshape((full * size,) + y.shape[2:]) for y in stacked]
    if full * size < points:
        rest = one_chunk([a[full * size :] for a in args])
        outs = [jnp.concatenate([o, r]) for o, r in zip(outs, rest)]
    return outs


def _in_chunks_last(
    one_chunk: Callable, args: list, points: int, size: int, through_cond: bool
) -> list:
    """`_in_chunks` with the point axis of every output last: each chunk's outputs are
    moved while in cache and written in place into buffers of the whole batch, where
    stacking the chunks and moving the axis afterwards would copy every output once more
    (docs/EMISSION.md, "Whole arrays")."""
    full = points // size
    heads = [a[: full * size].reshape((full, size) + a.shape[1:]) for a in args]
    shapes = jax.eval_shape(one_chunk, [h[0] for h in heads])
    buffers = [jnp.zeros(o.shape[1:] + (points,), o.dtype) for o in shapes]

    def body(buffers, xs):
        index, chunk = xs
        outs = one_chunk(chunk)
        if through_cond:
            outs = jax.lax.cond(index >= 0, lambda o: o, _never, outs)
        return [
            jax.lax.dynamic_update_slice_in_dim(b, jnp.moveaxis(o, 0, -1), index * size, -1)
            for b, o in zip(buffers, outs)
        ], None

    buffers, _ = jax.lax.scan(body, buffers, (jnp.arange(full), heads))
    if full * size < points:
        rest = one_chunk([a[full * size :] for a in args])
        buffers = [
            jax.lax.dynamic_update_slice_in_dim(b, jnp.moveaxis(r, 0, -1), full * size, -1)
            for b, r in zip(buffers, rest)
        ]
    return buffers


def _never(outs: list) -> list:
    """The branch a chunk never takes: NaN (zeros where not inexact), so that it differs
    from the other branch and XLA keeps the conditional."""
    return [
        jnp.full_like(o, jnp.nan) if jnp.issubdtype(o.dtype, jnp.inexact) else jnp.zeros_like(o)
        for o in outs
    ]


def _impl(*args, program, points_last):
    del points_last
    return list(program(*args))


def _abstract_eval(*avals, program, points_last):
    del avals, points_last
    return [_compat.shaped_array(v.aval.shape, v.aval.dtype) for v in program.closed.outvars]


# Differentiated, the primitive is the plain pass (see the module docstring).
_compat.define_as_function(chunked_call_p, _impl, _abstract_eval, _batch)
