"""An adaptive Taylor integrator: each step is the solution's own Taylor polynomial.

Step and order follow Jorba and Zou (2005), as heyoka does: for a tolerance `tol` the
order is `p = ceil(-ln(tol) / 2 + 1)`, and from the step's coefficients `y_k` the radius
`rho = min((s / |y_{p-1}|)^(1/(p-1)), (s / |y_p|)^(1/p))` (max norms, `s = max(1, |y_0|)`,
so the error is absolute below 1 and relative above) gives the step
`h = rho / e^2 exp(-0.7 / (p - 1))`. The truncation error `|y_p| h^p` is then about
`s e^(-2p) <= s tol`. There is no rejected step: the step is chosen from the
coefficients it is taken with. Values between steps (`ts`) are the step's polynomial at
that time, as accurate as the step's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._coefficients import check_time, real_problem, solution_series


class Solution(NamedTuple):
    """What `taylax.ode.integrate` returns.

    - `ys`: the state at each of `ts`, a pytree like `y0` with leaves stacked
      `(len(ts), *leaf.shape)`; NaN at the times past where `max_steps` ran out.
    - `steps`: the number of steps taken (an integer array; `max_steps` when it ran out).

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        sol = taylax.ode.integrate(lambda t, y, args: -y)(jnp.array([0.0, 1.0]), jnp.array(1.0))
        y_end, steps = sol.ys[-1], sol.steps  # exp(-1), a few steps
        ```
    """

    ys: object
    steps: jax.Array


def taylor_order(tol: float) -> int:
    """Jorba and Zou's order for a tolerance: `ceil(-ln(tol) / 2 + 1)`, at least 2."""
    return max(2, math.ceil(-math.log(tol) / 2 + 1))


def _horner(c, h):
    """`sum_k c[k] h^k` for coefficients `c` stacked `(p + 1, n)`."""
    out = c[-1]
    for k in range(c.shape[0] - 2, -1, -1):
        out = out * h + c[k]
    return out


def _two_sum(t, h, t_low):
    """`t + h + t_low` as a rounded sum and its error, the error kept exactly (Knuth)."""
    s = t + h
    b = s - t
    err = (t - (s - b)) + (h - b) + t_low
    hi = s + err
    return hi, err - (hi - s)


def _step_size(c, order: int):
    """Jorba and Zou's step from the coefficients `c` of order `order` (see the module)."""
    norms = jnp.max(jnp.abs(c), axis=1)
    scale = jnp.maximum(1.0, norms[0])
    tiny = jnp.finfo(c.dtype).tiny

    def radius(k):
        return (scale / jnp.maximum(norms[k], tiny)) ** (1.0 / k)

    rho = jnp.minimum(radius(order - 1), radius(order))
    return rho * math.exp(-2.0 - 0.7 / (order - 1))


def integrate(
    vector_field: Callable, *, tol: float | None = None, order: int | None = None, max_steps=100_000
) -> Callable:
    """Solve `y' = f(t, y, args)` with an adaptive Taylor method, saving at given times.

    **Arguments:**

    - `vector_field`: `f(t, y, args)`, as in `taylax.ode.coefficients` (and diffrax).
    - `tol`: the tolerance, absolute where the state's max norm is below 1 and relative
      above (default: the machine epsilon of the state's real dtype, as heyoka's).
    - `order`: the Taylor order of every step (default: Jorba and Zou's
      `ceil(-ln(tol) / 2 + 1)`: 20 for float64 at its epsilon, 9 for float32).
    - `max_steps`: the most steps to take (a Python integer).

    **Returns:** a function `(ts, y0, args=None) -> Solution` where `ts` is a 1-D array of
    times in increasing or decreasing order, `ts[0]` the initial time, and `y0` the state
    there (any pytree of floating-point or complex arrays). `Solution.ys` holds the state at
    every `ts` (leaves stacked `(len(ts), *leaf.shape)`), `Solution.steps` the number of
    steps. It works under `jax.jit`, `jax.vmap` (the batch steps until all are done) and
    forward-mode differentiation (`jax.jvp`, `jax.jacfwd`: forward sensitivities with
    respect to `ts`, `y0` and the arrays in `args`). Reverse mode (`jax.grad`) is not
    supported yet: the steps run in a `lax.while_loop`.

    The math: at `(t, y)` the step's coefficients `y_0..y_p` come from
    `taylax.ode.coefficients`; the step `h` from the last two of them (Jorba and Zou:
    `h = rho / e^2 exp(-0.7 / (p - 1))`, `rho` their radius of convergence estimate) keeps
    the truncation error near `tol`; the next state is `sum_k y_k h^k`, and a saved time
    inside the step is the same polynomial there.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        # y'' = -y: y = cos(t) through y(0) = 1, y'(0) = 0.
        field = lambda t, y, args: jnp.stack([y[1], -y[0]])
        ts = jnp.linspace(0.0, 10.0, 5)
        sol = taylax.ode.integrate(field)(ts, jnp.array([1.0, 0.0]))
        # sol.ys[:, 0] == cos(ts) to about 1e-15
        ```
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"`max_steps` must be a positive Python integer, got {max_steps!r}.")
    if tol is not None and not (isinstance(tol, (int, float)) and 0 < tol < 1):
        raise ValueError(f"`tol` must be a number between 0 and 1, got {tol!r}.")
    if order is not None and (
        isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 2
    ):
        raise ValueError(f"`order` must be a Python integer of at least 2, got {order!r}.")

    def solve(ts, y0, args=None) -> Solution:
        w0, g, to_state = real_problem(vector_field, y0, args)
        ts = jnp.asarray(ts)
        if ts.ndim != 1 or ts.shape[0] < 1 or jnp.issubdtype(ts.dtype, np.complexfloating):
            raise ValueError(
                "`ts` must be a 1-D array of real times (the first is the initial time), got "
                f"a {ts.dtype} array of shape {ts.shape}."
            )
        ts = ts.astype(w0.dtype)
        t_start = check_time(ts[0], w0.dtype, "ts[0]")
        t_end = ts[-1]
        p = order or taylor_order(tol or float(jnp.finfo(w0.dtype).eps))
        direction = jnp.where(t_end >= t_start, 1.0, -1.0).astype(w0.dtype)
        # NaN until a step covers the time: times never reached stay NaN.
        saved = jnp.where((ts == t_start)[:, None], w0, jnp.nan)

        def remaining(t, t_low):
            return direction * ((t_end - t) - t_low)

        def cond(state):
            t, t_low, _w, _saved, steps = state
            return (remaining(t, t_low) > 0) & (steps < max_steps)

        def body(state):
            t, t_low, w, saved, steps = state
            c = solution_series(g, t, w, p)
            left = remaining(t, t_low)
            h = jnp.minimum(_step_size(c, p), left)
            # Saved times inside this step: the step's polynomial there.
            offsets = (ts - t) - t_low
            inside = (direction * offsets > 0) & (direction * (offsets - direction * h) <= 0)
            values = jax.vmap(lambda d: _horner(c, d))(offsets)
            saved = jnp.where(inside[:, None], values, saved)
            # The time as an unevaluated sum `t + t_low` (two-sum): rounding `t + h` at
            # every step would drift the time by up to an ulp of `t` per step.
            last = h >= left
            t, t_low = _two_sum(t, direction * h, t_low)
            t, t_low = jnp.where(last, t_end, t), jnp.where(last, 0, t_low)
            return t, t_low, _horner(c, direction * h), saved, steps + 1

        zero = jnp.zeros((), w0.dtype)
        state = (t_start, zero, w0, saved, jnp.zeros((), jnp.int32))
        *_, saved, steps = lax.while_loop(cond, body, state)
        return Solution(jax.vmap(to_state)(saved), steps)

    return solve
