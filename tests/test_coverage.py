"""Which JAX primitives have a Taylor rule, user-registered rules, and bad input.

Every primitive exported by `jax.lax` (names ending `_p`) and `jax.extend.core.primitives` is
one test case: it passes when `taylax._interpret.taylor_rules` has a rule for it, is skipped
with a one-line reason when it cannot carry a series (integer/boolean outputs, tokens, PRNG
bits, or JAX itself defines no derivative), is a visible `xfail` ("todo: ...") where
`taylax._coverage.NOT_YET` says why it has no rule, and fails otherwise: a primitive that a
newer JAX adds needs a rule or a decision. The reasons live in
`taylax._coverage`, which also generates the README's list. Run
`pytest tests/test_coverage.py -rxs` to see the lists.
"""

from __future__ import annotations

import jax
import jax.extend.core.primitives as jex_primitives
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.interpreters import mlir

import taylax
from reference import assert_series_close, oracle
from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX
from taylax._coverage import NO_SERIES, NOT_YET
from taylax._interpret import taylor_rules


def _all_primitives() -> list[jex.Primitive]:
    found: dict[int, jex.Primitive] = {}
    for module in (lax, jex_primitives):
        for attr in dir(module):
            if attr.endswith("_p"):
                obj = getattr(module, attr)
                if isinstance(obj, jex.Primitive):
                    found[id(obj)] = obj
    return sorted(found.values(), key=lambda p: p.name)


# The reasons live in taylax._coverage, which also generates the README's list.
NO_RULE_NEEDED = NO_SERIES

ALL_PRIMITIVES = _all_primitives()


def _coverage_params():
    params = []
    for prim in ALL_PRIMITIVES:
        if prim in taylor_rules:
            marks = ()
        elif prim.name in NO_RULE_NEEDED:
            marks = pytest.mark.skip(reason=f"no rule needed: {NO_RULE_NEEDED[prim.name]}")
        elif prim.name in NOT_YET:
            marks = pytest.mark.xfail(reason=f"todo: {NOT_YET[prim.name]}", strict=True)
        else:
            # A primitive the running JAX exports that taylax has not decided about (a
            # newer JAX's): fails, until it has a rule or a reason in taylax._coverage.
            marks = ()
        params.append(pytest.param(prim, id=prim.name, marks=marks))
    return params


@pytest.mark.parametrize("primitive", _coverage_params())
def test_primitive_has_taylor_rule(primitive):
    assert primitive in taylor_rules, (
        f"no Taylor rule registered for '{primitive.name}': add one, or say why it needs none "
        "(taylax._coverage.NO_SERIES) or has none yet (taylax._coverage.NOT_YET)"
    )
    assert callable(taylor_rules[primitive])


def test_coverage_report(capsys):
    """Print the coverage table (visible with `pytest -s`); never fails on missing rules."""
    supported = [p.name for p in ALL_PRIMITIVES if p in taylor_rules]
    exempt = [p.name for p in ALL_PRIMITIVES if p not in taylor_rules and p.name in NO_RULE_NEEDED]
    todo = [
        p.name for p in ALL_PRIMITIVES if p not in taylor_rules and p.name not in NO_RULE_NEEDED
    ]
    with capsys.disabled():
        print(
            f"\ntaylax rule coverage: {len(supported)} supported, {len(exempt)} need no rule, "
            f"{len(todo)} todo (of {len(ALL_PRIMITIVES)} primitives)\n"
            f"  todo: {', '.join(todo)}"
        )
    assert len(supported) + len(exempt) + len(todo) == len(ALL_PRIMITIVES)


def test_registered_rules_are_keyed_by_primitives():
    for prim, rule in taylor_rules.items():
        assert isinstance(prim, jex.Primitive), prim
        assert callable(rule), prim.name


# --------------------------------------------------------------------------------------------
# Missing rules and user rules.
# --------------------------------------------------------------------------------------------


def _new_primitive(name, impl):
    prim = jex.Primitive(name)
    prim.def_impl(impl)
    prim.def_abstract_eval(lambda x: x)
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=False))
    return prim


def test_unsupported_primitive_raises_helpful_error():
    prim = _new_primitive("taylax_test_unsupported", lambda x: 2.0 * x)

    def f(x):
        return jnp.sin(prim.bind(x))

    with pytest.raises(NotImplementedError) as info:
        taylax.derivatives(f, 3)(np.asarray([0.1, 0.2]), np.asarray([1.0, 1.0]))
    message = str(info.value)
    assert "taylax_test_unsupported" in message
    assert "register_rule" in message


def _not_monoid(a, b):
    return a + 0.5 * b  # no standard monoid: binds the general reduce_window


_FLOAT_CANDIDATES = [
    ("random_gamma", lambda x: jax.random.gamma(jax.random.key(0), x)),
    ("reduce_window", lambda x: lax.reduce_window(x, 0.0, _not_monoid, (2,), (1,), "VALID")),
]


@pytest.mark.parametrize("name, f", _FLOAT_CANDIDATES, ids=[n for n, _ in _FLOAT_CANDIDATES])
def test_unsupported_jax_primitive_raises_helpful_error(name, f):
    if any(p.name == name for p in taylor_rules):
        pytest.skip(f"'{name}' has a rule now: pick another unsupported primitive")
    with pytest.raises(NotImplementedError) as info:
        taylax.derivatives(f, 2)(np.asarray([0.5, 1.5]), np.asarray([1.0, -1.0]))
    assert name in str(info.value)
    assert "register_rule" in str(info.value)


