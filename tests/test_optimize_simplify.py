"""Identities and forwarding: each always-safe rule on real and complex inputs, the zeros that
autodiff materializes, and the opt-in unsafe rules (with what safe mode must NOT do)."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import taylax
from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX
from taylax._optimize import _passes

X = np.array([0.5, -1.5, 2.0])
Z = np.array([0.5 + 1.0j, -1.5 - 0.25j, 2.0j])


def _zeros(x):
    return lax.broadcast_in_dim(jnp.zeros((), x.dtype), x.shape, ())


def _c(x, value):
    """`value` as a scalar of `x`'s dtype (lax ops need equal dtypes)."""
    return np.asarray(value, x.dtype)[()]


def _same(x):
    return lax.convert_element_type_p.bind(x, new_dtype=x.dtype, weak_type=False, sharding=None)


BOTH, REAL, COMPLEX = ("real", "complex"), ("real",), ("complex",)

# name -> (function of x, primitive counts after optimization, the dtypes it is tested on)
CASES = {
    "mul_one": (lambda x: lax.mul(jnp.sin(x), jnp.ones_like(x)), {"sin": 1}, BOTH),
    "one_mul": (lambda x: lax.mul(_c(x, 1), jnp.sin(x)), {"sin": 1}, BOTH),
    "div_one": (lambda x: lax.div(jnp.sin(x), _c(x, 1)), {"sin": 1}, BOTH),
    "add_zero": (lambda x: lax.add(jnp.sin(x), _c(x, 0)), {"sin": 1}, BOTH),
    "sub_zero": (lambda x: lax.sub(jnp.sin(x), _zeros(x)), {"sin": 1}, BOTH),
    "zero_sub": (lambda x: lax.sub(_zeros(x), jnp.sin(x)), {"sin": 1, "neg": 1}, BOTH),
    "add_any_zero": (
        lambda x: jax.jvp(lambda a: jnp.sin(a) + 2.0 * x, (x,), (x,))[1],
        {"cos": 1, "mul": 1},
        REAL,
    ),
    "neg_neg": (lambda x: lax.neg(lax.neg(jnp.sin(x))), {"sin": 1}, BOTH),
    # (conj of a real array is complex: conj(conj(x)) is then not x's type.)
    "conj_conj": (lambda x: lax.conj(lax.conj(jnp.sin(x))), {"sin": 1}, COMPLEX),
    "integer_pow_1": (lambda x: lax.integer_pow(jnp.sin(x), 1), {"sin": 1}, BOTH),
    "convert_noop": (lambda x: _same(jnp.sin(x)), {"sin": 1}, BOTH),
    "reshape_noop": (lambda x: lax.reshape(jnp.sin(x), x.shape), {"sin": 1}, BOTH),
    "broadcast_noop": (lambda x: lax.broadcast_in_dim(jnp.sin(x), x.shape, (0,)), {"sin": 1}, BOTH),
    "transpose_noop": (lambda x: lax.transpose(jnp.sin(x), (0,)), {"sin": 1}, BOTH),
    "reduce_noop": (lambda x: lax.reduce_sum_p.bind(x, axes=(), out_sharding=None), {}, BOTH),
    "select_equal": (
        lambda x: lax.select(x.real > 0, jnp.sin(x), jnp.sin(x)),
        {"sin": 1},
        BOTH,
    ),
    "zeros_flow": (
        lambda x: jnp.sin(x) + lax.neg(_zeros(x)) * 3.0 + lax.reshape(_zeros(x), x.shape),
        {"sin": 1},
        BOTH,
    ),
    "jit_forwarding": (
        lambda x: jax.jit(lambda a, b: (jnp.sin(a), b))(x, x)[1] * 2.0,
        {"mul": 1},
        BOTH,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_identity(name, kind):
    f, expected, kinds = CASES[name]
    if kind not in kinds:
        pytest.skip(f"{name} is tested on {kinds} inputs only")
    x = X if kind == "real" else Z
    raw = jax.make_jaxpr(f)(x)
    for optimize in (_passes.simplify, _passes.optimize):
        out = optimize(raw)
        jex.check_jaxpr(out.jaxpr)
        assert str(optimize(out)) == str(out)
        for a, e in zip(jex.jaxpr_as_fun(out)(x), jex.jaxpr_as_fun(raw)(x)):
            np.testing.assert_array_equal(a, e)
    assert taylax.equation_counts(out) == collections.Counter(expected)


def test_safe_mode_keeps_nan_and_inf():
    """x*0 and x-x are not rewritten by default: nan*0 and inf-inf are nan."""
    f = lambda x: (lax.mul(x, 0.0), lax.sub(x, x))  # noqa: E731
    x = np.array([np.nan, np.inf, 1.0])
    out = taylax.optimize_jaxpr(jax.make_jaxpr(f)(x))
    prod, diff = jex.jaxpr_as_fun(out)(x)
    np.testing.assert_array_equal(prod, [np.nan, np.nan, 0.0])
    np.testing.assert_array_equal(diff, [np.nan, np.nan, 0.0])


def test_products_of_zeros_with_finite_constants_stay_exact():
    f = lambda x: lax.mul(_zeros(x), 2.5) + jnp.sin(x)  # noqa: E731
    assert taylax.equation_counts(taylax.optimize_jaxpr(jax.make_jaxpr(f)(X))) == {"sin": 1}
    g = lambda x: lax.mul(_zeros(x), x) + jnp.sin(x)  # noqa: E731  (x may be inf: kept)
    assert taylax.equation_counts(taylax.optimize_jaxpr(jax.make_jaxpr(g)(X)))["mul"] == 1


UNSAFE = {
    "mul_zero": (lambda x: lax.mul(jnp.sin(x), _c(x, 0)) + jnp.cos(x), {"cos": 1}),
    "sub_self": (lambda x: lax.sub(jnp.sin(x), jnp.sin(x)) + jnp.cos(x), {"cos": 1}),
    "reassociate_mul": (lambda x: lax.mul(lax.mul(x, _c(x, 3)), _c(x, 7)), {"mul": 1}),
    "reassociate_add": (lambda x: lax.add(lax.add(x, _c(x, 3)), _c(x, 7)), {"add": 1}),
}


@pytest.mark.parametrize("name", sorted(UNSAFE))
@pytest.mark.parametrize("x", [X, Z], ids=["real", "complex"])
def test_unsafe_math(name, x):
    f, expected = UNSAFE[name]
    raw = jax.make_jaxpr(f)(x)
    safe = taylax.optimize_jaxpr(raw)
    out = taylax.optimize_jaxpr(raw, unsafe_math=True)
    jex.check_jaxpr(out.jaxpr)
    assert taylax.optimize_jaxpr(out, unsafe_math=True) is out
    assert taylax.equation_counts(out) == collections.Counter(expected)
    assert taylax.equation_counts(safe).total() > taylax.equation_counts(out).total()
    np.testing.assert_allclose(jex.jaxpr_as_fun(out)(x)[0], jex.jaxpr_as_fun(raw)(x)[0], rtol=1e-15)
