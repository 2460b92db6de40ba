"""The saved times of `taylax.ode.integrate`: the windows of them each step writes.

The times are sorted along the integration once (`sorted_times`); each step writes, in
place, the window of those it covers from the first not yet passed (`save_window`), and
the reverse walk reads the cotangents of the same windows (`window_cotangents`). A
solve whose step reads its coefficients as rows apart saves through `saving_again`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from ._coefficients import horner, horner_for_vjp, time_direction


def covers(offsets, h, direction):
    """Whether a step of size `h >= 0` covers the times at `offsets` from its start: after
    the start and up to its end, along `direction`. The forward loop saves, and the
    reverse walk differentiates, exactly the times this says."""
    ahead = direction * offsets
    return (ahead > 0) & (ahead - h <= 0)


def sorted_times(ts):
    """`(direction, order_ts, sorted_ts)`: the saved times sorted along the integration
    (stable, so equal times keep their order), as the forward loop writes them and the
    reverse walk reads them."""
    direction = time_direction(ts, ts.dtype)
    order_ts = jnp.argsort(direction * ts, stable=True)
    return direction, order_ts, ts[order_ts]


def _covering(first, t, t_low, h, keep, sorted_ts, direction):
    """Whether a step of size `h` from `t + t_low` covers the first saved time not yet
    passed (index `first`), elementwise over a batch's trajectories."""
    n = sorted_ts.shape[0]
    offsets = (sorted_ts[jnp.minimum(first, n - 1)] - t) - t_low
    return keep & (first < n) & covers(offsets, h, direction)


def saving_covered(save, sorted_ts, direction):
    """`save` for a batch, run only in a step that covers a saved time of some
    trajectory. Most steps cover none, and a batch evaluated the step's polynomial at its
    window of times in every step: 280 us of a 2 ms step of 4,096 Kepler orbits
    (docs/ODE.md, "Saved times only where a step covers one")."""

    def covered(saved, first, c, t, t_low, h, keep):
        return lax.cond(
            jnp.any(_covering(first, t, t_low, h, keep, sorted_ts, direction)),
            lambda: save(saved, first, c, t, t_low, h, keep),
            lambda: (saved, first),
        )

    return covered


def saving_again(save, coefficients: Callable, sorted_ts, direction):
    """`save` taking the step's start `w` for `c`, that runs only in a step covering a
    saved time and there computes the coefficients again, `coefficients(t, w)`.

    A step whose coefficients are rows apart (`solution_rows`) compiles into a few
    kernels while the step's size and its end are their only readers. Another reader
    (the saved times' polynomial, evaluated at every step) took copies of the whole
    recurrence into kernels of its own: the pendulum's step went from 6 kernels to 35
    and from 0.44 to 2.5 us (docs/ODE.md, "One kernel per step"). A step that saves
    pays for its coefficients twice."""

    def again(saved, first, w, t, t_low, h, keep):
        return lax.cond(
            jnp.any(_covering(first, t, t_low, h, keep, sorted_ts, direction)),
            lambda: save(saved, first, coefficients(t, w), t, t_low, h, keep),
            lambda: (saved, first),
        )

    return again


# The most saved times one pass of `save_window`'s loop evaluates.
WINDOW = 8


def _over_windows(body, state, n: int, window: int, more):
    """`body` run over windows of `window` of the `n` sorted saved times from `state`:
    once where a window covers all of them (no loop), else while `more(state)`."""
    return body(state) if window >= n else lax.while_loop(more, body, state)


def save_window(saved, first, c, t, t_low, h, keep, *, sorted_ts, direction, window: int):
    """`(saved, first)` after a step of size `h` from `t + t_low` with coefficients `c`:
    the step's polynomial written at the times of `sorted_ts` it covers, found from index
    `first` on (the first time not yet passed) a `window` at a time, and `first` moved
    past them. Nothing is written where `keep` is False (a step an event stopped)."""
    n = sorted_ts.shape[0]

    def body(state):
        saved, first, _ = state
        # A window that ends at the last time at most, read and written as slices: a
        # scatter in the step's loop keeps XLA:CPU from compiling a small loop into one
        # function (docs/ODE.md, "Small loops in one function"). A window over all the
        # times starts at 0 whatever `first` is, which keeps it a slice under `vmap`.
        start = 0 if window == n else jnp.minimum(first, n - window)
        index = start + jnp.arange(window)
        offsets = (lax.dynamic_slice_in_dim(sorted_ts, start, window) - t) - t_low
        inside = keep & (index >= first) & covers(offsets, h, direction)
        values = jax.vmap(lambda d: horner(c, d))(offsets)
        mask = inside.reshape(inside.shape + (1,) * (values.ndim - 1))
        current = lax.dynamic_slice_in_dim(saved, start, window)
        saved = lax.dynamic_update_slice_in_dim(saved, jnp.where(mask, values, current), start, 0)
        count = jnp.sum(inside, dtype=first.dtype)
        return saved, first + count, count == window

    state = (saved, first, jnp.asarray(True))
    saved, first, _ = _over_windows(body, state, n, window, lambda s: s[2])
    return saved, first


def window_cotangents(c, t, t_low, lo, hi, sorted_ts, ct_sorted, ct_sorted_ts):
    """The reverse of `save_window` for one step: the cotangents of the step's
    coefficients `c`, of `t` and `t_low`, and `ct_sorted_ts` plus those of the sorted saved
    times, from the cotangents `ct_sorted` of the saved states at the sorted indices
    `[lo, hi)` the step wrote, read a window of `WINDOW` at a time."""
    n = sorted_ts.shape[0]
    window = min(n, WINDOW)

    def body(state):
        j, ct_c, ct_t, ct_low, ct_sorted_ts = state
        # The window ends at the last time at most, as `save_window`'s.
        start = 0 if window == n else jnp.minimum(j, n - window)
        index = start + jnp.arange(window)
        inside = (index >= j) & (index < hi)

        def values(c, t, t_low, times):
            # The times past the step's, at offset 0: far ahead the polynomial may
            # overflow, and its zero cotangent times inf would be NaN.
            offsets = jnp.where(inside, (times - t) - t_low, 0)
            return jax.vmap(lambda d: horner_for_vjp(c, d))(offsets)

        read = functools.partial(lax.dynamic_slice_in_dim, start_index=start, slice_size=window)
        ct_values = jnp.where(inside[:, None], read(ct_sorted), 0)
        _, vjp = jax.vjp(values, c, t, t_low, read(sorted_ts))
        d_c, d_t, d_low, d_times = vjp(ct_values)
        ct_sorted_ts = lax.dynamic_update_slice_in_dim(
            ct_sorted_ts, read(ct_sorted_ts) + d_times, start, 0
        )
        return j + window, ct_c + d_c, ct_t + d_t, ct_low + d_low, ct_sorted_ts

    zero = jnp.zeros((), t.dtype)
    state = (lo, jnp.zeros_like(c), zero, zero, ct_sorted_ts)
    return _over_windows(body, state, n, window, lambda s: s[0] < hi)[1:]
