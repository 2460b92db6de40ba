"""Algebraic identities and forwarding.

Always applied (exact for every input, up to the sign of a zero result, as XLA's
own simplifier treats ``x + 0``): ``x*1``, ``x/1``, ``x+0``, ``x-0``, ``add_any``
with a zero, ``neg(neg(x))``, ``conj(conj(x))``, ``integer_pow(x, 1)``, no-op
``convert_element_type``/``reshape``/``broadcast_in_dim``/``transpose``/
``squeeze``/reductions over no axes, ``select_n`` with equal cases, outputs of a
``jit`` that are its inputs, and zeros (a literal 0 or a broadcast of one, as
autodiff materializes them) flowing into adds, subs, negations, linear reshapes
and products with finite constants.

With ``unsafe_math`` (changes nan/inf or rounding): ``x*0 -> 0``, ``x-x -> 0``
and reassociation of chained products and sums with scalar constants,
``(x*a)*b -> x*(a*b)``, ``(x+a)+b -> x+(a+b)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from jax import lax

from .. import _compat
from . import _ir
from ._rewrite import Rewriter

_UNIFORM_LIMIT = 4096  # constants larger than this are not scanned for a uniform value

# A rule returns an atom that replaces the single output, or None to leave the equation.
Rule = Callable[[Rewriter, Any], Any]
_RULES: dict[str, Rule] = {}


def _rule(*names: str):
    def register(fn: Rule) -> Rule:
        for name in names:
            _RULES[name] = fn
        return fn

    return register


def splat(rw: Rewriter, atom) -> Any:
    """The value of `atom` if all its elements are known and equal, else None."""
    if not _ir.is_var(atom):
        return np.asarray(atom.val)[()]
    eqn = rw.defs.get(atom)
    if eqn is not None:
        if eqn.primitive is lax.broadcast_in_dim_p or eqn.primitive.name == "copy":
            return splat(rw, eqn.invars[0])
        return None
    value = rw.known.get(atom)
    if value is None or value.size == 0 or value.size > _UNIFORM_LIMIT or value.dtype == object:
        return None
    first = value.reshape(-1)[0]
    return first if np.all(value == first) else None


def _is(rw: Rewriter, atom, target) -> bool:
    value = splat(rw, atom)
    return value is not None and bool(value == target)


def _finite(rw: Rewriter, atom) -> bool:
    value = splat(rw, atom)
    return value is not None and bool(np.isfinite(value))


def zeros(rw: Rewriter, aval, reuse=()) -> Any:
    """An atom of type `aval` that is all zeros: one of `reuse`, a literal, or a broadcast."""
    for atom in reuse:
        if atom.aval == aval and _is(rw, atom, 0):
            return atom
    zero = _ir.literal(0, aval)
    if aval.shape == ():
        return zero
    params = dict(shape=aval.shape, broadcast_dimensions=(), sharding=None)
    return rw.new_eqn(lax.broadcast_in_dim_p, [zero], aval, params)


def _exact_int(atom) -> bool:
    return not np.issubdtype(atom.aval.dtype, np.inexact)


def _other(eqn, index: int) -> Any:
    return eqn.invars[1 - index]


def _fits(atom, eqn) -> bool:
    return _ir.same_type(atom, eqn.outvars[0])


@_rule("mul")
def _mul(rw: Rewriter, eqn) -> Any:
    out = eqn.outvars[0]
    for i, x in enumerate(eqn.invars):
        other = _other(eqn, i)
        if _is(rw, x, 1) and _fits(other, eqn):
            return other
        if _is(rw, x, 0) and (rw.unsafe_math or _exact_int(x) or _finite(rw, other)):
            return zeros(rw, out.aval, eqn.invars)
    if rw.unsafe_math:
        return _reassociate(rw, eqn, lax.mul_p, np.multiply)
    return None


@_rule("add", "add_any")
def _add(rw: Rewriter, eqn) -> Any:
    for i, x in enumerate(eqn.invars):
        other = _other(eqn, i)
        if _is(rw, x, 0) and _fits(other, eqn):
            return other
    if rw.unsafe_math and eqn.primitive is lax.add_p:
        return _reassociate(rw, eqn, lax.add_p, np.add)
    return None


def _reassociate(rw: Rewriter, eqn, prim, combine) -> Any:
    """`(x op a) op b -> x op (a op b)` for scalar literals `a`, `b` (rounding may change)."""
    for i, b in enumerate(eqn.invars):
        inner_atom = _other(eqn, i)
        if _ir.is_var(b) or not _ir.is_var(inner_atom):
            continue
        inner = rw.defs.get(inner_atom)
        if inner is None or inner.primitive is not prim:
            continue
        for j, a in enumerate(inner.invars):
            x = inner.invars[1 - j]
            if _ir.is_var(a) or a.aval.dtype != b.aval.dtype or not _fits(x, eqn):
                continue
            value = combine(np.asarray(a.val), np.asarray(b.val))
            return rw.new_eqn(prim, [x, _ir.literal(value, b.aval)], eqn.outvars[0].aval, {})
    return None


@_rule("sub")
def _sub(rw: Rewriter, eqn) -> Any:
    x, y = eqn.invars
    if _is(rw, y, 0) and _fits(x, eqn):
        return x
    if _is(rw, x, 0) and _fits(y, eqn):
        return rw.new_eqn(lax.neg_p, [y], eqn.outvars[0].aval, {})
    if (rw.unsafe_math or _exact_int(x)) and x is y:
        return zeros(rw, eqn.outvars[0].aval)
    return None


@_rule("div")
def _div(rw: Rewriter, eqn) -> Any:
    x, y = eqn.invars
    if _is(rw, y, 1) and _fits(x, eqn):
        return x
    if _is(rw, x, 0) and _finite(rw, y) and not _is(rw, y, 0):
        return zeros(rw, eqn.outvars[0].aval)
    return None


def _involution(rw: Rewriter, eqn) -> Any:
    (x,) = eqn.invars
    inner = rw.defs.get(x) if _ir.is_var(x) else None
    if inner is not None and inner.primitive is eqn.primitive and _fits(inner.invars[0], eqn):
        return inner.invars[0]
    return None


@_rule("neg")
def _neg(rw: Rewriter, eqn) -> Any:
    if _is(rw, eqn.invars[0], 0):
        return zeros(rw, eqn.outvars[0].aval, eqn.invars)
    return _involution(rw, eqn)


_rule("conj")(_involution)


@_rule("integer_pow")
def _integer_pow(rw: Rewriter, eqn) -> Any:
    x = eqn.invars[0]
    return x if eqn.params["y"] == 1 and _fits(x, eqn) else None


def _linear_noop(noop: Callable[[Any], bool], zero_to_zero: bool = True) -> Rule:
    """A one-input primitive forwarded when a no-op; if linear, zeros stay zeros."""

    def rule(rw: Rewriter, eqn) -> Any:
        x = eqn.invars[0]
        if _fits(x, eqn) and noop(eqn):
            return x
        if zero_to_zero and _is(rw, x, 0):
            return zeros(rw, eqn.outvars[0].aval, eqn.invars)
        return None

    return rule


def _no_sharding(eqn) -> bool:
    return eqn.params.get("sharding") is None and eqn.params.get("out_sharding") is None


_rule("convert_element_type")(_linear_noop(_no_sharding))
_rule("reshape")(_linear_noop(lambda e: e.params.get("dimensions") is None and _no_sharding(e)))
_rule("broadcast_in_dim")(
    _linear_noop(
        lambda e: (
            tuple(e.params["broadcast_dimensions"]) == tuple(range(len(e.params["shape"])))
            and _no_sharding(e)
        ),
        zero_to_zero=False,  # a broadcast of a zero is already the canonical zero
    )
)
_rule("transpose")(
    _linear_noop(
        lambda e: tuple(e.params["permutation"]) == tuple(range(len(e.params["permutation"])))
    )
)
_rule("squeeze")(_linear_noop(lambda e: not e.params["dimensions"]))
_rule("reduce_sum")(_linear_noop(lambda e: not e.params["axes"] and _no_sharding(e)))
# Not linear: over an empty axis these give -inf, inf or 1, so zeros do not pass through.
_rule("reduce_max", "reduce_min", "reduce_prod")(
    _linear_noop(lambda e: not e.params["axes"] and _no_sharding(e), zero_to_zero=False)
)


@_rule("select_n")
def _select_n(rw: Rewriter, eqn) -> Any:
    cases = eqn.invars[1:]
    first = cases[0]
    keys = {(0, id(c)) if _ir.is_var(c) else (1, _ir.literal_key(c)) for c in cases}
    if len(keys) == 1 and _fits(first, eqn):
        return first
    return None


def _forward_call_outputs(rw: Rewriter, eqn) -> None:
    """Outputs of a jit that are its inputs (or literals) are forwarded around the call."""
    closed = eqn.params["jaxpr"]
    inner = _compat.open_jaxpr(closed)
    positions = {v: i for i, v in enumerate(inner.invars)}
    for outer, atom in zip(eqn.outvars, inner.outvars):
        if outer in rw.sub or isinstance(outer, _compat.DropVar):
            continue
        if not _ir.is_var(atom):
            if outer.aval.shape == ():
                rw.forward(outer, _ir.literal(np.asarray(atom.val), outer.aval))
        elif atom in positions and _ir.same_type(eqn.invars[positions[atom]], outer):
            rw.forward(outer, eqn.invars[positions[atom]])


def simplify_step(rw: Rewriter, eqn) -> bool:
    """Applies the identity rule of `eqn`'s primitive; True if `eqn` was replaced."""
    if eqn.primitive is _compat.jit_p and not _ir.is_kept(eqn):
        _forward_call_outputs(rw, eqn)
        return False  # the call stays; dead-code elimination prunes forwarded outputs
    rule = _RULES.get(eqn.primitive.name)
    if rule is None or len(eqn.outvars) != 1 or eqn.effects:
        return False
    result = rule(rw, eqn)
    if result is None:
        return False
    rw.forward(eqn.outvars[0], result)
    return True
