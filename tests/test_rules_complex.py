"""Complex-valued programs against the nested-jvp oracle.

The parameter `s` is real also for complex inputs (`x + s v` with complex `v`), and `conj`,
`real`, `imag` act coefficient-wise, exactly as nested `jax.jvp` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import taylax
from reference import assert_series_close, check_against_oracle, direction, oracle

ORDERS = (1, 6)  # the order-6 result holds orders 0..6; order 1 checks low truncation

Z3 = np.array([0.3 + 0.4j, -0.7 + 0.2j, 1.1 - 0.5j])
Z23 = np.array([[0.3 + 0.4j, -0.7 + 0.2j, 1.1 - 0.5j], [0.2 - 0.9j, 0.5 + 0.5j, -1.2 - 0.1j]])
Z22 = np.array([[0.3 + 0.4j, -0.7 + 0.2j], [0.2 - 0.9j, 0.5 + 0.5j]])
R3 = np.array([-1.3, 0.2, 0.9])
M = np.array([[1.0 - 0.5j, 0.3j], [-0.4 + 0.2j, 0.8]])


class Case(NamedTuple):
    name: str
    fn: Callable
    x: np.ndarray


CASES = [
    # real -> complex
    Case("complex", lambda x: lax.complex(jnp.sin(x), jnp.cos(x)), R3),
    Case("complex_times", lambda x: lax.complex(x, x * x) * jnp.exp(lax.complex(0.0, x)), R3),
    Case("real_of_exp_ix", lambda x: jnp.real(jnp.exp(1j * x)), R3),
    Case("imag_of_exp_ix", lambda x: jnp.imag(jnp.exp(1j * x)) * x, R3),
    Case("abs_of_complex_from_real", lambda x: jnp.abs(x + 1j * jnp.sin(x)), R3),
    Case("angle", lambda x: jnp.angle(jnp.cos(x) + 1j * jnp.sin(2.0 * x)), R3),
    # complex -> real
    Case("real", lambda z: jnp.real(jnp.exp(z)) * jnp.real(z), Z3),
    Case("imag", lambda z: jnp.imag(jnp.sin(z)) + jnp.imag(z) ** 2, Z3),
    Case("abs", lambda z: jnp.abs(jnp.exp(z) + z), Z3),
    Case("abs_plain", jnp.abs, Z3),
    Case("abs_squared", lambda z: jnp.real(z * jnp.conj(z)), Z3),
    # complex -> complex
    Case("conj", lambda z: jnp.conj(jnp.exp(z)) * z, Z3),
    Case("conj_plain", jnp.conj, Z3),
    Case("exp", jnp.exp, Z3),
    Case("log", jnp.log, Z3),
    Case("sin", jnp.sin, Z3),
    Case("div", lambda z: jnp.exp(z) / (2.0 + z * z), Z3),
    Case("div_by_conj", lambda z: z / jnp.conj(z), Z3),
    Case("sqrt", jnp.sqrt, Z3),
    Case("mixed_real_imag", lambda z: lax.complex(jnp.imag(z), jnp.real(z) ** 2), Z3),
    Case("matmul", lambda z: z @ z, Z22),
    Case("matmul_const", lambda z: jnp.sin(z) @ M, Z22),
    Case("matmul_conj_transpose", lambda z: z @ jnp.conj(z).T, Z23),
    Case("einsum", lambda z: jnp.einsum("ij,kj->ik", jnp.exp(z), z), Z23),
    Case("sum_of_products", lambda z: jnp.sum(z * jnp.sin(z), axis=1), Z23),
]
_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES)


@pytest.mark.parametrize("name", list(_BY_NAME))
def test_complex_rule(name):
    case = _BY_NAME[name]
    x = np.asarray(case.x)
    v = direction(name, x.shape, x.dtype)
    check_against_oracle(case.fn, x, v, ORDERS, context=name)


def test_complex_scalar_default_direction_is_real_one():
    # v defaults to 1 (a real step along s) also for a complex scalar.
    fn = jnp.exp
    x = np.asarray(0.3 + 0.2j)
    assert_series_close(taylax.derivatives(fn, 5)(x), oracle(fn, x, None, 5))


def test_complex_imaginary_direction():
    # A purely imaginary direction: d^k/ds^k exp(x + i s) = i^k exp(x + i s).
    x = np.asarray([0.3 + 0.2j, -0.4 + 0.0j])
    v = np.asarray([1j, 1j])
    actual = taylax.derivatives(jnp.exp, 6)(x, v)
    assert_series_close(actual, oracle(jnp.exp, x, v, 6))
    closed_form = np.stack([(1j) ** k * np.exp(x) for k in range(7)])
    assert_series_close(actual, closed_form)


# --------------------------------------------------------------------------------------------
# Branch cuts: closed forms at 30 digits, independent of JAX's own derivative rules.
# --------------------------------------------------------------------------------------------

# Points in all four quadrants, off the cuts (on a cut the side is a convention), one
# near the branch point 1.
BRANCH_POINTS = np.array(
    [
        0.3 + 0.4j,
        -0.7 + 0.9j,
        -1.5 - 0.2j,
        0.4 - 2.0j,
        2.5 + 0.1j,
        -0.3 - 0.05j,
        -2.2 + 1.3j,
        1.05 + 0.02j,
    ]
)


def _branch_cases():
    import mpmath

    return {
        "asin": (jnp.arcsin, mpmath.asin),
        "acos": (jnp.arccos, mpmath.acos),
        "asinh": (jnp.arcsinh, mpmath.asinh),
        "acosh": (jnp.arccosh, mpmath.acosh),
        "atan": (jnp.arctan, mpmath.atan),
        "atanh": (jnp.arctanh, mpmath.atanh),
        "log": (jnp.log, mpmath.log),
        "log1p": (jnp.log1p, lambda z: mpmath.log(1 + z)),
        "sqrt": (jnp.sqrt, mpmath.sqrt),
        "rsqrt": (lax.rsqrt, lambda z: 1 / mpmath.sqrt(z)),
        "pow": (lambda z: z ** (0.5 + 0.3j), lambda z: mpmath.power(z, mpmath.mpc(0.5, 0.3))),
    }


@pytest.mark.parametrize("name", list(_branch_cases()))
def test_branch_cut_functions_match_mpmath(name):
    # JAX 0.10's own rule for complex acosh had the wrong sign in the left half-plane, so
    # the nested-jvp oracle agreed with taylax's same error there; this reference cannot.
    import math

    import mpmath

    fn, reference = _branch_cases()[name]
    order = 6
    with mpmath.workdps(30):
        want = np.array(
            [
                [
                    complex(c) * math.factorial(k)
                    for k, c in enumerate(mpmath.taylor(reference, z, order))
                ]
                for z in BRANCH_POINTS
            ]
        )
    got = np.asarray(jax.jit(jax.vmap(taylax.derivatives(fn, order)))(jnp.asarray(BRANCH_POINTS)))
    scale = np.max(np.abs(want), axis=1, keepdims=True)
    np.testing.assert_allclose(got / scale, want / scale, rtol=0, atol=1e-13)
