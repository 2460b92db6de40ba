"""The state's coefficients as rows apart (`EmissionPolicy.ode_rows_max_state`): the
same solutions as the stacked state, with no stacked coefficients in the step."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX

ROWS = dataclasses.replace(taylax.CPU, name="cpu-rows", ode_rows_max_state=8)


def pendulum(t, y, args):
    return jnp.stack([y[1], -jnp.sin(y[0])])


def arenstorf(t, s, args, mu=0.012277471):
    # Powers, products and sums: the recurrences whose divisions the rows write as
    # products with a reciprocal.
    x, y, vx, vy = s
    d1 = ((x + mu) ** 2 + y**2) ** -1.5
    d2 = ((x - 1 + mu) ** 2 + y**2) ** -1.5
    ax = x + 2 * vy - (1 - mu) * (x + mu) * d1 - mu * (x - 1 + mu) * d2
    ay = y - 2 * vx - (1 - mu) * y * d1 - mu * y * d2
    return jnp.stack([vx, vy, ax, ay])


def quotients(t, y, args):
    # A quotient (its denominator a function of the time), a logarithm and a power.
    velocity = y[1] / (1.5 + jnp.cos(t))
    return jnp.stack([velocity, -jnp.log(2.0 + y[0] ** 2) + (1.0 + y[1] ** 2) ** -1.5])


ARENSTORF_Y0 = [0.994, 0.0, 0.0, -2.00158510637908252240537862224]
CASES = [
    (pendulum, [2.5, 0.0], 10.0),
    (arenstorf, ARENSTORF_Y0, 2.0),
    (quotients, [0.3, -0.2], 12.0),
]


def solve_both(field, ts, y0, **options):
    out = []
    for policy in (taylax.CPU, ROWS):
        with taylax.emission_policy(policy):
            out.append(jax.jit(taylax.ode.integrate(field, order=8, **options))(ts, y0))
    return out


@pytest.mark.parametrize("field, y0, t_end", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_rows_take_the_same_steps_to_the_same_states(field, y0, t_end):
    # Many saved times, out of order and several per step: the rows' steps that save
    # compute their coefficients again (`_saving_again`); the others do not save.
    ts = jnp.concatenate([jnp.zeros(1), jax.random.permutation(jax.random.key(0), 33) * t_end / 32])
    stacked, rows = solve_both(field, ts, jnp.asarray(y0))
    assert int(rows.steps) == int(stacked.steps) > 4
    np.testing.assert_allclose(rows.ys, stacked.ys, rtol=1e-12, atol=1e-12)


def test_rows_keep_forward_sensitivities():
    ts = jnp.array([0.0, 3.0])
    ends = []
    for policy in (taylax.CPU, ROWS):
        with taylax.emission_policy(policy):
            solve = taylax.ode.integrate(pendulum, order=6)
            ends.append(
                jax.jit(jax.jacfwd(lambda a, solve=solve: solve(ts, jnp.stack([a, 0.0])).ys[-1]))(
                    1.2
                )
            )
    np.testing.assert_allclose(ends[1], ends[0], rtol=1e-11)


def test_rows_under_vmap():
    ts = jnp.array([0.0, 3.0])
    starts = jnp.stack([jnp.linspace(0.5, 2.5, 5), jnp.zeros(5)], axis=1)
    ends = []
    for policy in (taylax.CPU, ROWS):
        with taylax.emission_policy(policy):
            solve = taylax.ode.integrate(pendulum, order=6)
            ends.append(jax.jit(jax.vmap(lambda y, solve=solve: solve(ts, y).ys[-1]))(starts))
    np.testing.assert_allclose(ends[1], ends[0], rtol=1e-12, atol=1e-13)


def test_complex_states_hold_their_real_rows_apart():
    ts = jnp.linspace(0.0, 4.0, 5)
    stacked, rows = solve_both(lambda t, y, a: 1j * y - 0.1 * y**2, ts, jnp.array(0.5 + 0.2j))
    np.testing.assert_allclose(rows.ys, stacked.ys, rtol=1e-12)


def _loop_eqns(closed):
    """The equations of the stepping loop's body, outside the branches inside it."""
    for eqn in closed.jaxpr.eqns:
        if eqn.primitive.name == "while":
            return jex.open_jaxpr(eqn.params["body_jaxpr"]).eqns
    raise AssertionError("no loop")


def test_the_step_holds_no_stacked_coefficients():
    # The step's coefficients `(order + 1, n)`: stacked under the CPU policy, never
    # built with rows apart (a stack of every coefficient is what XLA:CPU recomputes
    # element by element).
    ts, y0 = jnp.array([0.0, 1.0]), jnp.asarray(ARENSTORF_Y0)
    shapes, names = {}, {}
    for policy in (taylax.CPU, ROWS):
        with taylax.emission_policy(policy):
            closed = jax.make_jaxpr(taylax.ode.integrate(arenstorf, order=8))(ts, y0)
        shapes[policy.name] = {v.aval.shape for e in _loop_eqns(closed) for v in e.outvars}
        names[policy.name] = {e.primitive.name for e in _loop_eqns(closed)}
    assert (9, 4) in shapes["cpu"]
    assert (9, 4) not in shapes["cpu-rows"]
    # Only the rows save in a branch of their own, which steps that save take.
    assert "cond" in names["cpu-rows"] and "cond" not in names["cpu"]


@pytest.mark.parametrize("kind", ["batch", "event", "too many rows"])
def test_rows_stay_stacked_where_they_do_not_apply(kind):
    # A batch (`batch=True`), a solve with an event (whose watch reads the stack) and a
    # state past `ode_rows_max_state` emit what the CPU policy emits.
    ts = jnp.array([0.0, 1.0])
    options, y0 = {}, jnp.array([1.0, 0.5])
    if kind == "batch":
        options, y0 = {"batch": True}, jnp.ones((2, 3))
    elif kind == "event":
        options = {"event": lambda t, y, a: y[0] - 0.5}
    else:
        y0 = jnp.ones(9)
    field = lambda t, y, a: -jnp.sin(y)  # noqa: E731
    programs = []
    for policy in (taylax.CPU, ROWS):
        with taylax.emission_policy(policy):
            programs.append(
                str(jax.make_jaxpr(taylax.ode.integrate(field, order=6, **options))(ts, y0))
            )
    assert programs[0] == programs[1]
