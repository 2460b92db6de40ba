"""Outputs of a scalar function per point under `jax.vmap`, selected row by row.

`taylor` returns two outputs. Under `vmap` a stack of a scalar output's coefficients is
transposed to (points, K), and beside another output XLA:CPU did not fuse that transpose
into the kernel of the rows: one loop per row, each recomputing what the rows share, then
a copy (1.4-2x `derivatives`' time). Under the CPU policy the coefficients are selects
over their rows (`taylax._outputs.selected_rows`), elementwise on the (points, K) array,
and so is the stack of `derivatives` between `selected_derivatives_min_order` and
`selected_derivatives_max_order`; the GPU policy keeps the stacks (docs/EMISSION.md,
"Outputs beside other outputs").
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import assert_series_close, nested_jvp_derivatives
from taylax import _compat

FUNCTIONS = {
    "sin-power": lambda t: 0.3 * jnp.sin(t) * t**10,
    "gaussian-sine": lambda t: jnp.exp(-t * t) * jnp.sin(3 * t),
    "quotient-tanh": lambda t: (
        jnp.cos(t) ** 3 * jnp.exp(-t * t) / (2 + jnp.sin(t)) + jnp.tanh(t) ** 2
    ),
    "log1p-sqrt": lambda t: jnp.sqrt(1.5 + jnp.log1p(t * t)),
}


def _per_point(f, order):
    return jax.vmap(lambda t: taylax.taylor(f, order)(t, jnp.ones_like(t)))


def _selects_rows(text: str, rows: int) -> bool:
    """Whether the lowered `text` selects among `rows` rows of the 16 points: a select
    whose result is the `(16, rows)` output (a rule's own selects are per point). A stack
    lowers as a concatenate, transposed or not depending on JAX's version."""
    return re.search(rf"stablehlo\.select .*tensor<16x{rows}xf64>$", text, re.M) is not None


def _lowered(f, order, dtype=jnp.float64) -> str:
    t = jnp.linspace(-0.9, 0.9, 16, dtype=dtype)
    return jax.jit(_per_point(f, order)).lower(t).as_text()


@pytest.mark.parametrize("order", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_cpu_policy_selects_taylor_s_coefficients(name, order, cpu_policy):
    assert _selects_rows(_lowered(FUNCTIONS[name], order), order) == (order > 1)


def test_past_the_policy_s_order_the_coefficients_are_a_stack(emission):
    emission(selected_coefficients_max_order=4)
    assert not _selects_rows(_lowered(FUNCTIONS["sin-power"], 5), 5)
    assert _selects_rows(_lowered(FUNCTIONS["sin-power"], 4), 4)


def _derivatives_lowered(f, order, shape=(16,)) -> str:
    t = jnp.linspace(-0.9, 0.9, math.prod(shape)).reshape(shape)
    if len(shape) == 1:
        return jax.jit(jax.vmap(taylax.derivatives(f, order))).lower(t).as_text()
    return jax.jit(lambda t: taylax.derivatives(f, order)(t, jnp.ones_like(t))).lower(t).as_text()


# Not quotient-tanh: its rules select over a (points, K + 1) stack of their own.
@pytest.mark.parametrize("name", ["sin-power", "gaussian-sine", "log1p-sqrt"])
def test_derivatives_select_between_the_stacked_and_the_policy_s_orders(name, cpu_policy):
    f, policy = FUNCTIONS[name], taylax.CPU
    lowest, highest = policy.selected_derivatives_min_order, policy.selected_derivatives_max_order
    for order in (lowest - 1, highest + 1):
        assert not _selects_rows(_derivatives_lowered(f, order), order + 1), order
    for order in (lowest, highest):
        assert _selects_rows(_derivatives_lowered(f, order), order + 1), order


@pytest.mark.parametrize("order", [2, 4])
def test_no_derivatives_are_concatenated_along_the_points_minor_axis(order, cpu_policy):
    # JAX 0.9 has no `stack` primitive: there a vmapped stack is a concatenate along the
    # (points, K + 1) output's minor axis, which XLA:CPU wrote row by row (1.1-2.5x the
    # selected rows' time), so the CPU policy selects from order 2 on such a JAX.
    text = _derivatives_lowered(FUNCTIONS["gaussian-sine"], order)
    minor = rf"stablehlo\.concatenate .*dim = 1 .*-> tensor<16x{order + 1}xf64>$"
    assert re.search(minor, text, re.M) is None
    assert _selects_rows(text, order + 1) == (not _compat.HAS_STACK_PRIMITIVE)


def test_the_gpu_policy_keeps_the_derivatives_stack():
    with taylax.emission_policy("gpu"):
        assert not _selects_rows(_derivatives_lowered(FUNCTIONS["sin-power"], 8), 9)


def test_whole_arrays_keep_the_derivatives_stack(cpu_policy):
    # No select at all on whole arrays of the polynomial-trig function: the stack stays.
    f = FUNCTIONS["sin-power"]
    assert "stablehlo.select" not in _derivatives_lowered(f, 8, shape=(4, 4))
    assert "stablehlo.select" in _derivatives_lowered(f, 8)


def test_the_gpu_policy_keeps_the_stack():
    # Each GPU thread computes one element: a select chain would compute every row there.
    with taylax.emission_policy("gpu"):
        assert not _selects_rows(_lowered(FUNCTIONS["sin-power"], 4), 4)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_selected_coefficients_match_nested_jvp(name, dtype, cpu_policy):
    f = FUNCTIONS[name]
    t = jnp.linspace(-0.9, 0.9, 5).astype(dtype) + (0.1j if dtype == jnp.complex128 else 0)
    for order in range(7):
        primal, coeffs = jax.jit(_per_point(f, order))(t)
        want = nested_jvp_derivatives(f, t, jnp.ones_like(t), order)
        factorials = np.array([math.factorial(k) for k in range(order + 1)])
        got = jnp.concatenate([primal[:, None], coeffs * factorials[1:]], 1)
        assert got.dtype == want.dtype
        assert_series_close(got.T, want, rtol=1e-12, context=f"{name} {dtype} at K = {order}")


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.complex128])
def test_selected_derivatives_match_nested_jvp(dtype, cpu_policy):
    t = jnp.linspace(-0.9, 0.9, 5).astype(dtype) + (0.1j if dtype == jnp.complex128 else 0)
    for name, f in FUNCTIONS.items():
        for order in (5, 6, 8):
            got = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)
            want = nested_jvp_derivatives(f, t, jnp.ones_like(t), order)
            assert_series_close(got.T, want, rtol=1e-11, context=f"{name} {dtype} K = {order}")


