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

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat, _policy
from .._one_way import forward_only, reverse_only
from ._coefficients import (
    batched_problem,
    check_method,
    horner,
    horner_for_vjp,
    real_problem,
    solution_rows,
    solution_series,
    time_direction,
)
from ._events import Events, check_event
from ._saved import (
    WINDOW,
    save_window,
    saving_again,
    saving_covered,
    sorted_times,
    window_cotangents,
)
from ._tolerance import check_tolerance, default_order, step_size


class Solution(NamedTuple):
    """What `taylax.ode.integrate` returns.

    - `ys`: the state at each of `ts`, a pytree like `y0` with leaves stacked
      `(len(ts), *leaf.shape)`; NaN at the times past where `max_steps` ran out, and past
      the event's time when it fired.
    - `steps`: the number of steps taken (an integer array; `max_steps` when it ran out;
      one per trajectory with `batch=True`), the step the event fired in included.
    - `t_event`: the time the event fired at (NaN where it did not fire), a scalar (`(B,)`
      with `batch=True`); None without an `event`.
    - `y_event`: the state at `t_event`, a pytree like `y0` (NaN where the event did not
      fire); None without an `event`.
    - `event_happened`: whether the event fired, a boolean scalar (`(B,)` with
      `batch=True`); None without an `event`.

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
    t_event: jax.Array | None = None
    y_event: object = None
    event_happened: jax.Array | None = None


_FORWARD_ONLY = (
    "This solve cannot be differentiated in reverse mode (jax.grad, jax.vjp, jax.jacrev): "
    "it was made by `taylax.ode.integrate(..., gradients='forward')` (the default), whose "
    "adaptive loop JAX differentiates only forward. Make the solve with "
    "`gradients='reverse'` for reverse mode, or differentiate it with jax.jvp or jax.jacfwd."
)
_REVERSE_ONLY = (
    "This solve cannot be differentiated in forward mode (jax.jvp, jax.jacfwd, "
    "jax.hessian): it was made by `taylax.ode.integrate(..., gradients='reverse')`, whose "
    "gradient is a backward pass that JAX runs only in reverse. Make the solve with "
    "`gradients='forward'` (the default) for forward mode, or differentiate it with "
    "jax.grad, jax.vjp or jax.jacrev."
)


def _refusing_reverse_mode(solution: Solution) -> Solution:
    """`solution` with every floating-point leaf passed through `forward_only`, so that
    reverse mode meets `_FORWARD_ONLY` instead of JAX's error for the step loop's
    transpose (which advises `lax.scan`)."""

    def guard(leaf):  # `jax.tree.map` skips the None fields of a solve without an event
        if not jnp.issubdtype(jnp.result_type(leaf), np.inexact):
            return leaf  # `steps`, `event_happened`
        return forward_only(leaf, _FORWARD_ONLY)

    return jax.tree.map(guard, solution)


def _two_sum(t, h, t_low):
    """`t + h + t_low` as a rounded sum and its error, the error kept exactly (Knuth)."""
    s = t + h
    b = s - t
    err = (t - (s - b)) + (h - b) + t_low
    hi = s + err
    return hi, err - (hi - s)


def _series_of(g, order: int, batched: bool, method: str, rows: bool) -> Callable:
    """`(t, w) -> c`, a step's coefficients from its start (`solution_series`); with
    `rows`, as the state's rows apart (`solution_rows`) where the field has a recurrence
    for every primitive."""

    def series(t, w):
        c = solution_rows(g, t, w, order) if rows else None
        return solution_series(g, t, w, order, batched, method) if c is None else c

    return series


def _stepper(
    g,
    ts,
    order: int,
    batched: bool = False,
    method: str = "auto",
    evaluate: Callable = horner,
    rows: bool = False,
):
    """`(step, remaining)`: one step from `(t, t_low, w)` (the next `(t, t_low, w)`, the
    step's coefficients `c` and its size `h >= 0`) and the time left to `ts[-1]`. Only
    `ts[0]` and `ts[-1]` are read. `batched`: `t`, `t_low` are `(B,)` and `w` is `(n, B)`,
    B trajectories stepping at once, each with its own step (0 once it has reached
    `ts[-1]`). `method`: how the coefficients are computed (`solution_series`);
    `evaluate`: the polynomial's evaluation (`horner_for_vjp` for reverse mode). `rows`:
    `c` is the state's rows apart (`solution_rows`) where they are computed order by
    order, which `evaluate` must read (`horner` does)."""
    t_end = ts[-1]
    direction = time_direction(ts, ts.dtype)
    series = _series_of(g, order, batched, method, rows)

    def remaining(t, t_low):
        return direction * ((t_end - t) - t_low)

    def step(t, t_low, w):
        c = series(t, w)
        left = remaining(t, t_low)
        h = jnp.minimum(step_size(c, order), left)
        # The time as an unevaluated sum `t + t_low` (two-sum): rounding `t + h` at every
        # step would drift the time by up to an ulp of `t` per step.
        last = h >= left
        t_next, t_low_next = _two_sum(t, direction * h, t_low)
        t_next, t_low_next = jnp.where(last, t_end, t_next), jnp.where(last, 0, t_low_next)
        return t_next, t_low_next, evaluate(c, direction * h), c, h

    return step, remaining


def _rows(w0, event, batched: bool, method: str) -> bool:
    """Whether a forward solve's steps hold the state's coefficients as rows apart
    (`solution_rows`): for one trajectory (in a batch the rows are lanes, and 4,096
    Kepler orbits ran 1.6-3x slower, docs/ODE.md) whose state `w0` has at most the
    policy's `ode_rows_max_state` rows, no event (whose watch reads them stacked), and
    coefficients that may be computed order by order."""
    if batched or event is not None or method == "doubling":
        return False
    return w0.shape[0] <= _policy.current().ode_rows_max_state


def _refuse_explicit_sharding(y0) -> None:
    """A clear error for a batch sharded over explicit mesh axes: the batch's own lanes
    (step sizes, counters, saved-time indices) are made inside the solve unsharded, and
    JAX's explicit sharding refuses to mix the two (a `vmap` or a gather fails deep
    inside). Automatic axes work: XLA propagates the input's layout."""
    for leaf in jax.tree.leaves(y0):
        axes = _compat.explicit_mesh_axes(leaf)
        if axes:
            raise ValueError(
                f"`y0` is sharded over the explicit mesh axes {axes}, which "
                "`taylax.ode.integrate(..., batch=True)` does not support yet. Shard it "
                "over a mesh whose axes are automatic instead, e.g. `jax.make_mesh(shape, "
                "names, axis_types=(jax.sharding.AxisType.Auto,) * len(names))`: the solve "
                "then runs sharded along the input's layout."
            )


