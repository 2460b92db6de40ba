"""The symmetric-Hessian biharmonic pass (`taylax._biharmonic`) against dense nested
jax.hessian, its packed-band helpers against dense NumPy, and its fallback."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import all_equations
from taylax import _biharmonic, _operators
from test_operators import FUNCTIONS, init_mlp, residual_net

jax.config.update("jax_enable_x64", True)


def _packed(full: np.ndarray) -> np.ndarray:
    """The band layout of a symmetric matrix: diagonal k = 0..d-1 after one another."""
    d = full.shape[0]
    return np.concatenate([np.diagonal(full, k) for k in range(d)])


def _nested_hessian_biharmonic(f, x):
    laplacian = lambda y: jnp.trace(jax.hessian(f)(y).reshape(y.size, y.size))  # noqa: E731
    return jnp.trace(jax.hessian(laplacian)(x).reshape(x.size, x.size))


def _symmetric_pass(f, x):
    """The pass itself (raises `Unsupported` rather than falling back)."""
    closed = jax.make_jaxpr(f)(x)
    (out,) = _biharmonic.program_of(closed.jaxpr)(closed.consts, x, [])
    return out


@pytest.mark.parametrize("d", [1, 2, 5])
def test_packed_bands_match_dense_algebra(d):
    rng = np.random.default_rng(d)
    a = rng.normal(size=(d, d))
    full = a + a.T
    g = rng.normal(size=d)
    np.testing.assert_allclose(_biharmonic._hessian_times(_packed(full), g), full @ g, rtol=1e-13)
    np.testing.assert_allclose(_biharmonic._outer(g), _packed(np.outer(g, g)), rtol=1e-15)
    b = rng.normal(size=d)
    both = np.outer(g, b) + np.outer(b, g)
    np.testing.assert_allclose(_biharmonic._symmetric_outer(g, b), _packed(both), rtol=1e-14)
    k = rng.normal(size=(d, d))
    other = k + k.T
    np.testing.assert_allclose(
        _biharmonic._frobenius(_packed(full), _packed(other), d), np.sum(full * other), rtol=1e-13
    )


@pytest.mark.parametrize("name", ["tanh_mlp", "residual_softplus_gelu", "scalar_input"])
def test_symmetric_pass_matches_nested_hessian(name):
    """Networks built from linear maps and elementwise chains (gelu's product of x with a
    function of x, softplus's custom_jvp) run through the pass without falling back."""
    f, shape = FUNCTIONS[name]
    x = jnp.linspace(-0.4, 0.7, int(np.prod(shape))).reshape(shape)
    expected = _nested_hessian_biharmonic(f, x)
    np.testing.assert_allclose(_symmetric_pass(f, x), expected, rtol=1e-10)
    np.testing.assert_allclose(taylax.biharmonic(f)(x), expected, rtol=1e-10)


_W1 = np.random.default_rng(2).normal(size=(4, 6))
_W2 = np.random.default_rng(3).normal(size=(4, 6))
PRODUCTS = {
    "sin(x0) exp(x1 x2)": lambda x: jnp.sin(x[0]) * jnp.exp(x[1] * x[2]) + jnp.sum(x**4),
    "x0 x1 / (1 + x2^2 + x3^2)": lambda x: x[0] * x[1] / (1 + x[2] ** 2 + x[3] ** 2),
    "tanh(x W1) sin(x W2)": lambda x: jnp.sum(jnp.tanh(x @ _W1) * jnp.sin(x @ _W2)),
    "tanh(x W1) / (2 + cos(x W2))": lambda x: jnp.sum(jnp.tanh(x @ _W1) / (2 + jnp.cos(x @ _W2))),
    "nested products and a quotient": lambda x: (
        jnp.sum((x * jnp.exp(-x)) * x[::-1] ** 3) / (1 + jnp.sum(x**2))
    ),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_products_and_quotients_of_two_values_run_in_the_pass(name):
    f = PRODUCTS[name]
    x = jnp.asarray([0.3, -0.5, 0.8, 0.1])
    expected = _nested_hessian_biharmonic(f, x)
    np.testing.assert_allclose(_symmetric_pass(f, x), expected, rtol=1e-12)


def test_control_flow_falls_back_to_nested_laplacians():
    def f(x):
        return jax.lax.cond(x[0] > 0, jnp.sin, jnp.cos, x[1] * x[2]) + jnp.sum(x**4)

    x = jnp.asarray([0.3, -0.5, 0.8])
    with pytest.raises(_biharmonic.Unsupported, match="cond"):
        _symmetric_pass(f, x)
    expected = _nested_hessian_biharmonic(f, x)
    np.testing.assert_allclose(taylax.biharmonic(f)(x), expected, rtol=1e-10)
    # The program that failed is remembered: the next call does not trace the pass again.
    assert len(_operators._UNSUPPORTED_PROGRAMS) >= 1
    np.testing.assert_allclose(taylax.biharmonic(f)(x), expected, rtol=1e-10)


def test_hessian_is_packed_in_the_matmuls():
    """Each hidden layer maps d(d+1)/2 Hessian rows, not the d^2 of nested Laplacians."""
    d, width = 5, 7
    w1 = np.random.default_rng(0).normal(size=(d, width))
    w2 = np.random.default_rng(1).normal(size=(width, width))

    def f(x):
        return jnp.sum(jnp.tanh(jnp.tanh(x @ w1) @ w2))

    jaxpr = jax.make_jaxpr(lambda x: _symmetric_pass(f, x))(jnp.ones(d))
    lhs_rows = [
        e.invars[0].aval.shape for e in all_equations(jaxpr) if e.primitive.name == "dot_general"
    ]
    assert (d * (d + 1) // 2, width) in lhs_rows
    assert not any(shape[0] == d * d for shape in lhs_rows if len(shape) == 2)
    # The input's Hessian, third and fourth quantities are known zeros: the first layer
    # maps only the d gradient rows.
    assert (d, d) in lhs_rows
    assert (d * (d + 1) // 2, d) not in lhs_rows


def test_gradient_with_respect_to_parameters_passed_in():
    params = init_mlp(3)
    x = jnp.asarray([0.2, -0.3, 0.5])
    ours = jax.grad(lambda p: taylax.biharmonic(lambda y, p: residual_net(p, y))(x, p))(params)
    dense = jax.grad(lambda p: _nested_hessian_biharmonic(lambda y: residual_net(p, y), x))(params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(dense)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _tanh_mlp(d, width):
    w1 = np.random.default_rng(0).normal(size=(d, width)) / np.sqrt(d)
    w2 = np.random.default_rng(1).normal(size=(width, width)) / np.sqrt(width)
    w3 = np.random.default_rng(2).normal(size=(width,)) / np.sqrt(width)
    return lambda x: jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3


def test_chains_start_on_a_line():
    """A chain's root is the unit seed, so tanh takes its closed form along a line (one
    Horner polynomial) instead of the recurrence with its rows computed once."""
    f = _tanh_mlp(3, 5)
    jaxpr = jax.make_jaxpr(lambda x: _symmetric_pass(f, x))(jnp.ones(3))
    names = {e.primitive.name for e in all_equations(jaxpr)}
    assert "taylax_computed_once" not in names
    x = jnp.asarray([0.3, -0.2, 0.6])
    np.testing.assert_allclose(_symmetric_pass(f, x), _nested_hessian_biharmonic(f, x), rtol=1e-11)


def test_last_nonlinearity_builds_no_hessian_vector_product():
    """Before a linear output only `Q_y` is read, and `g . H g` is `<H, g g^T>` on packed
    entries: no (d, d) gather of the Hessian per point is left in the compiled program."""
    d, width, batch = 6, 8, 16
    f = _tanh_mlp(d, width)
    xs = jnp.asarray(np.random.default_rng(4).normal(size=(batch, d)))
    hlo = jax.jit(jax.vmap(taylax.biharmonic(f))).lower(xs).compile().as_text()
    assert f"f64[{batch},{d},{d},{width}]" not in hlo
