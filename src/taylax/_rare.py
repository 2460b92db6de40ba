"""`where_any`: a select whose rare side is computed only where some element takes it,
also under `jax.vmap`.

Some rules are exact everywhere but at a few special values, where nested jvp gives
something else that a second, costlier form reproduces: `x ** p` at `x_0 = 0` (a
composition, O(K^3)), `logaddexp` where an argument is `+inf` (an exponential series of
each argument). Written as `jnp.where(special, costly, common)`, the costly form runs for
every element; written as `lax.cond(any(special), ...)`, it runs only when needed on
one array, but a pass is traced at one point and batched by `jax.vmap` afterwards, which
turns the conditional on a per-point predicate into a select of both branches again.

`where_any_p` keeps the question whole-batch: its batching rule asks `any(special)` over
every point and runs the costly form, batched, only when some point needs it, each
point keeping its own select. Differentiated, the primitive is the plain conditional
(reverse mode transposes ordinary JAX operations); a Taylor pass over it runs the
conditional too. `taylax._fallback.fallback_p` does the same for the unscaled pass of
`derivatives`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _compat

where_any_p = _compat.Primitive("taylax_where_any")


def where_any(pred, rare: Callable, common, operands: list):
    """`jnp.where(pred, rare(*operands), common)`, with `rare` run only when some element
    of `pred` is true, once per call and under `jax.vmap` once per batch.

    Args:
      pred: a boolean array that broadcasts against `common` (aligned to its trailing
        axes, as `jnp.where` aligns them).
      rare: a function of `operands` returning one array shaped and typed as `common`,
        traced here (with the emission policy in force).
      common: the array taken wherever `pred` is false.
      operands: the arrays `rare` reads.

    Returns:
      An array shaped and typed as `common`.

    Example: `where_any(x == 0, lambda x: series_at_zero(x), series, [x])`.
    """
    leaves = [jnp.asarray(o) for o in operands]
    avals = [jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)) for a in leaves]
    closed = jax.make_jaxpr(rare)(*avals)
    out = closed.out_avals
    if len(out) != 1 or out[0].shape != jnp.shape(common) or out[0].dtype != common.dtype:
        raise ValueError(
            "`where_any`'s `rare` must return one array shaped and typed as `common` "
            f"({jnp.shape(common)}, {common.dtype}); it returned {out}."
        )
    # Values `rare` closes over (an exponent traced with the pass) become operands: as
    # constants of the sub-program they would be tracers of the enclosing trace.
    closed, consts = _compat.consts_to_invars(closed)
    return where_any_p.bind(jnp.asarray(pred), common, *consts, *leaves, rare=closed)


def _run(rare, operands):
    return _compat.jaxpr_as_fun(rare)(*operands)[0]


def _impl(pred, common, *operands, rare):
    def selected(args):
        p, c, ops = args
        return jnp.where(p, _run(rare, ops), c)

    return lax.cond(jnp.any(pred), selected, lambda args: args[1], (pred, common, operands))


def _abstract_eval(pred, common, *operands, rare):
    del pred, operands, rare
    return _compat.shaped_array(common.shape, common.dtype)


def _batch(axis_data, args, dims, *, rare):
    if all(d is None for d in dims):
        return where_any_p.bind(*args, rare=rare), None
    size = axis_data.size
    pred, common = args[0], args[1]
    # The output keeps `common`'s batch axis: moved to the front, a stack read row by row
    # downstream became a transposed copy (`logaddexp` of a series: 12.2 against 8.4 ms).
    out_axis = 0 if dims[1] is None else dims[1]
    common_b = jnp.broadcast_to(common, (size,) + common.shape) if dims[1] is None else common

    def selected(_):
        def per_point(p, c, *ops):
            return jnp.where(p, _run(rare, ops), c)

        return jax.vmap(
            per_point,
            in_axes=list(dims),
            axis_name=axis_data.name,
            axis_size=size,
            spmd_axis_name=axis_data.spmd_name,
            out_axes=out_axis,
        )(*args)

    # One question for every point: the rare side runs, batched, when any point needs it.
    return lax.cond(jnp.any(pred), selected, lambda _: common_b, None), out_axis


# The primitive's program (the conditional) as a closed jaxpr: what a Taylor pass over it
# runs. Differentiated, the primitive is that conditional.
impl_jaxpr = _compat.define_as_function(where_any_p, _impl, _abstract_eval, _batch)
