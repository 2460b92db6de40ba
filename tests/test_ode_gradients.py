"""Gradients through `taylax.ode.integrate` against independent references.

The loss is a weighted sum of squares of the final state, `L = sum(w * y(T)^2)`; its
gradient with respect to the initial state and to the floating-point parameters in `args`
is taken by forward mode (`jax.jacfwd` of the default `gradients="forward"`) and by
reverse mode (`jax.grad` of `gradients="reverse"`), each also with `batch=True`, and
checked against:

- a 2x2 rotation with decay, by its closed form's gradient written out by hand;
- a general 3x3 linear system `y' = s A y`, by `jax.grad` of the loss on
  `expm(s A T) y0` (`jax.scipy.linalg.expm`, no integrator involved);
- a damped pendulum with its two coefficients in `args`, by central finite differences
  of the (undifferentiated) solve, extrapolated twice (Richardson), the reference's own
  error estimate checked first;
- the same pendulum by heyoka's first-order variational equations (`heyoka.var_ode_sys`),
  where heyoka is installed.

Every comparison is relative in the max norm, per argument: `max|g - ref| / max|ref|`
over the gradient with respect to `y0`, and over each parameter's, below 1e-8 (issue 44).
Low orders keep the compiles short: at order 12 a step's truncation error is about
`e^(-24) = 4e-11` (the integrator's module docstring), and the gradients land within
about 1e-11 of their references; the two quick cases (the rotation) take order 10,
about 1e-9. At order 8 (`e^(-16)`) the rotation's would miss 1e-8 (3e-8).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax

RTOL = 1e-8
ORDER = 12


def relative_errors(got, want) -> dict:
    """Per leaf of `want`: `max|got - want| / max|want|`, the path as the key."""
    pairs = jax.tree_util.tree_flatten_with_path(want)[0]
    got_leaves = jax.tree.leaves(got)
    assert len(got_leaves) == len(pairs), "the gradient lost or gained an argument"
    return {
        jax.tree_util.keystr(path): float(
            np.max(np.abs(np.asarray(g) - np.asarray(w))) / np.max(np.abs(np.asarray(w)))
        )
        for (path, w), g in zip(pairs, got_leaves)
    }


def assert_close(got, want, rtol=RTOL):
    errors = relative_errors(got, want)
    assert max(errors.values()) < rtol, errors


def gradient(field, mode: str, ts, weights, order: int = ORDER):
    """A compiled `(y0, args) -> (dL/dy0, dL/dargs)` for `L = sum(weights * y(ts[-1])^2)`
    by `mode`: `"forward"` (`jax.jacfwd`), `"reverse"` (`jax.grad`), `"batch"`
    (`jax.jacfwd` of a `batch=True` solve: `y0` is `(n, B)`, the loss summed over the
    trajectories) or `"batch-reverse"` (`jax.grad` of a `batch=True` solve)."""
    reverse = mode in ("reverse", "batch-reverse")
    batch = mode.startswith("batch")
    solve = taylax.ode.integrate(
        field,
        order=order,
        max_steps=1000,
        gradients="reverse" if reverse else "forward",
        batch=batch,
    )

    def loss(y0, args):
        y_end = solve(ts, y0, args).ys[-1]
        w = weights[:, None] if batch else weights
        return jnp.sum(w * y_end**2)

    derivative = jax.grad if reverse else jax.jacfwd
    return jax.jit(derivative(loss, argnums=(0, 1)))


# --- linear systems -------------------------------------------------------------------


def rotation_decay(t, y, args):
    """`y' = (-k I + w J) y`, `J = [[0, 1], [-1, 0]]`: `y(T) = e^(-kT) R(wT) y0`."""
    k, w = args["k"], args["w"]
    return jnp.stack([-k * y[0] + w * y[1], -w * y[0] - k * y[1]])


def rotation_decay_gradient(weights, y0, k, w, t_end):
    """The loss's gradient from the closed form, by hand (numpy, no JAX):
    `z = e^(-kT) R y0` with `R = [[cos wT, sin wT], [-sin wT, cos wT]]`, `u = 2 w * z`;
    `dL/dy0 = e^(-kT) R^T u`, `dL/dk = -T u.z`, `dL/dw = T u.(J z)`."""
    c, s = np.cos(w * t_end), np.sin(w * t_end)
    rotation = np.array([[c, s], [-s, c]])
    z = np.exp(-k * t_end) * rotation @ y0
    u = 2 * weights * z
    jz = np.array([z[1], -z[0]])
    return np.exp(-k * t_end) * rotation.T @ u, {"k": -t_end * u @ z, "w": t_end * u @ jz}


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_rotation_with_decay_against_its_closed_form(mode):
    # The quick cases (`make test`): order 10 compiles in about two thirds of order 12's
    # time, and its truncation error (`e^(-20)` a step) leaves the gradients within
    # about 1e-9 of the closed form's, 1e-11 at order 12.
    y0, weights = np.array([0.8, -0.5]), np.array([1.0, 0.6])
    args = {"k": 0.3, "w": 1.1}
    ts = jnp.array([0.0, 2.0])
    got = gradient(rotation_decay, mode, ts, jnp.asarray(weights), order=10)(jnp.asarray(y0), args)
    want = rotation_decay_gradient(weights, y0, args["k"], args["w"], 2.0)
    assert_close(got, want)
    # The check can fail: a parameter's gradient off by its sign, or lost, is caught.
    for wrong in (-want[1]["w"], 0.0):
        errors = relative_errors((want[0], {"k": want[1]["k"], "w": wrong}), want)
        assert max(errors.values()) >= 1


def _saved_times(backwards: bool):
    """80 times from 0 to 3 (or 3 to 0): the middle ones shuffled, two repeated, one at
    the start and one outside the interval (NaN, no gradient), about eleven to a step."""
    inner = list(np.random.default_rng(5).uniform(0.05, 2.95, 74)) + [0.0, 1.5, 1.5, 4.0]
    np.random.default_rng(6).shuffle(inner)
    ts = np.array([0.0, *inner, 3.0])
    return jnp.asarray(3.0 - ts if backwards else ts)


@pytest.mark.parametrize("batch", [False, True], ids=["one", "batch"])
@pytest.mark.parametrize("backwards", [False, True], ids=["forwards", "backwards"])
def test_reverse_mode_through_many_saved_times_matches_forward_mode(backwards, batch):
    # The loss reads every saved state, so the backward walk must take each time's
    # cotangent in the step that wrote it (a window of 8 at a time), and the times' own
    # gradient too. Forward mode (`jax.jacfwd` through the forward loop's writes) is the
    # reference; both differentiate the same computed solution. The batch's three
    # starts, of different sizes, take different numbers of steps.
    ts = _saved_times(backwards)
    y0, args = jnp.asarray([0.8, -0.5]), {"k": 0.3, "w": 1.1}
    if batch:
        y0 = jnp.asarray([[0.8, 3.0, 0.01], [-0.5, 2.0, 0.02]])
    weights = jnp.asarray([1.0, 0.6]).reshape((2,) + (1,) * batch)

    def loss(gradients):
        solve = taylax.ode.integrate(rotation_decay, order=10, gradients=gradients, batch=batch)

        def value(ts, y0, args):
            ys = solve(ts, y0, args).ys
            return jnp.sum(weights * jnp.where(jnp.isnan(ys), 0.0, ys) ** 2)

        return value

    reverse = jax.jit(jax.grad(loss("reverse"), argnums=(0, 1, 2)))(ts, y0, args)
    forward = jax.jit(jax.jacfwd(loss("forward"), argnums=(0, 1, 2)))(ts, y0, args)
    steps = taylax.ode.integrate(rotation_decay, order=10, batch=batch)(ts, y0, args).steps
    assert steps.tolist() == ([7, 7, 5] if batch else 7)
    outside = np.asarray(ts) == (-1.0 if backwards else 4.0)
    assert outside.sum() == 1 and float(reverse[0][outside][0]) == 0.0
    # Every other time moves the loss, but a time at the start (its state is `y0`).
    at_start = np.arange(len(ts)) > 0
    at_start &= np.asarray(ts) == float(ts[0])
    assert np.all(np.asarray(reverse[0])[~outside & ~at_start] != 0)
    errors = relative_errors(reverse, forward)
    assert max(errors.values()) < 1e-12, errors


LINEAR_A = np.array([[-0.3, 1.1, 0.2], [-0.9, -0.2, 0.4], [0.1, -0.5, -0.1]])
LINEAR_Y0 = np.array([[0.8, -0.3], [-0.5, 0.6], [0.3, 1.2]])  # two starts, (3, B)
LINEAR_W = np.array([1.0, 0.6, 1.7])
LINEAR_T = 2.0


def linear(t, y, args):
    return args["s"] * (args["A"] @ y)


def expm_gradient(y0, args):
    """The reference: `jax.grad` of the loss on `expm(s A T) y0` (`y0` is `(3,)` or `(3, B)`,
    the loss summed over the starts)."""

    def loss(y0, args):
        y_end = jax.scipy.linalg.expm(args["s"] * args["A"] * LINEAR_T) @ y0
        return jnp.sum(jnp.asarray(LINEAR_W).reshape(3, *(1,) * (y0.ndim - 1)) * y_end**2)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))(y0, args)


@pytest.mark.parametrize("mode", ["forward", "reverse", "batch", "batch-reverse"])
def test_linear_system_against_the_gradient_of_expm(mode):
    args = {"A": jnp.asarray(LINEAR_A), "s": jnp.asarray(1.2)}
    y0 = jnp.asarray(LINEAR_Y0 if mode.startswith("batch") else LINEAR_Y0[:, 0])
    ts = jnp.array([0.0, LINEAR_T])
    got = gradient(linear, mode, ts, jnp.asarray(LINEAR_W))(y0, args)
    want = expm_gradient(y0, args)
    assert_close(got, want)
    # Every entry of A matters: the gradient with respect to A is a full matrix.
    assert np.min(np.abs(want[1]["A"])) > 1e-3 * np.max(np.abs(want[1]["A"]))


@pytest.mark.parametrize("mode", ["forward", "reverse", "batch", "batch-reverse"])
def test_gradients_hold_the_steps_where_they_fell(mode):
    # With its steps fixed, the solve of `y' = -1.3 y` is `y0` times a product of Taylor
    # polynomials, so `dy(T)/dy0 = y(T) / y0` to rounding. Below 1 the state sets the
    # step (`max(1, |y_0|) / |y_k|`): a step that carried its derivative added one of
    # the truncation error's size, 1.2e-6 relative at this tolerance.
    batch = mode.startswith("batch")
    solve = taylax.ode.integrate(
        lambda t, y, args: -1.3 * y,
        tol=1e-6,
        gradients="reverse" if mode.endswith("reverse") else "forward",
        batch=batch,
    )
    ts = jnp.array([0.0, 3.0])
    y0 = jnp.array([0.3, 0.6]) if batch else jnp.asarray(0.3)

    def y_end(y0):
        return jnp.sum(solve(ts, y0).ys[-1])

    grad = (jax.grad if mode.endswith("reverse") else jax.jacfwd)(y_end)(y0)
    ratio = solve(ts, y0).ys[-1] / y0
    np.testing.assert_allclose(grad, ratio, rtol=1e-14)


# --- a nonlinear problem: the damped pendulum -------------------------------------------


def pendulum(t, y, args):
    """`theta'' = -g sin(theta) - c theta'`, also for a batch `(2, B)` of states."""
    theta, omega = y[0], y[1]
    return jnp.stack([omega, -args["g"] * jnp.sin(theta) - args["c"] * omega])


PENDULUM_Y0 = np.array([[1.2, -0.4], [0.3, 0.9]])  # two starts, (2, B)
PENDULUM_ARGS = {"g": 1.5, "c": 0.1}
PENDULUM_W = np.array([1.0, 0.7])
PENDULUM_T = 6.0  # about 1.2 periods


@functools.cache
def pendulum_batch_solve():
    return jax.jit(taylax.ode.integrate(pendulum, max_steps=1000, batch=True))


@functools.cache
def pendulum_finite_differences(delta: float = 4e-3):
    """The loss's gradient at each start of `PENDULUM_Y0` by central differences in
    `(theta0, omega0, g, c)` at steps `delta`, `delta / 2`, `delta / 4`, extrapolated
    twice (Richardson: errors O(delta^2), then O(delta^4), then O(delta^6)). Returns
    `(gradients, estimates)`, `(B, 4)` each: the twice-extrapolated values, and their
    distance from the once-extrapolated ones at the smaller steps, a bound on the latter's
    error and so, generously, on the former's.

    The solves are taylax's, undifferentiated, at its default order (20) for float64:
    every perturbed problem is a trajectory of one `batch=True` solve. Their rounding
    errors, about 1e-15, enter the differences divided by the step: about 1e-12 at
    `delta / 4`."""
    solve = pendulum_batch_solve()
    steps = delta / 2.0 ** np.arange(3)
    params = np.tile([PENDULUM_ARGS["g"], PENDULUM_ARGS["c"]], (PENDULUM_Y0.shape[1], 1))
    base = np.concatenate([PENDULUM_Y0.T, params], axis=1)  # (B, 4)
    # points[b, level, i, sign]: start b with input i moved by sign * steps[level].
    shifts = np.einsum("l,ij,s->lisj", steps, np.eye(4), np.array([1.0, -1.0]))
    points = base[:, None, None, None, :] + shifts[None]
    flat = points.reshape(-1, 4)
    y_end = solve(
        jnp.array([0.0, PENDULUM_T]), jnp.asarray(flat[:, :2].T), {"g": flat[:, 2], "c": flat[:, 3]}
    ).ys[-1]
    loss = np.sum(PENDULUM_W[:, None] * np.asarray(y_end) ** 2, axis=0).reshape(points.shape[:-1])
    central = (loss[..., 0] - loss[..., 1]) / (2 * steps[None, :, None])  # (B, level, 4)
    once = (4 * central[:, 1:] - central[:, :-1]) / 3
    twice = (16 * once[:, 1] - once[:, 0]) / 15
    return twice, np.abs(twice - once[:, 1])


@functools.cache
def pendulum_gradient(mode: str):
    """taylax's gradient of the pendulum's loss by `mode`: `(d_y0, d_params)`, `d_y0`
    `(B, 2)` (one row per start) and `d_params` `(B, 2)` rows `(dL/dg, dL/dc)`, or for
    the batch modes (one solve of both starts, one loss) their sum `(2,)`."""
    grad = gradient(pendulum, mode, jnp.array([0.0, PENDULUM_T]), jnp.asarray(PENDULUM_W))
    args = {k: jnp.asarray(v) for k, v in PENDULUM_ARGS.items()}
    if mode.startswith("batch"):
        d_y0, d_args = grad(jnp.asarray(PENDULUM_Y0), args)
        return np.asarray(d_y0).T, np.array([d_args["g"], d_args["c"]])
    rows = []
    for y0 in PENDULUM_Y0.T:  # one compile for both
        d_y0, d_args = grad(jnp.asarray(y0), args)
        rows.append([*np.asarray(d_y0), d_args["g"], d_args["c"]])
    rows = np.array(rows)
    return rows[:, :2], rows[:, 2:]


def assert_pendulum_close(mode: str, reference) -> None:
    """taylax's gradients by `mode` against `reference` (`(B, 4)`, one row per start),
    each start's `y0` and parameter gradients apart (the batch's parameters summed)."""
    d_y0, d_params = pendulum_gradient(mode)
    for b, row in enumerate(reference):
        got, want = {"y0": d_y0[b]}, {"y0": row[:2]}
        if not mode.startswith("batch"):
            got[f"(g, c), start {b}"], want[f"(g, c), start {b}"] = d_params[b], row[2:]
        assert_close(got, want)
    if mode.startswith("batch"):
        assert_close({"(g, c), summed": d_params}, {"(g, c), summed": reference[:, 2:].sum(0)})


def test_the_finite_difference_reference_is_good_to_1e_9():
    reference, estimate = pendulum_finite_differences()
    for row, error in zip(reference, estimate):
        assert np.max(error) < 1e-9 * np.max(np.abs(row)), (row, error)
    # Each of the four inputs moves the loss: none of the gradient's entries is negligible.
    assert np.min(np.abs(reference)) > 1e-2 * np.max(np.abs(reference))
    # A step too large for this order of extrapolation is flagged.
    _, coarse = pendulum_finite_differences(delta=0.1)
    assert np.max(coarse) > 1e-9 * np.max(np.abs(reference))


@pytest.mark.parametrize("mode", ["forward", "reverse", "batch", "batch-reverse"])
def test_pendulum_against_finite_differences(mode):
    assert_pendulum_close(mode, pendulum_finite_differences()[0])


def heyoka_gradients(tol: float = 1e-15):
    """The loss's gradient at each start by heyoka's first-order variational equations
    with respect to the initial state and both parameters (`par[0] = g`, `par[1] = c`),
    `(B, 4)`: `2 (w * y(T)) . dy(T)/d(theta0, omega0, g, c)`."""
    hy = pytest.importorskip("heyoka")
    theta, omega = hy.make_vars("theta", "omega")
    system = [(theta, omega), (omega, -hy.par[0] * hy.sin(theta) - hy.par[1] * omega)]
    variational = hy.var_ode_sys(system, hy.var_args.vars | hy.var_args.params, order=1)
    pars = [PENDULUM_ARGS["g"], PENDULUM_ARGS["c"]]
    ta = hy.taylor_adaptive(variational, list(PENDULUM_Y0[:, 0]), pars=pars, tol=tol)
    rows = []
    for y0 in PENDULUM_Y0.T:
        # The state, then the identity (d y0 / d y0) and zeros (d y0 / d params).
        ta.time = 0.0
        ta.state[:] = [*y0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
        outcome = ta.propagate_until(PENDULUM_T)[0]
        assert outcome == hy.taylor_outcome.time_limit, outcome
        y_end = ta.state[:2]
        jacobian = ta.state[2:].reshape(2, 4)  # rows y(T); columns theta0, omega0, g, c
        rows.append(2 * (PENDULUM_W * y_end) @ jacobian)
    return np.array(rows)


@pytest.mark.parametrize("mode", ["forward", "reverse", "batch", "batch-reverse"])
def test_pendulum_against_heyokas_variational_equations(mode):
    reference = heyoka_gradients()
    # heyoka and the finite differences agree with each other first.
    for row, fd in zip(reference, pendulum_finite_differences()[0]):
        assert_close(fd, row)
    assert_pendulum_close(mode, reference)
