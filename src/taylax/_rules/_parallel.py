"""Rules for multi-device programs: sharding annotations, `shard_map` and collectives.

A series is one array `(d+1, *shape)`, so its sharding is the primal's with an
unsharded leading coefficient axis: `P('b')` becomes `P(None, 'b')`. Sharding
annotations and `shard_map` specs gain that leading `None`; collectives act on
every coefficient at once, with their axis parameters moved by one. Per-device
values stay where they are, so a sharded program stays sharded.

* psum, ppermute, all_gather, all_to_all, reduce_scatter, pvary, pbroadcast:
  linear, bound once on the stacked coefficients;
* ragged_all_to_all: linear row by row along the leading axis, so the
  coefficient axis rides second and one collective moves every coefficient;
* pmax, pmin: by the primal, like `reduce_max`: the coefficients of the
  winning devices (averaged over ties);
* shard_map: its body is interpreted per shard on series of the per-shard
  values and re-bound with the public `jax.shard_map`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding

from .. import _compat
from .._interpret import eval_jaxpr_series, register_rule
from .._series import Series, pad_degree, with_primal


def _lead(spec):
    """The spec of a stacked series: an unsharded coefficient axis in front of `spec`."""
    return spec.update(partitions=(None, *_compat.spec_partitions(spec)))


def _shift_positional(axes):
    """Positional (integer) collective axes, as vmap emits them, move by one; names stay."""
    if isinstance(axes, tuple):
        return tuple(a + 1 if isinstance(a, int) else a for a in axes)
    return axes + 1 if isinstance(axes, int) else axes


def _on_coeffs(prim, **shifted):
    """Register a collective that is linear and elementwise over devices: bind it on the
    stacked coefficients, adding one to the axis parameters named in `shifted`."""

    def rule(order, x, **params):
        del order
        for name in shifted:
            params[name] = params[name] + 1
        for name in ("axes", "axis_name"):
            if name in params:
                params[name] = _shift_positional(params[name])
        return Series(prim.bind(x.coeffs, **params))

    register_rule(prim)(rule)


for _p in (
    _compat.psum_p,
    _compat.psum_invariant_p,
    _compat.ppermute_p,
    _compat.pvary_p,
    _compat.pbroadcast_p,
):
    _on_coeffs(_p)
_on_coeffs(_compat.all_gather_p, all_gather_dimension=1)
_on_coeffs(_compat.all_gather_invariant_p, all_gather_dimension=1)
_on_coeffs(_compat.all_to_all_p, split_axis=1, concat_axis=1)
_on_coeffs(_compat.reduce_scatter_p, scatter_dimension=1)


@register_rule(_compat.ragged_all_to_all_p)
def _ragged_all_to_all(order, operand, output, *offsets_and_sizes, **params):
    """Rows `operand[o:o+n]` land in `output[o':o'+n]` on another device: linear in
    `(operand, output)` and blind to everything after the leading axis. So the stacked
    coefficients move as one array with the coefficient axis second (JAX's own batching
    rule would need offsets rebased per coefficient, and rejects unbatched offsets).
    Offsets and sizes are integers and carry no series."""
    del order
    degree = max(operand.degree, output.degree)
    rows_first = [jnp.moveaxis(pad_degree(x.coeffs, degree), 0, 1) for x in (operand, output)]
    moved = _compat.ragged_all_to_all_p.bind(
        *rows_first, *(x.primal for x in offsets_and_sizes), **params
    )
    return Series(jnp.moveaxis(moved, 1, 0))


def _device_chooser(prim):
    """pmax / pmin: the series of the device(s) holding the extremum, ties averaged."""

    def rule(order, x, *, axes, axis_index_groups):
        del order
        z0 = prim.bind(x.primal, axes=axes, axis_index_groups=axis_index_groups)
        hit = (x.primal == z0).astype(x.dtype)
        count = lax.psum(hit, axes, axis_index_groups=axis_index_groups)
        total = lax.psum(x.coeffs * hit[None], axes, axis_index_groups=axis_index_groups)
        return Series(with_primal(total / count[None], z0))

    register_rule(prim)(rule)


_device_chooser(_compat.pmax_p)
_device_chooser(_compat.pmin_p)


@register_rule(_compat.sharding_constraint_p)
def _sharding_constraint(order, x, *, sharding, layout, context_mesh, unconstrained_dims):
    del order
    if isinstance(sharding, NamedSharding) and layout is None:
        stacked = _compat.sharding_constraint_p.bind(
            x.coeffs,
            sharding=sharding.update(spec=_lead(sharding.spec)),
            layout=None,
            context_mesh=context_mesh,
            unconstrained_dims=frozenset(d + 1 for d in unconstrained_dims),
        )
        return Series(stacked)
    # Other shardings and layouts: JAX's batching rule adds the coefficient axis.
    return Series(
        jax.vmap(
            lambda c: _compat.sharding_constraint_p.bind(
                c,
                sharding=sharding,
                layout=layout,
                context_mesh=context_mesh,
                unconstrained_dims=unconstrained_dims,
            )
        )(x.coeffs)
    )


@register_rule(_compat.reshard_p)
def _reshard(order, x, *, dst_sharding, concrete_mesh):
    del order
    dst = dst_sharding.update(spec=_lead(dst_sharding.spec))
    return Series(_compat.reshard_p.bind(x.coeffs, dst_sharding=dst, concrete_mesh=concrete_mesh))


@register_rule(_compat.shard_map_p)
def _shard_map(order, *xs, jaxpr, mesh, in_specs, out_specs, check_vma, **params):
    """Interpret the body per shard and re-bind it with `jax.shard_map`.

    Inputs with a series enter stacked (their spec gains a leading `None`),
    constants enter as they are. Every output leaves stacked, constants with one
    row, so the output specs are known before the body is traced.
    """
    degrees = tuple(x.degree for x in xs)

    def body(*arrays):
        series = [Series.constant(a) if d == 0 else Series(a) for a, d in zip(arrays, degrees)]
        return tuple(o.coeffs for o in eval_jaxpr_series(jaxpr, (), series, order))

    mapped = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=tuple(s if d == 0 else _lead(s) for s, d in zip(in_specs, degrees)),
        out_specs=tuple(_lead(s) for s in out_specs),
        axis_names=_compat.shard_map_manual_axes(params),
        check_vma=check_vma,
    )
    outs = mapped(*[x.primal if x.is_constant else x.coeffs for x in xs])
    return [Series(o) for o in outs]