def test_taylor_and_derivatives_agree_past_the_one_kernel(cpu_policy):
    f, t = FUNCTIONS["quotient-tanh"], jnp.linspace(-0.9, 0.9, 9)
    for order in (8, 16):
        primal, coeffs = jax.jit(_per_point(f, order))(t)
        d = jax.vmap(taylax.derivatives(f, order))(t)
        factorials = np.array([math.factorial(k) for k in range(1, order + 1)])
        np.testing.assert_array_equal(primal, d[:, 0])
        np.testing.assert_allclose(coeffs * factorials, d[:, 1:], rtol=1e-12, atol=1e-12)


def test_a_scalar_call_and_a_pytree_output_keep_their_shapes(cpu_policy):
    y, c = taylax.taylor(jnp.exp, 3)(0.0, 1.0)
    np.testing.assert_allclose(c, [1.0, 0.5, 1 / 6], rtol=1e-15)
    (s, d), (cs, cd) = jax.vmap(
        lambda t: taylax.taylor(lambda x: (jnp.sin(x), 2 * x), 3)(t, jnp.ones_like(t))
    )(jnp.linspace(0.0, 1.0, 4))
    assert cs.shape == cd.shape == (4, 3)
    np.testing.assert_allclose(cd, np.tile([2.0, 0.0, 0.0], (4, 1)))
    np.testing.assert_allclose(cs[:, 0], jnp.cos(jnp.linspace(0.0, 1.0, 4)), rtol=1e-15)
