"""Hash-consing CSE: what merges (commutative operands, equal sub-programs) and what never does
(different literal bits, effects, random, barriers, remat with prevent_cse)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import taylax
from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX
from taylax._optimize import _passes


def _optimized(f, *args):
    raw = jax.make_jaxpr(f)(*args)
    out = _passes.optimize(raw)
    jex.check_jaxpr(out.jaxpr)
    assert str(_passes.cse(out)) == str(out)  # idempotent
    for a, e in zip(jex.jaxpr_as_fun(out)(*args), jex.jaxpr_as_fun(raw)(*args)):
        np.testing.assert_array_equal(a, e)
    return taylax.equation_counts(out)


X = np.array([0.5, -1.5, 2.0])
Z = X * (1.0 - 0.5j)

MERGED = {
    "commutative mul": (lambda x, y: x * y + y * x, {"mul": 1, "add": 1}),
    "commutative max": (lambda x, y: jnp.maximum(x, y) - jnp.maximum(y, x), {"max": 1, "sub": 1}),
    "same literal": (lambda x, y: x * 2.0 + x * 2.0, {"mul": 1, "add": 1}),
    "nested": (lambda x, y: jnp.sin(x * y) / jnp.sin(y * x), {"mul": 1, "sin": 1, "div": 1}),
    "equal jit bodies": (
        lambda x, y: jax.jit(lambda a: jnp.cos(a) * a)(x) + jax.jit(lambda b: jnp.cos(b) * b)(x),
        {"jit": 1, "cos": 1, "mul": 1, "add": 1},
    ),
}


@pytest.mark.parametrize("name", sorted(MERGED))
@pytest.mark.parametrize("dtype", ["real", "complex"])
def test_equal_expressions_merge(name, dtype):
    f, expected = MERGED[name]
    if dtype == "complex" and name == "commutative max":
        pytest.skip("max does not accept complex operands")
    x = X if dtype == "real" else Z
    assert _optimized(f, x, x[::-1]) == expected


def test_literals_of_different_bits_or_types_do_not_merge():
    f = lambda x: (lax.mul(x, 0.0), lax.mul(x, -0.0))  # noqa: E731
    assert taylax.equation_counts(_passes.optimize(jax.make_jaxpr(f)(X)))["mul"] == 2
    g = lambda x: (x.astype(jnp.float32) * 2.0, x.astype(jnp.float32) * np.float32(2.0))  # noqa: E731
    assert _optimized(g, X)["mul"] == 1  # equal dtype and bits: one mul


def test_different_jit_bodies_do_not_merge():
    f = lambda x: jax.jit(jnp.sin)(x) + jax.jit(jnp.cos)(x)  # noqa: E731
    assert _optimized(f, X)["jit"] == 2


@pytest.mark.parametrize(
    "f, name",
    [
        (lambda x: jax.checkpoint(jnp.sin)(x) + jax.checkpoint(jnp.sin)(x), "remat2"),
        (
            lambda x: lax.optimization_barrier(x) * lax.optimization_barrier(x),
            "optimization_barrier",
        ),
        (
            lambda x: (
                x
                + jax.random.normal(jax.random.key(1), (3,))
                + jax.random.normal(jax.random.key(1), (3,))
            ),
            "random_bits",
        ),
    ],
    ids=["remat_prevent_cse", "optimization_barrier", "random"],
)
def test_protected_equations_never_merge(f, name):
    raw_count = taylax.equation_counts(jax.make_jaxpr(f)(X))[name]
    assert raw_count >= 2
    assert _optimized(f, X)[name] == raw_count


def test_remat_without_prevent_cse_merges():
    g = jax.checkpoint(jnp.sin, prevent_cse=False)
    assert _optimized(lambda x: g(x) + g(x), X)["remat2"] == 1


def test_callbacks_are_neither_merged_nor_dropped():
    seen = []

    def f(x):
        jax.debug.callback(lambda v: seen.append(1), x)
        jax.debug.callback(lambda v: seen.append(1), x)
        return x * 1.0

    out = _passes.optimize(jax.make_jaxpr(f)(X))
    assert taylax.equation_counts(out) == {"debug_callback": 2}
    jex.jaxpr_as_fun(out)(X)
    assert len(seen) == 2
