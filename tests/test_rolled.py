"""Unrolled loops rolled back into `lax.scan` before a long pass (`taylax._rolled`)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taylax
from reference import all_equations, nested_jvp_derivatives, rk4_unrolled, xla_cpu_only
from taylax import _compat, _rolled

# The CPU's policy with a budget these loops pass at every order tested; and without rolling.
ROLL = dataclasses.replace(taylax.CPU, name="cpu-roll", budget=50, roll_past=50, roll_min_saved=8)
NO_ROLL = dataclasses.replace(ROLL, name="cpu-no-roll", roll_past=None)


def rk4(y, steps=40):
    """`reference.rk4_unrolled` over 40 steps: each trip's `sin` reads literals of its own."""
    return rk4_unrolled(y, steps)


def lorenz(y, steps=12):
    def field(u):
        return jnp.stack([10.0 * (u[1] - u[0]), u[0] * (28.0 - u[2]) - u[1], u[0] * u[1] - u[2]])

    u = y * jnp.ones(3, y.dtype)
    for _ in range(steps):
        k1 = field(u)
        k2 = field(u + 0.005 * k1)
        u = u + 0.01 * k2
    return u[0] + u[2]


def oscillator(y, steps=30):
    """A pytree state (position, velocity) and a closed-over array read by every trip."""
    weights = jnp.asarray([1.0, 0.5])
    x, v = y, jnp.zeros_like(y)
    for _ in range(steps):
        x, v = x + 0.1 * v, v - 0.1 * jnp.sin(x) * weights[0] - 0.01 * v * weights[1]
    return x * v


@jax.jit
def _step(y):
    return y + 0.1 * jnp.tanh(y) * jnp.cos(y)


def jitted_steps(y, steps=30):
    """Each trip a call of the same jitted function: one `jit` equation per trip."""
    for _ in range(steps):
        y = _step(y)
    return y


def every_state(y, steps=60):
    """Values of every trip read after the loop: the scan stacks them."""
    states = []
    for _ in range(steps):
        y = y * jnp.cos(y) + 0.3
        states.append(y)
    return jnp.sum(jnp.stack(states[::3])) + jnp.exp(-y)


def two_back(y, steps=40):
    """Each value reads the last two: a trip of two steps carries both."""
    previous = jnp.sin(y)
    for _ in range(steps):
        y, previous = 0.5 * jnp.tanh(y) + 0.4 * previous, y
    return y


def complex_rotation(y, steps=40):
    z = y * (1.0 + 0.5j)
    for _ in range(steps):
        z = z + 0.05j * z - 0.01 * z * z
    return jnp.real(z * jnp.conj(z))


LOOPS = [rk4, lorenz, oscillator, jitted_steps, every_state, two_back, complex_rotation]


def _rolled_once(f, *args, min_saved=16):
    jaxpr, consts = _compat.closed_parts(jax.make_jaxpr(f)(*args))
    return jaxpr, consts, _rolled.rolled(jaxpr, len(consts), min_saved)


def _scans(jaxpr) -> int:
    return sum(1 for e in all_equations(jaxpr) if e.primitive is _compat.scan_p)


@pytest.mark.parametrize("f", LOOPS, ids=lambda f: f.__name__)
def test_a_rolled_loop_computes_what_the_unrolled_one_does(f):
    y = jnp.float64(0.7)
    jaxpr, consts, closed = _rolled_once(f, y)
    assert closed is not None, f"no loop found in {f.__name__}"
    assert _scans(closed) == 1
    top = _compat.open_jaxpr(closed).eqns
    assert len(top) < len(jaxpr.eqns) / 3, (len(top), len(jaxpr.eqns))
    got = _compat.jaxpr_as_fun(closed)(*consts, y)
    np.testing.assert_allclose(got, [f(y)], rtol=1e-14, atol=1e-14)


def test_a_rolled_float32_loop_stays_float32():
    # Weakly typed literals (the step size, one `sin(t)` per trip) keep the state's dtype.
    y = jnp.float32(0.7)
    jaxpr, consts, closed = _rolled_once(rk4, y)
    (got,) = _compat.jaxpr_as_fun(closed)(*consts, y)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, rk4(y), rtol=1e-6)


def test_a_program_without_repeats_is_left_alone():
    f = lambda y: jnp.sin(y) * jnp.exp(y) + jnp.tanh(jnp.log1p(y * y))  # noqa: E731
    assert _rolled_once(f, 0.5)[2] is None
    # A short repeat saves fewer equations than asked for.
    g = lambda y: jnp.sin(jnp.sin(jnp.sin(y)))  # noqa: E731
    assert _rolled_once(g, 0.5, min_saved=16)[2] is None
    assert _rolled_once(g, 0.5, min_saved=2)[2] is not None


SHORT_LOOPS = {
    "rk4": functools.partial(rk4, steps=6),
    "oscillator": functools.partial(oscillator, steps=10),
    "two_back": functools.partial(two_back, steps=12),
    "every_state": functools.partial(every_state, steps=15),
}


