"""Elementwise primitives, and passes of order 1 through JAX's own derivative rules.

A Taylor pass of order 1 is forward mode: coefficient 1 of `y = g(x)` is `g'(x_0) x_1`,
which is what `jax.jvp` of `g` computes. For an elementwise `g` JAX's rule is one small
expression that XLA fuses with its neighbours, whereas the engine's closed forms along
a line stack their coefficients (`_series.along_line`): at order 1, with directions
known only at run time, that stack is a (points, 2) array under `vmap`, which XLA
writes and reads back in kernels of their own. Through `jax.jvp` a chain such as
`sqrt(1 + t^2) exp(sin t)` is one kernel (docs/EMISSION.md, "Order 1, and equations
only their primals reach").
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from . import _compat, _series
from ._series import Series

ELEMENTWISE = {
    getattr(lax, f"{name}_p")
    for name in (
        "abs acos acosh add asin asinh atan atan2 atanh cbrt cos cosh digamma div eq erf "
        "erf_inv erfc exp exp2 expm1 ge gt integer_pow is_finite le lgamma log log1p "
        "logistic lt max min mul ne neg pow rem rsqrt select_n sign sin sinh sqrt square "
        "sub tan tanh"
    ).split()
} | {lax.convert_element_type_p, _compat.add_any_p}

# At order 1 the engine's rules for these keep digits that JAX's derivative rules lose
# (tanh' = 1 - tanh^2 and logistic' = y (1 - y) are 0 where the function saturates;
# `_series.sech_squared` is not), so they stay in charge.
KEEP_ENGINE_RULE = {lax.tanh_p, lax.logistic_p}


def is_elementwise(eqn) -> bool:
    """Whether `eqn` maps elements independently: an elementwise primitive, or a
    `custom_jvp` function (softplus, relu) whose body is built only from them."""
    if eqn.primitive in ELEMENTWISE:
        return True
    if eqn.primitive is _compat.custom_jvp_call_p:
        body = _compat.open_jaxpr(eqn.params["call_jaxpr"])
        return all(is_elementwise(e) for e in body.eqns)
    return False


def bind_one(eqn, args):
    """`eqn`'s primitive bound on `args` with its parameters: its one output."""
    return _compat.bind_outputs(eqn, args)[0]


def of_varying(eqn, primals: Sequence, varying: Sequence[int]):
    """`eqn`'s one output as a function of its operands at the positions `varying`,
    the others held at `primals` (what `jax.jvp` differentiates)."""

    def g(*us):
        args = list(primals)
        for i, u in zip(varying, us, strict=True):
            args[i] = u
        return bind_one(eqn, args)

    return g


def _real_floating(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def first_order_by_jvp(eqn, series_in: Sequence[Series]) -> Series | None:
    """The order-1 series of an elementwise `eqn`'s output by `jax.jvp` of the
    primitive at the primals, along the inputs' coefficients 1 (rows of their own,
    `_series.known_rows`, so that readers take them without slicing a stack). None
    where the engine's rule applies instead: other primitives, several outputs, complex
    values, and `KEEP_ENGINE_RULE`."""
    if eqn.primitive not in ELEMENTWISE or eqn.primitive in KEEP_ENGINE_RULE:
        return None
    if len(eqn.outvars) != 1 or not _real_floating(eqn.outvars[0].aval.dtype):
        return None
    primals = [s.primal for s in series_in]
    varying = [i for i, s in enumerate(series_in) if not s.is_constant]
    if not all(_real_floating(primals[i]) for i in varying):
        return None
    tangents = []
    for i in varying:
        row = _series.row(series_in[i].coeffs, 1)
        tangents.append(jnp.zeros_like(primals[i]) if row is None else row)
    g = of_varying(eqn, primals, varying)
    y0, y1 = jax.jvp(g, tuple(primals[i] for i in varying), tuple(tangents))
    return Series(_series.stack_rows([y0, y1]))
