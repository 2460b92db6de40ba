"""Terminating events: the first time an event function of the solution changes sign,
located on the step's own Taylor polynomial.

Within a step of size `h` from `(t, y)` the solution is the step's polynomial
`y(t + s) = sum_k c_k s^k`, so the event function along it,
`g(s) = event(t + s, y(t + s), args)`, costs one Horner evaluation of `c` and one call of
`event` at any `s` in `[0, h]`. Each step evaluates `g` at `SAMPLES` equally spaced
points of the step (its end among them; its start is the last step's end) and fires in
the first sub-interval whose ends have crossed: then the loop stops that trajectory at
the step's start and keeps its coefficients. Once the loop is done the crossing is
bisected on that polynomial to the last bit of the dtype (`locate`), and the root's
derivative comes from the implicit function theorem, not from the bisection.

A pair of roots inside one sub-interval (`g` dipping below zero and back within a
quarter of a step) is missed: heyoka isolates every root of the event's Taylor
polynomial, which this does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._coefficients import at_times, horner, time_direction

# Points of each step where the event function is evaluated, the step's end among them.
SAMPLES = 4


class Watch(NamedTuple):
    """The event's state in the integrator's loop, one entry per trajectory."""

    fired: jax.Array  # whether the event fired (the trajectory then stops)
    g: jax.Array  # the event function at the current step's start
    c: jax.Array  # the coefficients of the step the event fired in
    lo: jax.Array  # the sub-interval of that step holding the first crossing,
    hi: jax.Array  # as offsets from the step's start (0 <= lo < hi <= h),
    g_lo: jax.Array  # and the event function at its ends
    g_hi: jax.Array


def check_event(event, event_direction) -> None:
    """Clear errors for `integrate`'s `event` and `event_direction`."""
    if event is not None and not callable(event):
        raise TypeError(
            "`event` must be a function `event(t, y, args)` returning a real scalar, whose "
            f"change of sign stops the integration, got {event!r}."
        )
    if isinstance(event_direction, bool) or event_direction not in (-1, 0, 1):
        raise ValueError(
            "`event_direction` must be 1 (the event function crossing zero upwards in "
            "time), -1 (downwards) or 0 (either way), got "
            f"{event_direction!r}."
        )
    if event is None and event_direction != 0:
        raise ValueError(
            f"`event_direction={event_direction}` was given without an `event`: pass "
            "`event=lambda t, y, args: ...` (the function whose zero stops the "
            "integration), or leave `event_direction` at 0."
        )


def crossed(g_a, g_b, sense):
    """Whether `g` has crossed zero from `g_a` to `g_b` (`g_b` may be zero, `g_a` not), in
    the sense `sense` along the integration: 1 upwards, -1 downwards, 0 either way."""
    up = (g_a < 0) & (g_b >= 0)
    down = (g_a > 0) & (g_b <= 0)
    return jnp.where(sense > 0, up, jnp.where(sense < 0, down, up | down))


def _event_function(event, to_state, dtype, batched: bool):
    """`(t, w, args) -> g`: `event` on the real vector `w`, checked to return a real scalar
    (one per trajectory when `batched`), in the state's real dtype."""

    def g(t, w, args):
        out = event(t, to_state(w), args)
        kind = (
            jnp.result_type(out)
            if isinstance(out, (jax.Array, np.ndarray, np.generic, float, int))
            else None
        )
        if kind is None or jnp.issubdtype(kind, np.complexfloating) or kind == jnp.bool_:
            got = f"a {kind} value" if kind is not None else f"{type(out).__name__}"
            raise TypeError(
                "`event(t, y, args)` must return a real number (a float array), whose change "
                f"of sign stops the integration, got {got}."
            )
        if jnp.shape(out) != jnp.shape(t):
            want = (
                f"one number per trajectory, shaped like `t` {jnp.shape(t)}, with `batch=True`"
                if batched
                else "a scalar"
            )
            raise ValueError(
                f"`event(t, y, args)` must return {want}, got an array of shape "
                f"{jnp.shape(out)}: reduce it to one number (e.g. `y[0]` or `jnp.min(y)`)."
            )
        return jnp.asarray(out).astype(dtype)

    return g


def _stop(tree):
    """`tree` with no derivative through its arrays (other leaves kept as they are)."""
    return jax.tree.map(lambda a: lax.stop_gradient(a) if isinstance(a, jax.Array) else a, tree)