@pytest.mark.parametrize("name", sorted(SHORT_LOOPS))
@pytest.mark.parametrize("order", [2, 5])
def test_a_pass_past_the_budget_rolls_the_loop_and_agrees(name, order):
    f = SHORT_LOOPS[name]
    y = jnp.asarray([0.7, -0.4])
    v = jnp.asarray([1.0, 0.5])
    g = taylax.derivatives(f, order)
    with taylax.emission_policy(ROLL):
        rolled = jax.make_jaxpr(g)(y, v)
        got = g(y, v)
    with taylax.emission_policy(NO_ROLL):
        unrolled = jax.make_jaxpr(g)(y, v)
        expected = g(y, v)
    assert _scans(rolled) >= 1
    size = lambda jaxpr: sum(1 for _ in all_equations(jaxpr))  # noqa: E731
    assert size(rolled) < size(unrolled) / 2, (size(rolled), size(unrolled))
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-13)
    if order == 2:  # nested jvp of a long unrolled loop compiles slowly past order 2
        np.testing.assert_allclose(
            got, nested_jvp_derivatives(f, y, v, order), rtol=1e-11, atol=1e-13
        )


def test_a_rolled_pass_does_not_grow_with_the_trips():
    # Issue 43: the program of a long unrolled loop is the size of one trip (so XLA's
    # kernels span one trip), whatever the number of trips.
    y = jnp.float64(0.8)
    sizes = {}
    with taylax.emission_policy(taylax.CPU):
        for steps in (40, 80, 160):
            jaxpr = jax.make_jaxpr(taylax.derivatives(lambda y, s=steps: rk4(y, s), 4))(y)
            sizes[steps] = sum(1 for _ in all_equations(jaxpr))
    assert sizes[40] == sizes[80] == sizes[160], sizes


@xla_cpu_only
def test_the_compiled_program_does_not_grow_with_the_trips():
    # Issue 43's structural check on the compiled HLO: the instructions XLA:CPU fuses do
    # not grow with the steps (they grew exponentially in run time, unrolled).
    def instructions(steps):
        f = lambda y: rk4(y, steps)  # noqa: E731
        with taylax.emission_policy(taylax.CPU):
            fn = jax.jit(jax.vmap(taylax.derivatives(f, 4)))
            text = fn.lower(jnp.linspace(0.5, 1.0, 8)).compile().as_text()
        return sum(1 for line in text.splitlines() if " = " in line)

    assert instructions(80) == instructions(40)


def test_a_rolled_pass_is_differentiable_and_vmappable():
    def loss(w, y):
        return taylax.derivatives(lambda s: oscillator(w * s, steps=6), 3)(y)[2]

    y = jnp.float64(0.6)
    with taylax.emission_policy(ROLL):
        assert _scans(jax.make_jaxpr(loss)(0.9, y)) >= 1
        got = jax.grad(loss)(0.9, y)
        ys = jnp.linspace(0.2, 0.9, 3)
        short = SHORT_LOOPS["rk4"]
        batched = jax.jit(jax.vmap(taylax.derivatives(short, 3)))(ys)
        one_by_one = jnp.stack([taylax.derivatives(short, 3)(y) for y in ys])
    with taylax.emission_policy(NO_ROLL):
        expected = jax.grad(loss)(0.9, y)
    np.testing.assert_allclose(got, expected, rtol=1e-11)
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-12)


def test_the_gpu_policy_does_not_roll():
    # Measured on the CPU only (docs/EMISSION.md, "Rolled loops").
    assert taylax.GPU.roll_past is None
    with taylax.emission_policy("gpu"):
        jaxpr = jax.make_jaxpr(taylax.derivatives(rk4, 4))(jnp.float64(0.8))
    assert _scans(jaxpr) == 0


def test_a_program_within_the_budget_is_not_rolled():
    short = lambda y: rk4(y, steps=4)  # noqa: E731
    with taylax.emission_policy(taylax.CPU):
        jaxpr = jax.make_jaxpr(taylax.derivatives(short, 4))(jnp.float64(0.8))
    assert _scans(jaxpr) == 0


_OPS = {
    "sin": lambda a, b: jnp.sin(a),
    "tanh": lambda a, b: jnp.tanh(a),
    "mul": lambda a, b: a * b,
    "add": lambda a, b: a + 0.5 * b,
    "square": lambda a, b: 0.9 * a * a,
    "cos": lambda a, b: jnp.cos(b),
}


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(sorted(_OPS)), st.integers(0, 3), st.integers(0, 3)),
        min_size=1,
        max_size=6,
    ),
    trips=st.integers(2, 12),
    prefix=st.integers(0, 3),
)
def test_random_unrolled_loops_roll_to_the_same_values(ops, trips, prefix):
    """A random step over a state of two values, unrolled: rolled or not, the same values."""

    def step(state):
        values = list(state)
        for name, i, j in ops:
            values.append(_OPS[name](values[i % len(values)], values[j % len(values)]))
        return values[-2] * 0.5, jnp.tanh(values[-1])

    def f(y):
        state = (y, jnp.cos(y))
        for _ in range(prefix):
            state = (state[1], state[0] * 0.3)
        for _ in range(trips):
            state = step(state)
        return state[0] + state[1]

    y = jnp.float64(0.3)
    jaxpr, consts, closed = _rolled_once(f, y, min_saved=2)
    if closed is not None:
        np.testing.assert_allclose(
            _compat.jaxpr_as_fun(closed)(*consts, y), [f(y)], rtol=1e-13, atol=1e-14
        )
