"""Dead-code elimination that keeps effects.

A backward walk keeps an equation when one of its outputs is used or when it is
*kept* (effects, random, callbacks, barriers, or a sub-program holding one).
Equations that carry sub-programs (``jit``, ``scan``, ``cond``, ``remat``,
``custom_jvp_call``, ``custom_vjp_call``, ``shard_map``, ...) are pruned by JAX's
own dead-code rule for that primitive, which also drops their unused outputs and
inputs; a kept one is left whole (its sub-programs are cleaned inside, with the
same signature, by the recursion of the caller).
"""

from __future__ import annotations

from .. import _compat
from . import _ir


def dce_jaxpr(jaxpr, consts, *, prune_constvars: bool = True):
    """Removes dead equations (and unused constants); returns `(jaxpr, consts, changed)`."""
    live: set = {a for a in jaxpr.outvars if _ir.is_var(a)}
    kept_eqns = []
    changed = False
    for eqn in reversed(jaxpr.eqns):
        used = [not isinstance(v, _compat.DropVar) and v in live for v in eqn.outvars]
        kept = _ir.is_kept(eqn)
        if not kept and not any(used):
            changed = True
            continue
        rule = None if kept else _compat.dce_rule(eqn.primitive)
        if rule is not None and not all(used):
            used_inputs, new_eqn = rule(used, eqn)
            if new_eqn is None:
                changed = True
                continue
            if new_eqn is not eqn:
                changed = True
            inputs = [a for a, u in zip(eqn.invars, used_inputs) if u]
            eqn = new_eqn
        else:
            inputs = eqn.invars
        kept_eqns.append(eqn)
        live.update(a for a in inputs if _ir.is_var(a))
        # A rule may keep inputs it reports unused; the equation's own inputs stay live.
        live.update(a for a in eqn.invars if _ir.is_var(a))
    if not changed and not prune_constvars:
        return jaxpr, consts, False
    constvars, invars = _compat.input_vars(jaxpr, len(consts))
    constvars, new_consts = list(constvars), list(consts)
    if prune_constvars:
        pairs = [(v, c) for v, c in zip(constvars, consts) if v in live]
        if len(pairs) != len(constvars):
            changed = True
            constvars, new_consts = [p[0] for p in pairs], [p[1] for p in pairs]
    if not changed:
        return jaxpr, consts, False
    # The inputs are given explicitly: where a jaxpr holds its constants' values
    # (`_compat.input_vars`), its `invars` may include constants whose values it lacks.
    new = jaxpr.replace(constvars=constvars, invars=list(invars), eqns=kept_eqns[::-1])
    return new, new_consts, True
