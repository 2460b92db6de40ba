"""The collapsed multi-direction pass against nested jax.jvp, direction by direction."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taylax
from reference import all_equations, nested_jvp_derivatives
from taylax._collapsed import eval_jaxpr_collapsed, seed
from test_random_programs import expressions, program

jax.config.update("jax_enable_x64", True)

W = np.random.default_rng(0).normal(size=(3, 5)) / 2


def _program(x):
    # Linear maps (matmul with a constant, sums, reshapes), products of two series, closed
    # forms along a line (sin, exp, tanh) and general rules (logistic, division, powers,
    # a custom_jvp function, a scan), so every path of the collapsed pass is used.
    h = jnp.tanh(x @ W + 0.1)
    g = jax.nn.sigmoid(h) * jnp.sin(h) + h**3
    q = jnp.exp(g[:3]) / (1.5 + x * x)
    s, _ = jax.lax.scan(lambda c, z: (c * jnp.cos(z) + z, None), 0.5, q)
    return jnp.sum(jax.nn.softplus(g)) + s


ORDERS = list(range(1, 7))


def _directions(count, shape, seed_value=0):
    return np.random.default_rng(seed_value).normal(size=(count,) + shape)


def _collapsed(f, x, directions, order, weights=None, summed=True):
    closed = jax.make_jaxpr(f)(x)
    w = None if weights is None else jnp.asarray(weights)
    x_in = seed(x, jnp.asarray(directions), order, w, summed)
    (out,) = eval_jaxpr_collapsed(closed.jaxpr, closed.consts, [x_in], order, w, summed)
    return out


def _normalized(f, x, v, order):
    """Nested-jvp derivatives along `v`, as normalized coefficients y_k = f^(k) / k!."""
    (d,) = jax.tree.leaves(nested_jvp_derivatives(f, x, v, order))
    return np.stack([np.asarray(d[k]) / math.factorial(k) for k in range(order + 1)])


@pytest.mark.parametrize("order", ORDERS)
def test_summed_top_and_lower_coefficients(order):
    x = jnp.asarray([0.3, -0.4, 0.8])
    directions = _directions(4, (3,))
    weights = np.array([0.5, -1.0, 2.0, 0.25])
    out = _collapsed(_program, x, directions, order, weights)
    per_direction = [_normalized(_program, x, v, order) for v in directions]
    np.testing.assert_allclose(out.primal, per_direction[0][0], rtol=1e-13)
    top = sum(w * y[order] for w, y in zip(weights, per_direction))
    np.testing.assert_allclose(out.top, top, rtol=1e-10)
    for k in range(1, order):
        rows = out.rows
        got = out.lower[:, k - 1] if k <= rows else np.zeros(len(directions))
        np.testing.assert_allclose(got, [y[k] for y in per_direction], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("order", ORDERS)
def test_top_kept_per_direction(order):
    x = jnp.asarray([0.6, 0.1, -0.2])
    directions = _directions(3, (3,), seed_value=1)
    out = _collapsed(_program, x, directions, order, summed=False)
    expected = [_normalized(_program, x, v, order)[order] for v in directions]
    np.testing.assert_allclose(out.top, expected, rtol=1e-10)


def _ones_mlp(d: int, width: int):
    """A tanh MLP `d -> width -> width -> 1` and its number of layers."""
    ws = [np.ones((d, width)), np.ones((width, width)), np.ones((width, 1))]

    def mlp(x):
        for w in ws[:-1]:
            x = jnp.tanh(x @ w)
        return (x @ ws[-1])[0]

    return mlp, len(ws)


def test_primal_is_computed_once_not_per_direction():
    """Every tanh in a Laplacian's program acts on per-point arrays (no direction axis)."""
    width, d = 7, 5
    mlp, _ = _ones_mlp(d, width)
    jaxpr = jax.make_jaxpr(taylax.laplacian(mlp))(jnp.ones(d))
    shapes = [e.outvars[0].aval.shape for e in all_equations(jaxpr) if e.primitive.name == "tanh"]
    assert shapes and all(s == (width,) for s in shapes), shapes


def test_matmuls_per_layer():
    """A layer maps the primal, the per-direction coefficients and the summed top: three
    matmuls (two for the first, whose input has no top), none of them per direction."""
    mlp, layers = _ones_mlp(4, 6)
    counts = taylax.equation_counts(jax.make_jaxpr(taylax.laplacian(mlp))(jnp.ones(4)))
    assert counts["dot_general"] == 2 + 3 * (layers - 1)