def _setup(vector_field, ts, y0, args, tol, order, batched: bool = False):
    """The problem on one real vector (`(n, B)` arrays with `batched`): `(w0, g, to_state,
    ts, order)`, with clear errors."""
    problem = batched_problem if batched else real_problem
    if batched:
        _refuse_explicit_sharding(y0)
    w0, g, to_state = problem(vector_field, y0, args)
    ts = jnp.asarray(ts)
    if ts.ndim != 1 or ts.shape[0] < 1 or jnp.issubdtype(ts.dtype, np.complexfloating):
        raise ValueError(
            "`ts` must be a 1-D array of real times (the first is the initial time), got "
            f"a {ts.dtype} array of shape {ts.shape}."
        )
    ts = ts.astype(w0.dtype)
    p = order or default_order(tol or float(jnp.finfo(w0.dtype).eps))
    return w0, g, to_state, ts, p


def _march(
    step,
    remaining,
    ts,
    w0,
    max_steps: int,
    trail: bool = False,
    batched: bool = False,
    events: Events | None = None,
    field=None,
    order: int = 0,
    coefficients: Callable | None = None,
):
    """Step from `ts[0]` to `ts[-1]`: `(saved, steps, trails, (t, t_low, w, watch))`. With
    `trail`, `trails` holds every step's starting `(t, t_low, w)` stacked
    `(max_steps, ...)` for the reverse pass, and the range `[lo, hi)` of the sorted saved
    times (`sorted_times`) the step wrote. `batched`: `w0` is `(n, B)`; the loop runs
    until every trajectory is done, and `steps` counts each one's steps. With `events`
    (for steps of order `order` of the ODE `w' = field(t, w)`), a trajectory whose event
    fires in a step stays at that step's start, its times in the step unsaved:
    `events.finish` locates the root there from `watch` and the last `(t, t_low)`.
    `coefficients(t, w)`: where given, a step that covers a saved time computes its
    coefficients again from it, in a branch of its own, and no other step reads the
    step's `c` for saving (`saving_again`)."""
    # The saved times sorted along the integration: each step writes, in place, the window
    # of those it covers from the first not yet passed (`save_window`), instead of its
    # polynomial at every time and a select over all of `saved`, which took 100 Kepler
    # orbits from 18 ms with 2 times to 781 ms with 10,001 (docs/ODE.md).
    direction, order_ts, sorted_ts = sorted_times(ts)
    # NaN until a step covers the time: times never reached stay NaN.
    start = (sorted_ts == ts[0]).reshape(ts.shape + (1,) * w0.ndim)
    saved = jnp.where(start, w0, jnp.nan)
    batch = w0.shape[1:] if batched else ()
    first = jnp.broadcast_to(jnp.sum(direction * (sorted_ts - ts[0]) <= 0), batch)
    window = min(ts.shape[0], WINDOW)
    save = functools.partial(save_window, sorted_ts=sorted_ts, direction=direction, window=window)
    if batched:
        save = jax.vmap(save, in_axes=(-1, 0, -1, 0, 0, 0, 0), out_axes=(-1, 0))
    if coefficients is not None:
        save = saving_again(save, coefficients, sorted_ts, direction)
    elif batched:
        # Not for one trajectory: under `jax.vmap` its `cond` would become a `select`
        # that computes the save anyway (docs/ODE.md, "Saved times only where a step
        # covers one").
        save = saving_covered(save, sorted_ts, direction)
    zero = jnp.zeros(batch, w0.dtype)
    trails = ()
    if trail:
        # t, t_low, w; in a batch the trajectories come first (`_write_trail`).
        shapes = (batch, batch, (*batch, *w0.shape[: w0.ndim - len(batch)]))
        trails = tuple(jnp.zeros((max_steps, *s), w0.dtype) for s in shapes)
        trails += (jnp.zeros((max_steps, *batch), first.dtype),) * 2  # lo, hi
    t0 = jnp.broadcast_to(ts[0], batch)
    watch = events.start(field, t0, w0, order) if events is not None else None

    def running(t, t_low, watch):
        going = remaining(t, t_low) > 0
        return going if watch is None else going & ~watch.fired

    def cond(state):
        t, t_low, _w, _saved, steps, _trails, watch = state
        return jnp.any(running(t, t_low, watch)) & (jnp.max(steps) < max_steps)

    def body(state):
        t, t_low, w, (saved, first), steps, trails, watch = state
        active = running(t, t_low, watch)
        t_next, low_next, w_next, c, h = step(t, t_low, w)
        keep = jnp.ones(batch, bool)
        if watch is not None:
            watch = events.watch(watch, active, t, t_low, c, h)
            stop = watch.fired
            t_next = jnp.where(stop, t, t_next)
            low_next = jnp.where(stop, t_low, low_next)
            w_next = jnp.where(stop, w, w_next)
            keep = ~stop
        lo = first
        # With `coefficients`, the save takes the step's start instead of `c`.
        saved, first = save(saved, first, c if coefficients is None else w, t, t_low, h, keep)
        if trail:
            values = (t, t_low, w, lo, first)
            trails = tuple(_write_trail(b, steps, v, batched) for b, v in zip(trails, values))
        steps = steps + active.astype(jnp.int32)
        return t_next, low_next, w_next, (saved, first), steps, trails, watch

    state = (t0, zero, w0, (saved, first), jnp.zeros(batch, jnp.int32), trails, watch)
    t, t_low, w, (saved, _), steps, trails, watch = lax.while_loop(cond, body, state)
    # Back to the order of `ts`.
    saved = saved[jnp.argsort(order_ts)]
    return saved, steps, trails, (t, t_low, w, watch)


