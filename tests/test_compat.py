"""`taylax._compat` across JAX versions: what runs here (JAX 0.10.x) and what is simulated.

JAX 0.11 cannot be installed here, so its layouts are exercised through stand-ins built
from its source (docs/JAX_VERSIONS.md): the flat-tree descriptors that replaced `scan`'s
`num_consts`/`num_carry`, a jaxpr whose constants are leading inputs (`all_invars`), and
primitives (`log2`, `one_minus_square`) that the running JAX may or may not define.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.interpreters import mlir

import taylax
from reference import assert_series_close, check_against_oracle
from taylax import _compat
from taylax._interpret import taylor_rules
from taylax._rules._arithmetic import one_minus_square_rule
from taylax._rules._transcendental import log2_rule
from taylax._series import Series


class _FlatTree:
    """A stand-in for JAX 0.11's `jax._src.flattree.FlatTree` of a scan's operands:
    `unpack()` gives its groups; iterating it (or a group) gives its leaves."""

    def __init__(self, *groups):
        self.groups = groups

    def unpack(self):
        return self.groups

    def __iter__(self):
        for group in self.groups:
            yield from group


def _scan_eqn(fn, *args):
    closed = jax.make_jaxpr(fn)(*args)
    (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive is _compat.scan_p]
    return eqn


def _mixed_scan(c, xs):
    w = jnp.cos(c)  # closed over by the body: a constant operand

    def body(carry, x):
        a, b = carry
        return (a * x + w, jnp.sin(b) * x), a * b

    return lax.scan(body, (c, c * 2), xs)


def _both_styles(eqn) -> tuple[dict, dict]:
    """`eqn`'s parameters with its operand split spelled as JAX <= 0.10 and as JAX 0.11 do."""
    num_consts, num_carry = _compat.scan_split(eqn.params)
    num_xs = len(eqn.invars) - num_consts - num_carry
    num_ys = len(eqn.outvars) - num_carry
    rest = {k: v for k, v in eqn.params.items() if k not in _compat.SCAN_LAYOUT_PARAMS}
    old = dict(rest, num_consts=num_consts, num_carry=num_carry)
    new = dict(
        rest,
        ft_in=_FlatTree([None] * num_consts, [None] * num_carry, [None] * num_xs),
        ft_out=_FlatTree([None] * num_carry, [None] * num_ys),
    )
    return old, new


def test_scan_split_reads_both_parameter_styles():
    eqn = _scan_eqn(_mixed_scan, 0.3, jnp.linspace(0.1, 0.5, 4))
    num_consts, num_carry = _compat.scan_split(eqn.params)
    # One closed-over constant (w), two carries, one scanned input (in either JAX).
    assert (num_consts, num_carry, len(eqn.invars)) == (1, 2, 4)
    old, new = _both_styles(eqn)
    assert _compat.scan_split(old) == _compat.scan_split(new) == (1, 2)
    # A group may be a nested tree (JAX 0.11's scan jvp pairs primals with tangents in each).
    nested = dict(new, ft_in=_FlatTree([None], _FlatTree([None], [None]), [None]))
    assert _compat.scan_split(nested) == (1, 2)


def test_scan_rule_takes_both_parameter_styles():
    xs = jnp.linspace(0.1, 0.5, 4)
    eqn = _scan_eqn(_mixed_scan, 0.3, xs)
    old, new = _both_styles(eqn)
    c = np.array([0.3, 0.7, 0.2, -0.1])  # a series in the constant and the carries
    series = [Series(jnp.asarray(c * (i + 1))) for i in range(3)] + [Series.constant(xs)]
    rule = taylor_rules[_compat.scan_p]
    for a, b in zip(rule(3, *series, **old), rule(3, *series, **new), strict=True):
        np.testing.assert_array_equal(a.coeffs, b.coeffs)


class _MergedJaxpr:
    """A stand-in for a JAX >= 0.11 jaxpr traced with constants whose values it was not
    given: after 0.11.0 these are its leading `all_invars` (and `constvars` is empty)."""

    def __init__(self, jaxpr):
        self.all_invars = [*jaxpr.constvars, *jaxpr.invars]
        self.constvars, self.invars = [], self.all_invars


def test_input_vars_splits_by_the_number_of_constants():
    w = jnp.arange(3.0)
    closed = jax.make_jaxpr(lambda x: jnp.sin(x) * w)(jnp.ones(3))
    jaxpr, consts = _compat.closed_parts(closed)
    assert len(consts) == 1
    assert _compat.input_vars(jaxpr, len(consts)) == (jaxpr.constvars, jaxpr.invars)
    merged = _MergedJaxpr(jaxpr)
    assert _compat.input_vars(merged, len(consts)) == (jaxpr.constvars, jaxpr.invars)


def test_closed_and_open_jaxprs():
    closed = jax.make_jaxpr(jnp.sin)(1.0)
    jaxpr = _compat.open_jaxpr(closed)
    assert _compat.is_jaxpr(closed) and _compat.is_jaxpr(jaxpr)
    assert _compat.is_closed_jaxpr(closed)
    assert _compat.open_jaxpr(jaxpr) is jaxpr
    assert _compat.closed_parts(closed) == (jaxpr, closed.consts)
    assert not _compat.is_jaxpr(object())
    if not _compat.JAXPR_HOLDS_CONSTS:  # JAX <= 0.10: two classes
        assert not _compat.is_closed_jaxpr(jaxpr)


def test_find_primitive():
    assert _compat.find_primitive("sin") is lax.sin_p
    assert _compat.find_primitive("no_such_primitive") is None


def _stand_in(name: str, fn):
    """A primitive named `name` computing `fn` elementwise, as a newer JAX might define it."""
    prim = _compat.Primitive(name)
    prim.def_impl(fn)
    prim.def_abstract_eval(lambda x: _compat.shaped_array(x.shape, x.dtype))
    mlir.register_lowering(prim, mlir.lower_fun(fn, multiple_results=False))
    return prim


_LOG2 = _stand_in("log2", lambda x: jnp.log(x) / jnp.log(2.0).astype(x.dtype))
_ONE_MINUS_SQUARE = _stand_in("one_minus_square", lambda x: 1 - x * x)
taylax.register_rule(_LOG2)(log2_rule(_LOG2))
taylax.register_rule(_ONE_MINUS_SQUARE)(one_minus_square_rule(_ONE_MINUS_SQUARE))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_log2_rule(dtype):
    x = np.array([0.4, 1.3, 2.7], dtype)
    if dtype == np.complex128:
        x = x + np.array([0.3j, -0.7j, 0.2j])
    v = np.array([0.5, -1.1, 0.8], dtype)
    check_against_oracle(_LOG2.bind, x, v, (1, 2, 6), per_point=True, reference=jnp.log2)


def test_one_minus_square_rule():
    x = np.array([-1.3, 0.2, 0.9])
    v = np.array([0.5, -1.1, 0.8])
    reference = lambda x: 1 - x * x  # noqa: E731
    check_against_oracle(
        _ONE_MINUS_SQUARE.bind, x, v, (1, 2, 6), per_point=True, reference=reference
    )
    # The primal is the primitive's own value.
    out = taylax.derivatives(_ONE_MINUS_SQUARE.bind, 2)(x, v)
    assert_series_close(np.asarray(out)[0], 1 - x * x)
