"""Dead-code elimination: dead equations go (also inside sub-programs and unused outputs of
calls), effects, random and barriers stay."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import taylax
from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX
from taylax._optimize import _passes

X = np.array([0.5, -1.5, 2.0])


def _dce(f, *args):
    raw = jax.make_jaxpr(f)(*args)
    out = _passes.dce(raw)
    jex.check_jaxpr(out.jaxpr)
    assert _passes.dce(out) is out  # idempotent: nothing left to remove
    for a, e in zip(jex.jaxpr_as_fun(out)(*args), jex.jaxpr_as_fun(raw)(*args)):
        np.testing.assert_array_equal(a, e)
    return taylax.equation_counts(out)


def test_dead_equations_are_removed():
    def f(x):
        jnp.exp(x) * 2.0  # dead
        return jnp.sin(x)

    assert _dce(f, X) == collections.Counter({"sin": 1})


def test_dropvar_equations_of_grad_are_removed():
    raw = jax.make_jaxpr(jax.grad(lambda x: jnp.sum(jnp.sin(x) ** 2)))(X)
    out = _passes.dce(raw)
    for eqn in out.jaxpr.eqns:
        assert not any(isinstance(v, jex.DropVar) for v in eqn.outvars)


def test_unused_outputs_of_jit_are_pruned_inside_and_out():
    inner = jax.jit(lambda x: (jnp.sin(x), jnp.cos(x) * 3.0))
    assert _dce(lambda x: inner(x)[0], X) == collections.Counter({"jit": 1, "sin": 1})


def test_dead_code_inside_loop_bodies_is_removed():
    def body(c):
        jnp.exp(c)  # dead inside the body
        return c * 0.5

    f = lambda x: lax.while_loop(lambda c: jnp.sum(c) > 0.1, body, x)  # noqa: E731
    counts = _dce(f, np.abs(X))
    assert "exp" not in counts and counts["while"] == 1


def test_dead_scan_outputs_are_pruned():
    def f(x):
        carry, (ys, zs) = lax.scan(lambda c, s: (c + s, (jnp.sin(s), jnp.cos(s))), 0.0, x)
        return carry, ys

    counts = _dce(f, X)
    assert counts["sin"] == 1 and "cos" not in counts


def test_effects_random_and_barriers_are_kept_even_when_dead():
    def f(x):
        jax.debug.callback(lambda v: None, x)
        jax.random.normal(jax.random.key(0), (3,))  # dead random
        lax.optimization_barrier(x)  # dead barrier
        jax.jit(lambda a: jax.random.uniform(jax.random.key(1), ()) + a)(x)  # dead jit with random
        return x

    counts = _dce(f, X)
    assert counts["debug_callback"] == 1
    assert counts["optimization_barrier"] == 1
    assert counts["random_bits"] == 2
    assert counts["jit"] >= 1
