"""The pass driver: passes iterated to a fixed point, recursively into sub-jaxprs.

Every sub-jaxpr (of ``jit``, ``scan``, ``while``, ``cond``, ``custom_jvp_call``,
``custom_vjp_call``, ``remat``, ``shard_map``, ...) is optimized first, with the
same passes, keeping its signature; a sub-jaxpr shared by several equations is
optimized once. Then the passes run on the enclosing jaxpr until nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _compat
from ._cse import cse_step
from ._dce import dce_jaxpr
from ._fold import fold_step
from ._rewrite import Rewriter, Step
from ._simplify import simplify_step

MAX_ROUNDS = 20
"""At most this many rounds of all passes per jaxpr (a fixed point comes much sooner)."""


class _Driver:
    def __init__(self, steps: Sequence[Step], dce: bool, unsafe_math: bool):
        self.steps, self.dce, self.unsafe_math = tuple(steps), dce, unsafe_math
        # id -> (object, result): keeps both alive so that ids stay unique during one call.
        self.memo: dict[int, tuple[Any, Any]] = {}

    def sub(self, jaxpr):
        """The optimized version of a sub-jaxpr (the same object if nothing changed)."""
        hit = self.memo.get(id(jaxpr))
        if hit is not None:
            return hit[1]
        if _compat.is_closed_jaxpr(jaxpr):
            inner, consts = _compat.closed_parts(jaxpr)
            new, consts, changed = self.run(inner, consts, top=False, closed=True)
            result = _compat.ClosedJaxpr(new, consts) if changed else jaxpr
        else:
            consts = [None] * len(jaxpr.constvars)
            result, _, _ = self.run(jaxpr, consts, top=False, closed=False)
        self.memo[id(jaxpr)] = (jaxpr, result)
        self.memo[id(result)] = (result, result)
        return result

    def run(self, jaxpr, consts, *, top: bool, closed: bool):
        """Runs the passes to a fixed point; returns `(jaxpr, consts, changed)`."""
        changed_any = False
        for _ in range(MAX_ROUNDS):
            rw = Rewriter(
                jaxpr,
                consts,
                steps=self.steps,
                sub_fn=self.sub,
                allow_new_consts=top,
                unsafe=self.unsafe_math,
            )
            jaxpr, consts = rw.run()
            changed = rw.changed
            if self.dce:
                jaxpr, consts, dce_changed = dce_jaxpr(jaxpr, consts, prune_constvars=closed)
                changed = changed or dce_changed
            if not changed:
                break
            changed_any = True
        return jaxpr, consts, changed_any


def run_passes(closed, steps: Sequence[Step], *, dce: bool, unsafe_math: bool = False):
    """Applies `steps` (and DCE) to a ClosedJaxpr, recursively, to a fixed point."""
    driver = _Driver(steps, dce, unsafe_math)
    jaxpr, consts, changed = driver.run(*_compat.closed_parts(closed), top=True, closed=True)
    return _compat.ClosedJaxpr(jaxpr, consts) if changed else closed


ALL_STEPS: tuple[Step, ...] = (fold_step, simplify_step, cse_step)
"""Folding, then identities, then CSE: each equation meets them in this order."""


def optimize(closed, *, unsafe_math: bool = False):
    """All passes: folding, simplification, CSE and DCE."""
    return run_passes(closed, ALL_STEPS, dce=True, unsafe_math=unsafe_math)


def dce(closed):
    """Dead-code elimination only (recursive, effects kept)."""
    return run_passes(closed, (), dce=True)


def cse(closed):
    """Common-subexpression elimination only (merged equations are left dead)."""
    return run_passes(closed, (cse_step,), dce=False)


def simplify(closed, *, unsafe_math: bool = False):
    """Identities and forwarding only (replaced equations are left dead)."""
    return run_passes(closed, (simplify_step,), dce=False, unsafe_math=unsafe_math)


def fold(closed):
    """Constant folding only (folded equations are left dead)."""
    return run_passes(closed, (fold_step,), dce=False)
