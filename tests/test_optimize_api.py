"""The public optimizer API and the issue's "Done when" checks.

`taylax.optimize_jaxpr`, `taylax.make_jaxpr`, `taylax.optimized`: the running example
of the issue, its gradient, nested jvp of `0.3*sin(t)*t**10` against the closed form.
"""

from __future__ import annotations

import collections
import doctest
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax import _compat
from taylax._optimize import _api, _passes


def fnc_jax(x1, x2):
    return (x1 / x2 - jnp.exp(x2)) * (jnp.sin(x1 / x2) + x1 / x2 - jnp.exp(x2))


def _walk(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _compat.jaxprs_in_params(eqn.params):
            yield from _walk(sub)


def test_fnc_jax_has_one_div_and_one_exp():
    raw = jax.make_jaxpr(fnc_jax)(1.0, 2.0)
    out = taylax.optimize_jaxpr(raw)
    _compat.check_jaxpr(out.jaxpr)
    counts = taylax.equation_counts(out)
    assert taylax.equation_counts(raw)["div"] == 3
    assert counts["div"] == 1 and counts["exp"] == 1
    assert _compat.jaxpr_as_fun(out)(1.3, 0.7) == _compat.jaxpr_as_fun(raw)(1.3, 0.7)


def test_grad_of_fnc_jax_has_no_mul_by_one_and_no_dead_equation():
    raw = jax.make_jaxpr(jax.grad(fnc_jax, argnums=(0, 1)))(1.0, 2.0)
    out = taylax.optimize_jaxpr(raw)
    _compat.check_jaxpr(out.jaxpr)
    mul_by_one = [
        eqn
        for eqn in _walk(raw.jaxpr)
        if eqn.primitive.name == "mul"
        and any(isinstance(a, _compat.Literal) and a.val == 1.0 for a in eqn.invars)
    ]
    assert mul_by_one, "the raw gradient should contain a mul by 1.0 for this test to mean much"
    for eqn in _walk(out.jaxpr):
        assert not any(isinstance(v, _compat.DropVar) for v in eqn.outvars)
        if eqn.primitive.name == "mul":
            assert not any(isinstance(a, _compat.Literal) and a.val == 1.0 for a in eqn.invars)
    assert _passes.dce(out) is out  # nothing dead left
    args = (np.float64(1.3), np.float64(0.7))
    np.testing.assert_array_equal(
        _compat.jaxpr_as_fun(out)(*args), _compat.jaxpr_as_fun(raw)(*args)
    )


def _nested_jvp(f, order):
    for _ in range(order):
        f = (lambda g: lambda t: jax.jvp(g, (t,), (1.0,))[1])(f)
    return f


def _closed_form(order: int, t: float) -> float:
    """d^k/dt^k 0.3 sin(t) t^10 by Leibniz' rule."""
    total = 0.0
    for j in range(order + 1):
        sin_j = math.sin(t + j * math.pi / 2)
        k = order - j
        pow_k = math.perm(10, k) * t ** (10 - k) if k <= 10 else 0.0
        total += math.comb(order, j) * 0.3 * sin_j * pow_k
    return total


@pytest.mark.parametrize("order", [4, 6, 8])
def test_nested_jvp_shrinks_to_a_third_with_equal_values(order):
    f = lambda t: 0.3 * jnp.sin(t) * t**10  # noqa: E731
    raw = jax.make_jaxpr(_nested_jvp(f, order))(1.1)
    out = taylax.optimize_jaxpr(raw)
    _compat.check_jaxpr(out.jaxpr)
    assert 3 * taylax.equation_counts(out).total() <= taylax.equation_counts(raw).total()
    (value,) = _compat.jaxpr_as_fun(out)(1.1)
    np.testing.assert_allclose(value, _closed_form(order, 1.1), rtol=1e-12)
    if order == 4:  # the raw program is cheap enough to evaluate here
        np.testing.assert_array_equal(value, _compat.jaxpr_as_fun(raw)(1.1)[0])


def test_make_jaxpr_optimizes_and_passes_options():
    f = lambda x, n: jnp.exp(x) * jnp.exp(x) * n  # noqa: E731
    out = taylax.make_jaxpr(f, static_argnums=1)(1.0, 3)
    assert taylax.equation_counts(out) == collections.Counter({"exp": 1, "mul": 2})
    raw = taylax.make_jaxpr(f, optimize=False, static_argnums=1)(1.0, 3)
    assert str(raw) == str(jax.make_jaxpr(f, static_argnums=1)(1.0, 3))
    closed, shape = taylax.make_jaxpr(f, static_argnums=1, return_shape=True)(1.0, 3)
    assert str(closed) == str(out) and shape.shape == ()


def test_optimized_under_jit_with_pytrees():
    def f(params, x, *, scale):
        y = jnp.tanh(params["w"] * x) * 1.0 + jnp.tanh(params["w"] * x)
        return {"y": y * scale, "z": (x + 0.0, params["b"])}

    params = {"w": jnp.arange(3.0), "b": jnp.ones(2)}
    x = jnp.linspace(-1.0, 1.0, 3)
    expected = f(params, x, scale=2.0)
    actual = jax.jit(lambda p, x: taylax.optimized(f)(p, x, scale=2.0))(params, x)
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_array_equal(a, e)
    # The program XLA receives is the optimized one: one tanh, not two.
    jaxpr = jax.make_jaxpr(taylax.optimized(lambda x: f(params, x, scale=2.0)))(x)
    assert taylax.equation_counts(jaxpr)["tanh"] == 1


def test_optimized_is_differentiable():
    f = taylax.optimized(lambda x: jnp.sin(x) * jnp.sin(x) * 1.0)
    np.testing.assert_allclose(jax.grad(f)(0.4), math.sin(0.8), rtol=1e-15)


def test_bad_arguments_raise_clear_errors():
    closed = jax.make_jaxpr(jnp.sin)(1.0)
    with pytest.raises(TypeError, match="`closed_jaxpr` to be a jax.extend.core.ClosedJaxpr"):
        taylax.optimize_jaxpr(jnp.sin)
    if not _compat.JAXPR_HOLDS_CONSTS:
        # From JAX 0.11 `closed.jaxpr` is `closed` itself: nothing open to reject.
        with pytest.raises(TypeError, match="wrap an open Jaxpr"):
            taylax.optimize_jaxpr(closed.jaxpr)
    with pytest.raises(TypeError, match="`unsafe_math` must be True or False"):
        taylax.optimize_jaxpr(closed, unsafe_math="yes")
    with pytest.raises(TypeError, match="make_jaxpr expects a callable `fun`"):
        taylax.make_jaxpr(3)
    with pytest.raises(TypeError, match="optimized expects a callable `fun`"):
        taylax.optimized(None)


def test_unchanged_program_is_returned_as_is():
    closed = jax.make_jaxpr(lambda x: jnp.sin(x) + x)(1.0)
    assert taylax.optimize_jaxpr(closed) is closed


def test_docstring_examples():
    failures, _ = doctest.testmod(_api, verbose=False)
    assert failures == 0


def test_derivative_programs_are_merged_and_optimized_inside():
    # Two calls of the same derivative trace two equal programs: CSE merges them; the
    # program inside is optimized too (`x * 1.0` goes).
    d2 = taylax.derivative(lambda t: jnp.sin(t) * 1.0 * t, 2)
    closed = taylax.make_jaxpr(lambda t: d2(t) + d2(t))(0.3)
    assert taylax.equation_counts(closed) == {"taylax_derivative": 1, "add": 1}
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "taylax_derivative"]
    inner = taylax.equation_counts(eqn.params["program"].closed)
    assert inner == {"sin": 1, "mul": 1}
    _compat.check_jaxpr(closed.jaxpr)
    np.testing.assert_allclose(
        taylax.optimized(lambda t: d2(t) + d2(t))(0.3), 2 * d2(0.3), rtol=1e-6
    )
