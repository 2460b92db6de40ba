"""Terminating events of `taylax.ode.integrate`, against closed-form event times.

Each test compiles one solve (a few at most), at small orders where the closed form
allows: the compile is most of each test's time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax


def oscillator(t, y, args):
    return jnp.stack([y[1], -y[0]])


def height(t, y, args):
    return y[0]


def test_oscillator_stops_at_pi_over_2_and_later_times_stay_nan():
    # y = cos(t): the first zero is pi / 2, inside the second step (steps about 0.83 long
    # at order 16), so 1.0 and 1.5 are filled from the event's own step.
    ts = jnp.linspace(0.0, 3.0, 7)
    solve = taylax.ode.integrate(oscillator, order=16, event=height)
    sol = jax.jit(solve)(ts, jnp.array([1.0, 0.0]))
    assert bool(sol.event_happened)
    np.testing.assert_allclose(sol.t_event, np.pi / 2, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sol.y_event, [0.0, -1.0], rtol=0, atol=1e-15)
    before = np.asarray(ts) <= np.pi / 2
    assert before.tolist() == [True] * 4 + [False] * 3
    np.testing.assert_allclose(sol.ys[before, 0], np.cos(ts[before]), rtol=0, atol=2e-15)
    np.testing.assert_allclose(sol.ys[before, 1], -np.sin(ts[before]), rtol=0, atol=2e-15)
    assert np.isnan(sol.ys[~before]).all()
    assert int(sol.steps) == 2


def fall(t, y, g):
    return jnp.stack([y[1], -g + 0 * y[0]])


def test_free_fall_and_a_throw_from_the_ground_under_vmap():
    # y'' = -g: a drop from h0 lands at sqrt(2 h0 / g), a throw up at v0 from the ground
    # at 2 v0 / g (the zero at the start is not an event). Order 4 holds the parabola
    # exactly: one step each, so the root is the bisection's alone.
    solve = taylax.ode.integrate(fall, order=4, event=height)
    ts = jnp.array([0.0, 10.0])
    y0 = jnp.array([[10.0, 0.0], [0.0, 5.0]])
    sol = jax.jit(jax.vmap(lambda y: solve(ts, y, 9.81)))(y0)
    expected = [np.sqrt(2 * 10.0 / 9.81), 2 * 5.0 / 9.81]
    np.testing.assert_allclose(sol.t_event, expected, rtol=4e-16)
    np.testing.assert_allclose(sol.y_event[:, 0], 0, atol=1e-14)
    np.testing.assert_allclose(sol.y_event[:, 1], y0[:, 1] - 9.81 * np.array(expected), rtol=1e-15)
    assert sol.event_happened.tolist() == [True, True]
    assert np.isnan(sol.ys[:, 1]).all() and sol.steps.tolist() == [1, 1]


def test_the_landing_times_forward_derivatives():
    # t* = sqrt(2 h0 / g): the implicit function theorem's dt*/dh0 = 1 / sqrt(2 h0 g) and
    # dt*/dg = -t* / (2 g), not the bisection's (whose derivative is zero). One step of
    # order 4 (the parabola exactly): the cheapest `jax.jacfwd` through a solve.
    solve = taylax.ode.integrate(fall, order=4, event=height)
    land = lambda h0, g: solve(jnp.array([0.0, 10.0]), jnp.stack([h0, 0.0]), g).t_event  # noqa: E731
    d_h0, d_g = jax.jit(jax.jacfwd(land, argnums=(0, 1)))(10.0, 9.81)
    np.testing.assert_allclose(d_h0, 1 / np.sqrt(2 * 10.0 * 9.81), rtol=1e-14)
    np.testing.assert_allclose(d_g, -np.sqrt(2 * 10.0 / 9.81) / (2 * 9.81), rtol=1e-14)


def test_decay_crossing_a_threshold_and_forward_derivatives():
    # y' = -a y crosses c at t* = ln(y0 / c) / a: dt*/dy0 = 1 / (a y0),
    # dt*/da = -t* / a, dt*/dc = -1 / (a c), the implicit function theorem's, not the
    # bisection's (whose derivative is zero). Order 14: the derivative through the steps
    # is then good to about 1e-14.
    solve = taylax.ode.integrate(
        lambda t, y, p: -p["a"] * y, order=14, event=lambda t, y, p: y - p["c"]
    )

    def event_time(y0, p):
        t = solve(jnp.array([0.0, 10.0]), y0, p).t_event
        return t, t

    y0, a, c = 2.0, 0.7, 0.3
    (d_y0, d_p), t = jax.jit(jax.jacfwd(event_time, argnums=(0, 1), has_aux=True))(
        y0, {"a": a, "c": c}
    )
    exact = np.log(y0 / c) / a
    np.testing.assert_allclose(t, exact, rtol=5e-14)
    np.testing.assert_allclose(d_y0, 1 / (a * y0), rtol=1e-10)
    np.testing.assert_allclose(d_p["a"], -exact / a, rtol=1e-10)
    np.testing.assert_allclose(d_p["c"], -1 / (a * c), rtol=1e-10)


def test_decay_crossing_a_threshold_reverse_mode():
    # The problem above through `gradients="reverse"`: `jax.grad` of the event time
    # reaches the implicit function theorem's derivative through the event's step,
    # computed again outside the loop, and the backward walk over the steps before it.
    solve = taylax.ode.integrate(
        lambda t, y, p: -p["a"] * y,
        order=14,
        event=lambda t, y, p: y - p["c"],
        gradients="reverse",
    )
    y0, a, c = 2.0, 0.7, 0.3

    def event_time(y0, p):
        return solve(jnp.array([0.0, 10.0]), y0, p).t_event

    d_y0, d_p = jax.jit(jax.grad(event_time, argnums=(0, 1)))(y0, {"a": a, "c": c})
    exact = np.log(y0 / c) / a
    np.testing.assert_allclose(d_y0, 1 / (a * y0), rtol=1e-10)
    np.testing.assert_allclose(d_p["a"], -exact / a, rtol=1e-10)
    np.testing.assert_allclose(d_p["c"], -1 / (a * c), rtol=1e-10)


def damped(t, y, args):
    return jnp.stack([y[1], -args["k"] * y[0] - 0.1 * y[1]])


def _reverse_against_forward(y0, k, ts, batch: bool = False):
    """One loss on the event's time and state and on the saved states (some of them inside
    the event's step, filled from its polynomial): `jax.grad` of the reverse-mode solve
    against `jax.jacfwd` of the forward-mode one, with respect to the initial state, a
    parameter and the times. Both differentiate the same computed solution, so they
    agree to rounding. Returns the reverse-mode solve's solution."""

    def solver(gradients):
        return taylax.ode.integrate(
            damped,
            order=8,
            batch=batch,
            event=lambda t, y, a: y[0] - 0.2,
            event_direction=-1,
            gradients=gradients,
        )

    def loss(gradients):
        solve = solver(gradients)

        def value(y0, k, ts):
            sol = solve(ts, y0, {"k": k})
            on_event = sol.t_event**2 + jnp.sum(sol.y_event**3, 0)
            on_event = jnp.where(sol.event_happened, on_event, 0.0)
            return jnp.sum(on_event) + jnp.nansum(jnp.sin(sol.ys))

        return value

    forward = jax.jit(jax.jacfwd(loss("forward"), argnums=(0, 1, 2)))(y0, k, ts)
    reverse = jax.jit(jax.grad(loss("reverse"), argnums=(0, 1, 2)))(y0, k, ts)
    for f, r in zip(forward, reverse):
        assert np.all(np.isfinite(r))
        np.testing.assert_allclose(r, f, rtol=1e-13, atol=1e-13)
    return solver("reverse")(ts, y0, {"k": k})


