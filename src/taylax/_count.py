"""Count the equations of a jaxpr, recursively into its sub-jaxprs.

The size of a traced program is the quantity that taylax keeps small: the time
JAX spends tracing and XLA spends compiling grows with it. These helpers count
it the way ``jax.make_jaxpr`` prints it, including every nested program
(``jit``, ``scan``, ``while``, ``cond`` branches, custom derivative rules...).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from . import _compat
from ._compat import ClosedJaxpr, Jaxpr

__all__ = ["count_equations", "equation_counts"]


def _as_jaxpr(jaxpr: Any) -> Jaxpr:
    if _compat.is_jaxpr(jaxpr):
        return _compat.open_jaxpr(jaxpr)
    raise TypeError(
        "Expected a jax.extend.core.ClosedJaxpr or Jaxpr (for example the result of "
        f"jax.make_jaxpr(f)(x)), but got an object of type {type(jaxpr).__name__}."
    )


def _jaxprs_in(value: Any) -> Iterator[Jaxpr]:
    """Yields every jaxpr held by one equation parameter, looking into containers."""
    if _compat.is_jaxpr(value):
        yield _compat.open_jaxpr(value)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _jaxprs_in(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _jaxprs_in(item)


def iter_jaxprs(
    jaxpr: ClosedJaxpr | Jaxpr, prune: Callable[[Any], bool] | None = None
) -> Iterator[Jaxpr]:
    """Yields a jaxpr and all its sub-jaxprs (see `equation_counts`), but not those
    inside an equation for which `prune` (when given) holds."""
    stack = [_as_jaxpr(jaxpr)]
    while stack:
        current = stack.pop()
        yield current
        for eqn in current.eqns:
            if prune is not None and prune(eqn):
                continue
            for value in eqn.params.values():
                stack.extend(_jaxprs_in(value))


def iter_equations(
    jaxpr: ClosedJaxpr | Jaxpr, prune: Callable[[Any], bool] | None = None
) -> Iterator:
    """Yields every equation of a jaxpr and of all its sub-jaxprs (see `equation_counts`),
    but not those inside an equation for which `prune` (when given) holds."""
    for current in iter_jaxprs(jaxpr, prune):
        yield from current.eqns


def equation_counts(jaxpr: ClosedJaxpr | Jaxpr) -> collections.Counter[str]:
    """Counts the equations of a jaxpr by primitive name, including all sub-jaxprs.

    Every sub-jaxpr found in an equation's parameters (``jit``'s ``jaxpr``,
    ``scan``'s ``jaxpr``, ``cond``'s ``branches``, ``while``'s ``cond_jaxpr`` and
    ``body_jaxpr``, ``custom_jvp_call``'s ``call_jaxpr``, ...) is counted, once
    per occurrence: a sub-program that appears at two call sites counts twice,
    as it prints twice. The equation that holds a sub-jaxpr counts as well.

    Args:
      jaxpr: a ``jax.extend.core.ClosedJaxpr`` (what ``jax.make_jaxpr`` returns)
        or a ``jax.extend.core.Jaxpr``.

    Returns:
      A ``collections.Counter`` mapping each primitive name to its number of
      equations.

    Raises:
      TypeError: if ``jaxpr`` is neither a ``ClosedJaxpr`` nor a ``Jaxpr``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from taylax._count import equation_counts
      >>> counts = equation_counts(jax.make_jaxpr(lambda x: jnp.sin(x) * x)(1.0))
      >>> sorted(counts.items())
      [('mul', 1), ('sin', 1)]
    """
    return collections.Counter(eqn.primitive.name for eqn in iter_equations(jaxpr))


def count_equations(jaxpr: ClosedJaxpr | Jaxpr) -> int:
    """Counts the equations of a jaxpr, including those of all its sub-jaxprs.

    This is ``sum(equation_counts(jaxpr).values())``; see :func:`equation_counts`
    for what is counted.

    Args:
      jaxpr: a ``jax.extend.core.ClosedJaxpr`` (what ``jax.make_jaxpr`` returns)
        or a ``jax.extend.core.Jaxpr``.

    Returns:
      The total number of equations, as an ``int``.

    Raises:
      TypeError: if ``jaxpr`` is neither a ``ClosedJaxpr`` nor a ``Jaxpr``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from taylax._count import count_equations
      >>> count_equations(jax.make_jaxpr(jax.jit(lambda x: jnp.sin(x) * x))(1.0))
      3
    """
    return sum(equation_counts(jaxpr).values())
