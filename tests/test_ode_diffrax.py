"""`taylax.ode.Taylor`: the Taylor method as a diffrax solver, against closed forms.

diffrax is optional: every test here skips without it.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax

diffrax = pytest.importorskip("diffrax")
optx = pytest.importorskip("optimistix")  # diffrax needs it: its root finders


def solve(field, order, t0, t1, y0, args=None, *, tol=None, dt0=None, **kwargs):
    """`diffrax.diffeqsolve` with `taylax.ode.Taylor(order)`: a PID controller at
    `rtol = atol = tol`, or constant steps of `dt0`."""
    controller = (
        diffrax.ConstantStepSize() if tol is None else diffrax.PIDController(rtol=tol, atol=tol)
    )
    return diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        taylax.ode.Taylor(order),
        t0,
        t1,
        dt0,
        y0,
        args,
        stepsize_controller=controller,
        **kwargs,
    )


def oscillator(t, y, args):
    return jnp.stack([y[1], -y[0]])


def kepler(t, y, args):
    r, v = y[:2], y[2:]
    return jnp.concatenate([v, -r / jnp.sum(r * r) ** 1.5])


def kepler_invariants(y):
    """Energy and angular momentum."""
    y = np.asarray(y)
    return 0.5 * np.sum(y[2:] ** 2) - 1 / np.linalg.norm(y[:2]), y[0] * y[3] - y[1] * y[2]


# name: (vector field, args, t0, the exact solution as a function of t).
W = 1.7
CLOSED = {
    "decay": (lambda t, y, a: -y, None, 0.0, lambda t: np.exp(-t)),
    "oscillator": (oscillator, None, 0.0, lambda t: np.stack([np.cos(t), -np.sin(t)], -1)),
    "rotation (complex)": (
        lambda t, y, w: 1j * w * y,
        W,
        0.0,
        lambda t: np.exp(1j * W * t),
    ),
    "time-dependent": (
        lambda t, y, a: jnp.cos(t) * y,
        None,
        0.3,
        lambda t: np.exp(np.sin(t)),
    ),
    "pytree": (
        lambda t, y, a: {"x": y["v"], "v": -a["k"] * y["x"]},
        {"k": W**2},
        0.0,
        lambda t: {"x": np.cos(W * t), "v": -W * np.sin(W * t)},
    ),
}


def _start(exact, t0):
    return jax.tree.map(jnp.asarray, exact(np.asarray(t0)))


@pytest.mark.parametrize("backwards", [False, True], ids=["forwards", "backwards"])
@pytest.mark.parametrize("name", sorted(CLOSED))
def test_closed_forms_at_saved_times_between_steps(name, backwards):
    field, args, t0, exact = CLOSED[name]
    t1 = t0 + 6.0
    if backwards:
        t0, t1 = t1, t0
    ts = np.linspace(t0, t1, 41)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffrax warns about complex states
        sol = jax.jit(
            lambda y0: solve(field, 12, t0, t1, y0, args, tol=1e-11, saveat=diffrax.SaveAt(ts=ts))
        )(_start(exact, t0))
    # More saved times than steps: most are the step polynomials' values between steps.
    steps = int(sol.stats["num_steps"])
    assert 3 <= steps < len(ts)
    # Each step's local error is below the tolerance (1e-11 (1 + |y|)); they add up.
    for got, want in zip(jax.tree.leaves(sol.ys), jax.tree.leaves(exact(ts))):
        assert got.dtype == jnp.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-11 * steps)


def test_float32():
    ts = np.linspace(0.0, 6.0, 13, dtype=np.float32)
    sol = solve(
        oscillator,
        8,
        jnp.float32(0.0),
        jnp.float32(6.0),
        jnp.array([1.0, 0.0], jnp.float32),
        tol=1e-6,
        saveat=diffrax.SaveAt(ts=jnp.asarray(ts)),
    )
    assert sol.ys.dtype == jnp.float32
    exact = np.stack([np.cos(ts.astype(float)), -np.sin(ts.astype(float))], -1)
    np.testing.assert_allclose(sol.ys, exact, rtol=0, atol=5e-6)


@pytest.mark.parametrize("order", range(2, 9))
def test_constant_steps_converge_at_the_order(order):
    # The logistic curve y = 1 / (1 + 4 exp(-t)): halving the step divides the error at
    # t = 2 by 2^K (its log2 within 0.35 of K: a method of order K - 1 or K + 1 fails).
    field = lambda t, y, a: y * (1 - y)  # noqa: E731
    run = jax.jit(lambda dt: solve(field, order, 0.0, 2.0, jnp.array(0.2), dt0=dt).ys[-1])
    exact = 1 / (1 + 4 * np.exp(-2.0))
    coarse, fine = (abs(float(run(h)) - exact) for h in (0.25, 0.125))
    assert abs(np.log2(coarse / fine) - order) < 0.35, (coarse, fine)


E, TOL, KEPLER_ORDER = 0.5, 1e-10, 12
KEPLER_Y0 = jnp.array([1 - E, 0.0, 0.0, np.sqrt((1 + E) / (1 - E))])


def kepler_orbit(ts=None, **controller):
    """One period of Kepler's orbit at e = 0.5, PID controller at `rtol = atol = TOL`."""
    return diffrax.diffeqsolve(
        diffrax.ODETerm(kepler),
        taylax.ode.Taylor(KEPLER_ORDER),
        0.0,
        2 * np.pi,
        None,
        KEPLER_Y0,
        saveat=diffrax.SaveAt(t1=True) if ts is None else diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=TOL, atol=TOL, **controller),
    )