def test_primitive_without_series_input_needs_no_rule():
    # The unsupported primitive only ever sees a constant: no rule is needed.
    prim = _new_primitive("taylax_test_constant_only", lambda x: 2.0 * x)
    c = np.asarray([0.1, 0.2])

    def f(x):
        return jnp.sin(x) * prim.bind(c)

    x, v = np.asarray([0.3, -0.4]), np.asarray([1.0, 0.5])
    expected = oracle(lambda x: jnp.sin(x) * (2.0 * c), x, v, 4)
    assert_series_close(taylax.derivatives(f, 4)(x, v), expected)


def test_register_rule_for_custom_primitive():
    cube_p = _new_primitive("taylax_test_cube", lambda x: x * x * x)

    @taylax.register_rule(cube_p)
    def _cube_rule(order, x):
        # Cauchy product x * x * x, truncated at `order`.
        c = x.coeffs
        c = jnp.concatenate([c, jnp.zeros((order + 1 - c.shape[0],) + c.shape[1:], c.dtype)])
        sq = jnp.stack([sum(c[i] * c[k - i] for i in range(k + 1)) for k in range(order + 1)])
        cube = jnp.stack([sum(sq[i] * c[k - i] for i in range(k + 1)) for k in range(order + 1)])
        return taylax.Series(cube)

    try:
        assert cube_p in taylor_rules

        def f(x):
            return jnp.sin(cube_p.bind(x))

        x, v = np.asarray([0.3, -1.2]), np.asarray([0.7, 1.1])
        actual = taylax.derivatives(f, 5)(x, v)
        assert_series_close(actual, oracle(lambda x: jnp.sin(x**3), x, v, 5))

        cube_only = taylax.derivatives(cube_p.bind, 5)(x, v)
        closed_form = np.stack([x**3, 3 * x**2 * v, 6 * x * v**2, 6 * v**3, 0 * x, 0 * x])
        assert_series_close(cube_only, closed_form)
    finally:
        taylor_rules.pop(cube_p, None)


def test_register_rule_rejects_non_primitives():
    with pytest.raises(TypeError):
        taylax.register_rule("sin")


# --------------------------------------------------------------------------------------------
# Bad input.
# --------------------------------------------------------------------------------------------


def test_negative_order_raises_value_error_naming_order():
    with pytest.raises(ValueError, match="order"):
        taylax.derivatives(jnp.sin, -1)(np.float64(0.3))


@pytest.mark.parametrize("order", [2.5, 2.0, "3", None])
def test_non_integer_order_raises_type_error(order):
    with pytest.raises(TypeError, match="order"):
        taylax.derivatives(jnp.sin, order)(np.float64(0.3))


def test_numpy_integer_order_is_accepted():
    x = np.float64(0.3)
    assert_series_close(taylax.derivatives(jnp.sin, np.int64(3))(x), oracle(jnp.sin, x, None, 3))


def test_order_zero_is_the_primal():
    x = np.asarray([0.3, 1.2])
    out = taylax.derivatives(jnp.sin, 0)(x, np.ones(2))
    assert out.shape == (1, 2)
    np.testing.assert_allclose(out[0], np.sin(x), rtol=1e-15)


@pytest.mark.parametrize("x", [np.int32(2), np.arange(3), True])
def test_integer_input_raises_type_error(x):
    with pytest.raises(TypeError):
        taylax.derivatives(jnp.sin, 2)(x)


def test_non_scalar_input_without_direction_raises_value_error_naming_v():
    with pytest.raises(ValueError, match=r"\bv\b"):
        taylax.derivatives(jnp.sin, 2)(np.asarray([0.1, 0.2]))


def test_direction_shape_mismatch_raises():
    with pytest.raises((ValueError, TypeError)):
        taylax.derivatives(jnp.sin, 2)(np.asarray([0.1, 0.2]), np.ones(3))


def test_taylor_returns_normalized_coefficients():
    x, v = np.asarray([0.3, -0.8]), np.asarray([1.0, 0.5])
    primal, coeffs = taylax.taylor(jnp.exp, 4)(x, v)
    derivs = oracle(jnp.exp, x, v, 4)
    factorials = np.array([1.0, 1.0, 2.0, 6.0, 24.0])[:, None]
    assert coeffs.shape == (4, 2)
    assert_series_close(np.asarray(primal)[None], derivs[:1])
    assert_series_close(np.asarray(coeffs), derivs[1:] / factorials[1:])


def test_jet_matches_jax_experimental_jet():
    from jax.experimental import jet as jax_jet

    def f(x):
        return jnp.sin(x) * jnp.exp(x)

    primals = (np.asarray([0.3, -0.8]),)
    series = ([np.asarray([1.0, 0.5]), np.asarray([0.2, -0.1]), np.asarray([0.3, 0.0])],)
    p_ref, s_ref = jax_jet.jet(f, primals, series)
    p_out, s_out = taylax.jet(f, primals, series)
    assert_series_close(np.asarray(p_out)[None], np.asarray(p_ref)[None])
    assert_series_close(np.stack(s_out), np.stack(s_ref))


def test_derivatives_under_jit_matches():
    x, v = np.asarray([0.3, -0.8]), np.asarray([1.0, 0.5])
    f = jax.jit(taylax.derivatives(jnp.tanh, 5))
    assert_series_close(f(x, v), oracle(jnp.tanh, x, v, 5))
