"""Whole-array calls of elementwise functions run as passes over points
(`taylax._pointwise`): the vmapped program, the whole-array layout, the same values, and
the whole-array pass wherever the function is not elementwise at every point."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import all_equations, nested_jvp_derivatives, users_codegen

jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.usefixtures("cpu_policy")


def damped_wave(t):
    return jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)


@pytest.fixture
def small_chunks(emission):
    """Chunks of 16 points from 32 points on, whatever the buffers' size; returns the
    changes to the CPU policy."""
    changes = dict(
        chunk_points=16,
        chunked_min_bytes=1,
        high_order_chunk_points=16,
        high_order_narrow_chunk_points=16,
        high_order_min_bytes=1,
        elementwise_by_points_min_bytes=1,
    )
    emission(**changes)
    return changes


def _primitives(fn, *args) -> set[str]:
    return {e.primitive.name for e in all_equations(jax.make_jaxpr(fn)(*args))}


def _per_point(f, order, x, v):
    """Each element's derivatives, by a jitted scalar call per point (no batching at all)."""
    one = jax.jit(taylax.derivatives(f, order))
    flat = [one(a, b) for a, b in zip(np.ravel(x), np.ravel(v))]
    return np.stack(flat, axis=-1).reshape((order + 1, *np.shape(x)))


@pytest.mark.parametrize("shape", [(70,), (5, 14)])
def test_whole_arrays_run_in_chunks_of_points(small_chunks, shape):
    x = jnp.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)
    v = jnp.linspace(1.0, 2.0, x.size).reshape(shape)
    d = taylax.derivatives(damped_wave, 8)
    # The loop over chunks of points that a vmapped call of this size takes.
    assert "scan" in _primitives(d, x, v)
    out = jax.jit(d, compiler_options=users_codegen())(x, v)
    assert out.shape == (9, *shape)
    np.testing.assert_allclose(out, _per_point(damped_wave, 8, x, v), rtol=1e-12, atol=0)
    # The same program as the vmap a user could write, transposed to the whole-array layout.
    vmapped = jax.jit(jax.vmap(d), compiler_options=users_codegen())(x.ravel(), v.ravel())
    np.testing.assert_array_equal(out, vmapped.T.reshape(out.shape))


def test_whole_array_taylor_layout(small_chunks):
    x = jnp.linspace(0.5, 1.5, 40)
    y, c = taylax.taylor(damped_wave, 5)(x, jnp.ones_like(x))
    assert y.shape == (40,) and c.shape == (5, 40)
    d = _per_point(damped_wave, 5, x, jnp.ones_like(x))
    factorials = np.array([1, 1, 2, 6, 24, 120], float)[:, None]
    np.testing.assert_allclose(y, d[0], rtol=1e-14)
    np.testing.assert_allclose(c, d[1:] / factorials[1:], rtol=1e-13)


def test_a_function_that_reads_its_shape_stays_whole(small_chunks):
    # Elementwise on the whole array, other constants at one point: not run per point.
    x = jnp.linspace(0.5, 1.5, 64)
    v = jnp.ones_like(x)
    f = lambda t: jnp.sin(t) / t.size  # noqa: E731
    assert "scan" not in _primitives(taylax.derivatives(f, 4), x, v)
    np.testing.assert_allclose(
        taylax.derivatives(f, 4)(x, v), nested_jvp_derivatives(f, x, v, 4), rtol=1e-13
    )


@pytest.mark.parametrize(
    "f",
    [
        lambda t: jnp.sin(t) * jnp.linspace(1.0, 2.0, 64),  # an array constant
        lambda t: jnp.exp(t) * jnp.sum(t),  # a reduction
        lambda t: jnp.cos(jnp.roll(t, 1)) * t,  # a permutation
    ],
    ids=["array-constant", "reduction", "roll"],
)
def test_non_elementwise_functions_stay_whole(small_chunks, f):
    x = jnp.linspace(0.5, 1.5, 64)
    v = jnp.linspace(1.0, 1.5, 64)
    assert "scan" not in _primitives(taylax.derivatives(f, 4), x, v)
    np.testing.assert_allclose(
        taylax.derivatives(f, 4)(x, v), nested_jvp_derivatives(f, x, v, 4), rtol=1e-12
    )