def _write_trail(trail, steps, value, batched: bool):
    """`trail` (`(max_steps, ...)`) with `value` written at row `steps`. With `batched`,
    `value`'s last axis is the batch and `trail` is `(max_steps, B, ...)`: each
    trajectory's entry goes to its own step count's row, one scatter over the two
    leading axes (with the batch last in the trail, the scatter was a transpose of the
    whole trail at every step). One trajectory's row is a slice, not a scatter, which
    would keep XLA:CPU from compiling the loop into one function (`_saved.save_window`)."""
    if not batched:
        return lax.dynamic_update_index_in_dim(trail, value, steps, 0)
    cols = jnp.arange(trail.shape[1])
    return trail.at[steps, cols].set(jnp.moveaxis(value, -1, 0))


def _read_trail(trail, index, batched: bool):
    """Row `index` of `trail`; with `batched`, `index` is `(B,)`, each trajectory's entry
    comes from its own row, and the batch goes back to the last axis."""
    if not batched:
        return trail[index]
    return jnp.moveaxis(trail[index, jnp.arange(trail.shape[1])], 0, -1)


def _reverse_solve(
    vector_field,
    tol,
    order,
    max_steps: int,
    event=None,
    event_direction=0,
    method="auto",
    batched: bool = False,
):
    """`solve` for reverse mode: a `jax.custom_vjp` whose backward pass walks the steps
    back, each step's vjp taken at its stored starting state (a discrete adjoint: the
    derivative of the computed solution with its steps held fixed, as `jax.grad` of the
    unrolled loop would be).

    `batched`: the trajectories of a batch walk back together, from the most steps any
    took; a trajectory with fewer takes part from its own last step, and before that
    its cotangents pass through untouched.

    With an `event` the loop also returns where it stopped: the start `(t, t_low, w)` of
    the step the event fired in and the bracket of its root. Outside the `custom_vjp` that
    step's coefficients are computed again from its start, and the root is located on
    them (`Events.finish`) by ordinary JAX operations, so reverse mode reaches the event's
    time and state through them, and through that start into the backward walk."""

    def pieces(ts, args_in, y_like, p):
        problem = batched_problem if batched else real_problem
        _, g, to_state = problem(vector_field, y_like, args_in)
        stepper = _stepper(g, ts, p, batched, method=method, evaluate=horner_for_vjp)
        return (*stepper, g, to_state)

    def march(ts, w0, diff_leaves, y_like, rebuild, p, trail):
        args_in = rebuild(diff_leaves)
        step, remaining, g, to_state = pieces(ts, args_in, y_like, p)
        events = None
        if event is not None:
            events = Events(event, event_direction, args_in, to_state, ts, w0.dtype, batched)
        saved, steps, trails, (t, t_low, w, watch) = _march(
            step,
            remaining,
            ts,
            w0,
            max_steps,
            trail=trail,
            batched=batched,
            events=events,
            field=g,
            order=p,
        )
        # Where the loop stopped (the event's step), without the coefficients `c`, which
        # are computed again outside, where reverse mode can reach them.
        end = () if watch is None else (t, t_low, w, watch._replace(c=None))
        return saved, steps, trails, end

    def make(y0, args, p):
        leaves, tree = jax.tree.flatten(args)
        differentiable = [
            isinstance(leaf, (float, complex, jax.Array, np.ndarray, np.generic))
            and jnp.issubdtype(jnp.result_type(leaf), np.inexact)
            for leaf in leaves
        ]
        fixed = [None if d else leaf for leaf, d in zip(leaves, differentiable)]

        def rebuild(diff_leaves):
            it = iter(diff_leaves)
            return jax.tree.unflatten(
                tree, [next(it) if d else f for d, f in zip(differentiable, fixed)]
            )

        diff_leaves = [jnp.asarray(leaf) for leaf, d in zip(leaves, differentiable) if d]
        # The state's structure, shapes and dtypes, in arrays that are never tracers
        # (`custom_vjp` functions must not close over the values they differentiate).
        y_like = jax.tree.map(lambda a: np.zeros(np.shape(a), jnp.result_type(a)), y0)

        @jax.custom_vjp
        def run(ts, w0, diff_leaves):
            saved, steps, _, end = march(ts, w0, diff_leaves, y_like, rebuild, p, False)
            return saved, steps, end

        def run_fwd(ts, w0, diff_leaves):
            saved, steps, trails, end = march(ts, w0, diff_leaves, y_like, rebuild, p, True)
            # The event's step stopped the loop at its start: no step to walk back.
            fired = end[3].fired if end else False
            back_from = steps - jnp.asarray(fired, steps.dtype)
            return (saved, steps, end), (ts, w0, diff_leaves, back_from, trails)

        def run_bwd(residuals, cotangents):
            ts, w0, diff_leaves, back_from, trails = residuals
            ct_saved = jnp.nan_to_num(cotangents[0])  # unreached times carry no gradient
            zero = jnp.zeros(back_from.shape, w0.dtype)
            ct_end = (zero, zero, jnp.zeros_like(w0))
            if cotangents[2]:
                # The event's time and state reach the loop through its last start.
                ct_end = tuple(cotangents[2][:3])
            # A step reads `ts` only at its ends; the saved times it wrote, `[lo, hi)` in
            # sorted order, are read a window at a time (`window_cotangents`), so that a
            # backward step costs nothing per saved time it does not cover.
            ends = ts[jnp.asarray([0, -1])]
            _, order_ts, sorted_ts = sorted_times(ts)
            ct_sorted = ct_saved[order_ts]
            windows = window_cotangents
            if batched:
                windows = jax.vmap(
                    window_cotangents,
                    in_axes=(-1, 0, 0, 0, 0, None, -1, -1),
                    out_axes=(-1, 0, 0, -1),
                )

            def back(state):
                i, ct_t, ct_low, ct_w, ct_sorted_ts, ct_ends, ct_leaves = state
                i = i - 1
                # In a batch, a trajectory whose steps are all walked back (or not yet
                # reached) reads its first real row with no cotangent: a row never
                # written could make the step's derivatives NaN, and NaN times 0 is NaN.
                active = i < back_from
                index = jnp.where(active, i, jnp.maximum(back_from - 1, 0))
                t, t_low, w, lo, hi = (_read_trail(b, index, batched) for b in trails)

                def moved(ends, leaves, t, t_low, w):
                    step, *_ = pieces(ends, rebuild(leaves), y_like, p)
                    return step(t, t_low, w)[:4]  # t, t_low, w and the coefficients

                (*_, c), vjp = jax.vjp(moved, ends, diff_leaves, t, t_low, w)
                hi = jnp.where(active, hi, lo)

                # In a batch only a step that wrote a saved time reads their cotangents
                # (the forward loop's `saving_covered`).
                def read():
                    return windows(c, t, t_low, lo, hi, sorted_ts, ct_sorted, ct_sorted_ts)

                def skip():
                    return jnp.zeros_like(c), jnp.zeros_like(t), jnp.zeros_like(t_low), ct_sorted_ts

                saved_cts = lax.cond(jnp.any(lo < hi), read, skip) if batched else read()
                ct_c, ct_t_saved, ct_low_saved, ct_sorted_ts = saved_cts
                later = (ct_t, ct_low, ct_w)
                masked = tuple(jnp.where(active, ct, 0) for ct in later)
                d_ends, d_leaves, *earlier = vjp((*masked, ct_c))
                ct_t, ct_low, ct_w = (
                    jnp.where(active, now, before) for now, before in zip(earlier, later)
                )
                ct_leaves = [a + b for a, b in zip(ct_leaves, d_leaves)]
                ct_t, ct_low = ct_t + ct_t_saved, ct_low + ct_low_saved
                return i, ct_t, ct_low, ct_w, ct_sorted_ts, ct_ends + d_ends, ct_leaves

            state = (
                jnp.max(back_from),
                *ct_end,
                jnp.zeros(ts.shape + back_from.shape, ts.dtype),
                jnp.zeros_like(ends),
                [jnp.zeros_like(leaf) for leaf in diff_leaves],
            )
            _, ct_t, _, ct_w, ct_sorted_ts, ct_ends, ct_leaves = lax.while_loop(
                lambda s: s[0] > 0, back, state
            )
            # The start: `t = ts[0]`, `w = w0`, and the saved states at `ts == ts[0]` (no
            # step covers them).
            start = (ts == ts[0]).reshape(ts.shape + (1,) * w0.ndim)
            ct_w = ct_w + jnp.sum(jnp.where(start, ct_saved, 0), axis=0)
            ct_sorted_ts = ct_sorted_ts.reshape(ts.shape + (-1,)).sum(axis=1)
            ct_ts = jnp.zeros_like(ts).at[order_ts].add(ct_sorted_ts)
            ct_ts = ct_ts.at[0].add(ct_ends[0] + jnp.sum(ct_t)).at[-1].add(ct_ends[1])
            return ct_ts, ct_w, ct_leaves

        run.defvjp(run_fwd, run_bwd)
        return run, diff_leaves

    def solve(ts, y0, args=None) -> Solution:
        w0, g, to_state, ts, p = _setup(vector_field, ts, y0, args, tol, order, batched)
        run, diff_leaves = make(y0, args, p)
        # Forward mode is refused on the inputs, before the `custom_vjp` meets tangents;
        # under `jax.vmap` JAX refuses first, at the `custom_vjp` itself.
        ts, w0, diff_leaves = jax.tree.map(
            lambda x: reverse_only(x, _REVERSE_ONLY), (ts, w0, diff_leaves)
        )
        try:
            saved, steps, end = run(ts, w0, diff_leaves)
        except TypeError as error:
            if _compat.is_custom_vjp_jvp_error(error):
                raise TypeError(_REVERSE_ONLY) from error
            raise
        if not end:
            return Solution(jax.vmap(to_state)(saved), steps)
        t, t_low, w, watch = end
        # The event's step again, differentiably (`_reverse_solve`'s docstring).
        step, _ = _stepper(g, ts, p, batched, method=method)
        *_, c, _h = step(t, t_low, w)
        events = Events(event, event_direction, args, to_state, ts, w0.dtype, batched)
        saved, t_event, w_event = events.finish(watch._replace(c=c), t, t_low, ts, saved)
        return Solution(jax.vmap(to_state)(saved), steps, t_event, to_state(w_event), watch.fired)

    return solve


