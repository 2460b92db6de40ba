"""`taylax.ode.coefficients`: the Taylor coefficients of an ODE's solution.

References, all outside taylax:

* closed forms in mpmath (`tan` for y' = 1 + y^2, `exp(sin t)` for y' = cos(t) y, the
  logistic curve, `exp(i t)`), up to order 40;
* for any vector field, the solution's derivatives as nested Lie derivatives, each a
  `jax.jvp` of the one before along `(1, f(t, y))`: `y^(k+1) = D_k` with `D_0 = f` and
  `D_{k+1}(t, y) = dD_k/dt + dD_k/dy f(t, y)`. Exponential in k, so orders 0..6.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

import taylax
from taylax.ode._coefficients import _schedule

mpmath.mp.dps = 50


def lie_coefficients(f, t0, y0, args, order):
    """Normalized coefficients `y^(k)(t0) / k!`, stacked per leaf, by nested `jax.jvp`."""
    derivatives = [lambda t, y: y]
    for _ in range(order):
        prev = derivatives[-1]

        def nxt(t, y, prev=prev):
            return jax.jvp(prev, (t, y), (jnp.ones_like(t), f(t, y, args)))[1]

        derivatives.append(nxt)
    t0 = jnp.asarray(t0, jnp.float64)
    values = [d(t0, y0) for d in derivatives]
    return jax.tree.map(
        lambda *leaves: jnp.stack([v / math.factorial(k) for k, v in enumerate(leaves)]), *values
    )


def mp_coefficients(fun, t0, order):
    return np.array([complex(c) for c in mpmath.taylor(fun, mpmath.mpf(t0), order)])


def assert_coefficients_close(actual, expected, rtol):
    """Order by order, relative to the largest coefficient of that order over the leaves."""
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape
        scale = np.max(np.abs(e).reshape(len(e), -1), axis=1)
        err = np.max(np.abs(a - e).reshape(len(e), -1), axis=1)
        bad = np.flatnonzero(err > rtol * np.maximum(scale, 1e-300))
        assert not bad.size, f"orders {bad.tolist()}: error {err[bad]} against scale {scale[bad]}"


# Closed forms: (vector field, solution as an mpmath function of t, t0, y0 from it).
CLOSED = {
    "tan": (lambda t, y, a: 1 + y**2, mpmath.tan, 0.3),
    "exp-sin": (lambda t, y, a: jnp.cos(t) * y, lambda t: mpmath.exp(mpmath.sin(t)), 0.7),
    "logistic": (lambda t, y, a: y * (1 - y), lambda t: 1 / (1 + mpmath.exp(-t)), -0.4),
    "rotation": (lambda t, y, a: 1j * y, lambda t: mpmath.exp(1j * t), 0.2),
}


# "auto" computes these order by order (tests/test_ode_order_by_order.py); "doubling"
# keeps the sweeps, which "auto" takes for fields without recurrences, checked too.
METHODS = ["auto", "doubling"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", sorted(CLOSED))
@pytest.mark.parametrize("order", [0, 1, 2, 3, 6, 40])
def test_closed_forms(name, order, method):
    f, solution, t0 = CLOSED[name]
    expected = mp_coefficients(solution, t0, order)
    y0 = jnp.asarray(expected[0] if name == "rotation" else expected[0].real)
    got = jax.jit(taylax.ode.coefficients(f, order, method=method))(t0, y0)
    assert got.shape == (order + 1,) and got.dtype == y0.dtype
    assert_coefficients_close(got, expected if name == "rotation" else expected.real, 1e-13)


@pytest.mark.parametrize("method", METHODS)
def test_float32_tan_to_order_30(method):
    got = jax.jit(taylax.ode.coefficients(lambda t, y, a: 1 + y**2, 30, method=method))(
        jnp.float32(0.3), jnp.tan(jnp.float32(0.3))
    )
    assert got.dtype == jnp.float32
    assert_coefficients_close(got, mp_coefficients(mpmath.tan, 0.3, 30).real, 2e-5)


def lorenz(t, y, args):
    sigma, rho, beta = args
    return jnp.stack([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1], y[0] * y[1] - beta * y[2]])


def forced_pendulum(t, y, args):
    return {"angle": y["speed"], "speed": -jnp.sin(y["angle"]) + args * jnp.cos(2 * t)}


def mlp_field(t, y, args):
    w1, w2 = args
    return jnp.tanh(jnp.concatenate([y, t[None]]) @ w1) @ w2


def nonlinear_schrodinger(t, y, args):
    # Not holomorphic (|y|^2 = y conj(y)): the Jacobian is only real-linear.
    return -1j * (jnp.abs(y) ** 2 * y + args * jnp.roll(y, 1))


def _mlp_args():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return (0.5 * jax.random.normal(k1, (4, 8)), 0.5 * jax.random.normal(k2, (8, 3)))


FIELDS = {
    "lorenz": (lorenz, 0.1, jnp.array([1.0, 2.0, 20.0]), (10.0, 28.0, 8.0 / 3.0)),
    "forced pendulum": (
        forced_pendulum,
        0.4,
        {"angle": jnp.array([0.3, 2.0]), "speed": jnp.array([0.1, -0.5])},
        0.7,
    ),
    "mlp": (mlp_field, -0.2, jnp.array([0.3, -0.1, 0.8]), _mlp_args()),
    "nonlinear schrodinger": (
        nonlinear_schrodinger,
        0.0,
        jnp.array([0.6 + 0.2j, -0.3 + 0.5j, 0.1 - 0.4j]),
        0.3,
    ),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", sorted(FIELDS))
def test_against_nested_lie_derivatives(name, method):
    f, t0, y0, args = FIELDS[name]
    # Both jitted: a nested-jvp program of order 6 runs op by op in seconds.
    got = jax.jit(taylax.ode.coefficients(f, 6, method=method))(t0, y0, args)
    expected = jax.jit(lambda t0, y0, args: lie_coefficients(f, t0, y0, args, 6))(t0, y0, args)
    assert jax.tree.structure(got) == jax.tree.structure(y0)
    assert_coefficients_close(got, expected, 1e-12)


def test_jit_vmap_and_grad():
    f, t0, y0, args = FIELDS["lorenz"]
    batch = y0 + jnp.linspace(0, 1, 4)[:, None]
    got = jax.jit(jax.vmap(lambda y: taylax.ode.coefficients(f, 5)(t0, y, args)))(batch)
    expected = jax.jit(jax.vmap(lambda y: lie_coefficients(f, t0, y, args, 5)))(batch)
    assert_coefficients_close(got.transpose(1, 0, 2), expected.transpose(1, 0, 2), 1e-12)

    def top(y0, t0, args, coefficients):
        return jnp.sum(coefficients(f, 5)(t0, y0, args)[5] ** 2)

    def lie(f, order):
        return lambda t0, y0, args: lie_coefficients(f, t0, y0, args, order)

    grad = jax.jit(jax.grad(top, argnums=(0, 1, 2)), static_argnums=3)
    grads = grad(y0, jnp.asarray(t0), args, taylax.ode.coefficients)
    expected = grad(y0, jnp.asarray(t0), args, lie)
    for g, e in zip(jax.tree.leaves(grads), jax.tree.leaves(expected)):
        np.testing.assert_allclose(g, e, rtol=1e-11, atol=1e-11 * np.max(np.abs(e)))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["lorenz", "forced pendulum"])
def test_batch_layout_equals_vmap(name, method):
    # `batch=True`: the trajectories as the last axis of every leaf, each at its own time.
    # The same numbers as `jax.vmap` of the single-trajectory coefficients.
    f, _, y0, args = FIELDS[name]
    starts = jax.tree.map(lambda a: a + 0.1 * jnp.arange(4.0)[:, None], y0)  # (4, ...)
    times = jnp.array([0.0, 0.3, -0.2, 1.1])
    single = jax.jit(
        jax.vmap(lambda t, y: taylax.ode.coefficients(f, 9, method=method)(t, y, args))
    )(times, starts)
    last = jax.tree.map(lambda a: jnp.moveaxis(a, 0, -1), starts)  # (..., 4)
    got = jax.jit(taylax.ode.coefficients(f, 9, batch=True, method=method))(times, last, args)
    expected = jax.tree.map(lambda a: jnp.moveaxis(a, 0, -1), single)  # (10, ..., 4)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-13)
    # A scalar `t0` is every trajectory's.
    same = jax.jit(taylax.ode.coefficients(f, 9, batch=True, method=method))(0.3, last, args)
    for g, e in zip(jax.tree.leaves(same), jax.tree.leaves(single)):
        np.testing.assert_allclose(g[..., 1], e[1], rtol=1e-13, atol=1e-13)


def test_schedule_doubles_and_ends_at_the_order():
    for order in range(0, 70):
        known = _schedule(order)
        assert (known[-1] if known else 0) == order
        previous = 0
        for k in known:
            assert previous < k <= 2 * previous + 2
            previous = k
        assert len(known) <= max(1, math.ceil(math.log2(order + 2)))


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda c: c(0.0, jnp.arange(3)), TypeError, "`y0` must hold floating-point"),
        (lambda c: c(0.0, {}), ValueError, "`y0` holds no arrays"),
        (lambda c: c(jnp.zeros(2), jnp.ones(3)), ValueError, "`t0` must be a real scalar"),
        (
            lambda c: taylax.ode.coefficients(lambda t, y, a: y[:2], 3)(0.0, jnp.ones(3)),
            ValueError,
            "shaped like `y0`",
        ),
        (
            lambda c: taylax.ode.coefficients(lambda t, y, a: (y, y), 3)(0.0, jnp.ones(3)),
            ValueError,
            "pytree shaped like `y0`",
        ),
        (
            lambda c: taylax.ode.coefficients(lambda t, y, a: 1j * y, 3)(0.0, jnp.ones(3)),
            TypeError,
            "make `y0` complex",
        ),
        (lambda c: taylax.ode.coefficients(lambda t, y, a: y, -1), ValueError, "`order`"),
        (
            lambda c: taylax.ode.coefficients(lambda t, y, a: y, 3, batch=1),
            TypeError,
            "`batch` must be True or False",
        ),
        (
            lambda c: taylax.ode.coefficients(lambda t, y, a: y, 3, batch=True)(
                jnp.zeros(2), jnp.ones((3, 5))
            ),
            ValueError,
            "With `batch=True`, `t0` must be a real scalar or a real array of shape",
        ),
    ],
)
def test_clear_errors(call, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(")):
        call(taylax.ode.coefficients(lambda t, y, a: y, 3))