class Events:
    """The event of one solve: its start, its test in every step and its root after."""

    def __init__(self, event: Callable, event_direction: int, args, to_state, ts, dtype, batched):
        self.g = _event_function(event, to_state, dtype, batched)
        self.args = args
        # The integration's direction in time, and the crossing's along it.
        self.direction = time_direction(ts, dtype)
        self.sense = event_direction * self.direction
        self.dtype = dtype

    def _along(self, c, t, t_low, args):
        """`s -> g(s)`, the event function along the polynomial `c` of the step from
        `t + t_low`, at the offset `s >= 0` in the integration's direction."""

        def g(s):
            d = self.direction * s
            return self.g(t + (t_low + d), horner(c, d), args)

        return g

    def start(self, field, t0, w0, order: int) -> Watch:
        """The state at `(t0, w0)` of the ODE `w' = field(t, w)`. A zero of the event
        function there is not an event: `g` then starts with the sign of its derivative
        along the solution, the sign it has just after `t0`."""
        # Only the signs of `g` matter in the loop: no derivatives through them.
        t0, w0, args = _stop((t0, w0, self.args))
        tangents = (jnp.full_like(t0, self.direction), self.direction * field(t0, w0))
        g0, slope = jax.jvp(lambda t, w: self.g(t, w, args), (t0, w0), tangents)
        g0 = jnp.where(g0 == 0, slope, g0)
        zero = jnp.zeros_like(g0)
        c = jnp.zeros((order + 1, *w0.shape), w0.dtype)
        return Watch(jnp.zeros(g0.shape, bool), g0, c, zero, zero, zero, zero)

    def watch(self, state: Watch, active, t, t_low, c, h) -> Watch:
        """The state after the step of size `h` (coefficients `c`) from `t + t_low`, for the
        trajectories that are `active`: fired where `g` crosses zero within the step."""
        g = self._along(*_stop((c, t, t_low, self.args)))
        h = lax.stop_gradient(h)
        ends = [h * (j / SAMPLES) for j in range(1, SAMPLES)] + [h]
        values = [state.g, *jax.vmap(g)(jnp.stack(ends))]
        starts = [jnp.zeros_like(h)] + ends[:-1]
        found = jnp.zeros_like(state.fired)
        bracket = (state.lo, state.hi, state.g_lo, state.g_hi)
        # Backwards, so that the first sub-interval that crossed wins.
        for j in range(SAMPLES - 1, -1, -1):
            here = crossed(values[j], values[j + 1], self.sense)
            ends_here = (starts[j], ends[j], values[j], values[j + 1])
            bracket = tuple(jnp.where(here, a, b) for a, b in zip(ends_here, bracket))
            found = found | here
        now = active & found & ~state.fired
        return Watch(
            state.fired | now,
            jnp.where(active & ~now, values[-1], state.g),
            jnp.where(now, c, state.c),
            *(jnp.where(now, a, b) for a, b in zip(bracket, state[3:])),
        )

    def locate(self, state: Watch, t, t_low):
        """The root's offset `s` into the step where the event fired (0 where it did not).

        Bisection on the step's polynomial for `nmant + 3` halvings of the sub-interval
        that crossed (55 in float64), which leaves a bracket of `h eps / 32` for a step
        `h`, below the rounding of the time, without derivatives (all inputs held
        constant). Then the implicit function
        theorem gives the derivative: `s - (g(s) - stop_gradient(g(s))) / g'(s)` is `s`
        with the tangent `-(dg/dp) / (dg/ds)`, `dg/ds` from `jax.jvp` along the polynomial.
        """
        fired = state.fired
        fixed = self._along(*_stop((state.c, t, t_low, self.args)))
        bracket = _stop((state.lo, state.hi, state.g_lo, state.g_hi))

        def halve(_, bracket):
            lo, hi, g_lo, g_hi = bracket
            mid = lo + (hi - lo) / 2
            g_mid = fixed(mid)
            left = crossed(g_lo, g_mid, self.sense)
            return (
                jnp.where(left, lo, mid),
                jnp.where(left, mid, hi),
                jnp.where(left, g_lo, g_mid),
                jnp.where(left, g_mid, g_hi),
            )

        halvings = jnp.finfo(self.dtype).nmant + 3
        lo, hi, g_lo, g_hi = lax.fori_loop(0, halvings, halve, bracket)
        s = lax.stop_gradient(jnp.where(jnp.abs(g_lo) < jnp.abs(g_hi), lo, hi))
        s = jnp.where(fired, s, 0)
        g_s, slope = jax.jvp(self._along(state.c, t, t_low, self.args), (s,), (jnp.ones_like(s),))
        slope = lax.stop_gradient(jnp.where(fired & (slope != 0), slope, 1))
        return s - (g_s - lax.stop_gradient(g_s)) / slope

    def finish(self, state: Watch, t, t_low, ts, saved):
        """`(saved, t_event, w_event)`: the saved states with those at times up to the event
        in its step filled from the step's polynomial, the event's time and state (NaN
        where it did not fire). `t`, `t_low` are each trajectory's last step's start."""
        fired = state.fired
        s = self.locate(state, t, t_low)
        d = self.direction * s
        t_event = jnp.where(fired, t + (t_low + d), jnp.nan)
        w_event = jnp.where(fired, horner(state.c, d), jnp.nan)
        offsets, values = at_times(state.c, ts, t, t_low)
        ahead = self.direction * offsets
        inside = fired & (ahead > 0) & (ahead <= s)
        saved = jnp.where(jnp.expand_dims(inside, 1), values, saved)
        return saved, t_event, w_event
