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

import jax.numpy as jnp
from jax import lax

from ._coeffs import Array
from ._lines import powers
from ._quadratic import Quadratic, quadratic_ode
from ._recurrences import unrolled
from ._rows import stack_rows_as, with_primal

_TWO_OVER_SQRT_PI = 1.1283791670955126
# erfcx's own equation, `y' = 2 x y - 2 / sqrt(pi)`, for the forward recurrence in a loop.
_EQUATION = Quadratic(c=-_TWO_OVER_SQRT_PI, xy=2.0)


def _backward_from(order: int) -> int:
    """The order N the backward sweep starts from, for coefficients up to `order`."""
    return 3 * order + 40


def _threshold(order: int) -> float:
    """Where the backward sweep takes over: from `x0 >= 1 + 4 / order`. Below it the
    forward recurrence loses fewer digits than the sweep from `_backward_from(order)`
    leaves: together at most 5.6e-13 relative up to order 8 over x0 in 0.05..1000, 6.9e-12
    at order 16 (`python benchmarks/erfcx_tail.py`)."""
    return 1.0 + 4.0 / order


def erfcx_coeffs(x0: Array, y0: Array, order: int) -> Array:
    """The stacked `c_0..c_order` of `erfcx(x0 + t)` (real `x0`), `c_0 = y0 = erfcx(x0)`:
    forward recurrence below `_threshold(order)`, Miller's backward sweep above. Unrolled
    where the policy unrolls a recurrence on a line (`unrolled(order, 1)`), else loops."""
    dtype = jnp.result_type(x0, y0)
    shape = jnp.shape(x0)
    if order == 0:
        return stack_rows_as([y0], shape, dtype)
    threshold = _threshold(order)
    backward = x0 >= threshold
    # The unused branch sees a harmless point, so no infinity reaches a derivative.
    xs = jnp.where(backward, x0, jnp.asarray(threshold, dtype))
    u = 1 / (2 * xs * xs)
    start = _backward_from(order)
    b_next = -2 / (1 + jnp.sqrt(1 + 4 * (start + 2) * u))
    b = jnp.ones_like(xs)
    if unrolled(order, 1):
        return _unrolled(x0, y0, xs, u, b_next, b, backward, order, shape, dtype)

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
    forward = quadratic_ode(stack_rows_as([x0, 1], shape, dtype), y0, _EQUATION, order)
    found = (y0 / bs[0]) * bs * powers(1 / xs, order)
    return with_primal(jnp.where(backward, found, forward), y0)


def _unrolled(x0, y0, xs, u, b_next, b, backward, order: int, shape, dtype) -> Array:
    """`erfcx_coeffs` unrolled, row by row."""
    forward = [y0, 2 * x0 * y0 - _TWO_OVER_SQRT_PI]
    for k in range(1, order):
        forward.append((2.0 / (k + 1)) * (x0 * forward[k] + forward[k - 1]))
    start = _backward_from(order)
    bs = [None] * (order + 1)
    for k in range(start, 0, -1):
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
    for k in range(1, order + 1):
        power = power * step
        rows.append(jnp.where(backward, scale * bs[k] * power, forward[k]))
    return stack_rows_as(rows, shape, dtype)
