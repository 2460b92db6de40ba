"""Multi-device programs against nested `jax.jvp`: sharded inputs, sharding annotations,
`shard_map` and the collectives inside it, on the 8 virtual CPU devices of conftest.py.

The oracle here is nested jvp compiled with `jax.jit`: the eager oracle of `reference.py`
runs a shard_map op by op, which takes minutes. Orders 1 and 6 (the order-6 result holds
0..6), float64 and complex128 where the collective accepts complex numbers.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import taylax
from reference import assert_series_close, direction, seeded_rng

ORDER = 6
N = 8  # devices
PERM = tuple((i, (i + 1) % N) for i in range(N))


@functools.cache
def _mesh(axis_type: str):
    if jax.device_count() < N:
        pytest.skip(f"needs {N} devices (tests/conftest.py sets XLA_FLAGS for 8 CPU devices)")
    kind = AxisType.Explicit if axis_type == "explicit" else AxisType.Auto
    return jax.make_mesh((N,), ("b",), axis_types=(kind,))


def _nested_jvp(f, order: int):
    """`x, v -> [d^k/ds^k f(x + s v) at s = 0 for k = 0..order]` stacked, by nested jvp, jitted."""

    def all_derivatives(x, v):
        real = jnp.finfo(x.dtype).dtype

        def level(h):
            def h_next(s):
                primals, tangents = jax.jvp(h, (s,), (jnp.ones((), real),))
                return (*primals, tangents[-1])

            return h_next

        h = lambda s: (f(x + s * v),)  # noqa: E731
        for _ in range(order):
            h = level(h)
        return jax.tree.map(lambda *ds: jnp.stack(ds), *h(jnp.zeros((), real)))

    return jax.jit(all_derivatives)


def _check(f, x, v, *, context="", orders=(1, ORDER)):
    """taylax at `orders` (jitted) against one jitted order-6 nested-jvp oracle."""
    expected = jax.tree.map(np.asarray, _nested_jvp(f, ORDER)(x, v))
    for order in orders:
        actual = jax.jit(taylax.derivatives(f, order))(x, v)
        truncated = jax.tree.map(lambda a, order=order: a[: order + 1], expected)
        assert_series_close(
            jax.tree.map(np.asarray, actual), truncated, context=f"{context} order {order}"
        )
    return actual


def _sharded(mesh, a, spec=None):
    return jax.device_put(a, NamedSharding(mesh, P("b") if spec is None else spec))


def _equivalent(array, mesh, spec) -> bool:
    return array.sharding.is_equivalent_to(NamedSharding(mesh, spec), array.ndim)


# --------------------------------------------------------------------------------------------
# Sharded inputs under jit: the "Done when" case of issue 3.
# --------------------------------------------------------------------------------------------

_W = [seeded_rng(f"mlp{i}").normal(size=(64, 64)) / 8 for i in range(3)]
_B = [seeded_rng(f"mlp-bias{i}").normal(size=(64,)) / 4 for i in range(3)]


def _mlp(x):
    h = x
    for w, b in zip(_W[:-1], _B[:-1]):
        h = jnp.tanh(h @ w + b)
    return h @ _W[-1] + _B[-1]


_COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")


@pytest.mark.parametrize("axis_type", ["auto", "explicit"])
def test_sharded_mlp_stays_sharded_without_collectives(axis_type):
    mesh = _mesh(axis_type)
    x = _sharded(mesh, seeded_rng("mlp-x").normal(size=(8, 64)))
    v = _sharded(mesh, direction("mlp-v", (8, 64), np.float64))
    f = jax.jit(taylax.derivatives(_mlp, ORDER))
    out = _check(_mlp, x, v, context=f"mlp {axis_type}")
    # The batch axis keeps the input's sharding; the derivative axis is in front, unsharded.
    assert out.shape == (ORDER + 1, 8, 64)
    assert _equivalent(out, mesh, P(None, "b")), out.sharding
    hlo = f.lower(x, v).compile().as_text()
    found = [c for c in _COLLECTIVES if c in hlo]
    assert not found, f"the compiled program communicates: {found}"


# --------------------------------------------------------------------------------------------
# Sharding annotations inside jit.
# --------------------------------------------------------------------------------------------


def test_sharding_constraint_keeps_the_batch_sharded():
    mesh = _mesh("auto")
    constraint = NamedSharding(mesh, P("b"))

    def f(x):
        y = lax.with_sharding_constraint(jnp.sin(x) * x, constraint)
        return jnp.exp(y) * jnp.cos(x)

    x = _sharded(mesh, seeded_rng("wsc").normal(size=(16, 3)))
    v = _sharded(mesh, direction("wsc", (16, 3), np.float64))
    out = _check(f, x, v, context="with_sharding_constraint")
    assert _equivalent(out, mesh, P(None, "b"))
    jaxpr = jax.make_jaxpr(taylax.derivatives(f, ORDER))(x, v)
    assert "sharding_constraint" in str(jaxpr)


def test_sharding_constraint_moves_unsharded_input_onto_the_mesh():
    # The constraint, not the input, decides the layout: the series follows it.
    mesh = _mesh("auto")

    def f(x):
        return jnp.tanh(lax.with_sharding_constraint(x * x, NamedSharding(mesh, P(None, "b"))))

    x = seeded_rng("wsc2").normal(size=(3, 16))
    out = _check(f, x, direction("wsc2", (3, 16), np.float64), context="constraint on axis 1")
    assert _equivalent(out, mesh, P(None, None, "b"))


def test_reshard_under_explicit_axes():
    mesh = _mesh("explicit")

    def f(x):
        y = jax.sharding.reshard(jnp.sin(x) * x, NamedSharding(mesh, P(None, "b")))
        return jnp.exp(y)

    x = _sharded(mesh, seeded_rng("reshard").normal(size=(8, 16)))
    v = _sharded(mesh, direction("reshard", (8, 16), np.float64))
    out = _check(f, x, v, context="reshard")
    assert _equivalent(out, mesh, P(None, None, "b"))


# --------------------------------------------------------------------------------------------
# shard_map and collectives.
# --------------------------------------------------------------------------------------------


def _collectives_body(x):
    y = jnp.sin(x) * x / (2 + jnp.cos(x))  # a full series, divided: a recurrence per shard
    total = lax.psum(y, "b")
    gathered = lax.all_gather(y, "b", axis=1, tiled=True)
    stacked = lax.all_gather(y, "b", axis=0)  # untiled: a new device axis
    shifted = lax.ppermute(y, "b", PERM)
    swapped = lax.all_to_all(y, "b", 0, 0, tiled=True)
    scattered = lax.psum_scatter(y, "b", scatter_dimension=0, tiled=True)
    return (
        jnp.exp(total),
        jnp.cos(gathered[:1]),
        jnp.sum(stacked, axis=0),
        shifted * y,
        jnp.exp(swapped),
        scattered * scattered,
    )


_COLLECTIVE_OUT_SPECS = (P(), P("b"), P("b"), P("b"), P("b"), P("b"))


@pytest.mark.parametrize(
    "axis_type, check_vma, dtype",
    [("auto", True, "float64"), ("auto", False, "complex128"), ("explicit", True, "float64")],
)
def test_shard_map_collectives(axis_type, check_vma, dtype):
    mesh = _mesh(axis_type)
    f = jax.shard_map(
        _collectives_body,
        mesh=mesh,
        in_specs=P("b"),
        out_specs=_COLLECTIVE_OUT_SPECS,
        check_vma=check_vma,
    )
    x = seeded_rng("collectives").normal(size=(64, 3)).astype(dtype)
    if dtype == "complex128":
        x = x + 0.3j * seeded_rng("collectives-im").normal(size=(64, 3))
    x = _sharded(mesh, x)
    v = _sharded(mesh, direction("collectives", (64, 3), dtype))
    # Order 1 (truncation) once; every variant at order 6.
    orders = (1, ORDER) if axis_type == "auto" and check_vma else (ORDER,)
    context = f"shard_map {axis_type} check_vma={check_vma} {dtype}"
    outs = _check(f, x, v, context=context, orders=orders)
    for out, spec in zip(outs, _COLLECTIVE_OUT_SPECS):
        assert _equivalent(out, mesh, P(None, *spec)), (spec, out.sharding)


def test_shard_map_with_constant_and_replicated_inputs():
    # A constant operand enters the body as it is; a replicated series operand is stacked.
    mesh = _mesh("auto")
    table = np.linspace(0.5, 1.5, 24).reshape(8, 3)

    def body(x, w, c):
        return lax.psum(jnp.sin(x * w) + c, "b"), x * jnp.exp(w)

    f = jax.shard_map(body, mesh=mesh, in_specs=(P("b"), P(), P("b")), out_specs=(P(), P("b")))

    def g(x):
        return f(x, jnp.tanh(x[:1]), table)

    x = _sharded(mesh, seeded_rng("sm-const").normal(size=(8, 3)))
    v = _sharded(mesh, direction("sm-const", (8, 3), np.float64))
    _check(g, x, v, context="shard_map constant input")


def _choosers_body(x):
    y = jnp.sin(x)
    return jnp.exp(lax.pmax(y, "b")), lax.pmin(y, "b") * lax.pmax(x, "b")


def _choosers_reference(x):
    # The same reductions over the device axis, unsharded: reduce_max's jvp averages ties.
    y = jnp.sin(x).reshape(N, -1, x.shape[1])
    return jnp.exp(jnp.max(y, 0)), jnp.min(y, 0) * jnp.max(x.reshape(y.shape), 0)


@pytest.mark.parametrize("check_vma", [True, False])
def test_pmax_pmin_follow_the_winning_device(check_vma):
    # JAX defines no jvp for pmax/pmin: the reference is the same reduction unsharded.
    mesh = _mesh("auto")
    f = jax.shard_map(
        _choosers_body, mesh=mesh, in_specs=P("b"), out_specs=(P(), P()), check_vma=check_vma
    )
    x = seeded_rng("pmax").uniform(-1.0, 1.0, size=(16, 3))
    # Ties between devices 1 and 5 (row 1 of their shards): the same maximum and minimum,
    # reached with different derivatives.
    x[3] = x[11] = 1.55
    x[2] = x[10] = -1.55
    v = direction("pmax", (16, 3), np.float64)
    expected = jax.tree.map(np.asarray, _nested_jvp(_choosers_reference, ORDER)(x, v))
    sx, sv = _sharded(mesh, x), _sharded(mesh, v)
    for order in (1, ORDER):
        actual = jax.jit(taylax.derivatives(f, order))(sx, sv)
        truncated = jax.tree.map(lambda a, order=order: a[: order + 1], expected)
        assert_series_close(jax.tree.map(np.asarray, actual), truncated, context=f"order {order}")
