"""What the kernel that writes a pass's output under `jax.vmap` must not read on the CPU:
a constant vector, or a sine from a complex exponential.

Under `vmap` the output of `derivatives` is (points, K + 1), the points leading. A
stack times a constant vector (the factorials, a line's signs and binomials) reads that
vector once per element there, and XLA's complex `exp` puts a select on `x == 0` in the
sine. Either kept LLVM from vectorizing the output kernel over points: `cosh(t) cos(t)`
at K = 2 ran 3.4x slower, `log1p(t) cos(t)` 1.5x (docs/EMISSION.md, "Output kernels
under vmap"). The lowered program is read as StableHLO text: a non-splat float constant
is a `dense<[...]>` tensor."""

import re

import jax
import jax.numpy as jnp
import pytest

import taylax
from reference import assert_series_close, nested_jvp_derivatives

pytestmark = pytest.mark.usefixtures("cpu_policy")

# Each times `cos t`: a product reads both factors' rows, and the cosine is `sin_cos`'s.
FUNCTIONS = {
    "exp": jnp.exp,
    "log": lambda t: jnp.log(2 + t),
    "log1p": jnp.log1p,
    "sqrt": lambda t: jnp.sqrt(2 + t),
    "rsqrt": lambda t: jax.lax.rsqrt(2 + t),
    "cbrt": lambda t: jnp.cbrt(2 + t),
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "sin": jnp.sin,
}

_CONSTANT_VECTOR = re.compile(r"dense<\[[^>]*\]> : tensor<[0-9x]+(f32|f64)>")
_COMPLEX_EXP = re.compile(r"stablehlo\.exponential .*complex")


def _product(g):
    return lambda t: g(t) * jnp.cos(t)


def _lowered(f, order: int, dtype=jnp.float64) -> str:
    t = jnp.linspace(-0.9, 0.9, 16, dtype=dtype)
    return jax.jit(jax.vmap(taylax.derivatives(f, order))).lower(t).as_text()


@pytest.mark.parametrize("order", [2, taylax.CPU.stacked_output_max_order])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_no_constant_vector_reaches_the_output(name, order):
    text = _lowered(_product(FUNCTIONS[name]), order)
    assert not _CONSTANT_VECTOR.findall(text), _CONSTANT_VECTOR.findall(text)
    assert not _COMPLEX_EXP.findall(text)


def test_float32_passes_hold_no_constant_vector_either():
    text = _lowered(_product(FUNCTIONS["log1p"]), 3, jnp.float32)
    assert "f32" in text
    assert not _CONSTANT_VECTOR.findall(text)


def test_the_check_sees_a_constant_vector():
    # A program that scales a stack by a constant vector, as the factorials were.
    def scaled(t):
        return jnp.stack([t, t, t]) * jnp.array([1.0, 1.0, 2.0])

    text = jax.jit(jax.vmap(scaled)).lower(jnp.ones(4)).as_text()
    assert _CONSTANT_VECTOR.findall(text)


@pytest.mark.parametrize("name", ["log", "log1p", "sqrt", "rsqrt", "cbrt", "cosh"])
def test_row_by_row_lines_match_nested_jvp(name):
    f, t = _product(FUNCTIONS[name]), jnp.linspace(-0.9, 0.9, 7)
    for order in range(7):
        got = jax.vmap(taylax.derivatives(f, order))(t)
        want = nested_jvp_derivatives(f, t, jnp.ones_like(t), order)
        assert_series_close(got.T, want, rtol=1e-12, context=f"{name} at K = {order}")
