"""Public entry points of the jaxpr optimizer: optimize_jaxpr, make_jaxpr, optimized."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from .. import _compat
from ._passes import optimize


def _check_closed(closed_jaxpr: Any) -> None:
    if not _compat.is_closed_jaxpr(closed_jaxpr):
        hint = (
            " (wrap an open Jaxpr as jax.extend.core.ClosedJaxpr(jaxpr, consts))"
            if _compat.is_jaxpr(closed_jaxpr)
            else ""
        )
        raise TypeError(
            "optimize_jaxpr expects `closed_jaxpr` to be a jax.extend.core.ClosedJaxpr, such "
            f"as jax.make_jaxpr(f)(x) returns, but got {type(closed_jaxpr).__name__}{hint}."
        )


def optimize_jaxpr(closed_jaxpr: Any, *, unsafe_math: bool = False) -> Any:
    """Returns an equivalent, smaller jaxpr: DCE, CSE, identities and folding, to a fixed point.

    The passes apply recursively into ``jit``, ``scan``, ``while``, ``cond``,
    ``custom_jvp_call``/``custom_vjp_call``, ``remat`` and ``shard_map`` bodies.
    Equations with effects, random and callback primitives, ``optimization_barrier``
    and ``remat`` with ``prevent_cse`` are never merged; those with effects, random,
    callback and barrier primitives are never dropped. The inputs, outputs and their
    types are unchanged.

    Args:
      closed_jaxpr: a ``jax.extend.core.ClosedJaxpr``, e.g. ``jax.make_jaxpr(f)(x)``.
      unsafe_math: also apply rewrites that may change nan/inf results or rounding:
        ``x*0 -> 0``, ``x-x -> 0`` and reassociation of constant factors and terms.

    Returns:
      A new ``ClosedJaxpr`` (or ``closed_jaxpr`` itself when nothing could be improved).

    Raises:
      TypeError: if ``closed_jaxpr`` is not a ``ClosedJaxpr``.

    Examples:
      >>> import jax, jax.numpy as jnp, taylax
      >>> f = lambda x, y: jnp.sin(x / y) + x / y * 1.0
      >>> str(taylax.optimize_jaxpr(jax.make_jaxpr(f)(1.0, 2.0))).count("div")
      1
    """
    _check_closed(closed_jaxpr)
    if not isinstance(unsafe_math, bool):
        raise TypeError(f"`unsafe_math` must be True or False, but got {unsafe_math!r}.")
    return optimize(closed_jaxpr, unsafe_math=unsafe_math)


def make_jaxpr(
    fun: Callable, *, optimize: bool = True, unsafe_math: bool = False, **kwargs: Any
) -> Callable[..., Any]:
    """Like ``jax.make_jaxpr``, but returns the optimized jaxpr (see :func:`optimize_jaxpr`).

    Args:
      fun: the function to trace.
      optimize: whether to optimize the traced jaxpr (``False``: exactly
        ``jax.make_jaxpr``).
      unsafe_math: passed to :func:`optimize_jaxpr`.
      **kwargs: passed to ``jax.make_jaxpr`` (``static_argnums``, ``axis_env``,
        ``return_shape``, ``abstracted_axes``).

    Returns:
      A function taking ``fun``'s arguments and returning a ``ClosedJaxpr`` (with
      ``return_shape=True``, a pair of it and the output shapes).

    Raises:
      TypeError: if ``fun`` is not callable.

    Examples:
      >>> import jax.numpy as jnp, taylax
      >>> jaxpr = taylax.make_jaxpr(lambda x: jnp.exp(x) * jnp.exp(x))(1.0)
      >>> sorted(taylax.equation_counts(jaxpr).items())
      [('exp', 1), ('mul', 1)]
    """
    if not callable(fun):
        raise TypeError(f"make_jaxpr expects a callable `fun`, but got {type(fun).__name__}.")
    traced = jax.make_jaxpr(fun, **kwargs)
    if not optimize:
        return traced

    @functools.wraps(traced)
    def make(*args, **fun_kwargs):
        out = traced(*args, **fun_kwargs)
        if kwargs.get("return_shape", False):
            closed, shapes = out
            return optimize_jaxpr(closed, unsafe_math=unsafe_math), shapes
        return optimize_jaxpr(out, unsafe_math=unsafe_math)

    return make


def optimized(fun: Callable, *, unsafe_math: bool = False) -> Callable:
    """Wraps ``fun`` so that it traces, optimizes its jaxpr, then evaluates the optimized jaxpr.

    Use it under ``jax.jit`` (``jax.jit(taylax.optimized(f))``): the optimization then
    runs once per trace, and XLA compiles the smaller program. Called eagerly, it
    traces and optimizes on every call. The result is the same as ``fun``'s, up to
    the sign of zero results (see :func:`optimize_jaxpr`).

    Args:
      fun: a function of arrays (pytrees of arrays in, pytrees of arrays out).
      unsafe_math: passed to :func:`optimize_jaxpr`.

    Returns:
      A function with ``fun``'s signature and results.

    Raises:
      TypeError: if ``fun`` is not callable.

    Examples:
      >>> import jax, jax.numpy as jnp, taylax
      >>> f = taylax.optimized(lambda x: jnp.sin(x) * 1.0 + jnp.sin(x))
      >>> float(jax.jit(f)(0.5)) == float(2 * jnp.sin(0.5))
      True
    """
    if not callable(fun):
        raise TypeError(f"optimized expects a callable `fun`, but got {type(fun).__name__}.")

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        flat_args = jax.tree_util.tree_leaves((args, kwargs))
        closed, shapes = jax.make_jaxpr(lambda a, k: fun(*a, **k), return_shape=True)(args, kwargs)
        closed = optimize(closed, unsafe_math=unsafe_math)
        outs = _compat.jaxpr_as_fun(closed)(*flat_args)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), outs)

    return wrapper