def test_kepler_orbit_with_a_pid_controller():
    sol = kepler_orbit(jnp.linspace(0.0, 2 * np.pi, 9))
    accepted = int(sol.stats["num_accepted_steps"])
    assert 10 < accepted < 100
    # One period: back at the start, energy and angular momentum kept along the way. Each
    # step's local error is below TOL (1 + |y|) <= 3 TOL, and they add up at most linearly.
    bound = 3 * TOL * accepted
    np.testing.assert_allclose(sol.ys[-1], KEPLER_Y0, rtol=0, atol=bound)
    energy, momentum = kepler_invariants(KEPLER_Y0)
    for y in sol.ys:
        e_y, m_y = kepler_invariants(y)
        assert abs(e_y / energy - 1) < bound and abs(m_y / momentum - 1) < bound


def test_the_controllers_exponent_fits_the_estimate():
    # The PID controller scales the step by error^(-1 / error_order), error_order = K:
    # exponents for an estimate of order K / 2 or 4 K take more steps, rejected ones
    # included.
    def tries(sol):
        return int(sol.stats["num_steps"])

    right = tries(kepler_orbit())
    for wrong in (KEPLER_ORDER // 2, 4 * KEPLER_ORDER):
        assert right < tries(kepler_orbit(error_order=wrong)), wrong


def test_steps_scale_with_the_tolerance_as_the_estimates_order():
    # The estimate y_K h^K is O(h^K): tightening the tolerance 1e4-fold shortens the steps
    # by 1e4^(1/K), whatever exponent the controller uses to get there.
    order = 4
    field = lambda t, y, a: -(y**3) + jnp.sin(t)  # noqa: E731
    counts = []
    for tol in (1e-6, 1e-10):
        sol = solve(field, order, 0.0, 40.0, jnp.array(0.8), tol=tol, max_steps=10_000)
        counts.append(int(sol.stats["num_accepted_steps"]))
    ratio = counts[1] / counts[0]
    assert abs(np.log(ratio) / np.log(1e4) - 1 / order) < 0.02, counts


def test_solver_order_is_the_taylor_order():
    term = diffrax.ODETerm(oscillator)
    for order in (1, 5, 20):
        solver = taylax.ode.Taylor(order)
        assert solver.order(term) == order
        # The PID controller's exponent is 1 / error_order: the estimate is O(h^order).
        assert solver.error_order(term) == order
    # HalfSolver's estimate (a step against two half steps) is O(h^(K + 1)).
    assert diffrax.HalfSolver(taylax.ode.Taylor(5)).error_order(term) == 6


def test_dense_output_values_increments_and_derivatives():
    sol = solve(
        oscillator,
        10,
        0.0,
        5.0,
        jnp.array([1.0, 0.0]),
        tol=1e-11,
        saveat=diffrax.SaveAt(dense=True),
    )
    assert int(sol.stats["num_steps"]) > 3
    ts = jnp.array([0.0, 0.37, 1.9, 3.1415, 5.0])
    values = jax.jit(jax.vmap(sol.evaluate))(ts)
    np.testing.assert_allclose(values, np.stack([np.cos(ts), -np.sin(ts)], -1), atol=5e-11)
    slopes = jax.jit(jax.vmap(sol.derivative))(ts)
    np.testing.assert_allclose(slopes, np.stack([-np.sin(ts), -np.cos(ts)], -1), atol=5e-10)
    # The increment between two times, within one step and across steps.
    a, b = jnp.array([0.37, 0.5]), jnp.array([0.38, 4.2])
    increments = jax.jit(jax.vmap(sol.evaluate))(a, b)
    want = np.stack([np.cos(b) - np.cos(a), np.sin(a) - np.sin(b)], -1)
    np.testing.assert_allclose(increments, want, rtol=1e-9, atol=5e-11)


def test_event_located_on_the_step_polynomial():
    # cos(t) crosses zero at pi / 2: the root finder works on the step's polynomial.
    event = diffrax.Event(lambda t, y, args, **kwargs: y[0], root_finder=optx.Newton(1e-13, 1e-13))
    sol = solve(oscillator, 10, 0.0, 5.0, jnp.array([1.0, 0.0]), tol=1e-11, event=event)
    np.testing.assert_allclose(sol.ts, [np.pi / 2], rtol=0, atol=1e-10)
    np.testing.assert_allclose(sol.ys[0], [0.0, -1.0], rtol=0, atol=1e-10)


def test_vmap_over_initial_states_equals_the_loop():
    y0s = jnp.stack([jnp.linspace(0.5, 2.0, 8), jnp.linspace(-1.0, 1.0, 8)], axis=1)
    field = lambda t, y, a: jnp.stack([y[1], -jnp.sin(y[0])])  # noqa: E731  (pendulum)
    run = jax.jit(lambda y0: solve(field, 10, 0.0, 4.0, y0, tol=1e-10).ys[-1])
    batched = jax.jit(jax.vmap(run))(y0s)
    looped = jnp.stack([run(y0) for y0 in y0s])
    np.testing.assert_allclose(batched, looped, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_derivatives_through_diffeqsolve_match_the_closed_form(mode):
    # x'' = -w^2 x: x(T) = x0 cos(wT) + v0 sin(wT) / w. Reverse mode differentiates
    # through the steps (diffrax's default RecursiveCheckpointAdjoint), forward mode with
    # diffrax.ForwardMode.
    T = 3.0
    field = lambda t, y, w: jnp.stack([y[1], -(w**2) * y[0]])  # noqa: E731
    if mode == "reverse":
        adjoint, differentiate = diffrax.RecursiveCheckpointAdjoint(), jax.grad
    else:
        adjoint, differentiate = diffrax.ForwardMode(), jax.jacfwd

    def final_x(y0, w):
        return solve(field, 12, 0.0, T, y0, w, tol=1e-11, adjoint=adjoint).ys[-1, 0]

    x0, v0, w = 0.8, -0.3, 1.3
    d_y0, d_w = jax.jit(differentiate(final_x, argnums=(0, 1)))(jnp.array([x0, v0]), w)
    s, c = np.sin(w * T), np.cos(w * T)
    np.testing.assert_allclose(d_y0, [c, s / w], rtol=0, atol=1e-9)
    np.testing.assert_allclose(d_w, -x0 * T * s + v0 * (T * c / w - s / w**2), rtol=0, atol=1e-9)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="at least 1"):
        taylax.ode.Taylor(0)
    with pytest.raises(TypeError, match="Python integer"):
        taylax.ode.Taylor(2.5)
    with pytest.raises(TypeError, match="Python integer"):
        taylax.ode.Taylor(True)
    # A term that is not an ODETerm: diffrax checks it against the solver's term structure.
    control = diffrax.ControlTerm(
        lambda t, y, a: y, diffrax.LinearInterpolation(jnp.array([0.0, 1.0]), jnp.ones(2))
    )
    with pytest.raises(Exception, match="ODETerm"):
        diffrax.diffeqsolve(control, taylax.ode.Taylor(4), 0.0, 1.0, 0.1, jnp.array(1.0))


def test_taylax_ode_imports_without_diffrax():
    code = """
import sys
import taylax, taylax.ode
assert "diffrax" not in sys.modules and "equinox" not in sys.modules
sys.modules["diffrax"] = None  # as if diffrax were not installed
try:
    taylax.ode.Taylor
except ImportError as error:
    assert "pip install 'diffrax>=0.7'" in str(error), error
else:
    raise AssertionError("no ImportError")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
