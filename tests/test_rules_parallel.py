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


def test_collective_of_a_value_computed_once_inside_the_body():
    # sin's primal inside the body is computed once (a mark): the mark keeps the mesh axes
    # the shard varies over, so pmax's rule counts the devices at the maximum (it failed:
    # "psum is a variant->invariant collective").
    mesh = _mesh("auto")
    f = jax.shard_map(
        lambda x: lax.pmax(jnp.sin(x * x), "b"), mesh=mesh, in_specs=P("b"), out_specs=P()
    )
    x = seeded_rng("pmax_once").uniform(-1.0, 1.0, size=(16,))
    v = direction("pmax_once", (16,), np.float64)
    reference = lambda x: jnp.max(jnp.sin(x * x).reshape(N, -1), 0)  # noqa: E731
    expected = np.asarray(_nested_jvp(reference, ORDER)(x, v))
    actual = jax.jit(taylax.derivatives(f, ORDER))(_sharded(mesh, x), _sharded(mesh, v))
    assert_series_close(np.asarray(actual), expected)


# --------------------------------------------------------------------------------------------
# ragged_all_to_all. XLA:CPU has no kernel for it ("HLO opcode `ragged-all-to-all` is not
# supported by XLA:CPU ThunkEmitter") and JAX's vmap cannot run it over a named axis, so on a
# CPU the program taylax emits is run by a small SPMD emulator: every shard_map body is
# evaluated in lockstep for all 8 devices (one vmap per equation), with the collective done
# by `_ragged_reference`, which follows the semantics in `jax.lax.ragged_all_to_all`'s
# docstring. On a GPU the compiled program itself runs (`test_ragged_all_to_all_compiled`).
# --------------------------------------------------------------------------------------------

_ROWS = 24  # rows of operand and output per device


def _ragged_plan():
    """Ragged offsets and sizes, as (devices, devices) arrays: row `src` is what device
    `src` passes. Device `src` sends `(src + dst) % 3` rows (0, 1 or 2) to device `dst`;
    receivers leave a one-row gap between senders, so untouched buffer rows stay."""
    send = np.array([[(s + d) % 3 for d in range(N)] for s in range(N)], np.int32)
    input_offsets = np.zeros_like(send)
    input_offsets[:, 1:] = np.cumsum(send, axis=1)[:, :-1]
    output_offsets = np.zeros_like(send)  # [src, dst]: where src's rows land on dst
    for dst in range(N):
        at = 0
        for src in range(N):
            output_offsets[src, dst] = at
            at += send[src, dst] + 1
        assert at <= _ROWS
    recv = send.T.copy()  # [dst, src]
    return input_offsets, send, output_offsets, recv


def _ragged_reference(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes):
    """`ragged_all_to_all` over a leading device axis, for concrete offsets and sizes: which
    operand row lands in each output row is worked out in NumPy, then one gather and select."""
    plan = (input_offsets, send_sizes, output_offsets, recv_sizes)
    io, ss, oo, rs = (np.asarray(a) for a in plan)
    devices, slots = io.shape
    per_device = slots // devices
    rows = output.shape[1]
    source = np.zeros((devices, rows, 2), np.int32)  # (src, row) feeding each output row
    received = np.zeros((devices, rows), bool)
    for src in range(devices):
        for i in range(slots):
            dst, n = i // per_device, ss[src, i]
            assert rs[dst, src * per_device + i % per_device] == n, "inconsistent sizes"
            at = slice(oo[src, i], oo[src, i] + n)
            source[dst, at] = np.stack([np.full(n, src), io[src, i] + np.arange(n)], -1)
            received[dst, at] = True
    moved = operand[source[..., 0], source[..., 1]]
    return jnp.where(received.reshape(*received.shape, *[1] * (output.ndim - 2)), moved, output)


def _ragged_sources(x, variant):
    """Operand and output buffer per device, as functions of the per-device rows of `x`."""
    operand = jnp.ones_like(x) if variant == "constant operand" else jnp.sin(x) * x
    buffer = jnp.zeros_like(x) if variant == "zero buffer" else jnp.cos(x) + 2
    return operand, buffer


def _ragged_sharded(mesh, variant):
    def body(x, io, ss, oo, rs):
        operand, buffer = _ragged_sources(x, variant)
        moved = lax.ragged_all_to_all(operand, buffer, io[0], ss[0], oo[0], rs[0], axis_name="b")
        return moved * jnp.exp(moved)

    f = jax.shard_map(body, mesh=mesh, in_specs=(P("b"),) * 5, out_specs=P("b"), check_vma=False)
    plan = _ragged_plan()
    return lambda x: f(x, *plan)


def _ragged_unsharded(variant):
    plan = _ragged_plan()

    def f(x):
        per_device = x.reshape(N, _ROWS, *x.shape[1:])
        moved = _ragged_reference(*_ragged_sources(per_device, variant), *plan)
        return (moved * jnp.exp(moved)).reshape(x.shape)

    return f


