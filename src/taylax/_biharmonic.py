"""The biharmonic in one forward pass with a symmetric Hessian.

`Delta^2 f = Delta (Delta f)` by nested collapsed Laplacians carries, per value, the
`d^2` mixed derivatives `d_a d_b z` of the inner pass's first derivatives, both halves
of a symmetric matrix, and `d_a Delta z` twice (as the outer derivative of the inner
Laplacian and as the outer Laplacian of the inner derivatives). Here every value `z`
carries each quantity once:

* `grad`: `g_a = d_a z`, shape `(d, *S)`;
* `hess`: `H_ab = d_a d_b z` for `a <= b` (packed), shape `(d (d + 1) / 2, *S)`;
* `third`: `T_a = d_a Delta z`, shape `(d, *S)`;
* `fourth`: `Q = Delta^2 z`, shape `S`.

Linear maps apply to each of them. An elementwise `y = phi(z)`, with `s = |g|^2`,
`L = tr H`, `u = g . H g`, `phi_k` its k-th derivative at `z`, gives

    g_y = phi_1 g,      H_y = phi_1 H + phi_2 g g^T,
    T_y = phi_1 T + phi_2 (L g + 2 H g) + phi_3 s g,
    Q_y = phi_1 Q + phi_2 (L^2 + 4 g . T + 2 ||H||_F^2) + phi_3 (2 s L + 4 u) + phi_4 s^2.

A run of elementwise equations on one value (gelu, `x * sigmoid(x)`) is one `phi`:
its Taylor series in that value, link by link through the engine's own rules, point
by point. A product of two different values follows Leibniz's rule (with
`<A, B> = sum_ab A_ab B_ab`):

    g_z = x g_y + y g_x,      H_z = x H_y + y H_x + g_x g_y^T + g_y g_x^T,
    T_z = x T_y + y T_x + L_y g_x + L_x g_y + 2 (H_x g_y + H_y g_x),
    Q_z = x Q_y + y Q_x + 2 L_x L_y + 4 (g_x . T_y + g_y . T_x) + 4 <H_x, H_y>,

and a quotient is the product with `1/y` (an elementwise `phi`). Anything else
(control flow, other bilinear maps of two values) raises `Unsupported`, and the
caller falls back to nested Laplacians.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import _series
from ._collapsed import (
    Chain,
    chain_root,
    checked_rule,
    eval_with_chains,
    linear_mask,
    map_linear,
    top_or_zeros,
)
from ._elementwise import bind_one
from ._series import Series

Array = jax.Array
_ORDER = 4


class Unsupported(Exception):
    """An equation this pass has no rule for; use nested Laplacians instead."""


@dataclasses.dataclass(frozen=True)
class Jet4:
    """A value and its biharmonic quantities (None for a constant).

    A quantity known to be zero is None too: the input's Hessian, third and fourth
    quantities, and what linear maps make of them. The first nonlinearity then skips
    every term they enter instead of multiplying arrays of zeros (which XLA keeps: `0 x`
    is not 0 for every float).
    """

    primal: Array
    parts: tuple | None = None  # (grad, hess, third, fourth), each an array or None

    @property
    def is_constant(self) -> bool:
        return self.parts is None


def _trace(h: Array, d: int) -> Array:
    """`tr H` (the Laplacian) of a packed Hessian: the sum of its main diagonal."""
    return jnp.sum(h[:d], 0)


@functools.cache
def _pairs(d: int) -> tuple[np.ndarray, np.ndarray]:
    """`(a, b)` of every packed entry: the packed layout is the diagonals `k = 0..d-1` of
    the upper triangle one after the other (`H[a, a+k]` for `a < d-k`), so the main
    diagonal is the first `d` entries."""
    a = np.concatenate([np.arange(d - k) for k in range(d)])
    b = np.concatenate([np.arange(k, d) for k in range(d)])
    return a, b


@functools.cache
def _packed_index(d: int) -> np.ndarray:
    """`P[a, b]`: where `H[a, b]` (either half) sits in the packed layout."""
    index = np.zeros((d, d), np.int32)
    for p, (a, b) in enumerate(zip(*_pairs(d))):
        index[a, b] = index[b, a] = p
    return index


def _hessian_times(h: Array, g: Array) -> Array:
    """`(H g)_a = sum_b H_ab g_b`: the packed entries gathered into the full matrix,
    one fused kernel, where shifted products band by band were kernels of their own
    (docs/OPERATORS.md, "The biharmonic pass")."""
    return jnp.sum(h[_packed_index(g.shape[0])] * g[None], axis=1)


def _outer(g: Array) -> Array:
    """`g g^T` packed."""
    a, b = _pairs(g.shape[0])
    return g[a] * g[b]


def _symmetric_outer(a: Array, b: Array) -> Array:
    """`a b^T + b a^T` packed."""
    i, j = _pairs(a.shape[0])
    return a[i] * b[j] + b[i] * a[j]


def _frobenius(h: Array, k: Array, d: int) -> Array:
    """`<H, K> = sum_ab H_ab K_ab` of two packed symmetric matrices: the main diagonal
    once, the other bands twice (weights on the whole array: a slice of the other bands
    was copied into a buffer of its own before the reduction)."""
    weight = np.where(np.arange(h.shape[0]) < d, 1.0, 2.0).reshape((-1,) + (1,) * (h.ndim - 1))
    product = h * k
    return jnp.sum(product * weight.astype(product.dtype), 0)


def _dot(a: Array, b: Array) -> Array:
    """`sum_a a_a b_a` over the leading axis."""
    return jnp.sum(a * b, 0)


def _sum(*terms):
    """The sum of the terms that are not None (known zeros); None if all are."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for t in present[1:]:
        total = total + t
    return total


