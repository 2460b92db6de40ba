"""`jnp.logaddexp` (softplus, log_sigmoid) and `jnp.logaddexp2` in one pass, as nested
jvp computes them.

JAX defines `logaddexp` with a custom jvp rule whose tangent reads the function's own
output:

    y' = a_1 x1' + a_2 x2',    a_i = exp(r(x_i) - r(y)),    r(z) = (0 if z = +inf else z).

Followed as written (`_calls._custom_jvp_call`), the series of `y'` at order K - 1 calls
`logaddexp` again at order K - 2, and so on down to order 0: K nested passes. At K = 8
under `vmap` that ran `jax.nn.log_sigmoid` at 4.0x nested jvp along a line
(docs/EMISSION.md, "logaddexp"). This rule solves the same equation in one pass:

- Where `y_0 < +inf`, `r` is the identity on the arguments and on `y`, so the weights are
  the analytic `a_1 = exp(x1 - y) = logistic(x1 - x2)` and `a_2 = 1 - a_1`: one logistic
  series, whose rule stays finite where the arguments are far apart. Ties (`x1_0 =
  x2_0`), where the function's own body has kinks, are analytic points here too.
- Where `y_0 = +inf` (an argument at `+inf`), `r(y) = 0` and `a_i = exp(r(x_i))`: 1 for
  an argument at `+inf`, its exponential for a finite one (`exp(x2) x2'` for
  `logaddexp(+inf, x2)`, as JAX's rule gives). Those exponentials are built only for an
  argument whose partner may be `+inf` (not for softplus's constant 0), and computed
  only when some element is `+inf`, under `vmap` too (`taylax._rare.where_any`).

`logaddexp2`'s rule is the same with `exp2`: its weights are `logistic((x1 - x2) ln 2)`
and `2^(r(x_i)) = exp(r(x_i) ln 2)`.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat, _rare, _series
from .._interpret import taylor_rules
from .._series import Series


def rule_for(jvp_jaxpr_fun):
    """This module's series rule for a `custom_jvp_call` whose jvp rule it knows, or None."""
    base = _compat.logaddexp_jvp_rules().get(_compat.custom_jvp_rule_function(jvp_jaxpr_fun))
    return None if base is None else functools.partial(logaddexp, base=base)


def logaddexp(order: int, x1: Series, x2: Series, base="e") -> Series | None:
    """The series of `jnp.logaddexp(x1, x2)` (`base="e"`) or `jnp.logaddexp2(x1, x2)`
    (`base=2`: every exponential in base 2, `2^u = exp(u ln 2)`) to `order` (see the
    module docstring); None for complex or constant arguments, which take the rule as
    written."""
    dtype = jnp.result_type(x1.dtype, x2.dtype)
    if not jnp.issubdtype(dtype, np.floating) or (x1.is_constant and x2.is_constant):
        return None
    primal = jnp.logaddexp if base == "e" else jnp.logaddexp2
    ln_base = 1.0 if base == "e" else math.log(2.0)
    y0 = _series.once(primal(jnp.asarray(x1.primal, dtype), jnp.asarray(x2.primal, dtype)))
    shape = jnp.shape(y0)
    low = order - 1
    c1, c2 = (_coeffs(x, shape, dtype) for x in (x1, x2))
    difference = _sum(c1, c2, -1.0)
    difference = difference if base == "e" else difference * ln_base
    weight = taylor_rules[lax.logistic_p](low, Series(difference)).coeffs
    slopes = [
        None if x.is_constant else _series.derivative_series(c) for x, c in ((x1, c1), (x2, c2))
    ]
    # a_1 x1' + (1 - a_1) x2' = x2' + a_1 (x1' - x2')
    if slopes[0] is None:
        g = _sum(slopes[1], _series.cauchy(weight, slopes[1], low), -1.0)
    elif slopes[1] is None:
        g = _series.cauchy(weight, slopes[0], low)
    else:
        g = _sum(slopes[1], _series.cauchy(weight, _sum(slopes[0], slopes[1], -1.0), low))
    # Where `y_0 = +inf`: each finite argument weighs its exponential. Those series are
    # computed only when some element needs them, also under `vmap` (`_rare`): for
    # every point they took half of `logaddexp(t, t^2 / 2)`'s time.
    infinite_sides = [
        (i, slope)
        for i, (slope, partner) in enumerate(((slopes[0], x2), (slopes[1], x1)))
        if slope is not None and _may_be_infinite(partner)
    ]
    if infinite_sides:
        cs = (c1, c2)

        def at_infinity(*ops):
            total = None
            for n in range(len(infinite_sides)):
                c, slope = ops[2 * n], ops[2 * n + 1]
                finite = _finite_part(c, low)
                finite = finite if base == "e" else finite * ln_base
                a = taylor_rules[lax.exp_p](low, Series(finite))
                term = _series.cauchy(a.coeffs, slope, low)
                total = term if total is None else _sum(total, term)
            return _series.pad_degree(total, degree)

        degree = max(_series.degree_of(g), *(_series.degree_of(s) for _, s in infinite_sides))
        degree = min(degree, low)
        operands = [a for i, slope in infinite_sides for a in (cs[i], slope)]
        g = _rare.where_any(y0 == jnp.inf, at_infinity, _series.pad_degree(g, degree), operands)
    return Series(_series.integrate(g, y0, order))


def _may_be_infinite(x: Series) -> bool:
    """False only for a constant argument known to be finite (softplus's 0)."""
    if not x.is_constant or _compat.is_tracer(x.primal):
        return True
    return not bool(np.all(np.isfinite(np.asarray(x.primal))))


def _coeffs(x: Series, shape, dtype):
    """`x`'s stacked coefficients (its primal alone for a constant), broadcast to `shape`."""
    c = jnp.asarray(x.primal, dtype)[None] if x.is_constant else jnp.asarray(x.coeffs, dtype)
    if c.shape[1:] == shape:
        return c
    return jnp.broadcast_to(_series.lift(c, len(shape)), c.shape[:1] + shape)


def _finite_part(c, order: int):
    """`r(x)` to `order`: `x`'s series, zero where `x_0 = +inf` (`jnp.logaddexp`'s
    `_replace_inf`, differentiated: a select of the constant 0)."""
    c = _series.leading_rows(c, order + 1)
    rows = _series.rows_of(c, c.shape[0])
    infinite = rows[0] == jnp.inf
    return _series.stack_rows([jnp.where(infinite, 0.0, row) for row in rows])


def _sum(a, b, sign: float = 1.0):
    """`a + sign b` for stacked series of possibly different degrees, as stacks: kept as
    rows (`_series.sum_series`), the sums and selects of two varying arguments were all
    fused into the kernel that writes the output, 7.6 against 4.1 ms at K = 8 for
    `logaddexp(t, t^2 / 2)` under `vmap` (`benchmarks/point_major.py`)."""
    degree = max(_series.degree_of(a), _series.degree_of(b))
    return _series.pad_degree(a, degree) + sign * _series.pad_degree(b, degree)