def _split(x, spec):
    """Per-device blocks of `x` stacked on a new leading axis (replicated dims broadcast)."""
    for dim, name in enumerate(spec):
        if name is not None:
            assert name == "b", spec
            blocks = x.reshape(*x.shape[:dim], N, -1, *x.shape[dim + 1 :])
            return jnp.moveaxis(blocks, dim, 0)
    return jnp.broadcast_to(x, (N, *x.shape))


def _join(stacked, spec):
    for dim, name in enumerate(spec):
        if name is not None:
            blocks = jnp.moveaxis(stacked, 0, dim)
            return blocks.reshape(*blocks.shape[:dim], -1, *blocks.shape[dim + 2 :])
    return stacked[0]


def _sub_jaxpr(eqn):
    # A custom_jvp call (the pass's `overflow_safe`) runs its function's jaxpr.
    if eqn.primitive.name == "custom_jvp_call":
        return eqn.params["call_jaxpr"]
    closed = eqn.params.get("jaxpr")
    return closed if eqn.primitive.name in ("jit", "pjit", "closed_call") else None


def _read(env, var, lockstep=False):
    if isinstance(var, jax.extend.core.Literal):
        return jnp.broadcast_to(var.val, (N, *np.shape(var.val))) if lockstep else var.val
    return env[var]


def _emulate(jaxpr, consts, args, lockstep=False):
    """Evaluate `jaxpr`; inside a shard_map body (`lockstep`) every value carries a leading
    device axis and each equation runs under vmap, except the collective."""
    env = dict(zip(jaxpr.constvars, consts)) | dict(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [_read(env, v, lockstep) for v in eqn.invars]
        name, sub = eqn.primitive.name, _sub_jaxpr(eqn)
        if sub is not None:
            consts_in = [jnp.broadcast_to(c, (N, *np.shape(c))) for c in sub.consts]
            outs = _emulate(sub.jaxpr, consts_in if lockstep else sub.consts, ins, lockstep)
        elif name == "shard_map":
            p = eqn.params
            body_ins = [_split(a, s) for a, s in zip(ins, p["in_specs"])]
            body_outs = _emulate(p["jaxpr"], (), body_ins, lockstep=True)
            outs = [_join(o, s) for o, s in zip(body_outs, p["out_specs"])]
        elif name == "ragged_all_to_all":
            outs = [_ragged_reference(*ins)]
        else:
            assert not (lockstep and name.startswith(("psum", "all_", "ppermute"))), name
            bind = functools.partial(eqn.primitive.bind, **eqn.params)
            outs = jax.vmap(bind)(*ins) if lockstep else bind(*ins)
            outs = outs if eqn.primitive.multiple_results else [outs]
        env.update(zip(eqn.outvars, outs))
    return [_read(env, v, lockstep) for v in jaxpr.outvars]


_RAGGED_CASES = [
    ("float64", "series on both"),
    ("complex128", "series on both"),
    ("float64", "zero buffer"),
    ("float64", "constant operand"),
]


def _ragged_inputs(dtype):
    x = seeded_rng("ragged").normal(size=(N * _ROWS, 3)).astype(dtype)
    if dtype == "complex128":
        x = x + 0.3j * seeded_rng("ragged-im").normal(size=x.shape)
    return x, direction("ragged", x.shape, dtype)


@pytest.mark.parametrize("dtype, variant", _RAGGED_CASES)
def test_ragged_all_to_all_emulated(dtype, variant):
    mesh = _mesh("auto")
    x, v = _ragged_inputs(dtype)
    expected = jax.tree.map(np.asarray, _nested_jvp(_ragged_unsharded(variant), ORDER)(x, v))
    # The emulator runs op by op (seconds per program): order 1 (truncation) only once.
    orders = (1, ORDER) if (dtype, variant) == _RAGGED_CASES[0] else (ORDER,)
    for order in orders:
        closed = jax.make_jaxpr(taylax.derivatives(_ragged_sharded(mesh, variant), order))(x, v)
        assert "ragged_all_to_all" in str(closed), "the collective must be in taylax's program"
        (actual,) = _emulate(closed.jaxpr, closed.consts, [x, v])
        assert_series_close(
            np.asarray(actual), expected[: order + 1], context=f"{variant} {dtype} order {order}"
        )


def test_ragged_all_to_all_moves_every_coefficient_in_one_collective():
    jaxpr = str(
        jax.make_jaxpr(taylax.derivatives(_ragged_sharded(_mesh("auto"), "series on both"), 6))(
            *_ragged_inputs("float64")
        )
    )
    assert jaxpr.count("ragged_all_to_all") == 1  # primal and coefficients move together


@pytest.mark.skipif(jax.default_backend() == "cpu", reason="XLA:CPU cannot run ragged_all_to_all")
def test_ragged_all_to_all_compiled():
    mesh = _mesh("auto")
    x, v = _ragged_inputs("float64")
    f = _ragged_sharded(mesh, "series on both")
    expected = _nested_jvp(_ragged_unsharded("series on both"), ORDER)(x, v)
    actual = jax.jit(taylax.derivatives(f, ORDER))(_sharded(mesh, x), _sharded(mesh, v))
    assert_series_close(np.asarray(actual), np.asarray(expected), context="compiled")
