"""Rules for bilinear primitives: `dot_general` and `conv_general_dilated`.

With one constant operand they are linear (one batched call); with two series
operands the Cauchy product is one batched call over a Toeplitz table.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
from jax import lax

from .. import _series as ks
from .._interpret import register_rule
from .._series import Series


def _bilinear(prim, small_op=None):
    def rule(order, a, b, **params):
        def op(x, y):
            return prim.bind(x, y, **params)

        degree = min(a.degree + b.degree, order)
        if small_op is not None and a.degree and b.degree:
            work = (degree + 1) ** 2 * _product_size(a.shape, b.shape, params)
            if work <= _SMALL_PRODUCT:
                op = functools.partial(small_op, **params)
        return Series(ks.cauchy_bilinear(op, a.coeffs, b.coeffs, order))

    register_rule(prim)(rule)


# A Cauchy product of small matrices is cheaper as one fused multiply-and-sum than
# as (degree+1) small dots: XLA:CPU emits every dot as its own kernel, which costs
# compile time (measured: nested jacfwd of 2x2 matrix recursions), and fuses the
# multiply-and-sum with its neighbours.
_SMALL_PRODUCT = 1 << 14


def _split_dims(ndim, contract, batch):
    return [d for d in range(ndim) if d not in contract and d not in batch]


def _product_size(a_shape, b_shape, params) -> int:
    (ac, bc), (ab, _) = params["dimension_numbers"]
    size = math.prod(a_shape)
    return size * math.prod(b_shape[d] for d in _split_dims(len(b_shape), bc, ()))


def _dot_general_by_multiply(x, y, *, dimension_numbers, preferred_element_type=None, **_):
    """`lax.dot_general` as a broadcast multiply and a sum (same result, fusable)."""
    (xc, yc), (xb, yb) = dimension_numbers
    xf = _split_dims(x.ndim, xc, xb)
    yf = _split_dims(y.ndim, yc, yb)
    xt = lax.transpose(x, (*xb, *xf, *xc))
    yt = lax.transpose(y, (*yb, *yf, *yc))
    nb, nxf, nyf, nc = len(xb), len(xf), len(yf), len(xc)
    xt = lax.expand_dims(xt, tuple(range(nb + nxf, nb + nxf + nyf)))
    yt = lax.expand_dims(yt, tuple(range(nb, nb + nxf)))
    dtype = preferred_element_type or jnp.result_type(x, y)
    prod = xt.astype(dtype) * yt.astype(dtype)
    return jnp.sum(prod, axis=tuple(range(prod.ndim - nc, prod.ndim))) if nc else prod


_bilinear(lax.dot_general_p, _dot_general_by_multiply)
_bilinear(lax.conv_general_dilated_p)
