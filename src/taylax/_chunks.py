"""Large batches of Taylor passes in chunks of points.

Under `jax.vmap`, a Taylor pass over `N` points writes each value it keeps in a buffer
(`taylax._series.computed_once`) as an `N`-point array. At a million points and order 8
a chain of exponentials and quotients keeps about 18 of them: 150 MB of temporaries,
which glibc serves as fresh `mmap` blocks, so every page faults again on every call,
and no row of a recurrence is still in cache when the next row reads it. Run in chunks
of `CHUNK_POINTS` points (a loop, `jax.lax.map`), the same program keeps its buffers in
cache and reuses them from chunk to chunk.

`taylax.derivatives` and `taylax.taylor` call their pass through `chunked_call_p` when
their inputs are being batched; its batching rule, which sees the batch size, picks
the loop or the plain vmap. Chunks pay a loop and a copy of each chunk's output: a pass
that keeps few buffers (`0.3 sin(t) t^10` keeps 2) ran 1.5-2x slower in chunks, so the
loop is taken only where the buffers are large (`CHUNKED_MIN_BYTES`) and many
(`CHUNKED_MIN_BUFFERS`).

Differentiated itself (a `jax.jvp` or `jax.grad` inside the `vmap`), the primitive is the
plain pass: its JVP is the pass's own, so reverse mode transposes ordinary JAX
operations. A `vmap` inside `jax.grad` differentiates the loop like any `lax.map`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _compat
from ._count import iter_equations
from ._once import computed_once_p

# Points per chunk, and the buffers from which chunks are used (from 2 chunks of points
# on). Measured with `jax.jit(jax.vmap(taylax.derivatives(f, K)))` against `jax.lax.map`
# over chunks of the same (2 CPUs, float64, one process, interleaved with jet and nested
# jvp; /tmp/w/chunk.py): at 1,048,576 points the damped wave and the growth chain at
# K = 8 ran 0.33-0.35x the best of jet and nested jvp in chunks of 65,536 against
# 0.62-0.66x as one vmap (16,384: 0.50x; 131,072: 0.36x), the growth chain at K = 16
# 0.32x against 0.58x and at K = 4 0.53x against 0.73x, the damped wave at 262,144
# points and K = 8 0.30x against 0.62x; at K = 2 (6 buffers, unmarked at that size)
# chunks ran 1.1x slower, and `0.3 sin(t) t^10` (2 buffers) 1.5-2x slower at K = 2-8.
CHUNK_POINTS = 1 << 16
CHUNKED_MIN_BYTES = 32 << 20
CHUNKED_MIN_BUFFERS = 8
CHUNKED_MAX_ORDER = 16

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
    `jax.vmap` around it batches many points (see the module docstring)."""
    if not any(isinstance(a, _compat.BatchTracer) for a in args):
        return list(fun(*args))
    avals = [jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)) for a in args]
    return chunked_call_p.bind(*args, program=PointProgram(fun, avals))


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


def buffered_bytes(equations) -> tuple[int, int]:
    """How many values a pass keeps in buffers (`computed_once`), and their bytes per point,
    from its equations (`taylax._count.iter_equations`)."""
    count, size = 0, 0
    for eqn in equations:
        if eqn.primitive is computed_once_p and eqn.params["kind"] == "once":
            aval = eqn.outvars[0].aval
            count += 1
            size += math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    return count, size


def _chunked(points: int, program: PointProgram) -> bool:
    # What chunks save is XLA:CPU's (page faults, cache). On an H200 (jax 0.11.2, 1,048,576
    # points, K = 4 / 8 / 16) chunks of 65,536 took 0.94-2.2x the time of one vmap,
    # more in 8 of 9 cells.
    if points < 2 * CHUNK_POINTS or jax.default_backend() != "cpu":
        return False
    equations = list(iter_equations(program.closed))
    if any(e.primitive.name in _NAMED_AXIS_PRIMITIVES for e in equations):
        return False
    # Passes of higher order ran slower in chunks: the damped wave at K = 32 (67 buffers),
    # 1,048,576 points, 1,295-1,338 ms in chunks of 65,536 against 534-539 ms as one
    # vmap, and 77-83 ms against 31 ms at 65,536 points in chunks of 8,192-32,768. Not the
    # chunk's size: at 1,048,576 points, chunks of 4,096 / 16,384 / 65,536 took 1,258 /
    # 1,296 / 1,318 ms against 520 ms as one vmap.
    orders = [e.params["pass_order"] for e in equations if e.primitive is computed_once_p]
    if any(order is None or order > CHUNKED_MAX_ORDER for order in orders):
        return False
    count, size = buffered_bytes(equations)
    return count >= CHUNKED_MIN_BUFFERS and size * points >= CHUNKED_MIN_BYTES


def _batch(axis_data, args, dims, *, program):
    if all(d is None for d in dims):
        outs = chunked_call_p.bind(*args, program=program)
        return outs, [None] * len(outs)
    points = axis_data.size
    if not _chunked(points, program):
        # As `jax.vmap` batches the pass, under the enclosing axis' name and size.
        outs = jax.vmap(
            program,
            in_axes=list(dims),
            axis_name=axis_data.name,
            axis_size=axis_data.size,
            spmd_axis_name=axis_data.spmd_name,
        )(*args)
        return list(outs), [0] * len(outs)
    batched = [i for i, d in enumerate(dims) if d is not None]
    moved = [jnp.moveaxis(args[i], dims[i], 0) for i in batched]

    def one_point(point_args):
        full = list(args)
        for i, a in zip(batched, point_args):
            full[i] = a
        return list(program(*full))

    outs = jax.lax.map(one_point, moved, batch_size=CHUNK_POINTS)
    return list(outs), [0] * len(outs)


def _impl(*args, program):
    return list(program(*args))


def _abstract_eval(*avals, program):
    del avals
    return [_compat.shaped_array(v.aval.shape, v.aval.dtype) for v in program.closed.jaxpr.outvars]


def _jvp(primals, tangents, *, program):
    tangents = [_compat.ad.instantiate_zeros(t) for t in tangents]
    outs, out_tangents = jax.jvp(lambda *a: list(program(*a)), list(primals), tangents)
    return outs, out_tangents


chunked_call_p.def_impl(_impl)
chunked_call_p.def_abstract_eval(_abstract_eval)
_compat.mlir.register_lowering(chunked_call_p, _compat.mlir.lower_fun(_impl, multiple_results=True))
_compat.ad.primitive_jvps[chunked_call_p] = _jvp
_compat.batching.fancy_primitive_batchers[chunked_call_p] = _batch