def _times(*factors):
    """The product of the factors; None (zero) if any is None."""
    if any(f is None for f in factors):
        return None
    product = factors[0]
    for f in factors[1:]:
        product = product * f
    return product


def _packed_dim(h: Array) -> int:
    """`d` of a packed Hessian of `d (d + 1) / 2` entries."""
    return (math.isqrt(8 * h.shape[0] + 1) - 1) // 2


def _apply(x: Jet4, phi: Sequence[Array], primal) -> Jet4:
    """`phi(x)` from `phi[k]`, the k-th derivative at `x.primal` (k = 1..4)."""
    g, h, t, q = x.parts
    has_g, has_h = g is not None, h is not None
    d = _packed_dim(h) if has_h else None
    hg = _hessian_times(h, g) if has_g and has_h else None
    s = _dot(g, g) if has_g else None
    trace = _trace(h, d) if has_h else None
    outer = _outer(g) if has_g else None
    # `g . H g` as `<H, g g^T>` on the packed entries: where only `Q_y` is read (the last
    # nonlinearity before a linear output) no `H g` is left, whose gather filled a (d, d)
    # buffer per point (docs/OPERATORS.md, "The biharmonic pass").
    u = _frobenius(h, outer, d) if has_g and has_h else None
    # A reduction over the leading axis: a tensordot with the band weights made XLA
    # transpose `h` for a dot.
    frobenius = _frobenius(h, h, d) if has_h else None
    p1, p2, p3, p4 = phi
    g_y = _times(p1, g)
    h_y = _sum(_times(p1, h), _times(p2, outer))
    t_y = _sum(_times(p1, t), _times(p2, _sum(_times(trace, g), _times(2, hg))), _times(p3, s, g))
    q_y = _sum(
        _times(p1, q),
        _times(p2, _sum(_times(trace, trace), _times(4, _dot_or_none(g, t)), _times(2, frobenius))),
        _times(p3, _sum(_times(2, s, trace), _times(4, u))),
        _times(p4, s, s),
    )
    return Jet4(primal, (g_y, h_y, t_y, q_y))


def _dot_or_none(a, b):
    return None if a is None or b is None else _dot(a, b)


def _product(x: Jet4, y: Jet4, primal) -> Jet4:
    """`x * y` of two values with biharmonic parts, by Leibniz's rule (module docstring)."""
    (gx, hx, tx, qx), (gy, hy, ty, qy) = x.parts, y.parts
    lx = _trace(hx, _packed_dim(hx)) if hx is not None else None
    ly = _trace(hy, _packed_dim(hy)) if hy is not None else None
    both_g = gx is not None and gy is not None
    g = _sum(_times(x.primal, gy), _times(y.primal, gx))
    h = _sum(
        _times(x.primal, hy), _times(y.primal, hx), _symmetric_outer(gx, gy) if both_g else None
    )
    t = _sum(
        _times(x.primal, ty),
        _times(y.primal, tx),
        _times(ly, gx),
        _times(lx, gy),
        _times(2, _sum(_hessian_times_or_none(hx, gy), _hessian_times_or_none(hy, gx))),
    )
    frobenius = None
    if hx is not None and hy is not None:
        frobenius = _frobenius(hx, hy, _packed_dim(hx))
    q = _sum(
        _times(x.primal, qy),
        _times(y.primal, qx),
        _times(2, lx, ly),
        _times(4, _sum(_dot_or_none(gx, ty), _dot_or_none(gy, tx))),
        _times(4, frobenius),
    )
    return Jet4(primal, (g, h, t, q))


def _hessian_times_or_none(h, g):
    return None if h is None or g is None else _hessian_times(h, g)