@pytest.mark.parametrize("t_end", [3.0, 0.5], ids=["fires", "does-not-fire"])
def test_reverse_mode_equals_forward_mode(t_end):
    # Up to 0.5 the event does not fire.
    ts = jnp.linspace(0.0, t_end, 7)
    sol = _reverse_against_forward(jnp.array([1.0, 0.3]), 1.3, ts)
    assert bool(sol.event_happened) == (t_end == 3.0)


def test_batch_reverse_mode_equals_forward_mode():
    # The same loss over a batch of three trajectories, each with its own parameter: the
    # first two fire at different steps, the third (a slow, weak oscillation) does not.
    # The batch walks back from the most steps any took; each trajectory from its own.
    y0 = jnp.array([[1.0, 0.8, 0.25], [0.3, -0.2, 0.0]])
    k, ts = jnp.array([1.3, 2.1, 0.05]), jnp.linspace(0.0, 3.0, 7)
    sol = _reverse_against_forward(y0, k, ts, batch=True)
    assert sol.event_happened.tolist() == [True, True, False]
    assert len(set(sol.steps.tolist())) == 3


def test_event_direction_forwards_and_backwards_in_time():
    # `event_direction=-1`: cos(t) falling through zero as time increases. From pi
    # forwards, cos rises through zero at 3 pi / 2 (skipped) and falls at 5 pi / 2; from
    # 2 pi backwards the first zero met, 3 pi / 2, is again a rise in time (skipped) and
    # the next, pi / 2, a fall. One vmapped solve, each trajectory its own direction.
    solve = taylax.ode.integrate(oscillator, order=12, event=height, event_direction=-1)
    ts = jnp.array([[np.pi, 3 * np.pi], [2 * np.pi, 0.0]])
    y0 = jnp.array([[-1.0, 0.0], [1.0, 0.0]])
    sol = jax.jit(jax.vmap(solve))(ts, y0)
    np.testing.assert_allclose(sol.t_event, [2.5 * np.pi, 0.5 * np.pi], rtol=1e-11)
    np.testing.assert_allclose(sol.y_event[:, 1], [-1.0, -1.0], rtol=1e-11)