def test_scalar_constants_are_per_call_values(small_chunks):
    # A closed-over 0-d array is an argument: a new value gives new derivatives.
    x = jnp.linspace(0.5, 1.5, 64)
    for w in (0.5, 0.75):
        w = jnp.asarray(w)
        f = lambda t: jnp.sin(w * t) * jnp.exp(t)  # noqa: B023, E731
        np.testing.assert_allclose(
            taylax.derivatives(f, 5)(x, jnp.ones_like(x)),
            _per_point(f, 5, x, jnp.ones_like(x)),
            rtol=1e-13,
        )


def test_pytree_inputs_of_one_shape(small_chunks):
    x = {"a": jnp.linspace(0.5, 1.5, 48), "b": jnp.linspace(-1.0, 1.0, 48)}
    v = {"a": jnp.ones(48), "b": jnp.full(48, 0.5)}
    f = lambda p: (damped_wave(p["a"]) * jnp.exp(p["b"]), p["a"] ** 3)  # noqa: E731
    out = taylax.derivatives(f, 4)(x, v)
    assert "scan" in _primitives(taylax.derivatives(f, 4), x, v)
    g = lambda s: f(jax.tree.map(lambda a, b: a + s * b, x, v))  # noqa: E731
    for got, want in zip(out, nested_jvp_derivatives(g, 0.0, 1.0, 4)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gradient_through_a_whole_array_call(small_chunks):
    x = jnp.linspace(0.5, 1.5, 64)

    def loss(w, batched):
        f = lambda t: jnp.exp(-w * t**2) * jnp.cos(t)  # noqa: E731
        d = taylax.derivatives(f, 6)
        out = jax.vmap(d)(x, jnp.ones_like(x)).T if batched else d(x, jnp.ones_like(x))
        return jnp.sum(out[3] ** 2)

    np.testing.assert_allclose(jax.grad(loss)(0.7, False), jax.grad(loss)(0.7, True), rtol=1e-12)


def test_the_policy_can_keep_whole_arrays(small_chunks, emission):
    # The GPU policy keeps whole-array passes (a vmap there is unmeasured).
    x = jnp.linspace(0.5, 1.5, 64)
    d = taylax.derivatives(damped_wave, 8)
    assert "scan" in _primitives(d, x, jnp.ones_like(x))
    emission(**{**small_chunks, "elementwise_by_points_min_bytes": None})
    assert "scan" not in _primitives(d, x, jnp.ones_like(x))
    np.testing.assert_allclose(
        d(x, jnp.ones_like(x)), _per_point(damped_wave, 8, x, jnp.ones_like(x)), rtol=1e-12
    )
    assert taylax.GPU.elementwise_by_points_min_bytes is None


def test_small_series_stay_whole(small_chunks, emission):
    # Below the policy's bytes, whole-array rows were as fast or faster than chunks.
    x = jnp.linspace(0.5, 1.5, 64)
    emission(**{**small_chunks, "elementwise_by_points_min_bytes": 64 * 9 * 8 + 1})
    assert "scan" not in _primitives(taylax.derivatives(damped_wave, 8), x, jnp.ones_like(x))
    emission(**{**small_chunks, "elementwise_by_points_min_bytes": 64 * 9 * 8})
    assert "scan" in _primitives(taylax.derivatives(damped_wave, 8), x, jnp.ones_like(x))


def test_passes_that_a_vmap_runs_whole_stay_whole(small_chunks):
    # A pass with few buffers runs as one vmap, not in chunks: its whole-array pass is kept.
    x = jnp.linspace(0.5, 1.5, 64)
    f = lambda t: 0.3 * jnp.sin(t) * t**10  # noqa: E731
    d = taylax.derivatives(f, 6)
    assert "scan" not in _primitives(jax.vmap(d), x)
    assert "scan" not in _primitives(d, x, jnp.ones_like(x))
    np.testing.assert_allclose(
        d(x, jnp.ones_like(x)), nested_jvp_derivatives(f, x, jnp.ones_like(x), 6), rtol=1e-12
    )


def test_narrow_passes_past_high_order_keep_whole_arrays_longer(small_chunks, emission):
    # Past `high_order` a float32 whole-array pass ran as fast as the vmap in chunks up to
    # more bytes than float64's or lower orders' (`elementwise_by_points_narrow_min_bytes`).
    K, n = 6, 64
    x32 = jnp.linspace(0.5, 1.5, n, dtype=jnp.float32)
    x64 = jnp.linspace(0.5, 1.5, n)
    series32 = n * (K + 1) * 4
    d = taylax.derivatives(damped_wave, K)
    emission(
        **{**small_chunks, "high_order": 4, "elementwise_by_points_narrow_min_bytes": series32 + 1}
    )
    assert "scan" not in _primitives(d, x32, jnp.ones_like(x32))
    assert "scan" in _primitives(d, x64, jnp.ones_like(x64))
    assert "scan" in _primitives(taylax.derivatives(damped_wave, 4), x32, jnp.ones_like(x32))
    emission(
        **{**small_chunks, "high_order": 4, "elementwise_by_points_narrow_min_bytes": series32}
    )
    assert "scan" in _primitives(d, x32, jnp.ones_like(x32))
    # float32 against float64 per point, each order relative to its largest value (a
    # value near a zero of its order carries the cancellation's absolute error).
    got = np.asarray(d(x32, jnp.ones_like(x32)), np.float64)
    want = _per_point(damped_wave, K, x64, jnp.ones_like(x64))
    scale = np.max(np.abs(want), axis=1, keepdims=True)
    assert np.max(np.abs(got - want) / scale) < 1e-5


def _long_chain(t):
    return jnp.sin(jnp.sqrt(1.5 + jnp.tanh(jnp.log1p(t * t))))


def test_wide_kernels_count_passes_that_read_many_kept_values():
    # Kernels reading 16 or more kept values: many in a pass of long recurrences, few in
    # a short one (the CPU policy routes a whole array over points from 8).
    from taylax import _point_chunks

    def program(f):
        fn = lambda t: taylax.derivatives(f, 16)(t, 1.0)  # noqa: E731
        return _point_chunks.PointProgram(fn, [jax.ShapeDtypeStruct((), jnp.float64)])

    least = taylax.CPU.elementwise_by_points_min_wide_kernels
    assert _point_chunks.wide_kernels(program(_long_chain), 16) >= least
    assert _point_chunks.wide_kernels(program(damped_wave), 16) < least
    assert _point_chunks.wide_kernels(program(_long_chain), 10**6) == 0


def test_wide_kernels_run_over_points_below_the_bytes(small_chunks, emission):
    # Below the policy's bytes, a float64 pass of many wide kernels still runs over points
    # (over a whole array each operand is a pass over memory); a short pass, float32 and
    # the field at None keep the whole-array pass.
    x = jnp.linspace(0.5, 1.5, 64)
    ones = jnp.ones_like(x)
    below = {**small_chunks, "elementwise_by_points_min_bytes": 1 << 40}
    emission(**below)
    d = taylax.derivatives(_long_chain, 16)
    assert "scan" in _primitives(d, x, ones)
    got = np.asarray(jax.jit(d)(x, ones))
    assert "scan" not in _primitives(taylax.derivatives(damped_wave, 16), x, ones)
    x32 = x.astype(jnp.float32)
    assert "scan" not in _primitives(d, x32, jnp.ones_like(x32))
    emission(**{**below, "elementwise_by_points_min_wide_kernels": 10**6})
    assert "scan" not in _primitives(d, x, ones)
    emission(**{**below, "elementwise_by_points_min_wide_kernels": None})
    assert "scan" not in _primitives(d, x, ones)
    want = np.asarray(jax.jit(d)(x, ones))
    scale = np.max(np.abs(want), axis=1, keepdims=True)
    assert np.max(np.abs(got - want) / scale) < 1e-12
