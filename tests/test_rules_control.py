"""Control-flow Taylor rules (scan, fori_loop, while, cond, switch, callbacks) against nested jvp.

Table-driven like `test_rules_structural.py`: every case feeds the loop or branch a full series
and applies nonlinear functions inside the body, so a carry whose series is wrong after the
first step fails. float64 for all cases, complex128 for a representative case of scan, while
and cond (the complex paths are shared); `taylax.derivatives` at orders 1 and 6 (the order-6
result holds orders 0..6). The RK4 integrator is checked at order 8 w.r.t. its initial state
and its start time, and its emitted program is checked not to grow with the number of steps
or (much) with the order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import io_callback

import taylax
from reference import (
    assert_series_close,
    case_params,
    check_against_oracle,
    direction,
    oracle,
    seeded_rng,
)
from taylax import _compat
from taylax._compat import ClosedJaxpr, Jaxpr, check_jaxpr, subjaxprs
from taylax._count import count_equations, equation_counts

ORDERS = (1, 6)

X3 = np.array([0.3, -0.5, 0.9])
X3_NEG = np.array([-0.4, 0.6, 0.2])  # another while trip count than X3
X23 = np.array([[0.3, -0.5, 0.9], [-0.4, 0.6, 0.2]])  # rows take different branches


class Case(NamedTuple):
    name: str
    fn: Callable
    x: np.ndarray = X3
    complex_ok: bool = False


def _re(x):
    return jnp.real(x)


# ---- scan -------------------------------------------------------------------------------------


def _scan_carry_stacked(x, reverse=False, unroll=1):
    def body(c, xi):
        c = jnp.sin(c) * xi + x[1] * c  # x[1] is a closed-over const with a series
        return c, jnp.exp(c) * xi

    c, ys = lax.scan(body, x[0], x[:2], reverse=reverse, unroll=unroll)
    return jnp.concatenate([c[None], ys])


def _scan_no_xs(x):
    c, ys = lax.scan(lambda c, _: (jnp.cos(c) * c + 0.5, c * c), x, None, length=2)
    return c + jnp.sum(ys, axis=0)


def _scan_mixed_carries(x):
    # A constant carry, a carry of degree 2 (a fixed point below the order), a full series
    # carry and an integer carry, and a constant sequence next to a series one.
    def body(carry, xs):
        k, a, b, c = carry
        w, xi = xs
        return (k + 1, a * 0.9 + w, b + xi * xi, jnp.sin(c) * a + b * k), c * w

    init = (0, jnp.ones((), x.dtype), jnp.zeros((), x.dtype), x[0])
    (k, a, b, c), ys = lax.scan(body, init, (jnp.linspace(0.5, 1.0, 3).astype(x.dtype), x))
    return jnp.stack([a, b, c, *ys]) * k


def _scan_nested(x):
    def inner(c, xi):
        return c * jnp.cos(xi) + xi, c

    def outer(c, row):
        c2, ys = lax.scan(inner, c, row)
        return jnp.sin(c2), ys.sum()

    c, ys = lax.scan(outer, x[0], jnp.stack([x[:2], x[1:] * x[1:]]))
    return jnp.concatenate([c[None], ys])


def _fori_static(x, unroll=1):
    return lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) * (i + 1.0) * 0.5 + x * c, x, unroll=unroll)


def _scan_cond_in_body(x):
    # Each step chooses its branch from the primal of the carry.
    def body(c, xi):
        c = lax.cond(_re(c).sum() > 0.5, lambda c: c * 0.5 - xi, lambda c: jnp.exp(c) * xi, c)
        return c, c[0]

    c, ys = lax.scan(body, x, x)
    return jnp.concatenate([c, ys])


def _loop_remat_and_barrier(x):
    # remat and optimization_barrier inside a scan body and inside a fori_loop body.
    step = jax.checkpoint(lambda c, xi: jnp.sin(c) * jnp.exp(xi * c))
    ys = lax.scan(lambda c, xi: (step(c, xi), c * xi), x[0], x[:2])[1]

    def body(i, c):
        a, b = lax.optimization_barrier((jnp.sin(c), c * ys))
        return a * b + 0.3

    return lax.fori_loop(0, 2, body, x[1:])


# ---- while ------------------------------------------------------------------------------------


def _while_data_dependent(x):
    # The trip count depends on the primal: 2 steps from X3, 3 from X3_NEG (see the test).
    def body(c):
        return c * 1.4 + 0.2 * jnp.sin(c)

    return lax.while_loop(lambda c: jnp.max(jnp.abs(c)) < 2.0, body, x)


def _while_cond_const_series(x):
    # The predicate closes over x[2], which carries a series: only its primal counts.
    def cond(carry):
        i, c = carry
        return i < 1 + (_re(x[2]) > 0)

    # The body also goes through jax.checkpoint (remat inside a while loop).
    step = jax.checkpoint(lambda c: jnp.tanh(c) * x)
    i, c = lax.while_loop(cond, lambda carry: (carry[0] + 1, step(carry[1])), (0, x))
    return c * i


def _fori_traced_trip_count(x):
    n = (jnp.abs(_re(x[0])) * 10).astype(jnp.int32)  # 3 for X3: a while loop, not a scan
    return lax.fori_loop(0, n, lambda i, c: jnp.cos(c) * c + x[1] * i, x)


# ---- cond and switch --------------------------------------------------------------------------


def _cond_mixed_degrees(x):
    # The false branch returns a constant: the result has the true branch's degree. The
    # second call takes the other branch (x[0] and -x[2] have opposite signs below).
    def one(y):
        return lax.cond(
            _re(y[0]) > 0, lambda y: jnp.sin(y) * y, lambda y: jnp.full_like(y, 2.0), jnp.exp(y)
        )

    return one(x) * one(-x[::-1])


def _cond_operands(x):
    # Several operands, one of them constant, and an integer output next to a series.
    def true_fn(a, b, n):
        return a * b, n + 1

    def false_fn(a, b, n):
        return jnp.cos(a) + b, n * 2

    def one(y):
        return lax.cond(_re(y[0]) > 0, true_fn, false_fn, jnp.sin(y), jnp.ones(3, y.dtype), 3)

    (a, n), (b, m) = one(x), one(-x[::-1])
    return a * n + b * m


def _switch_three(x, shift=0):
    branches = [jnp.sin, lambda y: y * y * 3.0, lambda y: jnp.exp(y) - y]
    return lax.switch(jnp.argmax(_re(x)) + shift, branches, x * x)


def _switch_all_branches(x):
    # Rolling x moves its argmax: each branch is taken once, and an out-of-range index clamps.
    taken = [_switch_three(jnp.roll(x, k)) for k in range(3)]
    return jnp.stack([*taken, _switch_three(x, shift=5)])


def _platform_dependent(x):
    # A cond whose index is the lowering platform: its per-platform branch table is kept.
    return lax.platform_dependent(x, cpu=lambda y: jnp.sin(y) * y, default=jnp.cos)


# Its value depends on where it runs, so its oracle runs there too (tests/reference.py).
_platform_dependent.platform_dependent = True


def _vmap_cond_inside(x):
    # A batched predicate: vmap turns the cond into select_n before taylax sees it.
    def row(r):
        return lax.cond(_re(r[0]) > 0, lambda y: jnp.sin(y) * y, lambda y: jnp.exp(y), r)

    return jax.vmap(row)(x)


def _vmap_while_inside(x):
    # Batched predicate: JAX's while keeps looping while any row runs, freezing finished rows.
    return jax.vmap(_while_data_dependent)(x)


# Complex numbers for a representative case of each rule (the complex paths are shared).
CASES = [
    Case("scan_carry_stacked", _scan_carry_stacked, complex_ok=True),
    Case(
        "scan_reverse_unroll",
        lambda x: _scan_carry_stacked(x, reverse=True, unroll=2),
    ),
    Case("scan_length_no_xs", _scan_no_xs),
    Case("scan_mixed_carries", _scan_mixed_carries),
    Case("scan_nested", _scan_nested),
    Case("fori_static", _fori_static),
    Case("scan_cond_in_body", _scan_cond_in_body),
    Case("loop_remat_and_barrier", _loop_remat_and_barrier),
    Case("while_data_dependent", _while_data_dependent, complex_ok=True),
    Case("while_cond_const_series_remat", _while_cond_const_series),
    Case("fori_traced_trip_count", _fori_traced_trip_count),
    Case("cond_both_branches", _cond_mixed_degrees, complex_ok=True),
    Case("cond_operands", _cond_operands),
    Case("switch_all_branches", _switch_all_branches),
    Case("platform_dependent", _platform_dependent),
    Case("vmap_cond_inside", _vmap_cond_inside, X23),
    Case("vmap_while_inside", _vmap_while_inside, X23),
]
_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "duplicate case names"


def _inputs(case: Case, dtype: str):
    x = np.asarray(case.x, dtype=dtype)
    if dtype == "complex128":
        rng = seeded_rng("imag:" + case.name)
        x = x + 1j * np.round(rng.uniform(-0.3, 0.3, size=x.shape), 2)
    return x, direction(case.name, x.shape, dtype)


@pytest.mark.parametrize("name,dtype", case_params(CASES, lambda c: c.complex_ok))
def test_control_rule(name, dtype):
    case = _BY_NAME[name]
    x, v = _inputs(case, dtype)
    check_against_oracle(case.fn, x, v, ORDERS, context=f"{name} [{dtype}]")


def test_while_trip_count_is_data_dependent():
    # Guards the premise of the while_data_dependent case: the trip count follows x.
    def trips(x):
        return lax.while_loop(
            lambda c: jnp.max(jnp.abs(c[1])) < 2.0,
            lambda c: (c[0] + 1, c[1] * 1.4 + 0.2 * jnp.sin(c[1])),
            (0, jnp.asarray(x)),
        )[0]

    assert (int(trips(X3)), int(trips(X3_NEG))) == (2, 3)


# ---- vmap around taylax: the emitted cond/while get a batched predicate -------------------------


def _cond_switch_while(x):
    y = lax.cond(_re(x[0]) > 0, lambda y: jnp.sin(y) * y, lambda y: jnp.exp(y), x)
    z = _switch_three(y)
    return _while_data_dependent(z * 0.5)


def test_vmap_of_taylax_with_batched_predicates():
    xs, vs = X23, direction("vmap_outside", X23.shape, "float64")
    derivs = jax.vmap(taylax.derivatives(_cond_switch_while, 6))(xs, vs)
    for i in range(xs.shape[0]):
        expected = oracle(_cond_switch_while, xs[i], vs[i], 6)
        assert_series_close(np.asarray(derivs)[i], expected, context=f"row {i}")
    # The premise: the rows take different branches, so the predicate really is batched,
    # and vmap of a cond with a batched predicate selects between both branches.
    assert len({bool(r[0] > 0) for r in xs}) == 2
    counts = equation_counts(
        jax.make_jaxpr(jax.vmap(taylax.derivatives(_cond_switch_while, 6)))(xs, vs)
    )
    assert counts["cond"] == 0 and counts["select_n"] > 0 and counts["while"] >= 1


# ---- what the emitted program looks like ------------------------------------------------------


def _eqns(jaxpr, name):
    """Every equation of primitive `name` in `jaxpr`, recursively into sub-jaxprs."""
    found, stack = [], [jaxpr.jaxpr]
    while stack:
        for eqn in stack.pop().eqns:
            if eqn.primitive.name == name:
                found.append(eqn)
            for value in eqn.params.values():
                for v in value if isinstance(value, tuple | list) else (value,):
                    if isinstance(v, ClosedJaxpr):
                        stack.append(v.jaxpr)
                    elif isinstance(v, Jaxpr):
                        stack.append(v)
    return found


def _check_recursively(jaxpr) -> int:
    check_jaxpr(jaxpr)
    return 1 + sum(_check_recursively(getattr(sub, "jaxpr", sub)) for sub in subjaxprs(jaxpr))


@pytest.mark.parametrize(
    "name",
    ["scan_mixed_carries", "scan_reverse_unroll", "while_data_dependent", "vmap_while_inside"]
    + ["fori_traced_trip_count", "cond_operands", "switch_all_branches", "platform_dependent"],
)
def test_emitted_jaxpr_typechecks(name):
    case = _BY_NAME[name]
    x, v = _inputs(case, "float64")
    closed = jax.make_jaxpr(taylax.derivatives(case.fn, 6))(x, v)
    assert _check_recursively(closed.jaxpr) > 2  # the loop or the branches were checked too


def test_scan_carry_degrees_are_a_fixed_point():
    # Order 6 along X3: the constant carry stays unstacked, `b + x*x` keeps degree 2, the
    # carry that multiplies in a series each step gets all 7 coefficients.
    x = jnp.asarray(X3)
    jaxpr = jax.make_jaxpr(taylax.derivatives(_scan_mixed_carries, 6))(x, x)
    (scan,) = [
        e
        for e in _eqns(jaxpr, "scan")
        if e.params["length"] == 3 and _compat.scan_split(e.params)[1] == 4
    ]
    carry_shapes = [v.aval.shape for v in scan.outvars[:4]]
    assert carry_shapes == [(), (), (3,), (7,)]


def test_platform_dependent_cond_keeps_its_platforms():
    x = jnp.asarray(X3)
    jaxpr = jax.make_jaxpr(taylax.derivatives(_platform_dependent, 6))(x, x)
    (cond,) = _eqns(jaxpr, "cond")
    assert cond.params["branches_platforms"] == (("cpu",), None)


def test_loop_program_does_not_depend_on_trip_count():
    def f(n):
        return lambda x: lax.fori_loop(0, n, lambda i, c: jnp.sin(c) * c + x, x)

    x = jnp.asarray(X3)
    counts = {
        n: count_equations(jax.make_jaxpr(taylax.derivatives(f(n), 6))(x, x)) for n in (3, 300)
    }
    assert counts[3] == counts[300]


# ---- RK4 in fori_loop: order 8 w.r.t. the initial state and the start time ------------------


def _pendulum(t, y):
    return jnp.stack([y[1], -jnp.sin(y[0]) + 0.5 * jnp.cos(t)])


def rk4(y0, t0, steps: int, h: float = 0.1):
    """Classic RK4 for the forced pendulum, as one fori_loop over the steps."""

    def step(i, carry):
        y, t = carry
        k1 = _pendulum(t, y)
        k2 = _pendulum(t + h / 2, y + h / 2 * k1)
        k3 = _pendulum(t + h / 2, y + h / 2 * k2)
        k4 = _pendulum(t + h, y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h

    return lax.fori_loop(0, steps, step, (y0, t0))[0]


def _rk4_packed(steps):
    # The oracle takes one array: x = (y0[0], y0[1], t0).
    return lambda x: rk4(x[:2], x[2], steps)


RK4_X = np.array([0.4, -0.2, 0.3])
_RK4_2 = _rk4_packed(2)  # two steps: the second one starts from a full series


@pytest.mark.parametrize(
    "wrt,v", [("y0", np.array([0.7, -0.3, 0.0])), ("t0", np.array([0.0, 0.0, 1.0]))]
)
def test_rk4_order8(wrt, v):
    check_against_oracle(_RK4_2, RK4_X, v, (1, 8), context=f"RK4 w.r.t. {wrt}")


def test_rk4_pytree_input_matches_packed():
    y0, t0 = jnp.asarray(RK4_X[:2]), jnp.asarray(RK4_X[2])
    v = (jnp.array([0.7, -0.3]), jnp.asarray(1.0))
    tree = taylax.derivatives(lambda a: rk4(a[0], a[1], 2), 8)((y0, t0), v)
    packed = taylax.derivatives(_RK4_2, 8)(RK4_X, np.array([0.7, -0.3, 1.0]))
    assert_series_close(tree, packed, rtol=1e-13)


def test_rk4_program_size():
    # The loop body is traced once: the program does not depend on the number of steps.
    # Above the unrolled orders the recurrences (sin of a full series) run by blocks of
    # rows, so the program is nearly flat in the order (a few equations per order).
    x = jnp.asarray(RK4_X)
    v = jnp.array([0.7, -0.3, 1.0])
    counts = {
        (steps, order): count_equations(
            jax.make_jaxpr(taylax.derivatives(_rk4_packed(steps), order))(x, v)
        )
        for steps, order in [(100, 4), (1000, 4), (100, 16), (1000, 16), (100, 40)]
    }
    for order in (4, 16):
        assert counts[100, order] == counts[1000, order], counts
    assert counts[100, 40] - counts[100, 16] <= 2 * (40 - 16), counts


# ---- host callbacks -----------------------------------------------------------------------------


def _host_sin(x):
    return np.sin(x)


def _pure_sin(x):
    return jax.pure_callback(_host_sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def _io_sin(x):
    return io_callback(_host_sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


@pytest.mark.parametrize("fn,api", [(_pure_sin, "jax.pure_callback"), (_io_sin, "io_callback")])
def test_callback_on_series_raises(fn, api):
    with pytest.raises(ValueError, match=rf"(?s){api}.*_host_sin.*jax.custom_jvp"):
        taylax.derivatives(lambda x: fn(x) * x, 3)(X3, X3)


def test_callback_inside_loop_raises():
    with pytest.raises(ValueError, match="jax.pure_callback"):
        taylax.derivatives(lambda x: lax.fori_loop(0, 2, lambda i, c: _pure_sin(c), x), 2)(X3, X3)


def test_callback_on_constants_runs():
    # The callback sees no series (its input does not depend on x): it runs on the host.
    f = lambda x: _pure_sin(jnp.linspace(0.0, 1.0, 3)) * jnp.sin(x)  # noqa: E731
    check_against_oracle(f, X3, direction("cb_const", (3,), "float64"), 6)


@jax.custom_jvp
def _sin_via_host(x):
    return _pure_sin(x)


@_sin_via_host.defjvp
def _sin_via_host_jvp(primals, tangents):
    # The derivative rule calls back into custom_jvp functions, so every order is defined.
    (x,), (t,) = primals, tangents
    return _sin_via_host(x), _cos_via_host(x) * t


@jax.custom_jvp
def _cos_via_host(x):
    return jax.pure_callback(np.cos, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


@_cos_via_host.defjvp
def _cos_via_host_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _cos_via_host(x), -_sin_via_host(x) * t


def test_callback_wrapped_in_custom_jvp_works():
    # The workaround the error message names: it matches nested jvp at every order.
    f = lambda x: _sin_via_host(x * x) * x  # noqa: E731
    check_against_oracle(f, X3, direction("cb_custom_jvp", (3,), "float64"), ORDERS)
