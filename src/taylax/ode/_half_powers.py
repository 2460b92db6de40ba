"""Values of order 0 of `x ** 1.5` and `x ** -1.5` by a square root.

Gravity's `r ** -1.5` (or `** 1.5`, divided by) is in most of the ODE benchmarks'
fields. XLA:CPU computes `pow` by a scalar call of libm's `pow`: 58 us over 4,096
float64 values, where a square root, a product and a division take 7.6 us (docs/ODE.md,
"Powers of three halves"). A square root is correctly rounded on every backend, so
`x sqrt(x)` (and its reciprocal) is within 1-2 ulp of the exact power, as `pow` is, and
agrees with `pow` at 0, -0, inf, NaN and x < 0 (NaN). Exponents `+-1/2` and `+-5/2` are
left to `pow`: there `sqrt(-0) = -0` would give -0 (or -inf) where `pow` gives +0 (+inf).
"""

from __future__ import annotations

import numpy as np
from jax import lax

from .. import _compat
from .._series import half_integer_power


def three_halves(eqn, values: list):
    """`[x ** p]` as `x sqrt(x)` or its reciprocal where `eqn` is a `pow` of a real
    floating-point `x` by the constant `p = 1.5` or `-1.5`; else None. `values` are the
    inputs' values of order 0."""
    if eqn.primitive is not lax.pow_p or not isinstance(eqn.invars[1], _compat.Literal):
        return None
    x, p = values
    dtype = getattr(x, "dtype", None)
    if dtype is None or not np.issubdtype(dtype, np.floating) or np.ndim(p) != 0:
        return None
    if abs(float(p)) != 1.5:
        return None
    return [half_integer_power(x, float(p))]