def integrate(
    vector_field: Callable,
    *,
    tol: float | None = None,
    order: int | None = None,
    max_steps=100_000,
    gradients: str = "forward",
    batch: bool = False,
    event: Callable | None = None,
    event_direction: int = 0,
    coefficients: str = "auto",
) -> Callable:
    """Solve `y' = f(t, y, args)` with an adaptive Taylor method, saving at given times.

    **Arguments:**

    - `vector_field`: `f(t, y, args)`, as in `taylax.ode.coefficients` (and diffrax).
    - `tol`: the tolerance, absolute where the state's max norm is below 1 and relative
      above (default: the machine epsilon of the state's real dtype, as heyoka's).
    - `order`: the Taylor order of every step (default: Jorba and Zou's
      `ceil(-ln(tol) / 2 + 1)`: 20 for float64 at its epsilon, 9 for float32).
    - `max_steps`: the most steps to take (a Python integer).
    - `gradients`: `"forward"` (default) for forward-mode derivatives (`jax.jvp`,
      `jax.jacfwd`), or `"reverse"` for reverse mode (`jax.grad`, `jax.vjp`): the
      backward pass walks the steps back from each step's stored start (a discrete
      adjoint, exact for the computed solution), keeping `max_steps` states of the size of
      `y0` while differentiating. JAX offers one mode per function here: a reverse-mode
      solve cannot be differentiated forward, nor the other way round, and each refuses
      the other in a sentence naming the `gradients` to choose (a `ValueError` from
      `jax.grad` of a forward-mode solve, a `TypeError` from `jax.jvp` of a reverse-mode
      one). Taylor passes (`taylax.derivatives`) run through both. In both modes the
      steps are held where they fell: the derivative is the computed solution's with its
      step sizes fixed (a step ending at a saved time still moves with that time).
    - `batch`: many trajectories in one solve, the fast way on a CPU. Every leaf of `y0`
      then ends in an axis of B trajectories, and `vector_field(t, y, args)` must map such
      states trajectory by trajectory, with `t` a `(B,)` array of their times (a field
      written with `y[0]`, `y[1]`, `jnp.stack` and elementwise functions does). Each
      trajectory takes its own steps; `Solution.ys` leaves are `(len(ts), *leaf.shape)`
      and `Solution.steps` is `(B,)`. The trajectories are the minor axis of every array
      of the Taylor passes, which is 3-4x faster than `jax.vmap` of a solve on XLA:CPU
      (docs/ODE.md). Both gradient modes: in reverse mode the trajectories walk back
      together, each from its own last step. `event` then returns one number per
      trajectory, a `(B,)` array, and each trajectory stops at its own event. A batch
      sharded over devices along its trajectories runs sharded where the mesh's axes
      are automatic (`jax.sharding.AxisType.Auto`); explicit axes are refused with a
      `ValueError`.
    - `event`: a terminating event, `event(t, y, args) -> real scalar` (as heyoka's
      terminal events and diffrax's `Event`): the integration stops at the first time
      after `ts[0]` where `event` changes sign along the solution (or reaches zero from
      either side), and `Solution` reports that time and state. A zero at `ts[0]` itself
      is not an event: the sign `event` takes just after `ts[0]` counts (a ball thrown up
      from the ground lands). The saved times after the event stay NaN. The event time's
      derivative follows the implicit function theorem, in both `gradients` modes.
    - `event_direction`: which crossings fire the event: `1` where `event` goes up through
      zero as time increases, `-1` down, `0` (default) either (heyoka's convention, also
      when integrating backwards in time).
    - `coefficients`: how each step's Taylor coefficients are computed, as
      `taylax.ode.coefficients`' `method`: `"auto"` (default), `"order_by_order"` or
      `"doubling"`.

    **Returns:** a function `(ts, y0, args=None) -> Solution` where `ts` is a 1-D array of
    times in increasing or decreasing order, `ts[0]` the initial time, and `y0` the state
    there (any pytree of floating-point or complex arrays). `Solution.ys` holds the state at
    every `ts` (leaves stacked `(len(ts), *leaf.shape)`), `Solution.steps` the number of
    steps, and with an `event` `Solution.t_event`, `y_event` and `event_happened` (NaN,
    NaN and False where it did not fire). It works under `jax.jit`, `jax.vmap` (the batch
    steps until all are done; each trajectory stops at its own event) and
    differentiation with respect to `ts`, `y0` and the floating-point arrays in `args`
    (see `gradients`). Times outside the interval from `ts[0]` to `ts[-1]` stay NaN. `ts`
    may hold many times: each step evaluates its polynomial only at the times it covers
    (100 orbits of Kepler's problem, 3,773 steps, take 19 ms with 2 saved times and 22 ms
    with 10,001), and each backward step of reverse mode reads only theirs.

    The math: at `(t, y)` the step's coefficients `y_0..y_p` come from
    `taylax.ode.coefficients`; the step `h` from the last two of them (Jorba and Zou:
    `h = rho / e^2 exp(-0.7 / (p - 1))`, `rho` their radius of convergence estimate) keeps
    the truncation error near `tol`; the next state is `sum_k y_k h^k`, and a saved time
    inside the step is the same polynomial there.

    Events: along a step of size `h` from `(t, y)` the event function is
    `g(s) = event(t + s, sum_k y_k s^k, args)`, one Horner evaluation and one call of
    `event` at any `s` in `[0, h]`. Each step evaluates `g` at `h/4, h/2, 3h/4` and `h`, and
    the first quarter whose ends have crossed zero holds the event (so two roots within
    one quarter of a step are missed: heyoka isolates all roots of `g`'s Taylor
    polynomial, which this does not). After the loop that quarter is bisected on the
    step's polynomial down to the dtype's last bit (`nmant + 3` halvings, 55 in float64):
    this runs once per solve, costs less than a step, and cannot fail where Newton's
    method could (a flat `g`, a tangential root, a step out of the bracket). Its derivative
    is not the bisection's: the root `s*` is returned as
    `s* - (g(s*) - stop_gradient(g(s*))) / g'(s*)`, whose value is `s*` and whose tangent is
    the implicit function theorem's `-(dg/dp) / g'(s*)` (`g'` by `jax.jvp` along the
    polynomial), so `jax.jacfwd` of `t_event` is `dt*/dp = -(dG/dp) / (dG/dt)` along the
    computed solution.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        # y'' = -y: y = cos(t) through y(0) = 1, y'(0) = 0.
        field = lambda t, y, args: jnp.stack([y[1], -y[0]])
        ts = jnp.linspace(0.0, 10.0, 5)
        sol = taylax.ode.integrate(field)(ts, jnp.array([1.0, 0.0]))
        # sol.ys[:, 0] == cos(ts) to about 1e-15

        # The first time y[0] = cos(t) falls through zero: pi / 2. The saved times after
        # it stay NaN.
        stop = taylax.ode.integrate(field, event=lambda t, y, args: y[0], event_direction=-1)
        sol = stop(ts, jnp.array([1.0, 0.0]))
        # sol.t_event == pi / 2, sol.y_event == [0, -1], sol.event_happened == True
        ```
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"`max_steps` must be a positive Python integer, got {max_steps!r}.")
    if tol is not None:
        check_tolerance(tol)
    if order is not None and (
        isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 2
    ):
        raise ValueError(f"`order` must be a Python integer of at least 2, got {order!r}.")

    if gradients not in ("forward", "reverse"):
        raise ValueError(f"`gradients` must be 'forward' or 'reverse', got {gradients!r}.")
    if not isinstance(batch, bool):
        raise TypeError(f"`batch` must be True or False, got {batch!r}.")
    check_event(event, event_direction)
    check_method(coefficients, "coefficients")
    if gradients == "reverse":
        return _reverse_solve(
            vector_field, tol, order, int(max_steps), event, event_direction, coefficients, batch
        )

    def solve(ts, y0, args=None) -> Solution:
        w0, g, to_state, ts, p = _setup(vector_field, ts, y0, args, tol, order, batch)
        events = None
        if event is not None:
            events = Events(event, event_direction, args, to_state, ts, w0.dtype, batch)
        rows = _rows(w0, event, batch, coefficients)
        step, remaining = _stepper(g, ts, p, batch, coefficients, rows=rows)
        saved, steps, _, (t, t_low, _, watch) = _march(
            step,
            remaining,
            ts,
            w0,
            int(max_steps),
            batched=batch,
            events=events,
            field=g,
            order=p,
            coefficients=_series_of(g, p, batch, coefficients, rows) if rows else None,
        )
        if events is None:
            return _refusing_reverse_mode(Solution(jax.vmap(to_state)(saved), steps))
        saved, t_event, w_event = events.finish(watch, t, t_low, ts, saved)
        ys = jax.vmap(to_state)(saved)
        return _refusing_reverse_mode(Solution(ys, steps, t_event, to_state(w_event), watch.fired))

    return solve
