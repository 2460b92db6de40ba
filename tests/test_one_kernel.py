"""Passes of polynomials and sin/cos that compile into one kernel (`taylax._one_kernel`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import entry_kernels, nested_jvp_derivatives, xla_cpu_only
from taylax import _one_kernel
from taylax._count import iter_equations


def _seed(t):
    return 0.3 * jnp.sin(t) * t**10


def _nested_jit(t):
    return jax.jit(lambda u: jnp.sin(u) ** 2)(t) + jnp.cos(2 * t) * t


ONE_KERNEL = {
    "0.3 sin(t) t^10": _seed,
    "sin(cos(t) t)": lambda t: jnp.sin(jnp.cos(t) * t),
    "sin(t)^2 + cos(2t) t, inner jit": _nested_jit,
    "t^3 - 2t": lambda t: t**3 - 2 * t,
}
MARKED = {
    "exp": lambda t: jnp.exp(jnp.sin(t)) * t**3,
    "division": lambda t: jnp.cos(t) / (2 + jnp.sin(t)),
    "cosh": lambda t: jnp.cosh(0.3 * t) * jnp.cos(2 * t),
    "sqrt": lambda t: jnp.sqrt(1 + t**2) * jnp.sin(t),
}


def _jaxpr(f, x):
    return jax.make_jaxpr(f)(x).jaxpr


@pytest.mark.parametrize("name", list(ONE_KERNEL))
def test_polynomials_and_trig_fit_one_kernel_at_orders_one_to_four(name):
    jaxpr = _jaxpr(ONE_KERNEL[name], 0.5)
    assert [_one_kernel.fits_one_kernel(jaxpr, k) for k in range(7)] == [
        False,
        True,
        True,
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("name", list(MARKED))
def test_exponentials_divisions_and_roots_do_not_fit(name):
    assert not _one_kernel.fits_one_kernel(_jaxpr(MARKED[name], 0.5), 4)


def test_arrays_several_outputs_and_integers_do_not_fit():
    assert not _one_kernel.fits_one_kernel(_jaxpr(jnp.sin, jnp.ones(3)), 4)
    assert not _one_kernel.fits_one_kernel(_jaxpr(lambda t: (jnp.sin(t), t * t), 0.5), 4)
    assert not _one_kernel.fits_one_kernel(_jaxpr(lambda t: jnp.sum(jnp.sin(t)), jnp.ones(3)), 4)
    assert not _one_kernel.fits_one_kernel(_jaxpr(lambda t: t * t, np.int32(2)), 4)


def _marks(f, order):
    closed = jax.make_jaxpr(taylax.derivatives(f, order))(0.5)
    return sum(e.primitive.name == "taylax_computed_once" for e in iter_equations(closed))


@pytest.mark.parametrize("order", [3, 4])
def test_one_kernel_passes_mark_nothing(order):
    # The seed function's sin and cos were one marked `exp(i t)`; the exponential keeps its
    # marks (it would not be vectorized in one kernel).
    assert _marks(_seed, order) == 0
    assert _marks(ONE_KERNEL["sin(cos(t) t)"], order) == 0
    assert _marks(MARKED["exp"], order) > 0


@xla_cpu_only
@pytest.mark.parametrize("points", [4096, 65536])
def test_seed_function_at_order_four_compiles_into_one_kernel(points):
    fn = jax.vmap(taylax.derivatives(_seed, 4))
    assert entry_kernels(fn, jax.ShapeDtypeStruct((points,), jnp.float64)) == 1


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("name", list(ONE_KERNEL))
def test_one_kernel_passes_match_nested_jvp(name, order):
    f = ONE_KERNEL[name]
    t = jnp.linspace(-2.0, 2.0, 33)
    got = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)
    want = np.stack([nested_jvp_derivatives(f, np.float64(x), order=order) for x in t])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    # With the direction as an argument too (not the unit seed).
    v = jnp.full_like(t, -0.75)
    got = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t, v)
    want = np.stack(
        [nested_jvp_derivatives(f, np.float64(x), np.float64(-0.75), order=order) for x in t]
    )
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-11)


def test_an_inner_jit_is_emitted_for_the_pass_that_calls_it():
    # The Taylor program of an inner `jax.jit` is cached per function: traced first in a
    # one-kernel pass, it must not serve a pass that marks (sin and cos as one `exp(i t)`).
    inner = jax.jit(lambda u: jnp.sin(u) ** 2)

    def pure(t):
        return inner(t) + t

    def with_exp(t):
        return inner(t) * jnp.exp(t)

    def complex_marks(f):
        closed = jax.make_jaxpr(taylax.derivatives(f, 4))(0.5)
        return sum(
            e.primitive.name == "taylax_computed_once"
            and jnp.issubdtype(e.outvars[0].aval.dtype, jnp.complexfloating)
            for e in iter_equations(closed)
        )

    assert complex_marks(pure) == 0
    assert complex_marks(with_exp) == 1
    assert complex_marks(pure) == 0