def _reciprocal(y: Jet4) -> Jet4:
    """`1 / y`: `phi_k = (-1)^k k! / y^(k+1)`."""
    inverse = 1 / y.primal
    phi = [(-1) ** k * math.factorial(k) * inverse ** (k + 1) for k in range(1, 5)]
    return _apply(y, phi, inverse)


def _expand(chain: Chain) -> Jet4:
    """`phi(root)` from the chain's Taylor series in its root: `phi_k = k! c_k`."""
    c = chain.state.coeffs
    phi = [
        c[k] * math.factorial(k) if k < c.shape[0] else jnp.zeros_like(c[0]) for k in range(1, 5)
    ]
    return _apply(chain.root, phi, chain.primal)


def _link(eqn, values, only_elementwise_readers) -> Chain | None:
    """Continue an elementwise chain (its order-4 Taylor series in the root, by the
    engine's rules), or start one at a nonlinear elementwise equation of a value."""
    root = chain_root(eqn, values)
    if root is None:
        return None
    starts = not any(isinstance(x, Chain) for x in values)
    if starts and linear_mask(eqn.primitive, values) is not None:
        return None  # a linear map of a value: apply it as it is
    series = []
    for x in values:
        if isinstance(x, Chain):
            series.append(x.state)
        elif x.is_constant:
            series.append(Series.constant(x.primal))
        else:  # the root itself: the unit seed, so closed forms along a line apply
            series.append(Series(_series.unit_seed(x.primal)))
    (y,) = checked_rule(eqn)(_ORDER, *series)
    return Chain(bind_one(eqn, [x.primal for x in values]), root, y)


def _linear(eqn, xs: Sequence[Jet4], mask, primals) -> list[Jet4]:
    """A linear map applied to each quantity: one mapped call per quantity, so no copy
    concatenates them (each is its own matmul under `vmap`).

    After the first nonlinearity every quantity is `phi_k(z)` times rows that are the
    same at every point, so the second layer could be one GEMM of the points' `phi_k`
    with a fixed (width, rows * width) matrix instead of a GEMM of the scaled rows. That
    ran slower: the wide GEMM and the reads of its fixed matrix on every call cost more
    than the scaled rows it saved (docs/OPERATORS.md, "The biharmonic pass").
    """
    mapped = []
    for i in range(4):

        def rows(x, i=i):
            if x.is_constant or x.parts[i] is None:
                return None
            return x.parts[i] if i < 3 else x.parts[i][None]

        out = map_linear(eqn, xs, mask, rows)
        mapped.append([None] * len(primals) if out is None else out)
    return [
        Jet4(p, (g, h, t, None if q is None else q[0])) for p, g, h, t, q in zip(primals, *mapped)
    ]


def _apply_equation(eqn, xs: Sequence[Jet4], primals) -> list[Jet4]:
    """A linear map, or a product or quotient of two values; `Unsupported` otherwise."""
    mask = linear_mask(eqn.primitive, xs)
    if mask is not None:
        return _linear(eqn, xs, mask, primals)
    name = eqn.primitive.name
    both = len(xs) == 2 and not any(x.is_constant for x in xs)
    # lax's binary operators take equal shapes (jnp broadcasts before them).
    if both and name in ("mul", "div") and xs[0].primal.shape == xs[1].primal.shape:
        x, y = xs
        return [_product(x, y if name == "mul" else _reciprocal(y), primals[0])]
    raise Unsupported(name)


def eval_jaxpr_biharmonic(jaxpr, consts, args: Sequence[Jet4]) -> list[Jet4]:
    """Evaluate `jaxpr` on `Jet4` inputs; raise `Unsupported` where no rule applies."""
    return eval_with_chains(
        jaxpr, consts, args, wrap=Jet4, link=_link, expand=_expand, apply=_apply_equation
    )


def seed(x: Array) -> Jet4:
    """The input: `g = e_a` (the basis of `x`'s entries), everything above it zero."""
    d = x.size
    # Built from shapes, not from `x`: under `vmap` it stays unbatched, so the first
    # layer maps `d` constant rows once, not once per point.
    g = jnp.eye(d, dtype=x.dtype).reshape((d, *x.shape))
    return Jet4(x, (g, None, None, None))


def program_of(jaxpr):
    """`(consts, x, arg_leaves) -> biharmonic of every output` (zeros where constant)."""

    def program(consts, x, arg_leaves):
        inputs = [seed(x)] + [Jet4(a) for a in arg_leaves]
        outs = eval_jaxpr_biharmonic(jaxpr, consts, inputs)
        return [
            top_or_zeros(None if o.is_constant else o.parts[3], v.aval, v.aval.shape)
            for o, v in zip(outs, jaxpr.outvars)
        ]

    return program
