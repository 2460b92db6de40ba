"""The public entry points: taylor, derivatives, jet, under jit/vmap/grad, and their errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import jet as jax_jet

import taylax
from reference import (
    assert_series_close,
    entry_kernels,
    nested_jvp_derivatives,
    xla_cpu_only,
)
from taylax import _compat, _series
from taylax._compat import Primitive
from taylax._count import count_equations
from taylax._pass import read_row_by_row

# The structural tests here pin the programs the CPU policy emits, whatever the backend.
pytestmark = pytest.mark.usefixtures("cpu_policy")


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


def test_equations_grow_at_most_linearly_with_order():
    # Recurrences run unrolled up to a small order and by blocks of rows in a loop above
    # it; products (above order 8) are shifted sums with a few equations per coefficient:
    # linear in the order, never quadratic. The switch to blocks adds the block body once
    # (a constant, about the size of the order-10 program); past it the program is flat.
    counts = {
        k: count_equations(jax.make_jaxpr(lambda x, k=k: taylax.taylor(f_scalar, k)(x, 1.0))(1.1))
        for k in (10, 40, 70, 100)
    }
    per_order_late = (counts[100] - counts[70]) / 30
    per_order_early = (counts[40] - counts[10]) / 30
    assert per_order_late <= max(per_order_early, 1.0), counts
    assert counts[100] <= counts[40] + 2 * counts[10], counts
    # Past order 57 in float64, `derivatives` adds an unscaled pass (docs/guides/dtypes.md,
    # "High orders in every dtype"): two passes and the merge, nothing that grows faster.
    both = count_equations(jax.make_jaxpr(taylax.derivatives(f_scalar, 100))(1.1))
    assert both <= 2 * counts[100] + 4 * 100, (both, counts)


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
    _compat.check_jaxpr(closed.jaxpr)


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


# --------------------------------------------------------------------------------------------
# Dtypes and outputs that are choices (docs/guides/dtypes.md and docs/guides/choosing.md).
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_low_precision_inputs_are_accepted(dtype):
    x = jnp.asarray(0.5, dtype)
    want = np.array([np.sin(0.5), np.cos(0.5), -np.sin(0.5)])
    rtol = 4 * float(jnp.finfo(dtype).eps)  # a few ulps of the dtype: three short products
    d = taylax.derivatives(jnp.sin, 2)(x)
    _, c = taylax.taylor(jnp.sin, 2)(x, jnp.asarray(1.0, dtype))
    y0, terms = taylax.jet(jnp.sin, (x,), ((jnp.asarray(1.0, dtype), jnp.asarray(0.0, dtype)),))
    assert d.dtype == c.dtype == y0.dtype == dtype
    np.testing.assert_allclose(np.asarray(d, np.float64), want, rtol=rtol)
    np.testing.assert_allclose(np.asarray(c, np.float64), want[1:] / [1, 2], rtol=rtol)
    np.testing.assert_allclose(np.asarray([y0, *terms], np.float64), want, rtol=rtol)


def test_constant_output_has_zero_derivatives():
    np.testing.assert_array_equal(taylax.derivatives(lambda t: 2.0, 2)(0.5), [2.0, 0.0, 0.0])
    y, c = taylax.taylor(lambda t: {"a": 2.0, "b": jnp.ones(2)}, 2)(0.5, 1.0)
    assert c["a"].shape == (2,) and c["b"].shape == (2, 2)
    assert not np.any(c["a"]) and not np.any(c["b"])
    y0, terms = taylax.jet(lambda t: 3.0, (0.5,), ((1.0, 0.0),))
    assert y0 == 3.0 and [float(t) for t in terms] == [0.0, 0.0]


def test_integer_and_boolean_outputs_have_zero_derivatives():
    # jax.jacfwd gives zeros for an integer output (it fails on a boolean one).
    def f(t):
        return {"i": jnp.floor(3 * t).astype(jnp.int32), "b": t > 0, "y": jnp.sin(t)}

    d = taylax.derivatives(f, 2)(0.5)
    assert d["i"].dtype == jnp.int32 and d["b"].dtype == jnp.bool_
    np.testing.assert_array_equal(d["i"], [1, 0, 0])
    np.testing.assert_array_equal(d["b"], [True, False, False])
    np.testing.assert_allclose(d["y"], [np.sin(0.5), np.cos(0.5), -np.sin(0.5)], rtol=1e-15)
    assert jax.jacfwd(lambda t: f(t)["i"])(0.5) == 0
    y0, terms = taylax.jet(lambda t: jnp.floor(3 * t).astype(jnp.int32), (0.5,), ((1.0, 0.0),))
    assert y0 == 1 and [int(t) for t in terms] == [0, 0]


def test_python_if_on_the_value_says_the_function_is_traced():
    def f(t):
        return jnp.sin(t) if t > 0 else t

    for call in (lambda: taylax.derivatives(f, 2)(0.5), lambda: taylax.jacfwd(f)(0.5)):
        with pytest.raises(TypeError, match="traces the function.*jnp.where"):
            call()


def _primitive(name):
    p = Primitive(name)
    p.def_impl(lambda x: 2 * x)
    p.def_abstract_eval(lambda x: x)
    return p


@pytest.mark.parametrize(
    "rule, error, match",
    [
        (lambda order, x: 2 * x.coeffs, TypeError, "returned an array.*taylax.Series"),
        (lambda order, x: taylax.Series(2 * x.coeffs[..., None]), ValueError, "shape"),
        (lambda order, x: taylax.Series(x.coeffs.astype(jnp.float32)), TypeError, "dtype"),
        (
            lambda order, x: taylax.Series(jnp.concatenate([x.coeffs, x.coeffs])),
            ValueError,
            "degree",
        ),
    ],
    ids=["bare-array", "shape", "dtype", "degree"],
)
def test_register_rule_results_are_checked(rule, error, match):
    p = _primitive(f"taylax_test_bad_rule_{match[:5]}")
    taylax.register_rule(p)(rule)
    with pytest.raises(error, match=f"'{p.name}'.*{match}"):
        jax.make_jaxpr(taylax.derivatives(lambda x: p.bind(jnp.sin(x)), 2))(0.5)


@pytest.mark.parametrize(
    "use, expected",
    [
        (lambda y, x, w: y @ w, True),
        (lambda y, x, w: w.T @ y, True),
        (lambda y, x, w: y @ (w * x[0]), False),  # the other operand varies
        (lambda y, x, w: y @ w + jnp.sum(y), False),  # one reader is not a matmul
        (lambda y, x, w: y * 2.0, False),
        (lambda y, x, w: y, False),  # an output of the function
    ],
    ids=["right", "left", "varying-matrix", "mixed-readers", "elementwise", "output"],
)
@pytest.mark.parametrize("row_bytes", [0, None], ids=["rows-large-enough", "rows-too-small"])
def test_rules_are_told_whether_their_output_is_read_row_by_row(use, expected, row_bytes, emission):
    # What lets the tanh rule leave its rows unmarked in a large network's hidden layers.
    if row_bytes is not None:
        emission(row_dots_min_bytes=row_bytes)
    w = jnp.arange(6.0).reshape(3, 2)
    x = jnp.ones(3)
    seen = _told_read_row_by_row(
        f"taylax_test_read_by_rows_{id(use)}_{row_bytes}",
        lambda p: lambda x: use(p.bind(jnp.sin(x)), x, w),
        2,
        x,
        x,
    )
    assert seen == [expected and row_bytes is not None]
    assert not read_row_by_row()  # outside a rule


def _told_read_row_by_row(name, program, order, *args) -> list[bool]:
    """What `read_row_by_row` tells the rule of a fresh primitive `p` (doubling its input)
    when `program(p)` is differentiated to `order` at `args`."""
    seen = []
    p = _primitive(name)

    @taylax.register_rule(p)
    def _rule(order, y):
        seen.append(read_row_by_row())
        return taylax.Series(2 * y.coeffs)

    jax.make_jaxpr(taylax.derivatives(program(p), order))(*args)
    return seen


_ROWS_BOUND = taylax.CPU.rows_max_order


@pytest.mark.parametrize(
    "use, order, expected",
    [
        (lambda y, t: y / (1 + t**2), 12, True),
        (lambda y, t: y / (1 + t**2), _ROWS_BOUND, True),
        (lambda y, t: y / (1 + t**2), _ROWS_BOUND + 1, False),  # rows cost K^2 equations
        # Products are rows there anyway (`stacked_product_rows_max_order`).
        (lambda y, t: y / (1 + t**2), taylax.CPU.stacked_product_rows_max_order, False),
        (lambda y, t: y / jnp.cos(t), 12, True),  # the denominator's degree is not static
        (lambda y, t: (1 + t**2) / y, 12, False),  # the denominator
        (lambda y, t: y / (1 + t**2) + y, 12, False),  # read elsewhere too
    ],
    ids=["order-12", "bound", "above-bound", "unrolled", "any-denominator", "denominator", "mixed"],
)
def test_a_division_reads_its_numerator_row_by_row(use, order, expected):
    # What makes a product over a low-degree series (exp(-t^2/2) cos(3t) / (1 + t^2))
    # give its rows as buffers of their own above the unrolled orders (`_series.cauchy`).
    seen = _told_read_row_by_row(
        f"taylax_test_division_reads_rows_{order}_{id(use)}",
        lambda p: lambda t: use(p.bind(jnp.sin(t)), t),
        order,
        0.3,
    )
    # Off XLA:CPU products past `OFF_CPU_PRODUCT_ROWS_MAX_ORDER` are shifted sums, read whole.
    assert seen == [expected and order <= _series.product_rows_max_order()]


LOW_ORDER_CHAINS = {
    "0.3 sin(t) t^10": lambda t: 0.3 * jnp.sin(t) * t**10,
    "exp(-t^2/2) cos(3t) / (1 + t^2)": lambda t: jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2),
    "sqrt(1 + t^2) exp(sin(t))": lambda t: jnp.sqrt(1 + t**2) * jnp.exp(jnp.sin(t)),
}


@xla_cpu_only
@pytest.mark.parametrize("points", [4096, 1 << 20])
@pytest.mark.parametrize("name", list(LOW_ORDER_CHAINS))
def test_order_two_chains_compile_into_one_kernel(name, points, stacked_derivatives):
    # At order 2 nothing is marked (`_once.UNMARKED_ANY_SIZE_MAX_ORDER`), a quotient's
    # recurrence reads `a_0 (1 / b_0)` (XLA:CPU fuses a reciprocal, not a quotient with
    # several readers), and the output is the pass's own stack, so XLA fuses the whole
    # program into one kernel, as it does nested jvp's under `vmap`.
    fn = jax.vmap(taylax.derivatives(LOW_ORDER_CHAINS[name], 2))
    assert entry_kernels(fn, jax.ShapeDtypeStruct((points,), jnp.float64)) == 1


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_quotient_primal_is_the_quotient_itself(order):
    # The recurrence may read `a_0 (1 / b_0)`; the primal row stays `a_0 / b_0`, bit
    # for bit what the function returns.
    f = LOW_ORDER_CHAINS["exp(-t^2/2) cos(3t) / (1 + t^2)"]
    t = jnp.linspace(-3.0, 3.0, 101)
    got = jax.jit(jax.vmap(taylax.derivatives(f, order)))(t)
    np.testing.assert_array_equal(np.asarray(got[:, 0]), np.asarray(jax.jit(f)(t)))
    want = nested_jvp_derivatives(f, t, jnp.ones_like(t), order)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want).T, rtol=1e-12, atol=1e-12)
