"""The public entry points: taylor, derivatives, jet, under jit/vmap/grad, and their errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import jet as jax_jet
from jax.extend.core import Primitive

import taylax
from reference import assert_series_close, nested_jvp_derivatives
from taylax._count import count_equations


def f_scalar(t):
    return 0.3 * jnp.sin(t) * t**10


def mlp(params, x):
    for w, b in params:
        x = jnp.tanh(x @ w + b)
    return x


def make_params(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, k1, k2 = jax.random.split(key, 3)
        params.append(
            (
                jax.random.normal(k1, (n_in, n_out)) / math.sqrt(n_in),
                0.1 * jax.random.normal(k2, (n_out,)),
            )
        )
    return params


def tree_nested_jvp(f, x, v, order):
    """Nested jvp along a real s for pytree inputs and outputs: stacked (order+1, ...)."""

    def line(s):
        return f(jax.tree.map(lambda a, b: a + s * b, x, v))

    outs = []
    g = line
    for _ in range(order + 1):
        outs.append(g(jnp.float64(0.0)))
        g = (lambda h: lambda s: jax.jvp(h, (s,), (jnp.ones_like(s),))[1])(g)
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *outs)


def test_derivatives_scalar_matches_nested_jvp():
    got = taylax.derivatives(f_scalar, 8)(1.1)
    want = nested_jvp_derivatives(f_scalar, jnp.float64(1.1), jnp.float64(1.0), 8)
    assert_series_close(got, want)


def test_taylor_returns_normalized_coefficients():
    y, c = taylax.taylor(jnp.exp, 5)(0.0, 1.0)
    np.testing.assert_allclose(y, 1.0)
    np.testing.assert_allclose(c, [1 / math.factorial(k) for k in range(1, 6)], rtol=1e-14)
    assert c.shape == (5,)


def test_taylor_order_zero():
    y, c = taylax.taylor(jnp.sin, 0)(0.5, 1.0)
    np.testing.assert_allclose(y, np.sin(0.5))
    assert c.shape == (0,)


def test_pytree_in_and_out():
    def f(tree):
        a, b = tree["a"], tree["b"]
        return {"sum": jnp.sum(jnp.sin(a) * b), "pair": (a * b, jnp.exp(b))}

    x = {"a": jnp.array([0.1, 0.2]), "b": jnp.array([1.5, -0.5])}
    v = {"a": jnp.array([1.0, 0.5]), "b": jnp.array([0.2, 0.3])}
    got = taylax.derivatives(f, 5)(x, v)
    want = tree_nested_jvp(f, x, v, 5)
    jax.tree.map(assert_series_close, got, want)


def test_under_jit_and_vmap():
    d = jax.jit(taylax.derivatives(jnp.tanh, 6))
    xs = jnp.linspace(-2.0, 2.0, 5)
    got = jax.vmap(d)(xs)
    for i, x in enumerate(xs):
        assert_series_close(got[i], nested_jvp_derivatives(jnp.tanh, x, jnp.float64(1.0), 6))


def test_grad_through_taylor_pass_closed_over_and_passed_in():
    params = make_params(jax.random.key(0), [1, 8, 8, 1])

    def loss_passed(p, t):
        d = taylax.derivatives(lambda s: mlp(p, s[None])[0], 4)(t)
        return jnp.sum(d[1:] ** 2)

    def loss_reference(p, t):
        d = tree_nested_jvp(lambda s: mlp(p, s[None])[0], t, jnp.float64(1.0), 4)
        return jnp.sum(d[1:] ** 2)

    t = jnp.float64(0.3)
    got = jax.grad(loss_passed)(params, t)
    want = jax.grad(loss_reference)(params, t)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12), got, want)
    got_t = jax.grad(loss_passed, argnums=1)(params, t)
    want_t = jax.grad(loss_reference, argnums=1)(params, t)
    np.testing.assert_allclose(got_t, want_t, rtol=1e-10)


def test_jet_matches_jax_experimental_jet():
    f = lambda x, y: jnp.sin(x) * jnp.exp(y) + x / (1 + y**2)  # noqa: E731
    primals = (jnp.float64(0.4), jnp.float64(-0.3))
    series = ([1.0, 0.5, -0.2, 0.1], [0.3, 0.0, 0.7, -0.4])
    want_p, want_s = jax_jet.jet(f, primals, series)
    got_p, got_s = taylax.jet(f, primals, series)
    np.testing.assert_allclose(got_p, want_p, rtol=1e-13)
    assert len(got_s) == len(want_s) == 4
    np.testing.assert_allclose(jnp.stack(got_s), jnp.stack(want_s), rtol=1e-12)
    _, got_raw = taylax.jet(f, primals, series, factorial_scaled=False)
    _, want_raw = jax_jet.jet(f, primals, series, factorial_scaled=False)
    np.testing.assert_allclose(jnp.stack(got_raw), jnp.stack(want_raw), rtol=1e-12)


def test_jet_pytree_output():
    f = lambda x: (jnp.sin(x), {"c": jnp.cos(x)})  # noqa: E731
    (s, d), (s_terms, d_terms) = taylax.jet(f, (0.5,), ([1.0, 0.0],))
    np.testing.assert_allclose(s, np.sin(0.5))
    np.testing.assert_allclose(d["c"], np.cos(0.5))
    np.testing.assert_allclose(s_terms[1], -np.sin(0.5), rtol=1e-14)
    np.testing.assert_allclose(d_terms["c"][0], -np.sin(0.5), rtol=1e-14)


def test_complex_input_real_parameter():
    f = lambda z: jnp.exp(1j * z) * z  # noqa: E731
    z = jnp.complex128(0.3 + 0.2j)
    got = taylax.derivatives(f, 6)(z)
    want = nested_jvp_derivatives(f, z, jnp.complex128(1.0), 6)
    assert_series_close(got, want)


def test_equations_do_not_grow_with_order():
    counts = {
        k: count_equations(jax.make_jaxpr(taylax.derivatives(f_scalar, k))(1.1))
        for k in (10, 40, 100)
    }
    assert max(counts.values()) <= 150, counts
    assert max(counts.values()) <= 1.2 * min(counts.values()), counts


def test_index_from_astype_int_gets_no_series():
    table = jnp.arange(5.0) ** 2

    def f(x):
        return table[x.astype(int)] * x

    got = taylax.derivatives(f, 4)(2.5)
    want = nested_jvp_derivatives(f, jnp.float64(2.5), jnp.float64(1.0), 4)
    assert_series_close(got, want)


def test_sub_jit_checkpoint_and_custom_rules():
    # Custom derivative rules define first derivatives only: taylax expands the primal
    # function, so the reference is the same program without the custom rules (nested
    # jvp itself cannot go past first order through a custom_vjp).
    @jax.jit
    def inner(x):
        return jnp.sin(x) * x

    @jax.custom_jvp
    def softplus(x):
        return jnp.log1p(jnp.exp(x))

    softplus.defjvp(lambda p, t: (softplus(p[0]), jax.nn.sigmoid(p[0]) * t[0]))

    @jax.custom_vjp
    def cube(x):
        return x**3

    cube.defvjp(lambda x: (x**3, x), lambda x, g: (3 * x**2 * g,))

    def f(x):
        return inner(x) + jax.checkpoint(jnp.cos)(inner(x)) + softplus(x) + cube(x)

    def plain(x):
        return inner(x) + jnp.cos(inner(x)) + jnp.log1p(jnp.exp(x)) + x**3

    got = taylax.derivatives(f, 6)(0.7)
    want = nested_jvp_derivatives(plain, jnp.float64(0.7), jnp.float64(1.0), 6)
    assert_series_close(got, want)


def test_emitted_jaxpr_type_checks():
    def f(x):
        return jax.jit(jnp.tanh)(x) * jnp.exp(x) / (1 + x**2)

    closed = jax.make_jaxpr(taylax.derivatives(f, 5))(0.3)
    jax.extend.core.check_jaxpr(closed.jaxpr)


@pytest.mark.parametrize("order", [-1, 1.5, True, "3"])
def test_bad_order(order):
    error = ValueError if order == -1 else TypeError
    with pytest.raises(error, match="`order`"):
        taylax.derivatives(jnp.sin, order)


def test_integer_input_rejected():
    with pytest.raises(TypeError, match="floating-point or complex"):
        taylax.derivatives(jnp.sin, 2)(jnp.int32(1))


def test_direction_required_for_arrays():
    with pytest.raises(ValueError, match="`v`"):
        taylax.derivatives(jnp.sin, 2)(jnp.ones(3))


def test_direction_shape_checked():
    with pytest.raises(ValueError, match="same shape"):
        taylax.derivatives(jnp.sin, 2)(jnp.ones(3), jnp.ones(2))


def test_unsupported_primitive_names_it():
    # A primitive no rule table knows: it has only an abstract evaluation rule.
    opaque_p = Primitive("taylax_test_opaque")
    opaque_p.def_abstract_eval(lambda x: x)
    opaque_p.def_impl(lambda x: x)

    with pytest.raises(NotImplementedError, match="'taylax_test_opaque'.*register_rule"):
        taylax.derivatives(lambda x: opaque_p.bind(jnp.sin(x)), 2)(0.5)
