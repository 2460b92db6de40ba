"""`taylax._rare.where_any`: a select whose rare side runs only when some element takes
it, under `jax.vmap` once per batch; and the rules that use it (`x ** p` of a series
through 0, `logaddexp` at `+inf`) under `vmap`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import all_equations, oracle
from taylax import _rare


def _rare_side(x, scale):
    return jnp.sin(x) * scale


def _with_where_any(x, scale):
    return _rare.where_any(x > 1.0, _rare_side, jnp.cos(x), [x, scale])


def _with_where(x, scale):
    return jnp.where(x > 1.0, _rare_side(x, scale), jnp.cos(x))


X = np.asarray([0.3, 1.4, -0.2, 2.5])


@pytest.mark.parametrize("x", [X, np.asarray([0.3, -0.2])], ids=["some", "none"])
def test_values_as_where(x):
    np.testing.assert_allclose(_with_where_any(x, 2.0), _with_where(x, 2.0), rtol=1e-15)
    got = jax.jit(_with_where_any)(x, 2.0)
    np.testing.assert_allclose(got, _with_where(x, 2.0), rtol=1e-15)


@pytest.mark.parametrize("in_axes", [(0, None), (0, 0), (None, 0)])
def test_under_vmap(in_axes):
    xs = np.stack([X, X[::-1], np.zeros(4)])
    scales = np.asarray([2.0, -1.0, 0.5])
    x_arg = xs if in_axes[0] == 0 else X
    s_arg = scales if in_axes[1] == 0 else 2.0
    got = jax.jit(jax.vmap(_with_where_any, in_axes=in_axes))(x_arg, s_arg)
    want = jax.vmap(_with_where, in_axes=in_axes)(x_arg, s_arg)
    np.testing.assert_allclose(got, want, rtol=1e-15)


def test_vmap_asks_once_per_batch():
    # The batched program keeps a conditional on the whole batch, not a select that
    # computes the rare side for every point.
    program = jax.make_jaxpr(jax.vmap(lambda x: _with_where_any(x, 2.0)))(np.stack([X, X]))
    counts = taylax.equation_counts(program)
    assert counts.get("cond", 0) == 1, counts
    top = [e.primitive.name for e in program.jaxpr.eqns]
    assert "sin" not in top, top  # only inside the conditional's branch


@pytest.mark.parametrize("batched", [False, True])
def test_gradients_as_where(batched):
    f, ref, x = _with_where_any, _with_where, X
    if batched:
        f, ref = (jax.vmap(g, in_axes=(0, None)) for g in (f, ref))
        x = np.stack([X, X + 0.5])
    got = jax.grad(lambda x, s: jnp.sum(f(x, s)), argnums=(0, 1))(x, 2.0)
    want = jax.grad(lambda x, s: jnp.sum(ref(x, s)), argnums=(0, 1))(x, 2.0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-14)


def test_a_taylor_pass_over_it():
    # A nested derivative's outer pass meets the primitive in the inner pass's program.
    got = taylax.derivatives(lambda x: _with_where_any(x, 2.0), 4)(X, np.ones(4))
    want = taylax.derivatives(lambda x: _with_where(x, 2.0), 4)(X, np.ones(4))
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_rare_side_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="must return one array shaped and typed as"):
        _rare.where_any(X > 1, lambda x: x[:2], jnp.cos(X), [X])


def _pow_of_series(t):
    return (t * jnp.sin(t) + 0.5 * t**3) ** 2.5


def test_pow_of_a_series_through_zero_under_vmap():
    # Points at 0 take the composition (nested jvp's zeros and non-finite values there),
    # the others the recurrence; under vmap the composition runs because some point is 0.
    t = np.asarray([0.0, 0.4, 1.1, 0.0])
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(_pow_of_series, 6)))(t)).T
    want = oracle(_pow_of_series, t, np.ones(4), 6)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-10, atol=1e-12)


def test_logaddexp_at_plus_inf_under_vmap():
    def f(x):
        return jnp.logaddexp(jnp.where(x > 1.0, jnp.inf, x * x), jnp.sin(x))

    t = np.asarray([0.3, 1.5, -0.7])
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(f, 5)))(t)).T
    want = oracle(f, t, np.ones(3), 5)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _sin_times_power(t):
    return jnp.sin(t) * (1.2 + t * t) ** -1.5


def test_pow_of_a_series_keeps_its_rows_for_a_product(emission):
    # The conditional's output is a buffer; on the CPU a product past the stacked bound
    # reads its rows (row sums) instead of a shifted sum over a padded copy of it, which
    # XLA:CPU computed transposed against the line's (points, K + 1) stack.
    emission()
    t = jnp.linspace(-0.9, 0.9, 8)
    order = taylax.CPU.stacked_product_rows_max_order + 1
    jaxpr = jax.make_jaxpr(jax.vmap(taylax.derivatives(_sin_times_power, order)))(t)
    assert "pad" not in {e.primitive.name for e in all_equations(jaxpr)}


def test_pow_of_a_series_through_zero_with_a_product(emission):
    # The rows of the conditional's output, on both of its sides.
    emission()
    order = taylax.CPU.stacked_product_rows_max_order + 1

    def f(t):
        return jnp.sin(t) * _pow_of_series(t)

    t = np.asarray([0.0, 0.4, 1.1, -0.3])
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)).T
    want = oracle(f, t, np.ones(4), order)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-10, atol=1e-12)
    away = t != 0.0
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(f, order)))(t[away])).T
    np.testing.assert_allclose(got, want[:, away], rtol=1e-10, atol=1e-12)
