"""Large vmapped batches of Taylor passes run in chunks of points (`taylax._point_chunks`):
the same values as one vmap, through `jax.grad` and `jax.jvp` too, and only where the
pass keeps many buffers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import all_equations, users_codegen
from taylax import _point_chunks
from taylax._count import iter_equations

jax.config.update("jax_enable_x64", True)

# Chunks are taken on the CPU backend only: elsewhere every batch is one vmap.
# Chunks of points are a choice of the CPU policy: its programs, whatever the backend.
pytestmark = pytest.mark.usefixtures("cpu_policy")


def damped_wave(t):
    return jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)


def seed_function(t):
    return 0.3 * jnp.sin(t) * t**10


@pytest.fixture
def small_chunks(emission):
    """Chunks of 16 points from 32 points on, whatever the buffers' size (the CPU policy
    so changed, in force for the test); returns the changes."""
    changes = dict(
        chunk_points=16,
        chunked_min_bytes=1,
        high_order_chunk_points=16,
        high_order_narrow_chunk_points=16,
        high_order_min_bytes=1,
    )
    emission(**changes)
    return changes


def _primitives(fn, *args) -> set[str]:
    return {e.primitive.name for e in all_equations(jax.make_jaxpr(fn)(*args))}


def _relative(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("points", [64, 70])
def test_chunks_equal_one_vmap(small_chunks, points):
    t = jnp.linspace(0.5, 1.5, points)
    d = taylax.derivatives(damped_wave, 8)
    chunked = jax.vmap(d)
    # A jit inside the vmap hides the batch from the API call: one plain vmap.
    plain = jax.vmap(jax.jit(d))
    assert "scan" in _primitives(chunked, t)
    assert "cond" not in _primitives(chunked, t)  # the conditional is for high orders
    assert "scan" not in _primitives(plain, t)
    np.testing.assert_allclose(jax.jit(chunked)(t), plain(t), rtol=1e-14, atol=0)
    # A direction batched with the points, and one shared by all of them.
    v = jnp.linspace(1.0, 2.0, points)
    np.testing.assert_allclose(jax.vmap(d)(t, v), jax.vmap(jax.jit(d))(t, v), rtol=1e-14)
    shared = jax.vmap(lambda t: d(t, jnp.asarray(0.5)))
    np.testing.assert_allclose(shared(t), jax.vmap(jax.jit(lambda t: d(t, 0.5)))(t), rtol=1e-14)


def test_chunks_under_grad_and_jvp(small_chunks):
    t = jnp.linspace(0.5, 1.5, 40)
    taylor = taylax.taylor(damped_wave, 6)

    def d(t):
        return taylor(t, jnp.ones_like(t))

    def loss(t, batch):
        return sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(batch(d)(t)))

    chunked = jax.grad(lambda t: loss(t, jax.vmap))(t)
    plain = jax.grad(lambda t: loss(t, lambda g: jax.vmap(jax.jit(g))))(t)
    assert _relative(chunked, plain) < 1e-13
    tangent = jnp.cos(t)
    _, chunked = jax.jvp(jax.vmap(d), (t,), (tangent,))
    _, plain = jax.jvp(jax.vmap(jax.jit(d)), (t,), (tangent,))
    for a, b in zip(jax.tree.leaves(chunked), jax.tree.leaves(plain)):
        assert _relative(a, b) < 1e-13
    assert "scan" in _primitives(jax.vmap(d), t)


def test_few_buffers_stay_one_vmap(small_chunks):
    """`0.3 sin(t) t^10` keeps two buffers: chunks would only add a loop."""
    t = jnp.linspace(0.5, 1.5, 64)
    closed = jax.make_jaxpr(taylax.derivatives(seed_function, 8))(1.0)
    count, _ = _point_chunks.buffered_bytes(iter_equations(closed))
    assert count < taylax.CPU.chunked_min_buffers
    assert "scan" not in _primitives(jax.vmap(taylax.derivatives(seed_function, 8)), t)


def test_output_rows_past_a_fused_concatenate_count_as_buffers(small_chunks):
    """Past 8 rows XLA:CPU writes each row of a stacked output to a buffer of its own:
    `0.3 sin(t) t^10` keeps two values in buffers but runs in chunks at order 12."""
    t = jnp.linspace(0.5, 1.5, 64)
    d = taylax.derivatives(seed_function, 12)
    assert _point_chunks._output_row_buffers(jax.make_jaxpr(d)(1.0), 12, taylax.CPU) == (12, 12 * 8)
    assert "scan" in _primitives(jax.vmap(d), t)
    np.testing.assert_allclose(jax.jit(jax.vmap(d))(t), jax.vmap(jax.jit(d))(t), rtol=1e-14, atol=0)


def test_output_rows_count_twice():
    """Rows written one buffer each are copied into the stacked output, so their bytes
    count twice: `0.3 sin(t) t^10` at order 9 keeps two buffers and nine rows, about
    42 MB over 262,144 points (chunked) and half that over 131,072 (one vmap)."""
    d = jax.vmap(taylax.derivatives(seed_function, 9))
    big, small = jnp.linspace(0.5, 1.5, 262144), jnp.linspace(0.5, 1.5, 131072)
    assert _scan_lengths(d, big) == [262144 // taylax.CPU.chunk_points]
    assert _scan_lengths(d, small) == []


def test_high_orders_stay_one_vmap(small_chunks):
    """Past `CHUNKED_MAX_ORDER` (not measured) one vmap. The chunk loop is told by its
    conditional: the pass itself loops over rows at such orders."""
    t = jnp.linspace(0.5, 1.5, 64)
    order = taylax.CPU.chunked_max_order + 1
    assert "cond" not in _primitives(jax.vmap(taylax.derivatives(damped_wave, order)), t)
    assert "cond" in _primitives(jax.vmap(taylax.derivatives(damped_wave, order - 1)), t)


def _scan_lengths(fn, *args) -> list[int]:
    closed = jax.make_jaxpr(fn)(*args)
    return [e.params["length"] for e in all_equations(closed) if e.primitive.name == "scan"]


def test_chunk_size_by_order():
    """Past `HIGH_ORDER`, chunks of 8,192 points from fewer buffered bytes; the chunk's
    outputs leave the loop through a conditional, which keeps XLA from fusing the
    pass's last kernel into the update that stacks the chunks."""
    t = jnp.linspace(0.5, 1.5, 65536)
    high = jax.vmap(taylax.derivatives(damped_wave, 32))
    assert _scan_lengths(high, t) == [65536 // taylax.CPU.high_order_chunk_points]
    assert "cond" in _primitives(high, t)
    # At order 8 the same batch is one chunk of 65,536: one vmap.
    assert _scan_lengths(jax.vmap(taylax.derivatives(damped_wave, 8)), t) == []
    # float32 past `high_order`: chunks of `high_order_narrow_chunk_points`.
    t32 = t.astype(jnp.float32)
    narrow = taylax.CPU.high_order_narrow_chunk_points
    assert narrow != taylax.CPU.high_order_chunk_points
    assert _scan_lengths(high, t32) == [65536 // narrow]


def test_chunks_shrink_until_their_buffers_fit(emission):
    """A pass whose buffers outgrow `chunk_max_bytes` in chunks of `chunk_points` runs in
    smaller chunks: this chain keeps 52 buffers and 16 output rows at order 16, 34 MiB
    over 65,536 points, which one chunk of 65,536 would not split."""

    def chain(t):
        return jnp.sqrt(1 + jnp.tanh(jnp.log1p(t * t))) * jnp.sin(t)

    t = jnp.linspace(-0.9, 0.9, 65536)
    d = jax.vmap(taylax.derivatives(chain, 16))
    count, per_point = _point_chunks.buffered_bytes(iter_equations(jax.make_jaxpr(d)(t[:1])))
    assert per_point * 65536 > taylax.CPU.chunk_max_bytes
    (length,) = _scan_lengths(d, t)
    assert 2 <= length and (65536 // length) * per_point <= taylax.CPU.chunk_max_bytes
    emission(chunk_max_bytes=None)
    assert _scan_lengths(d, t) == []


def _vmapped_both_ways(d, t):
    """`jit(vmap(d))(t)` (the policy's chunks, if any) and `vmap(jit(d))(t)` (one `vmap`),
    compiled as users compile them (`users_codegen`)."""
    options = users_codegen()
    chunked = jax.jit(jax.vmap(d), compiler_options=options)(t)
    one_vmap = jax.vmap(jax.jit(d, compiler_options=options))(t)
    return chunked, one_vmap


def test_chunks_with_a_remainder_equal_one_vmap(small_chunks):
    t = jnp.linspace(0.5, 1.5, 53)
    d = taylax.derivatives(damped_wave, 20)
    assert _scan_lengths(jax.vmap(d), t) == [3]
    np.testing.assert_allclose(*_vmapped_both_ways(d, t), rtol=1e-14)


def test_other_backends_stay_one_vmap(small_chunks, emission):
    # What chunks save is XLA:CPU's (page faults, cache); on an H200 one vmap was faster.
    t = jnp.linspace(0.5, 1.5, 64)
    d = taylax.derivatives(damped_wave, 8)
    assert "scan" in _primitives(jax.vmap(d), t)
    emission(base=taylax.GPU, **small_chunks)
    assert "scan" not in _primitives(jax.vmap(d), t)
    np.testing.assert_allclose(*_vmapped_both_ways(d, t), rtol=1e-14)


def test_small_batches_stay_one_vmap():
    t = jnp.linspace(0.5, 1.5, 1000)
    assert "scan" not in _primitives(jax.vmap(taylax.derivatives(damped_wave, 8)), t)


def test_named_axes_stay_one_vmap(small_chunks):
    """A collective over the vmapped axis needs every point at once."""
    t = jnp.linspace(0.5, 1.5, 64)

    def f(t):
        return damped_wave(t) * jax.lax.psum(t, "points")

    d = taylax.derivatives(f, 8)
    out = jax.vmap(d, axis_name="points")(t)
    assert "scan" not in _primitives(jax.vmap(d, axis_name="points"), t)
    first = jax.vmap(lambda t: jax.jvp(f, (t,), (1.0,))[1], axis_name="points")(t)
    np.testing.assert_allclose(out[:, 1], first, rtol=1e-13)


def test_buffered_bytes_counts_marked_values():
    closed = jax.make_jaxpr(taylax.derivatives(damped_wave, 8))(1.0)
    count, size = _point_chunks.buffered_bytes(iter_equations(closed))
    assert count >= taylax.CPU.chunked_min_buffers
    assert size == 8 * count  # one float64 per buffered value and point


def test_the_float32_fallback_counts_once():
    """The float32 fallback's unscaled pass runs only where the stretched one overflowed,
    after its buffers are dead: counted, it doubled the buffers, and over 65,536 points
    at order 13 the pass ran in two chunks, 1.1-1.4x the time of one vmap
    (docs/EMISSION.md, "float32 past order 12")."""
    from taylax._fallback import fallback_p

    def chain(t):
        return jnp.exp(jnp.cos(t)) / (2 + t**3)

    t = jnp.linspace(0.1, 0.9, 65536, dtype=jnp.float32)
    d = jax.vmap(taylax.derivatives(chain, 13))
    closed = jax.make_jaxpr(taylax.derivatives(chain, 13))(t[0], t[0])
    counted, _ = _point_chunks.buffered_bytes(
        iter_equations(closed, prune=lambda e: e.primitive is fallback_p)
    )
    everything, _ = _point_chunks.buffered_bytes(iter_equations(closed))
    assert 0 < counted < everything
    assert _scan_lengths(d, t, t) == []
