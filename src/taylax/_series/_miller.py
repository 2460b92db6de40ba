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

# On and left of the imaginary axis erfcx(z) holds a part `exp(z^2)` (once on the axis,
# twice left of it), which the sweep, converging to the decaying solution, leaves out.
# Its coefficients grow like `(2 |z|^2)^k / k!` against erfcx's `|z|^-k`, so the sweep is
# taken there only where that part stays below 2^-60 of erfcx's coefficients to the
# order asked (`_exp_part_log`).
_EXP_PART_MAX_LOG = -60 * math.log(2.0)


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
    sweep where `|x0| >= _threshold(order)` and the function decays like `1 / x` there,
    else the forward recurrence (`quadratic_ode` along the line). Unrolled where the
    policy unrolls a recurrence on a line (`unrolled(order, 1)`), else loops."""
    dtype = jnp.result_type(x0, y0)
    shape = jnp.shape(x0)
    forward = quadratic_ode(stack_rows_as([x0, 1], shape, dtype), y0, g, order)
    if order == 0:
        return forward
    threshold = _threshold(order)
    z = x0 if g.xy > 0 else -1j * x0  # the argument of erfcx
    decays = jnp.real(z) > 0
    if jnp.issubdtype(dtype, jnp.complexfloating):
        decays = decays | (_exp_part_log(z, order) <= _EXP_PART_MAX_LOG)
    backward = decays & (jnp.abs(x0) >= threshold)
    # The unused branch sees a harmless point, so no infinity reaches a derivative.
    xs = jnp.where(backward, x0, jnp.asarray(threshold, dtype))
    u = 1 / (g.xy * xs * xs)
    start = _backward_from(order)
    b_next = -2 / (1 + jnp.sqrt(1 + 4 * (start + 2) * u))
    b = jnp.ones_like(xs)
    if unrolled(order, 1):
        return _unrolled(y0, xs, u, b_next, backward, forward, order)

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
    return with_primal(jnp.where(backward, found, forward), y0)


def _exp_part_log(z, order: int):
    """The logarithm of the ratio of `exp(z^2)`'s coefficient `order` to erfcx's
    (`~ 1 / (sqrt(pi) z^(order + 1))`) at `z`, roughly."""
    r = jnp.maximum(jnp.abs(z), 1.0)
    log_r = jnp.log(r)
    growth = order * (math.log(2.0) + 2 * log_r) - math.lgamma(order + 1)
    return jnp.real(z * z) + 0.5 * math.log(math.pi) + log_r + growth


def _unrolled(y0, xs, u, b_next, backward, forward, order: int) -> Array:
    """`erfcx_coeffs` unrolled, row by row (`forward`: the forward recurrence's rows)."""
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
    rows, power = [y0], jnp.ones_like(xs)
    for k, forward_k in enumerate(rows_of(forward, order + 1)[1:], start=1):
        power = power * step
        rows.append(jnp.where(backward, scale * bs[k] * power, forward_k))
    return stack_rows_as(rows, jnp.shape(xs), forward.dtype)