def _elementwise_program(x):
    # Elementwise functions with one varying input next to constants (a power with a
    # constant exponent, a constant over x, atan2, relu's custom_jvp max, exact gelu's
    # erfc): at orders 1 and 2 their derivatives come from nested jax.jvp.
    a = jnp.power(1.5 + x * x, 0.7) + 2.0 / (2.0 + x) + jnp.arctan2(x, 0.4)
    b = jax.nn.relu(x - 0.1) + jax.nn.gelu(a, approximate=False) + jax.nn.softplus(-a)
    return jnp.sum(b * jnp.cos(x))


def _per_direction_equations(f, d: int, width: int) -> list[str]:
    """The equations of `taylax.laplacian(f)`'s program whose outputs carry the direction
    axis (shape `(d, width)`), by primitive name."""
    jaxpr = jax.make_jaxpr(taylax.laplacian(f))(jnp.linspace(0.1, 0.5, d))
    return [
        e.primitive.name
        for e in all_equations(jaxpr)
        if any(getattr(v.aval, "shape", None) == (d, width) for v in e.outvars)
    ]


@pytest.mark.parametrize(
    "activation",
    [jax.nn.gelu, jax.nn.softplus, jax.nn.silu, lambda z: jnp.tanh(z) * z**2 + jnp.exp(-z)],
)
def test_elementwise_chains_cost_one_composition_per_direction(activation):
    """At order 2 a run of elementwise equations on one value (gelu's eight, softplus's
    custom_jvp, silu's product) is composed along the line once: the per-direction work
    is `d_1 x_1` and `x_1^2`, whatever the chain's length."""
    d, width = 5, 7
    w = np.random.default_rng(3).normal(size=(width, width))
    x_of = np.random.default_rng(4).normal(size=(d, width))

    def network(act):
        return lambda x: jnp.sum(act(jnp.tanh(x @ x_of) @ w))

    names = _per_direction_equations(network(activation), d, width)
    # The same per-direction equations as a single tanh: d_1 * x_1 and x_1 * x_1 per
    # activation, besides the matmuls and their reshapes.
    assert names == _per_direction_equations(network(jnp.tanh), d, width)
    assert names.count("mul") == 4, names


def _broadcast_product_program(x):
    # lax.mul of equal-rank operands with a size-1 dimension (the Laplacian's own
    # program multiplies a (1, n) derivative by (d, n) rows): the product path.
    row = jax.lax.broadcast_in_dim(jnp.sin(x), (1, 3), (1,))
    table = jnp.exp(jnp.outer(x, x) / 4)
    return jnp.sum(jax.lax.mul(row, table) + jax.lax.mul(table, row) ** 2)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("program", [_elementwise_program, _broadcast_product_program])
def test_summed_top_of_more_programs(program, order):
    x = jnp.asarray([0.3, -0.4, 0.8])
    directions = _directions(5, (3,), seed_value=2)
    out = _collapsed(program, x, directions, order)
    per_direction = [_normalized(program, x, v, order) for v in directions]
    np.testing.assert_allclose(out.top, sum(y[order] for y in per_direction), rtol=1e-11)


@settings(max_examples=25, deadline=None)
@given(
    expr=st.integers(2, 5).flatmap(expressions),
    order=st.sampled_from([1, 2, 3]),
    summed=st.booleans(),
)
def test_random_programs_against_nested_jvp(expr, order, summed):
    """Random compositions (elementwise chains that merge, products of values with
    different roots, custom_jvp softplus) after a matmul and before a mixing reduction."""
    mix = np.random.default_rng(6).normal(size=(3, 4)) / 2

    def f(x):
        y = program(expr)(x @ mix)
        return jnp.sum(y[:2] * y[2:]) + jnp.sum(jnp.sin(y))

    x = jnp.asarray([0.3, -0.4, 0.8])
    directions = _directions(3, (3,), seed_value=7)
    weights = np.array([0.5, -1.0, 2.0])
    out = _collapsed(f, x, directions, order, weights if summed else None, summed)
    per_direction = [_normalized(f, x, v, order)[order] for v in directions]
    expected = (
        sum(w * y for w, y in zip(weights, per_direction)) if summed else np.stack(per_direction)
    )
    np.testing.assert_allclose(out.top, expected, rtol=1e-9, atol=1e-12, err_msg=str(expr))
