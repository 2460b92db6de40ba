"""Rules for bilinear primitives: `dot_general` and `conv_general_dilated`.

With one constant operand they are linear (one batched call); with two series
operands the Cauchy product is one batched call over a Toeplitz table.
"""

from __future__ import annotations

from jax import lax

from .. import _series as ks
from .._interpret import register_rule
from .._series import Series


def _bilinear(prim):
    def rule(order, a, b, **params):
        def op(x, y):
            return prim.bind(x, y, **params)

        return Series(ks.cauchy_bilinear(op, a.coeffs, b.coeffs, order))

    register_rule(prim)(rule)


_bilinear(lax.dot_general_p)
_bilinear(lax.conv_general_dilated_p)
