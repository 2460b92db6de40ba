"""The Taylor coefficients of `erfcx` at a point, accurate in its tail (Miller's algorithm).

`y = erfcx(x)` solves `y' = 2 x y - 2 / sqrt(pi)`, so `y'' = 2 (y + x y')`, and its
coefficients `c_k` at a point `x0` obey, for k >= 1,

    (k + 1) c_{k+1} = 2 (x0 c_k + c_{k-1}),

whose second solution is the coefficients of `exp(x^2)`. For large `x0` erfcx decays like
`1 / (sqrt(pi) x)` and its coefficients like `x0^-k`, while those of `exp(x^2)` grow like
`(2 x0^2)^k / k!`: run forward (as JAX's jvp rule, nested jvp and a series recurrence do),
the recurrence multiplies each rounding error by about `2 x0^2 / k` per order, and
`erfcx(30 + t)` had lost every digit by order 6 (docs/EMISSION.md, "erfcx in its
tail"). Run backward, from an order N above K down to 0, it damps the second solution
by as much, and the known `c_0 = erfcx(x0)` scales the result (Miller's algorithm).

Written for `b_k = c_k x0^k`, the backward step `b_{k-1} = (k + 1) u b_{k+1} - b_k`,
`u = 1 / (2 x0^2)`, is two products and a difference, with no division, and its values
stay near 1 however large `x0` is. It starts from the ratio `b_{N+1} / b_N` of the
recurrence's decaying solution at order N (the smaller root of `(N + 2) r^2 = 2 x0 r + 2`,
times `x0`): from there the sweep needs about 3K + 40 orders near `x0 = 1`, fewer far
out, where it converges faster than the forward recurrence diverges.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ._coeffs import Array
from ._lines import powers
from ._quadratic import Quadratic, quadratic_ode
from ._recurrences import unrolled
from ._rows import rows_of, stack_rows_as, with_primal

# `_sweep_wins`'s margin: the sweep is taken where the two solutions' ratios over orders
# 1..N reach `exp(-_SWEEP_MARGIN) / eps`.
_SWEEP_MARGIN = 9.0


def _backward_from(order: int) -> int:
    """The order N the backward sweep starts from, for coefficients up to `order`."""
    return 3 * order + 40


def _threshold(order: int) -> float:
    """Where the backward sweep takes over: from `x0 >= 1 + 4 / order`. Below it the
    forward recurrence loses fewer digits than the sweep from `_backward_from(order)`
    leaves: together at most 5.6e-13 relative up to order 8 over x0 in 0.05..1000, 6.9e-12
    at order 16 (`python benchmarks/erfcx_tail.py`)."""
    return 1.0 + 4.0 / order


def erfcx_coeffs(x0: Array, y0: Array, order: int, g: Quadratic) -> Array:
    """The stacked `c_0..c_order` at `x0` of the solution `y` of `y' = g.xy x y + g.c`
    through `y(x0) = y0`: erfcx (`g.xy = 2`, real or complex `x0`) or the Faddeeva
    function `w(x) = erfcx(-i x)` (`g.xy = -2`, JAX's complex erfcx). Miller's backward
    sweep for real `x0 >= _threshold(order)`, and for complex ones where it beats the
    forward recurrence (`_sweep_wins`; left of the axis through `erfcx(-z)`), else the
    forward recurrence (`quadratic_ode` along the line). Unrolled where the policy
    unrolls a recurrence on a line (`unrolled(order, 1)`), else loops."""
    dtype = jnp.result_type(x0, y0)
    shape = jnp.shape(x0)
    forward = quadratic_ode(stack_rows_as([x0, 1], shape, dtype), y0, g, order)
    if order == 0:
        return forward
    threshold = _threshold(order)
    z = x0 if g.xy > 0 else -1j * x0  # the argument of erfcx
    exp_part = None
    if jnp.issubdtype(dtype, jnp.complexfloating):
        backward = _sweep_wins(z, order, dtype)
        # Left of the axis, `erfcx(z) = 2 exp(z^2) - erfcx(-z)`: the sweep serves
        # `erfcx(-z)`, whose value is `2 exp(z^2) - y0` and whose sweep is this one (it
        # reads only `x0^2`), and `exp(z^2)`'s coefficients, the growing solution, run
        # forward without loss. Where `exp(z^2)` overflows, so does `y0`.
        reflected = backward & (jnp.real(z) < 0)
        exp_part = _exp_part(x0, reflected, order, g)
        backward = backward & jnp.isfinite(exp_part[0])
        y0 = jnp.where(reflected, y0 - exp_part[0], y0)
    else:
        backward = (jnp.abs(x0) >= threshold) & (jnp.real(z) > 0)
    # The unused branch sees a harmless point, so no infinity reaches a derivative.
    xs = jnp.where(backward, x0, jnp.asarray(threshold, dtype))
    u = 1 / (g.xy * xs * xs)
    start = _backward_from(order)
    b_next = -2 / (1 + jnp.sqrt(1 + 4 * (start + 2) * u))
    if unrolled(order, 1):
        return _unrolled(y0, xs, u, b_next, backward, forward, exp_part, order)
    b = jnp.ones_like(xs)

    # Above `order` nothing is kept: a loop, rescaled every trip (float32's range).
    def upper(i, carry):
        b_next, b = carry
        k = start - i
        b_next, b = b, (k + 1) * u * b_next - b
        scale = 1 / (jnp.abs(b) + jnp.abs(b_next))
        return b_next * scale, b * scale

    b_next, b = lax.fori_loop(0, start - order - 1, upper, (b_next, b))

    def lower(carry, k):
        b_next, b = carry
        b_new = (k + 1) * u * b_next - b
        return (b, b_new), b_new

    ks = jnp.arange(order + 1, 0, -1).astype(dtype)
    _, kept = lax.scan(lower, (b_next, b), ks)  # b_order .. b_0
    bs = jnp.flip(kept, 0)
    found = (y0 / bs[0]) * bs * powers(1 / xs, order)
    if exp_part is not None:
        found = found + exp_part
    return with_primal(jnp.where(backward, found, forward), forward[0])


def _exp_part(x0, reflected, order: int, g: Quadratic) -> Array:
    """The stacked coefficients of `2 exp(z^2)` at the `reflected` points (`z = x0`, or
    `-i x0` for `w`: `exp(g.xy x^2 / 2)`), zero elsewhere."""
    xe = jnp.where(reflected, x0, jnp.zeros_like(x0))
    e0 = jnp.where(reflected, 2 * jnp.exp(0.5 * g.xy * xe * xe), jnp.zeros_like(x0))
    line = stack_rows_as([xe, 1], jnp.shape(x0), jnp.result_type(x0))
    return quadratic_ode(line, e0, Quadratic(xy=g.xy), order)


def _sweep_wins(z, order: int, dtype):
    """Where the sweep (reflected left of the axis) beats the forward recurrence at the
    complex point `z`, by a model of both errors.

    Both errors follow the ratio of the recurrence's two solutions, `|r_+(k) / r_-(k)|`
    at order k, whose roots `r = (z +- s) / (k + 1)`, `s = sqrt(z^2 + 2 (k + 1))`, give
    `log |r_+ / r_-| = dG / dm` for `G(m) = m log(|s + z|^2 / (2 m)) + Re(z s)` (`s` at
    `m = k + 1`, `Re z >= 0`). The forward recurrence multiplies a rounding error by
    `exp(G(K) - G(1))` up to order K; the sweep damps its start's error by
    `exp(G(N) - G(K))` from order N down. Their sum `G(N) - G(1)` against `log(1 / eps)`
    decides, with a margin set on a grid where both methods were forced at each point
    (docs/EMISSION.md, "Complex erfcx"; `python benchmarks/erfcx_tail.py` measures the
    choice)."""
    w = jnp.where(jnp.real(z) < 0, -z, z)
    gain = _damping(w, _backward_from(order)) - _damping(w, 1)
    return gain >= -math.log(float(jnp.finfo(dtype).eps)) - _SWEEP_MARGIN


def _damping(w, m: int):
    """`G(m)` of `_sweep_wins` at `w` (`Re w >= 0`)."""
    s = jnp.sqrt(w * w + 2 * m)
    return m * jnp.log(jnp.abs(s + w) ** 2 / (2 * m)) + jnp.real(w * s)


def _unrolled(y0, xs, u, b_next, backward, forward, exp_part, order: int) -> Array:
    """`erfcx_coeffs` unrolled, row by row (`forward`: the forward recurrence's rows;
    `exp_part`: `_exp_part`'s, or None)."""
    b = jnp.ones_like(xs)
    bs = [None] * (order + 1)
    for k in range(_backward_from(order), 0, -1):
        b_next, b = b, (k + 1) * u * b_next - b
        if k - 1 <= order:
            bs[k - 1] = b
        elif k % 8 == 0:
            # Rescaled every 8 orders (at most about 40x each) above those kept: float32's
            # range would not hold the sweep's growth from about x0 = 1.
            scale = 1 / (jnp.abs(b) + jnp.abs(b_next))
            b_next, b = b_next * scale, b * scale
    scale = y0 / bs[0]
    step = 1 / xs
    exp_rows = None if exp_part is None else rows_of(exp_part, order + 1)
    forward_rows = rows_of(forward, order + 1)
    rows, power = [forward_rows[0]], jnp.ones_like(xs)
    for k in range(1, order + 1):
        power = power * step
        found = scale * bs[k] * power
        if exp_rows is not None:
            found = found + exp_rows[k]
        rows.append(jnp.where(backward, found, forward_rows[k]))
    return stack_rows_as(rows, jnp.shape(xs), forward.dtype)
