"""First-order equations `y' = x' g(x, y)` whose `g` is a polynomial of degree at most
two in `x` and `y`: the series of JAX's special functions whose custom jvp rule reads the
function's own output (`taylax._rules._own_output`).

With `g = c + c_x x + c_y y + c_xy x y + c_yy y^2`, coefficient `m` of `g` needs `y` only
up to coefficient `m`, and

    k y_k = sum_{j=1..k} j x_j g_{k-j},

so the coefficients come one order at a time in O(K^2) products: the rule solves in one
pass what nested jvp, following the rule as written, computes in K nested ones.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ._coeffs import (
    Array,
    as_real,
    conv_at,
    degree_of,
    derivative_stack,
    fori,
    fresh,
    get_coeff,
    lift,
    pad_degree,
    reversed_window_source,
    self_conv_at,
    set_coeff,
)
from ._marks import computed_once, opaque_one
from ._products import derivative_rows, dot_rows
from ._recurrences import folded_square_terms, unrolled
from ._rows import stack_rows_as


@dataclasses.dataclass(frozen=True)
class Quadratic:
    """The coefficients of `g(x, y) = c + x_ x + y_ y + xy x y + yy y^2` (numbers; `c`
    may be complex for a complex equation)."""

    c: complex = 0.0
    x_: float = 0.0
    y_: float = 0.0
    xy: float = 0.0
    yy: float = 0.0

    def at(self, x0, y0):
        """`g(x0, y0)`, the terms with a zero coefficient left out."""
        total = jnp.zeros_like(y0) + self.c if self.c else jnp.zeros_like(y0)
        for weight, term in ((self.x_, x0), (self.y_, y0), (self.xy, x0 * y0), (self.yy, y0 * y0)):
            if weight:
                total = total + weight * term
        return total


def quadratic_ode(x: Array, y0: Array, g: Quadratic, order: int) -> Array:
    """The series `y` (stacked, rows 0..order) with `y' = x' g(x, y)` and `y(0) = y0`, for
    a stacked series `x` of any degree.

    Unrolled (`unrolled`) each row is a sum of products of earlier rows: `deg(x)` terms
    for `x' g` and for `x y`, k/2 for `y^2`, so along a line (`deg(x) = 1`) an equation
    without `y^2` costs a few products per order and unrolls as far as the policy's
    low-degree bound. Past that, one `lax.fori_loop` fills `y` and `g` one coefficient
    per trip.

    Example: `erfcx(x)` solves `y' = x' (2 x y - 2 / sqrt(pi))`:
    `quadratic_ode(x, erfcx(x0), Quadratic(c=-2 / sqrt(pi), xy=2.0), order)`.
    """
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0))
    # `y^2` has full degree whatever `x`'s; `x y` and `x' g` have `x`'s.
    degree = None if g.yy else degree_of(x)
    if unrolled(order, degree):
        return _unrolled(x, y0, g, order, shape, dtype)
    return _loop(x, y0, g, order, shape, dtype)


def _unrolled(x: Array, y0: Array, g: Quadratic, order: int, shape, dtype) -> Array:
    xs, jx = derivative_rows(x, dtype, order)
    one = opaque_one(xs[0])
    y0 = jnp.broadcast_to(jnp.asarray(y0, dtype), shape)
    # Every row is read by every later one: computed once, or XLA computes each again in
    # every reader (`computed_once`). The rows of `g`, a few products each, fuse into the
    # row that reads them, as `_recurrences._riccati`'s slope does.
    ys = [computed_once(y0, one)]
    gs = [computed_once(g.at(xs[0], ys[0]).astype(dtype), one)]
    for k in range(1, order + 1):
        acc = dot_rows((jx[j], gs[k - j]) for j in range(1, k + 1))
        ys.append(jnp.zeros(shape, dtype) if acc is None else computed_once(acc / float(k), one))
        if k == order:
            break
        terms = []
        if g.x_ and xs[k] is not None:
            terms.append(g.x_ * xs[k])
        if g.y_:
            terms.append(g.y_ * ys[k])
        if g.xy:
            xy = dot_rows((xs[i], ys[k - i]) for i in range(k + 1))
            if xy is not None:
                terms.append(g.xy * xy)
        if g.yy:
            square = 2 * ys[0] * ys[k]
            for term in folded_square_terms(ys, k):
                square = square + term
            terms.append(g.yy * square)
        total = None
        for term in terms:
            total = term if total is None else total + term
        gs.append(total)
    return stack_rows_as(ys, shape, dtype)


def _loop(x: Array, y0: Array, g: Quadratic, order: int, shape, dtype) -> Array:
    c = jnp.broadcast_to(lift(pad_degree(x, order), len(shape)), (order + 1,) + shape)
    c = c.astype(dtype)
    u_source = reversed_window_source(derivative_stack(c), order)  # x' = sum (j+1) x_{j+1}
    x_source = reversed_window_source(c, order)
    y0 = jnp.broadcast_to(jnp.asarray(y0, dtype), shape)
    y = fresh(y0, order, dtype)
    gs = fresh(g.at(c[0], y0).astype(dtype), order, dtype)

    def body(k, carry):
        y, gs = carry
        y_k = conv_at(u_source, order, gs, k - 1, order) / as_real(k, dtype)
        y = set_coeff(y, y_k, k)
        g_k = jnp.zeros(shape, dtype)
        if g.x_:
            g_k = g_k + g.x_ * get_coeff(c, k)
        if g.y_:
            g_k = g_k + g.y_ * y_k
        if g.xy:
            g_k = g_k + g.xy * conv_at(x_source, order + 1, y, k, order)
        if g.yy:
            g_k = g_k + g.yy * self_conv_at(y, k, order)
        return y, set_coeff(gs, g_k, k)

    return fori(order, body, (y, gs))[0]
