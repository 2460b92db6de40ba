"""Passes of polynomials and sin/cos, and under the CPU policy of exp, log, log1p and sqrt
of polynomials and divisions by them, that compile into one kernel (`taylax._one_kernel`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import computed_once_marks, entry_kernels, nested_jvp_derivatives, xla_cpu_only
from taylax import _one_kernel


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


def _inner_division(t):
    return jax.jit(lambda u: jnp.cos(u) / (1.2 - u * u))(t) * t


# exp, log, log1p and sqrt of polynomials, divisions by polynomials (the CPU policy's
# `one_kernel_of_polynomials`).
OF_POLYNOMIALS = {
    "exp(-t^2) sin(3t)": lambda t: jnp.exp(-t * t) * jnp.sin(3 * t),
    "log1p(t^2) cos(2t)": lambda t: jnp.log1p(t * t) * jnp.cos(2 * t),
    "log(2 + t) - t": lambda t: jnp.log(2 + t) - t,
    "sqrt(1 + t^2) sin(t)": lambda t: jnp.sqrt(1 + t**2) * jnp.sin(t),
    "cos(exp(0.3t)) / (2 + t^3)": lambda t: jnp.cos(jnp.exp(0.3 * t)) / (2 + t**3),
    "cos(u) / (1.2 - u^2) t, inner jit": _inner_division,
    "exp(-t^2 / 2) cos(3t) / (1 + t^2)": lambda t: (
        jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)
    ),
}
# Of anything else the one kernel was slower than the marked pass.
MARKED = {
    "exp of sin": lambda t: jnp.exp(jnp.sin(t)) * t**3,
    "division by 2 + sin": lambda t: jnp.cos(t) / (2 + jnp.sin(t)),
    "cosh": lambda t: jnp.cosh(0.3 * t) * jnp.cos(2 * t),
    "sqrt of exp": lambda t: jnp.sqrt(2 + jnp.exp(-t * t)) * jnp.cos(t),
    "exp of exp": lambda t: jnp.exp(jnp.exp(0.3 * t)),
    "log1p of exp of sin": lambda t: jnp.log1p(jnp.exp(jnp.sin(t))),
    "tanh": lambda t: jnp.tanh(t) * t,
    "exp of an inner jit's sin": lambda t: jnp.exp(jax.jit(jnp.sin)(t)),
    "exp of sin / 2": lambda t: jnp.exp(jnp.sin(t) / 2),
    "exp of a quotient by t": lambda t: jnp.exp(t / (1 + t * t)),
    "exp of a negative power": lambda t: jnp.exp((2 + t) ** -2),
}


def _jaxpr(f, x):
    return jax.make_jaxpr(f)(x).jaxpr


def _orders_that_fit(f, **options) -> list[int]:
    jaxpr = _jaxpr(f, 0.5)
    return [k for k in range(8) if _one_kernel.fits_one_kernel(jaxpr, k, **options)]


@pytest.mark.parametrize("name", list(ONE_KERNEL))
def test_polynomials_and_trig_fit_one_kernel_at_orders_one_to_four(name):
    assert _orders_that_fit(ONE_KERNEL[name]) == [1, 2, 3, 4]


@pytest.mark.parametrize("name", list(OF_POLYNOMIALS))
def test_functions_of_polynomials_fit_one_kernel_under_the_cpu_policy_only(name):
    with taylax.emission_policy("cpu"):
        assert _orders_that_fit(OF_POLYNOMIALS[name]) == [1, 2, 3, 4]
        # The pass at one point of a whole-array call leaves them out (`taylax._api`).
        assert _orders_that_fit(OF_POLYNOMIALS[name], of_polynomials=False) == []
    with taylax.emission_policy("gpu"):
        assert _orders_that_fit(OF_POLYNOMIALS[name]) == []


@pytest.mark.parametrize("name", list(MARKED))
def test_other_exponentials_divisions_and_roots_do_not_fit(name):
    with taylax.emission_policy("cpu"):
        assert not _one_kernel.fits_one_kernel(_jaxpr(MARKED[name], 0.5), 4)


def test_arrays_several_outputs_and_integers_do_not_fit():
    assert not _one_kernel.fits_one_kernel(_jaxpr(jnp.sin, jnp.ones(3)), 4)
    assert not _one_kernel.fits_one_kernel(_jaxpr(lambda t: (jnp.sin(t), t * t), 0.5), 4)
    assert not _one_kernel.fits_one_kernel(_jaxpr(lambda t: jnp.sum(jnp.sin(t)), jnp.ones(3)), 4)
    assert not _one_kernel.fits_one_kernel(_jaxpr(lambda t: t * t, np.int32(2)), 4)


def _marks(f, order):
    return computed_once_marks(jax.make_jaxpr(taylax.derivatives(f, order))(0.5))


@pytest.mark.parametrize("order", [3, 4])
def test_one_kernel_passes_mark_nothing(order):
    # The seed function's sin and cos were one marked `exp(i t)`; the exponential keeps its
    # marks (it would not be vectorized in one kernel).
    assert _marks(_seed, order) == 0
    assert _marks(ONE_KERNEL["sin(cos(t) t)"], order) == 0
    assert _marks(MARKED["exp of sin"], order) > 0
    with taylax.emission_policy("cpu"):
        for f in OF_POLYNOMIALS.values():
            assert _marks(f, order) == 0


@xla_cpu_only
@pytest.mark.parametrize("points", [4096, 65536])
def test_seed_function_at_order_four_compiles_into_one_kernel(points):
    fn = jax.vmap(taylax.derivatives(_seed, 4))
    assert entry_kernels(fn, jax.ShapeDtypeStruct((points,), jnp.float64)) == 1


@xla_cpu_only
@pytest.mark.parametrize("name", list(OF_POLYNOMIALS))
def test_functions_of_polynomials_compile_into_one_kernel_or_few(
    name, cpu_policy, stacked_derivatives
):
    # Marked, these passes compiled into 6 to 12 kernels at order 4. XLA:CPU keeps a
    # quotient or a `log1p` that several rows read in a kernel of its own.
    few = 1 if name in ("exp(-t^2) sin(3t)", "log(2 + t) - t", "sqrt(1 + t^2) sin(t)") else 3
    fn = jax.vmap(taylax.derivatives(OF_POLYNOMIALS[name], 4))
    assert entry_kernels(fn, jax.ShapeDtypeStruct((65536,), jnp.float64)) <= few


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("name", [*ONE_KERNEL, *OF_POLYNOMIALS])
def test_one_kernel_passes_match_nested_jvp(name, order):
    f = {**ONE_KERNEL, **OF_POLYNOMIALS}[name]
    # Inside every function's domain (the inner jit's pole is at 1.2 ** 0.5).
    t = jnp.linspace(-2.0, 2.0, 33) if name in ONE_KERNEL else jnp.linspace(-0.9, 0.9, 33)
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
        return inner(t) * jnp.exp(jnp.sin(t))

    def complex_marks(f):
        closed = jax.make_jaxpr(taylax.derivatives(f, 4))(0.5)
        return computed_once_marks(
            closed, where=lambda e: jnp.issubdtype(e.outvars[0].aval.dtype, jnp.complexfloating)
        )

    # `exp` of a sine keeps the pass from being one kernel: the inner jit's sin(u) and the
    # outer sin(t) are each marked (one complex `exp(i t)` apiece).
    assert complex_marks(pure) == 0
    assert complex_marks(with_exp) == 2
    assert complex_marks(pure) == 0
