"""Hash-consing common-subexpression elimination.

Two equations merge when they apply the same primitive, with equal parameters
(sub-jaxprs compared structurally, so two calls of equal sub-programs merge), to
the same operands (operands of commutative primitives in a canonical order;
literals compared by dtype, weak type and bits), in the same context, with the
same output types. Equations with effects, random, callback and barrier
primitives, and ``remat`` with ``prevent_cse`` never merge.
"""

from __future__ import annotations

from typing import Any

from .. import _compat
from . import _ir
from ._rewrite import Rewriter

# `name` of a jit is cosmetic: equal programs under different names still merge.
_IGNORED_PARAMS = {_compat.jit_p: frozenset({"name"})}


def _operand_key(rw: Rewriter, atom) -> tuple:
    if _ir.is_var(atom):
        return (0, rw.order[atom])
    return (1, _ir.literal_key(atom))


def _context_key(ctx) -> Any:
    """Equal equation contexts merge, even as distinct objects (JAX may make one per
    equation); an unhashable context only merges with itself."""
    try:
        hash(ctx)
    except TypeError:
        return ("id", id(ctx))
    return ctx


def eqn_key(rw: Rewriter, eqn) -> Any:
    """The hash-consing key of `eqn` (inputs already substituted)."""
    operands = [_operand_key(rw, a) for a in eqn.invars]
    if eqn.primitive.name in _ir.COMMUTATIVE:
        operands.sort()
    ignore = _IGNORED_PARAMS.get(eqn.primitive, frozenset())
    return (
        eqn.primitive,
        tuple(operands),
        _ir.params_key(eqn.params, ignore),
        tuple(v.aval for v in eqn.outvars),
        _context_key(eqn.ctx),
    )


def cse_step(rw: Rewriter, eqn) -> bool:
    """Merges `eqn` into an equal earlier equation, or emits and records it."""
    if not _ir.is_mergeable(eqn):
        return False
    try:
        key = eqn_key(rw, eqn)
        hash(key)
    except TypeError:  # a parameter that cannot be compared: leave the equation alone
        return False
    previous = rw.cse_table.get(key)
    if previous is not None:
        for new, old in zip(eqn.outvars, previous):
            rw.forward(new, old)
        return True
    rw.emit(eqn)
    if not any(isinstance(v, _compat.DropVar) for v in eqn.outvars):
        rw.cse_table[key] = list(eqn.outvars)
    return True
