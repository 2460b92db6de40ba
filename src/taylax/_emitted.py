"""The program that runs for a call, every derivative replaced by its Taylor pass, and
its size: what tests, benchmarks and the demo count (`jax.make_jaxpr` shows a
derivative as one equation)."""

from __future__ import annotations

import weakref
from collections.abc import Callable

import jax

from . import _compat
from ._derivative import derivative_p, distinct_jaxprs, evaluate_final
from ._rules._calls import jit_per_jaxpr

_EXPANDED_JITS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _eval_expanded(jaxpr: _compat.Jaxpr, consts, args) -> list:
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, _compat.Literal) else env[v]

    constvars, invars = _compat.input_vars(jaxpr, len(consts))
    for v, x in zip(constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(invars, args, strict=True):
        env[v] = x
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive is derivative_p:
            outs = evaluate_final(*ins, **eqn.params)
        elif eqn.primitive is _compat.jit_p:
            outs = _expanded_jit(eqn.params["jaxpr"])(*ins)
        else:
            outs = _compat.bind_outputs(eqn, ins)
        for v, x in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, _compat.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _expanded_jit(closed: _compat.ClosedJaxpr):
    def expanded(closed, *args):
        return _eval_expanded(*_compat.closed_parts(closed), args)

    return jit_per_jaxpr(_EXPANDED_JITS, closed, None, expanded, "expanded")


def emitted_jaxpr(fun: Callable, *args) -> _compat.ClosedJaxpr:
    """The program that runs for `fun(*args)`: every derivative replaced by its Taylor pass.

    `jax.make_jaxpr(fun)` shows a `taylax.derivative` (or `taylax.jacfwd`) as one
    equation that carries the differentiated program; this shows what it lowers to, each
    nested derivative collapsed into one Taylor pass, as `jit` sub-programs shared where
    they are shared. Use it to see or count what taylax emits for a call.

    Args:
      fun: a function of `args` (any JAX function, taylax's transformations included).
      *args: example arguments (arrays or pytrees of arrays).

    Returns:
      A `jax.core.ClosedJaxpr` over the flat leaves of `args`.

    Examples:

        >>> import jax.numpy as jnp, taylax
        >>> d3 = taylax.derivative(taylax.derivative(taylax.derivative(jnp.sin)))
        >>> closed = taylax.emitted_jaxpr(d3, 0.5)
        >>> "taylax_derivative" in str(closed)
        False
    """
    closed = jax.make_jaxpr(fun)(*args)
    return jax.make_jaxpr(lambda *a: _eval_expanded(*_compat.closed_parts(closed), a))(
        *jax.tree.leaves(args)
    )


def count_unique_equations(closed: _compat.ClosedJaxpr) -> int:
    """Equations of a jaxpr and its sub-jaxprs, each distinct sub-jaxpr counted once.

    This is the size of what is traced and lowered (a `jit` sub-program is
    lowered once however many call sites it has).
    """
    return sum(len(jaxpr.eqns) for jaxpr in distinct_jaxprs(_compat.open_jaxpr(closed)))
