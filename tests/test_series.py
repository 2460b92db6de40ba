"""The series kernels, and every elementwise rule on a full series (not only along a line).

Applying a function directly to `x + s v` hands its rule a degree-1 series, which
takes the closed form along a line. Composing it after an inner function
(`f(0.6 + 0.4 sin(x))`) hands it a series of full degree, which exercises the
recurrences (push-form loops, composition, chunking).
"""

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest

import taylax
from reference import assert_series_close, nested_jvp_derivatives
from taylax import _series as ks


def inner(x):
    return 0.6 + 0.4 * jnp.sin(x)


OUTER = {
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "asinh": jnp.arcsinh,
    "acosh": lambda y: jnp.arccosh(1 + y),
    "atanh": jnp.arctanh,
    "sqrt": jnp.sqrt,
    "rsqrt": jax.lax.rsqrt,
    "cbrt": jnp.cbrt,
    "pow_2.5": lambda y: y**2.5,
    "pow_-1.5": lambda y: y**-1.5,
    "integer_pow_7": lambda y: y**7,
    "integer_pow_-3": lambda y: y**-3,
    "reciprocal": lambda y: 1 / y,
    "square": jnp.square,
    "erf": jsp.erf,
    "erfc": jsp.erfc,
    "erf_inv": jsp.erfinv,
    "lgamma": jsp.gammaln,
    "digamma": jsp.digamma,
    "polygamma_2": lambda y: jsp.polygamma(2, y),
    "atan2": lambda y: jnp.arctan2(y, 1.5 - y),
    "div": lambda y: jnp.sin(y) / (1 + y),
    "mul": lambda y: y * jnp.exp(y),
    "abs_complex": lambda y: jnp.abs(y * (1 + 2j)),
}


@pytest.mark.parametrize("name", sorted(OUTER))
def test_rule_on_full_series(name):
    outer = OUTER[name]

    def f(x):
        return outer(inner(x))

    x = jnp.array([0.3, -0.7, 1.2])
    v = jnp.array([1.0, -0.5, 0.8])
    assert_series_close(taylax.derivatives(f, 6)(x, v), nested_jvp_derivatives(f, x, v, 6))


def test_chunked_path_matches_unchunked():
    # 4096 elements at order 6 run chunk by chunk; 8 elements do not.
    key = jax.random.key(0)
    x = jax.random.uniform(key, (64, 64), minval=-1.0, maxval=1.0)
    v = jax.random.normal(jax.random.key(1), (64, 64))

    def f(x):
        return jnp.tanh(inner(x)) * jnp.log(inner(x))

    big = taylax.derivatives(f, 6)(x, v)
    small = jnp.stack(
        [taylax.derivatives(f, 6)(x[i, :8], v[i, :8]) for i in range(0, 64, 16)], axis=1
    )
    np.testing.assert_allclose(big[:, ::16, :8], small, rtol=1e-12, atol=1e-12)


def test_cauchy_matches_polynomial_product():
    a = np.array([1.0, 2.0, -1.0, 0.5, 3.0])
    b = np.array([0.5, -1.0, 4.0])
    want = np.convolve(a, b)[:6]
    got = ks.cauchy(jnp.asarray(a), jnp.asarray(b), 5)
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_divide_inverts_cauchy():
    a = jnp.array([1.0, 2.0, -1.0, 0.5, 3.0, 1.0])
    b = jnp.array([2.0, -1.0, 0.25, 0.0, 1.0, -2.0])
    q = ks.divide(a, b, 5)
    np.testing.assert_allclose(ks.cauchy(q, b, 5), a, rtol=1e-13, atol=1e-13)


def test_degrees_are_tracked():
    seed = taylax.Series(jnp.array([1.0, 1.0]))
    assert seed.degree == 1
    assert taylax.Series.constant(3.0).degree == 0
    square = ks.cauchy(seed.coeffs, seed.coeffs, 10)
    assert ks.degree_of(square) == 2
    assert ks.degree_of(ks.cauchy(square, square, 3)) == 3
