"""The `taylax_computed_once` primitive: the identity, marked or not when lowered by size."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax import _once, _series

# Marks are lowered by the CPU policy's bounds, whatever the backend.
pytestmark = pytest.mark.usefixtures("cpu_policy")

LARGE = taylax.CPU.unmarked_min_bytes // 8  # float64 values: the smallest unmarked size


def _marked(kind="once", pass_order=taylax.CPU.unmarked_max_order):
    def fn(x):
        return _once.mark(x, _series.opaque_one(x), kind=kind, pass_order=pass_order)

    return fn


def _lowered(fn, *shapes) -> str:
    # Lowered, not compiled: nothing of the large shapes is allocated.
    args = [jax.ShapeDtypeStruct(s, jnp.float64) for s in shapes]
    return jax.jit(fn).lower(*args).as_text()


def _unmarked(text: str) -> bool:
    """Whether a lowered one-input program returns its input unchanged."""
    return "return %arg0 " in text


@pytest.mark.parametrize("kind", ["once", "shield"])
def test_marks_are_lowered_by_size_and_order(kind):
    # Below the size bound, or at orders past `UNMARKED_MAX_ORDER`, the mark is the
    # division (or product) by an opaque one; above it at low orders, the value itself.
    assert not _unmarked(_lowered(_marked(kind), (LARGE - 1,)))
    assert _unmarked(_lowered(_marked(kind), (LARGE,)))
    assert not _unmarked(_lowered(_marked(kind, taylax.CPU.unmarked_max_order + 1), (LARGE,)))
    assert not _unmarked(_lowered(_marked(kind, None), (LARGE,)))  # outside a Taylor pass


@pytest.mark.parametrize("kind", ["once", "shield"])
def test_batched_marks_of_the_lowest_orders_are_lowered_unmarked_at_every_size(kind):
    low = taylax.CPU.unmarked_any_size_max_order
    assert _unmarked(_lowered(jax.vmap(_marked(kind, low)), (3,)))
    assert _unmarked(_lowered(jax.vmap(_marked(kind, low)), (LARGE,)))
    assert not _unmarked(_lowered(jax.vmap(_marked(kind, low + 1)), (3,)))


@pytest.mark.parametrize("kind", ["once", "shield"])
def test_unbatched_marks_of_the_lowest_orders_are_lowered_by_their_own_bound(kind):
    # Traced at the shape they are lowered at (no vmap after the pass): marked while
    # smaller than `unbatched_unmarked_min_bytes`, a bound of their own.
    low = taylax.CPU.unmarked_any_size_max_order
    least = taylax.CPU.unbatched_unmarked_min_bytes // 8  # float64 elements
    assert least < LARGE
    assert not _unmarked(_lowered(_marked(kind, low), (3,)))
    assert not _unmarked(_lowered(_marked(kind, low), (least - 1,)))
    assert _unmarked(_lowered(_marked(kind, low), (least,)))
    # A value batched by vmap is told apart by its traced shape, even where the batch
    # leaves it small.
    assert _unmarked(_lowered(jax.vmap(_marked(kind, low)), (least - 1,)))


def test_unbatched_marks_of_the_lowest_orders_follow_the_policy(emission):
    emission(unbatched_unmarked_min_bytes=None)
    assert _unmarked(_lowered(_marked("once", taylax.CPU.unmarked_any_size_max_order), (3,)))


def test_batched_marks_are_lowered_by_the_batched_size():
    # Under vmap the rules see one point; the lowering sees the whole batch.
    per_point = jax.vmap(_marked())  # at the largest order that marks by size
    assert not _unmarked(_lowered(per_point, (1024,)))
    assert _unmarked(_lowered(per_point, (LARGE,)))
    # `one` shared by the batch (not batched) is broadcast to it.
    order = taylax.CPU.unmarked_max_order
    shared = jax.vmap(lambda x, one: _once.mark(x, one, kind="once", pass_order=order), (0, None))
    assert "stablehlo.divide" not in _lowered(shared, (LARGE,), ())
    assert "stablehlo.divide" in _lowered(shared, (1024,), ())
    np.testing.assert_array_equal(shared(jnp.arange(3.0), jnp.ones(())), np.arange(3.0))


@pytest.mark.parametrize("size", [5, LARGE])
@pytest.mark.parametrize("kind", ["once", "shield"])
def test_marks_are_the_identity(kind, size):
    x = jnp.linspace(-2.0, 3.0, size).at[:4].set(jnp.array([jnp.inf, -jnp.inf, jnp.nan, -0.0]))
    out = np.asarray(jax.jit(_marked(kind))(x))
    np.testing.assert_array_equal(out, np.asarray(x))
    assert np.signbit(out[3])
    np.testing.assert_array_equal(np.asarray(_marked(kind)(x[4:9])), np.asarray(x[4:9]))


def test_marks_differentiate_as_the_identity():
    x = jnp.array([0.3, -1.2, 2.0])
    fn = _marked()

    def loss(x):
        return jnp.sum(jnp.sin(fn(x)) ** 2)

    expected = jax.grad(lambda x: jnp.sum(jnp.sin(x) ** 2))(x)
    np.testing.assert_allclose(jax.grad(loss)(x), expected, rtol=1e-15)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), expected, rtol=1e-15)
    _, tangent = jax.jvp(fn, (x,), (jnp.array([1.0, 2.0, 3.0]),))
    np.testing.assert_array_equal(tangent, [1.0, 2.0, 3.0])


def test_taylor_passes_through_emitted_marks():
    # A program that already holds a Taylor pass (and its marks) differentiates again. (An
    # exponential of a sine: of a polynomial, the scalar pass would be one kernel, unmarked.)
    def f(t):
        return jnp.exp(jnp.sin(t)) * jnp.cos(3 * t) / (1 + t**2)

    inner = jax.jit(taylax.derivatives(f, 2))
    assert "taylax_computed_once" in str(jax.make_jaxpr(inner)(0.7))
    outer = taylax.derivatives(inner, 2)(0.7)
    direct = taylax.derivatives(f, 4)(0.7)
    for k in range(3):
        np.testing.assert_allclose(outer[:, k], direct[k : k + 3], rtol=1e-13)


@pytest.mark.parametrize("order", [2, 4, 8])
def test_large_batches_give_the_marked_values(order):
    # The unmarked lowering computes the same arithmetic: values agree to rounding
    # (the division recurrence multiplies by one reciprocal either way).
    def f(t):
        return jnp.sqrt(1 + t**2) * jnp.exp(jnp.sin(t)) / (2 + jnp.cos(t))

    fn = jax.jit(jax.vmap(taylax.derivatives(f, order)))
    t = jnp.linspace(0.5, 1.5, LARGE)
    large = np.asarray(fn(t))
    small = np.asarray(fn(t[::4096]))
    np.testing.assert_allclose(large[::4096], small, rtol=1e-14, atol=0)


@pytest.mark.parametrize("kind", ["once", "shield"])
def test_policies_without_marks_lower_every_value_unmarked(kind, emission):
    # The GPU policy marks nothing: XLA:GPU fuses the readers, recomputing is cheap there.
    emission(base=taylax.GPU)
    for order in (None, 1, taylax.CPU.unmarked_max_order + 1, 32):
        assert _unmarked(_lowered(_marked(kind, order), (3,)))


def test_whole_array_passes_of_the_lowest_orders_mark_small_values(emission):
    # A pass traced at its arrays' full shape marks what its rows share; the same pass
    # under vmap does not (docs/EMISSION.md, "Values computed once").
    def f(t):
        return jnp.cos(t) ** 3 * jnp.exp(-t * t) / (2 + jnp.sin(t))

    order = taylax.CPU.unmarked_any_size_max_order
    t = jax.ShapeDtypeStruct((4096,), jnp.float64)

    def divides(fn) -> int:
        return jax.jit(fn).lower(t).as_text().count("stablehlo.divide")

    def whole(t):
        return taylax.derivatives(f, order)(t, jnp.ones_like(t))

    per_point = jax.vmap(taylax.derivatives(f, order))
    marked_whole, marked_vmap = divides(whole), divides(per_point)
    emission(unbatched_unmarked_min_bytes=None)
    assert divides(whole) < marked_whole
    assert divides(per_point) == marked_vmap


def test_row_marks_are_kept_only_while_small_past_the_lowest_orders():
    # A recurrence's rows (kind "row"): a buffer while it stays in cache, else recomputed
    # in the readers; up to `unmarked_max_order` never a buffer.
    least = taylax.CPU.rows_unmarked_min_bytes // 8
    high = taylax.CPU.unmarked_max_order + 1
    for kind in ("row", "row shield"):
        assert not _unmarked(_lowered(_marked(kind, high), (least - 1,)))
        assert _unmarked(_lowered(_marked(kind, high), (least,)))
        assert not _unmarked(_lowered(jax.vmap(_marked(kind, high)), (least - 1,)))
        assert _unmarked(_lowered(jax.vmap(_marked(kind, high)), (least,)))
        assert _unmarked(_lowered(_marked(kind, taylax.CPU.unmarked_max_order), (3,)))
    # The marking itself: a division for the row, a product for its shield.
    assert "divide" in _lowered(_marked("row", high), (3,))
    assert "multiply" in _lowered(_marked("row shield", high), (3,))


def test_point_row_marks_are_rows_under_vmap_and_buffers_over_whole_arrays():
    # A quotient's rows by a series (kind "point row"): kept as "row" marks where vmap
    # batched them, always a buffer at the shape the pass traced (a whole array's pass).
    least = taylax.CPU.rows_unmarked_min_bytes // 8
    high = taylax.CPU.unmarked_max_order + 1
    for kind in ("point row", "point row shield"):
        assert not _unmarked(_lowered(jax.vmap(_marked(kind, high)), (least - 1,)))
        assert _unmarked(_lowered(jax.vmap(_marked(kind, high)), (least,)))
        assert not _unmarked(_lowered(_marked(kind, high), (LARGE,)))
        assert _unmarked(_lowered(_marked(kind, taylax.CPU.unmarked_max_order), (LARGE,)))
    assert "divide" in _lowered(_marked("point row", high), (3,))
    assert "multiply" in _lowered(_marked("point row shield", high), (3,))


def test_row_marks_follow_the_policy(emission):
    emission(rows_unmarked_min_bytes=None)
    assert not _unmarked(_lowered(_marked("row", taylax.CPU.unmarked_max_order + 1), (LARGE,)))
    emission(mark_values=False)
    assert _unmarked(_lowered(_marked("row", taylax.CPU.unmarked_max_order + 1), (3,)))
