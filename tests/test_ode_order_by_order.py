"""`taylax.ode.coefficients(..., method="order_by_order")`: the field's program evaluated
one coefficient at a time.

One vector field per recurrence (and per kind of structural primitive and call), real and
complex, orders 0..6 against the solution's nested Lie derivatives (`jax.jvp`, outside
taylax) and order 12 against the doubling sweeps; random compositions (hypothesis)
against the doubling sweeps; the choice `method="auto"` makes; and the errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import taylax
from taylax.ode._coefficients import real_problem
from taylax.ode._order_by_order import field_program, unsupported_primitive
from test_ode_coefficients import assert_coefficients_close, lie_coefficients


@jax.custom_vjp
def _cube(x):
    return x**3


_cube.defvjp(lambda x: (x**3, x), lambda x, g: (3 * x**2 * g,))


@jax.jit
def _inner(y):
    return jnp.sin(y) * y


WEIGHTS = jnp.array([[0.5, -0.3, 0.2], [0.1, 0.4, -0.6], [-0.2, 0.3, 0.7]])
Y0 = jnp.array([0.3, -0.7, 1.1])

# name -> vector field f(t, y, args) of a state `Y0`-like (or the given y0).
FIELDS = {
    "mul": lambda t, y, a: y[::-1] * y - t * y,
    "square": lambda t, y, a: lax.square(y) - y,
    "dot_general": lambda t, y, a: a @ jnp.tanh(y) + jnp.dot(y, a)[0],
    "div": lambda t, y, a: y / (1 + t * t + y[::-1] ** 2),
    "integer powers at zero": lambda t, y, a: 1 + y**2 - 0.1 * y**3 + 0.01 * y**5,
    "negative integer powers": lambda t, y, a: (1 + y**2) ** -2 - 0.5 * (2 + y) ** -1,
    "pow": lambda t, y, a: (1.5 + y) ** 1.5 - (2.0 + y) ** -0.7,
    "pow with a varying exponent": lambda t, y, a: (1.5 + y) ** (0.5 + 0.2 * jnp.sin(y[::-1] + t)),
    "roots": lambda t, y, a: jnp.sqrt(2 + y) - lax.rsqrt(3 + y) + jnp.cbrt(2 + y),
    "exponentials": lambda t, y, a: jnp.exp(-y) + jnp.exp2(0.5 * y) - jnp.expm1(0.3 * y * t),
    "logarithms": lambda t, y, a: jnp.log(2 + y) - jnp.log1p(0.5 * y * y),
    "sin and cos of one value": lambda t, y, a: jnp.sin(y) * jnp.cos(y) - jnp.cos(t),
    "sin alone": lambda t, y, a: -jnp.sin(y[::-1]),
    "sinh and cosh": lambda t, y, a: 0.3 * jnp.sinh(y) - 0.2 * jnp.cosh(y[::-1]),
    "tanh, tan, logistic": lambda t, y, a: jnp.tanh(y) + 0.1 * jnp.tan(y) - jax.nn.sigmoid(y),
    "atan": lambda t, y, a: jnp.arctan(2 * y - t),
    "asin, acos, atanh": lambda t, y, a: (
        jnp.arcsin(0.5 * jnp.tanh(y)) - 0.3 * jnp.arccos(0.4 * y[::-1]) + jnp.arctanh(0.3 * y)
    ),
    "asinh, acosh": lambda t, y, a: jnp.arcsinh(2 * y) - jnp.arccosh(2 + y * y),
    "erf, erfc": lambda t, y, a: jax.lax.erf(y) - 0.5 * jax.lax.erfc(y[::-1] - t),
    "abs, max, min, clamp": lambda t, y, a: (
        jnp.abs(y) - jnp.maximum(y, 0.1) + jnp.minimum(y, -0.5) + lax.clamp(-0.5, y, 0.5)
    ),
    "select": lambda t, y, a: jnp.where(y > 0, y**2, -y) + jnp.sign(y) * 0.1,
    "structural": lambda t, y, a: (
        jnp.concatenate([y[1:], y[:1]])
        + jnp.cumsum(y)
        + jnp.sum(y * y)
        + jnp.pad(y, 1)[1:-1]
        + y[jnp.array([2, 0, 1])]
        + lax.dynamic_slice(jnp.tile(y, 2), (1,), (3,))
        + jnp.reshape(jnp.outer(y, y).T, (9,))[:3]
    ),
    "calls": lambda t, y, a: (
        _inner(y) + jax.nn.relu(y) + jax.nn.softplus(y) + jax.checkpoint(jnp.exp)(-y)
    ),
    "time only": lambda t, y, a: jnp.cos(t) * jnp.ones_like(y),
    "constant": lambda t, y, a: jnp.ones_like(y),
}

COMPLEX_Y0 = jnp.array([0.6 + 0.2j, -0.3 + 0.5j, 0.1 - 0.4j])
COMPLEX_FIELDS = {
    "complex products and conj": lambda t, y, a: -1j * (y * jnp.conj(y)) * y + 0.3j * y[::-1],
    "complex exp, sqrt, division": lambda t, y, a: jnp.exp(1j * y) + jnp.sqrt(2 + y) / (3 + y),
    "real and imag parts": lambda t, y, a: jnp.real(y) * y - 1j * jnp.imag(y) ** 2,
}


def _solve(f, y0, order, method):
    return jax.jit(taylax.ode.coefficients(f, order, method=method))(0.2, y0, WEIGHTS)


@pytest.mark.parametrize(
    "name, y0",
    [(n, Y0) for n in FIELDS] + [(n, COMPLEX_Y0) for n in COMPLEX_FIELDS],
)
def test_each_recurrence_against_nested_lie_derivatives(name, y0):
    f = FIELDS.get(name) or COMPLEX_FIELDS[name]
    if name == "integer powers at zero":
        y0 = jnp.array([0.0, 0.3, -0.2])  # Miller's power recurrence would divide by 0
    got = _solve(f, y0, 6, "order_by_order")
    expected = jax.jit(lambda t, y, a: lie_coefficients(f, t, y, a, 6))(0.2, y0, WEIGHTS)
    assert got.dtype == y0.dtype
    assert_coefficients_close(got, expected, 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, y0",
    [(n, Y0) for n in FIELDS] + [(n, COMPLEX_Y0) for n in COMPLEX_FIELDS],
)
def test_each_recurrence_at_order_12_against_doubling(name, y0):
    f = FIELDS.get(name) or COMPLEX_FIELDS[name]
    assert_coefficients_close(
        _solve(f, y0, 12, "order_by_order"), _solve(f, y0, 12, "doubling"), 1e-11
    )


def test_custom_vjp_functions_are_followed_by_their_primal():
    # Nested jvp cannot differentiate a `custom_vjp` function: the same field without it
    # is the reference.
    plain = _solve(lambda t, y, a: jnp.sin(y) - 0.1 * y**3, Y0, 10, "order_by_order")
    wrapped = _solve(lambda t, y, a: jnp.sin(y) - 0.1 * _cube(y), Y0, 10, "order_by_order")
    np.testing.assert_array_equal(wrapped, plain)


def test_order_zero_and_one():
    f = FIELDS["mul"]
    c0 = _solve(f, Y0, 0, "order_by_order")
    assert c0.shape == (1, 3)
    np.testing.assert_array_equal(c0[0], Y0)
    c1 = _solve(f, Y0, 1, "order_by_order")
    np.testing.assert_allclose(c1[1], f(0.2, Y0, None), rtol=1e-15)


def test_float32():
    f = FIELDS["tanh, tan, logistic"]
    y0 = Y0.astype(jnp.float32)
    got = jax.jit(taylax.ode.coefficients(f, 12, method="order_by_order"))(jnp.float32(0.2), y0)
    assert got.dtype == jnp.float32
    expected = _solve(f, Y0, 12, "doubling")
    assert_coefficients_close(got, expected, 2e-6)


def test_auto_takes_the_order_by_order_program_where_it_can():
    f = FIELDS["exponentials"]

    def program(method):
        return str(jax.make_jaxpr(taylax.ode.coefficients(f, 8, method=method))(0.2, Y0))

    assert program("auto") == program("order_by_order")
    assert program("auto") != program("doubling")
    # A field with control flow: auto falls back to the doubling sweeps.
    g = lambda t, y, a: lax.cond(t > 0, lambda: -y, lambda: y)  # noqa: E731
    auto = str(jax.make_jaxpr(taylax.ode.coefficients(g, 8))(0.2, Y0))
    assert auto == str(jax.make_jaxpr(taylax.ode.coefficients(g, 8, method="doubling"))(0.2, Y0))


def test_the_work_grows_as_the_order_squared():
    # y' = y^2: one product, whose coefficient k sums k + 1 terms, so the program holds
    # about K^2 / 2 multiplications and no Jacobian.
    f = lambda t, y, a: y * y  # noqa: E731
    counts = {}
    for order in (8, 16):
        jaxpr = jax.make_jaxpr(taylax.ode.coefficients(f, order, method="order_by_order"))(
            0.0, jnp.float64(0.5)
        )
        names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
        assert "dot_general" not in names and "while" not in names
        # Less the one multiplication of each mark's opaque one (`0 * (x == x)`).
        counts[order] = names.count("mul") - names.count("taylax_computed_once")
    assert counts[8] == sum(k + 1 for k in range(8))
    assert counts[16] == sum(k + 1 for k in range(16))


@pytest.mark.parametrize(
    "field, y0, primitive",
    [
        (lambda t, y, a: lax.cond(t > 0, lambda: -y, lambda: y), Y0, "cond"),
        (lambda t, y, a: jax.scipy.special.gammaln(2 + y), Y0, "lgamma"),
        (lambda t, y, a: -1j * jnp.abs(y) ** 2 * y, COMPLEX_Y0, "abs of a complex value"),
        (lambda t, y, a: jnp.linalg.solve(a, y), Y0, None),
    ],
)
def test_fields_without_recurrences(field, y0, primitive):
    w0, g, _ = real_problem(field, y0, WEIGHTS)
    missing = unsupported_primitive(field_program(g, jnp.asarray(0.2), w0))
    assert missing is not None and (primitive is None or missing == primitive)
    with pytest.raises(ValueError, match="needs a recurrence for every primitive") as error:
        _solve(field, y0, 4, "order_by_order")
    assert f"none for `{missing}`" in str(error.value) and "method='auto'" in str(error.value)
    # "auto" computes them by doubling, as `method="doubling"` does.
    assert_coefficients_close(_solve(field, y0, 6, "auto"), _solve(field, y0, 6, "doubling"), 0)


def test_bad_method():
    with pytest.raises(ValueError, match="`method` must be one of 'auto', 'order_by_order'"):
        taylax.ode.coefficients(FIELDS["mul"], 4, method="newton")
    with pytest.raises(ValueError, match="`coefficients` must be one of"):
        taylax.ode.integrate(FIELDS["mul"], coefficients="sweeps")


def test_batch_and_gradients():
    f = FIELDS["sin and cos of one value"]
    starts = Y0[:, None] + 0.1 * jnp.arange(4.0)  # (3, 4): four trajectories
    times = jnp.array([0.0, 0.3, -0.2, 1.1])
    got = jax.jit(taylax.ode.coefficients(f, 7, batch=True, method="order_by_order"))(times, starts)
    single = jax.jit(jax.vmap(taylax.ode.coefficients(f, 7, method="doubling"), (0, 1), 2))
    np.testing.assert_allclose(got, single(times, starts), rtol=1e-13, atol=1e-13)

    def loss(y0, t0, a, method):
        c = taylax.ode.coefficients(FIELDS["dot_general"], 6, method=method)(t0, y0, a)
        return jnp.sum(c[6] ** 2) + jnp.sum(c[3])

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), static_argnums=3)
    mine = grad(Y0, jnp.asarray(0.2), WEIGHTS, "order_by_order")
    theirs = grad(Y0, jnp.asarray(0.2), WEIGHTS, "doubling")
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11 * np.max(np.abs(b)))


UNARY = {
    "sin": jnp.sin,
    "tanh": jnp.tanh,
    "exp_neg_square": lambda a: jnp.exp(-a * a),
    "log1p_square": lambda a: jnp.log1p(a * a),
    "sqrt_1p_square": lambda a: jnp.sqrt(1.0 + a * a),
    "atan": jnp.arctan,
    "cube_third": lambda a: a**3 / 3.0,
    "softplus": jax.nn.softplus,
}
BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "div_1p_square": lambda a, b: a / (1.0 + b * b),
    "pow_pos_base": lambda a, b: (1.5 + jnp.sin(a)) ** jnp.tanh(b),
}


@st.composite
def _programs(draw):
    """A random field of three state components: each output a composition of depth up to
    four of the operations above, over the state and the time."""
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from(sorted(UNARY) + sorted(BINARY)),
                st.integers(0, 3),
                st.integers(0, 3),
            ),
            min_size=1,
            max_size=4,
        )
    )
    return steps


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(_programs())
def test_random_fields_against_doubling(steps):
    def field(t, y, a):
        values = [y[0], y[1], y[2], t]
        for name, i, j in steps:
            if name in UNARY:
                values.append(UNARY[name](values[i]))
            else:
                values.append(BINARY[name](values[i], values[j]))
            values = values[1:] if len(values) > 6 else values
        return jnp.stack([values[-1] * 0.5, values[-2] - y[0], jnp.tanh(values[-1]) * y[2]])

    assert_coefficients_close(
        _solve(field, Y0, 12, "order_by_order"), _solve(field, Y0, 12, "doubling"), 1e-10
    )


_COSTLY_NAMES = {"sin", "cos", "sinh", "cosh", "tanh", "tan", "logistic", "exp", "exp2"}
_COSTLY_NAMES |= {"expm1", "log", "log1p", "pow", "sqrt", "rsqrt", "cbrt", "atan", "asin"}
_COSTLY_NAMES |= {"acos", "asinh", "acosh", "atanh", "erf", "erfc"}


@pytest.mark.parametrize(
    "name",
    ["sin alone", "exponentials", "logarithms", "pow", "roots", "asinh, acosh", "erf, erfc"],
)
def test_values_of_order_0_that_cost_a_libm_call_are_computed_once(name):
    # Every order's kernel reads the values of order 0, and XLA copies an unmarked
    # `sin(y_0)` into each of them (K calls of libm's sin per step, per trajectory).
    jaxpr = jax.make_jaxpr(taylax.ode.coefficients(FIELDS[name], 8, method="order_by_order"))(
        0.2, Y0
    ).jaxpr
    readers: dict = {}
    for eqn in jaxpr.eqns:
        for var in eqn.invars:
            readers.setdefault(id(var), []).append(eqn.primitive.name)
    costly = [e for e in jaxpr.eqns if e.primitive.name in _COSTLY_NAMES]
    assert costly
    for eqn in costly:
        # Read by the mark alone (and by the `x == x` of the mark's opaque one); a
        # `** 1.5`'s square root through the one product `x sqrt(x)`, then the mark.
        names = set(readers.get(id(eqn.outvars[0]), []))
        if eqn.primitive.name == "sqrt" and names == {"mul"}:
            (product,) = [e for e in jaxpr.eqns if eqn.outvars[0] in e.invars]
            names = set(readers.get(id(product.outvars[0]), []))
        assert names <= {"taylax_computed_once", "eq"}, eqn


def test_compiled_for_the_cpu_the_coefficients_call_sin_once():
    # Once per call, not once per order (8 here): the mark keeps XLA:CPU from copying it.
    with taylax.emission_policy("cpu"):
        compiled = (
            jax.jit(taylax.ode.coefficients(FIELDS["sin alone"], 8, method="order_by_order"))
            .lower(0.2, Y0)
            .compile()
            .as_text()
        )
    assert compiled.count(" sine(") == 1, compiled.count(" sine(")


def test_each_new_state_coefficient_is_computed_once():
    # Each order's kernel writes w_{k+1} itself: unmarked, XLA:CPU wrote F_k and a second
    # kernel per order scaled it by 1 / (k + 1) for the stack (docs/ODE.md).
    f = lambda t, y, a: y[::-1] * y - t * y  # noqa: E731
    jaxpr = jax.make_jaxpr(taylax.ode.coefficients(f, 8, method="order_by_order"))(0.2, Y0).jaxpr
    names = [e.primitive.name for e in jaxpr.eqns]
    assert names.count("taylax_computed_once") == 8


@pytest.mark.parametrize(
    "field, marks",
    [
        (lambda t, y, a: y[::-1] * y - t * y, 8),  # products: the states alone
        (lambda t, y, a: jnp.tanh(y), 16),  # tanh of order 0, and of orders 1..7
        # sin of order 0 (and the pair's sin and cos), then both of the pair's series at
        # orders 1..7: its recurrence reads those, not the equation's output.
        (lambda t, y, a: jnp.sin(y), 25),
        (lambda t, y, a: y / (1 + y[::-1] ** 2), 15),  # the quotient's orders 1..7
        (lambda t, y, a: (1 + y**2) ** -2, 15),  # a reciprocal's recurrence
        # atan, asin and erf integrate a series of their own (u^p, exp(-x^2)), which
        # reads its earlier coefficients: that series' orders 0..6 and the output's
        # order 0, not the output's later orders (which read only x and the series).
        (lambda t, y, a: jnp.arctan(y), 16),
        (lambda t, y, a: jnp.arcsin(y), 16),
        (lambda t, y, a: jax.scipy.special.erf(y), 16),
        # A varying exponent: log x's orders 0..7 (its recurrence reads them) and the
        # output's (exp's recurrence reads its own).
        (lambda t, y, a: (1.5 + y) ** (1 + y[::-1]), 24),
    ],
)
def test_recurrences_reading_their_own_output_are_computed_once_per_order(field, marks):
    # XLA copied such a coefficient (products and sums) into every later order's kernel,
    # each copy computed again from its own earlier coefficients: O(K^3) work. Products
    # read only their inputs and stay unmarked (docs/ODE.md).
    jaxpr = jax.make_jaxpr(taylax.ode.coefficients(field, 8, method="order_by_order"))(0.2, Y0)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert names.count("taylax_computed_once") == marks


@pytest.mark.parametrize("n, batch, reduces", [(3, 2048, False), (12, 2048, True), (3, 64, True)])
def test_small_sums_in_batches_are_additions_of_slices(n, batch, reduces):
    # A sum over at most 8 components of arrays of 4,096 elements or more is written as
    # additions: XLA:CPU made each order's such reduction a library call (a YNNPACK
    # fusion), which took 4,096 Kepler orbits to twice their time (docs/ODE.md). Larger
    # sums, and smaller arrays, stay reductions.
    f = lambda t, y, a: -y * jnp.sum(y * y, axis=0) ** -1.5  # noqa: E731
    y0 = jnp.linspace(0.5, 1.0, n * batch).reshape(n, batch)
    coefficients = taylax.ode.coefficients(f, 8, method="order_by_order", batch=True)
    names = [e.primitive.name for e in jax.make_jaxpr(coefficients)(0.2, y0).jaxpr.eqns]
    assert ("reduce_sum" in names) == reduces
    doubling = taylax.ode.coefficients(f, 8, method="doubling", batch=True)
    want = jax.jit(doubling)(0.2, y0)
    np.testing.assert_allclose(jax.jit(coefficients)(0.2, y0), want, rtol=1e-12, atol=1e-14)


def test_three_halves_powers_of_order_0_are_square_roots():
    # XLA:CPU calls libm's scalar `pow` (58 us over 4,096 float64 values, against 7.6 us
    # for a square root, a product and a division: docs/ODE.md): `x ** +-1.5` of order 0
    # is `x sqrt(x)` or its reciprocal, within 2 ulp of `pow` and equal to it at the
    # special values. Other exponents keep `pow`.
    f = lambda t, y, a: y**1.5 - (2.0 + y) ** -1.5 + (1.5 + y) ** 0.5  # noqa: E731
    jaxpr = jax.make_jaxpr(taylax.ode.coefficients(f, 4, method="order_by_order"))(0.2, Y0)
    pows = [e.invars[1].val for e in jaxpr.jaxpr.eqns if e.primitive.name == "pow"]
    assert pows == [0.5]
    for dtype in (np.float32, np.float64):
        special = [0.0, -0.0, np.inf, np.nan, -1.0, np.finfo(dtype).tiny, 1e30]
        x = np.concatenate([special, np.geomspace(1e-6, 1e6, 101)]).astype(dtype)
        for p in (1.5, -1.5):
            g = lambda t, y, a, p=p: y**p  # noqa: E731
            got = np.asarray(taylax.ode.coefficients(g, 1, method="order_by_order")(0.0, x))[1]
            assert got.dtype == dtype
            # The power correctly rounded (mpmath), and `pow` (XLA's) at the special values.
            with np.errstate(all="ignore"):
                want = np.array([_exact_power(v, p) for v in x]).astype(dtype)
            np.testing.assert_array_equal(got[:5], np.asarray(jax.jit(g)(0.0, x[:5], None)))
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
            finite = np.isfinite(want) & (want != 0)
            np.testing.assert_array_equal(got[~finite], want[~finite])
            ulp = np.spacing(np.abs(want[finite]))
            assert np.all(np.abs(got[finite] - want[finite]) <= 2 * ulp)
    # At -inf, a state that has left the reals, the root gives NaN where `pow` gives
    # +inf (or +0).
    got = taylax.ode.coefficients(lambda t, y, a: y**1.5, 1)(0.0, jnp.array([-jnp.inf]))
    assert np.isnan(got[1, 0])


def _exact_power(x: float, p: float) -> float:
    if not np.isfinite(x) or x <= 0:
        return float(np.float64(x) ** p)
    return float(mpmath.mpf(float(x)) ** p)


def test_compiled_steps_call_no_pow_for_three_halves():
    # Neither the field's `** -1.5` nor the step size (`exp` of the smaller logarithm).
    f = lambda t, y, a: -y * jnp.sum(y * y, axis=0) ** -1.5  # noqa: E731
    solve = jax.jit(taylax.ode.integrate(f, tol=1e-12))
    text = solve.lower(jnp.array([0.0, 1.0]), jnp.array([1.0, 0.2])).compile().as_text()
    assert " power(" not in text
