"""`jnp.logaddexp` (softplus, log_sigmoid) and `jnp.logaddexp2` in one pass
(`taylax._rules._logaddexp`), against nested jvp through JAX's own rules: ties,
arguments far apart, infinities."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import check_against_oracle, direction, oracle

ORDERS = (0, 1, 2, 6)

CASES = {
    "softplus": (jax.nn.softplus, (-30.0, -1.3, 0.0, 0.9, 40.0)),
    "log_sigmoid": (jax.nn.log_sigmoid, (-40.0, -0.7, 0.0, 1.1, 30.0)),
    "two_series": (lambda x: jnp.logaddexp(jnp.sin(x), x * x), (-1.3, 0.2, 0.9)),
    # x1_0 = x2_0: the function's own body has kinks there (max, abs); the rule does not.
    "tie": (lambda x: jnp.logaddexp(x, 2.0 - x), (1.0,)),
    # e^x1 overflows the series of exp(x1 - max) but not the logistic weight.
    "far_apart": (lambda x: jnp.logaddexp(jnp.exp(6.0 * x), jnp.sin(x)), (1.0, 1.5)),
    # +inf: r(y) = 0 in JAX's rule, so a finite argument weighs exp(x_i) there.
    "plus_inf": (lambda x: jnp.logaddexp(jnp.inf + 0.0 * x, jnp.sin(x)), (-0.4, 0.8)),
    "plus_inf_constant": (lambda x: jnp.logaddexp(jnp.sin(x), jnp.inf), (-0.4, 0.8)),
    "minus_inf": (lambda x: jnp.logaddexp(-jnp.inf + 0.0 * x, jnp.sin(x)), (-0.4, 0.8)),
    "both_minus_inf": (lambda x: jnp.logaddexp(-jnp.inf + 0.0 * x, -jnp.inf + x), (0.3,)),
    "base_2": (lambda x: jnp.logaddexp2(jnp.sin(x), x * x), (-1.3, 0.2, 0.9)),
    "base_2_tie": (lambda x: jnp.logaddexp2(x, 2.0 - x), (1.0,)),
    "base_2_plus_inf": (lambda x: jnp.logaddexp2(jnp.inf + 0.0 * x, jnp.sin(x)), (-0.4, 0.8)),
    "broadcast": (
        lambda x: jnp.logaddexp(x[:, None] * jnp.asarray([1.0, -2.0]), jnp.cos(x)[:, None]),
        (-0.6, 0.5),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_logaddexp_matches_nested_jvp(name):
    f, points = CASES[name]
    x = np.asarray(points)
    check_against_oracle(
        f, x, direction(name, x.shape, x.dtype), ORDERS, per_point=True, context=name
    )


def test_softplus_at_order_10():
    x = np.asarray([-3.0, 0.0, 0.4, 5.0])
    check_against_oracle(jax.nn.softplus, x, np.ones_like(x), (10,), per_point=True)


def test_complex_arguments_take_the_rule_as_written():
    x = np.asarray([0.3 + 0.4j, -0.7 + 0.2j])
    f = lambda z: jnp.logaddexp(z, 0.3 * z * z)  # noqa: E731
    check_against_oracle(f, x, direction("complex", x.shape, x.dtype), (0, 1, 4), per_point=True)


def test_float32_against_float64():
    x = np.asarray([-2.0, 0.0, 0.7, 3.0])
    got = taylax.derivatives(jax.nn.softplus, 6)(x.astype(np.float32), np.ones(4, np.float32))
    want = oracle(jax.nn.softplus, x, np.ones(4), 6)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-5, atol=2e-6)


def test_under_vmap_and_jit():
    x = jnp.linspace(-3.0, 3.0, 7)
    got = jax.jit(jax.vmap(taylax.derivatives(jax.nn.log_sigmoid, 8)))(x)
    want = oracle(jax.nn.log_sigmoid, np.asarray(x), np.ones(7), 8)
    np.testing.assert_allclose(np.asarray(got).T, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("f", [jax.nn.softplus, lambda x: jnp.logaddexp2(x, 0.3 * x)])
def test_one_pass_not_one_per_order(f):
    # JAX's rules read the function's own output: followed as written, each order's
    # tangent called logaddexp again one order lower (softplus: 10 custom_jvp calls and
    # 1,237 equations at K = 8). Now: the primal's call and `derivatives`' own wrapper.
    for k in (2, 8):
        counts = taylax.equation_counts(jax.make_jaxpr(taylax.derivatives(f, k))(0.3))
        assert counts["custom_jvp_call"] == 2, (k, counts)
