"""Passes of order 1 through JAX's own derivative rules (`taylax._elementwise`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import taylax
from reference import entry_kernels, xla_cpu_only
from taylax import _elementwise

CHAINS = {
    "sqrt(1 + t^2) exp(sin t)": lambda t: jnp.sqrt(1 + t**2) * jnp.exp(jnp.sin(t)),
    "exp(-t^2/2) cos(3t) / (1 + t^2)": lambda t: jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2),
    "t^2.5 - atan2(t, 2) + max(t, 0.5)": lambda t: (
        t**2.5 - jnp.arctan2(t, 2.0) + jnp.maximum(t, 0.5)
    ),
}


def _forward_mode(f):
    return lambda t: jnp.stack([f(t), jax.jvp(f, (t,), (jnp.ones_like(t),))[1]])


@pytest.mark.parametrize("name", list(CHAINS))
def test_order_one_is_forward_mode(name):
    f = CHAINS[name]
    t = jnp.linspace(0.0, 3.0, 301)  # max(t, 0.5) has its tie at 0.5
    got = jax.jit(jax.vmap(taylax.derivatives(f, 1)))(t)
    want = jax.jit(jax.vmap(_forward_mode(f)))(t)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-15, atol=0)


@xla_cpu_only
@pytest.mark.parametrize("name", list(CHAINS)[:2])
def test_order_one_chains_compile_into_one_kernel(name):
    fn = jax.vmap(taylax.derivatives(CHAINS[name], 1))
    assert entry_kernels(fn, jax.ShapeDtypeStruct((65536,), jnp.float64)) == 1


@pytest.mark.parametrize(
    "fn, exact",
    [
        (jnp.tanh, lambda x: 1 / np.cosh(x) ** 2),
        (jax.nn.sigmoid, lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
    ],
)
def test_saturating_functions_keep_the_engine_rule_at_order_one(fn, exact):
    # JAX's rules give exactly 0 here (1 - tanh^2 with tanh = 1); the engine's do not.
    x = 40.0
    got = float(taylax.derivatives(fn, 1)(x)[1])
    assert got == pytest.approx(exact(x), rel=1e-13)
    assert float(jax.grad(fn)(x)) == 0.0


def test_only_real_elementwise_single_output_equations_take_the_jvp():
    def eqn_of(f, *args):
        (eqn,) = jax.make_jaxpr(f)(*args).eqns
        return eqn

    def series(x):
        return taylax.Series(jnp.stack([jnp.asarray(x), jnp.ones_like(x)]))

    sin = eqn_of(jnp.sin, 0.5)
    assert _elementwise.first_order_by_jvp(sin, [series(0.5)]) is not None
    assert _elementwise.first_order_by_jvp(eqn_of(jnp.tanh, 0.5), [series(0.5)]) is None
    complex_sin = eqn_of(jnp.sin, 0.5 + 1j)
    assert _elementwise.first_order_by_jvp(complex_sin, [series(0.5 + 1j)]) is None
    cumsum = eqn_of(lambda x: lax.cumsum(x), jnp.ones(3))
    assert _elementwise.first_order_by_jvp(cumsum, [series(jnp.ones(3))]) is None
