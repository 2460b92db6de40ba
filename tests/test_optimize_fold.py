"""Constant folding: small constants fold (scalars to literals, uniform arrays to broadcasts,
others to new constants at the top level only), large ones and random values do not."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import taylax
from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX
from taylax._optimize import _fold, _passes

X = np.array([0.5, -1.5, 2.0])


def _fold_checked(f, *args):
    raw = jax.make_jaxpr(f)(*args)
    out = _passes.optimize(raw)
    jex.check_jaxpr(out.jaxpr)
    assert _passes.optimize(out) is out
    assert str(_passes.fold(out)) == str(out)
    for a, e in zip(jex.jaxpr_as_fun(out)(*args), jex.jaxpr_as_fun(raw)(*args)):
        np.testing.assert_array_equal(a, e)
    return out


def test_scalar_arithmetic_folds_to_a_literal():
    out = _fold_checked(lambda x: x * (jnp.float64(3.0) * jnp.exp(jnp.float64(0.5))), X)
    assert taylax.equation_counts(out) == collections.Counter({"mul": 1})


def test_small_array_constant_folds_to_one_constant():
    out = _fold_checked(lambda x: x * (jnp.arange(3.0) * 2.0 + 1.0), X)
    assert taylax.equation_counts(out) == collections.Counter({"mul": 1})
    np.testing.assert_array_equal(out.consts[0], [1.0, 3.0, 5.0])


def test_uniform_array_folds_to_a_broadcast():
    out = _fold_checked(lambda x: x + jnp.exp(jnp.zeros(3)), X)
    assert taylax.equation_counts(out) == collections.Counter({"broadcast_in_dim": 1, "add": 1})


def test_large_constants_are_left_alone():
    n = _fold.FOLD_LIMIT + 1
    out = _fold_checked(lambda x: x * jnp.sin(jnp.arange(float(n))), np.ones(n))
    assert taylax.equation_counts(out)["sin"] == 1


def test_random_values_are_not_folded():
    out = _fold_checked(lambda x: x + jax.random.uniform(jax.random.key(0), (3,)), X)
    assert taylax.equation_counts(out)["random_bits"] == 1


def test_sub_jaxprs_fold_without_new_constants():
    def f(x):
        body = lambda c, s: (c * (jnp.arange(3.0) + 1.0) + s * (2.0 * 3.0), None)  # noqa: E731
        return lax.scan(body, x, jnp.ones(2))[0]

    raw = jax.make_jaxpr(f)(X)
    out = _fold_checked(f, X)
    (raw_scan,), (scan,) = ([e for e in j.eqns if e.primitive.name == "scan"] for j in (raw, out))
    assert len(scan.params["jaxpr"].consts) == len(raw_scan.params["jaxpr"].consts)
    inner = taylax.equation_counts(scan.params["jaxpr"])
    assert inner["iota"] == 1  # non-uniform: stays inside the body
    assert inner["mul"] == 2  # 2.0 * 3.0 folded


def test_folding_while_an_outer_jit_traces():
    f = taylax.optimized(lambda x: x * (jnp.arange(3.0) * 2.0 + 1.0) + jnp.float64(2.0) ** 3)
    np.testing.assert_array_equal(jax.jit(f)(X), X * np.array([1.0, 3.0, 5.0]) + 8.0)