def test_two_roots_inside_one_step_are_found_by_the_samples():
    # 0.99 - cos(t) from t = -0.3 to 0.3 is positive at both ends of every step (order
    # 12 steps about 0.56) and negative between its roots -+arccos(0.99): only the
    # samples inside the step see the first.
    solve = taylax.ode.integrate(oscillator, order=12, event=lambda t, y, a: 0.99 - y[0])
    y0 = jnp.array([np.cos(0.3), np.sin(0.3)])
    sol = jax.jit(solve)(jnp.array([-0.3, 0.3]), y0)
    assert bool(sol.event_happened)
    np.testing.assert_allclose(sol.t_event, -np.arccos(0.99), rtol=1e-10)


def test_no_event_leaves_the_solution_as_it_was():
    field = lambda t, y, a: -y  # noqa: E731
    ts = jnp.linspace(0.0, 2.0, 5)
    plain = jax.jit(taylax.ode.integrate(field, order=8))(ts, jnp.array(1.0))
    watched = taylax.ode.integrate(field, order=8, event=lambda t, y, a: y - 2.0)
    sol = jax.jit(watched)(ts, jnp.array(1.0))
    assert not bool(sol.event_happened)
    assert np.isnan(sol.t_event) and np.isnan(sol.y_event)
    np.testing.assert_array_equal(sol.ys, plain.ys)
    assert int(sol.steps) == int(plain.steps)
    assert plain.t_event is None and plain.y_event is None and plain.event_happened is None


def test_a_batch_stops_each_trajectory_at_its_own_event():
    # y'' = -w^2 y, one frequency per trajectory: cos(w t) is zero at pi / (2 w), which
    # for w = 0.4 lies past the end (t = 3): that one runs to the end.
    def field(t, y, w):
        return jnp.stack([y[1], -(w**2) * y[0]])

    w = jnp.array([1.0, 2.0, 0.4])
    y0 = jnp.stack([jnp.ones(3), jnp.zeros(3)])
    ts = jnp.array([0.0, 1.0, 3.0])
    solve = taylax.ode.integrate(field, order=12, batch=True, event=height)
    sol = jax.jit(solve)(ts, y0, w)
    assert sol.event_happened.tolist() == [True, True, False]
    np.testing.assert_allclose(sol.t_event[:2], np.pi / (2 * w[:2]), rtol=1e-11)
    assert np.isnan(sol.t_event[2]) and np.isnan(sol.y_event[:, 2]).all()
    # Saved: t = 1 only before w = 1's event; t = 3 only on the one that ran to the end.
    np.testing.assert_allclose(sol.ys[1, 0, 0], np.cos(1.0), atol=1e-11)
    assert np.isnan(sol.ys[1:, :, 1]).all() and np.isnan(sol.ys[2, :, 0]).all()
    np.testing.assert_allclose(sol.ys[2, 0, 2], np.cos(0.4 * 3.0), atol=1e-11)


def test_float32():
    # Order 9 at float32's epsilon (1.2e-7): the event time is good to a few ulps of
    # pi / 2 (ulp 1.2e-7), from the steps' rounding and the root's.
    ts = jnp.array([0.0, 3.0], jnp.float32)
    sol = jax.jit(taylax.ode.integrate(oscillator, event=height))(
        ts, jnp.array([1.0, 0.0], jnp.float32)
    )
    assert sol.t_event.dtype == jnp.float32 and sol.y_event.dtype == jnp.float32
    np.testing.assert_allclose(sol.t_event, np.pi / 2, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sol.y_event, [0.0, -1.0], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: taylax.ode.integrate(oscillator, event=1.0), TypeError, "`event` must be a"),
        (
            lambda: taylax.ode.integrate(oscillator, event=height, event_direction=2),
            ValueError,
            "`event_direction` must be 1",
        ),
        (
            lambda: taylax.ode.integrate(oscillator, event_direction=-1),
            ValueError,
            "was given without an `event`",
        ),
        (
            lambda: taylax.ode.integrate(oscillator, event=lambda t, y, a: y)(
                jnp.array([0.0, 1.0]), jnp.array([1.0, 0.0])
            ),
            ValueError,
            r"must return a scalar, got an array of shape \(2,\)",
        ),
        (
            lambda: taylax.ode.integrate(oscillator, event=lambda t, y, a: 1j * y[0])(
                jnp.array([0.0, 1.0]), jnp.array([1.0, 0.0])
            ),
            TypeError,
            "must return a real number",
        ),
        (
            lambda: taylax.ode.integrate(oscillator, event=lambda t, y, a: y[0] > 0)(
                jnp.array([0.0, 1.0]), jnp.array([1.0, 0.0])
            ),
            TypeError,
            "must return a real number",
        ),
        (
            lambda: taylax.ode.integrate(oscillator, batch=True, event=lambda t, y, a: y)(
                jnp.array([0.0, 1.0]), jnp.ones((2, 3))
            ),
            ValueError,
            r"one number per trajectory, shaped like `t` \(3,\)",
        ),
    ],
)
def test_clear_errors(make, error, words):
    with pytest.raises(error, match=words):
        make()
