"""Fusion cuts: the live series of a long pass materialized every so many equations.

XLA fuses a long chain of elementwise operations into one kernel. When that kernel has
several outputs (a series' rows, stacked or returned apart), XLA:CPU emits shared
sub-expressions as functions that recompute their operands at every use, so the kernel's
run time grows exponentially with the chain's depth: 14 unrolled RK4 steps at order 4
ran 0.8 s per call where jet took 0.04 ms (docs/EMISSION.md, "Fusion cuts"). A cut puts
every series still to be read through one `lax.optimization_barrier` after a fixed amount
of work, so no fused kernel spans more than that and the program's run time grows
linearly with its length. Values never change.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax import lax

from . import _compat, _pass, _policy
from ._series import Series


def cut_points(
    jaxpr: _compat.Jaxpr, varying: set, order: int
) -> dict[int, tuple[_compat.Var, ...]]:
    """Where a pass over `jaxpr` cuts: equation index -> the varying variables to
    materialize after that equation (those read later, or outputs).

    Each equation that reads a varying value weighs `min(order, unroll_max_order)` (the
    rows a rule emits); a cut follows once the weight since the last cut reaches the
    policy's `fusion_cut`. None there: no cuts; none in the body of a loop either, which
    a `while` runs as kernels of its own once per step (a cut in the 100-step RK4 of
    `bench_programs` cost 10-70% at K = 8). None in a pass whose work, the same
    equations each weighing the square, stays below the policy's `fusion_cut_min_work`:
    a cut costs a kernel per live series that recomputes what its rows share, and such a
    pass runs faster whole (docs/EMISSION.md, "Concatenate roots").
    """
    policy = _policy.current()
    if policy.fusion_cut is None or order < 1 or _pass.in_loop_body():
        return {}
    weight = min(order, max(policy.unroll_max_order, 1))
    if policy.fusion_cut_min_work is not None:
        reading = sum(1 for eqn in jaxpr.eqns if _reads(eqn, varying))
        if reading * weight * weight < policy.fusion_cut_min_work:
            return {}
    last_use: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if not isinstance(v, _compat.Literal):
                last_use[v] = i
    end = len(jaxpr.eqns)
    for v in jaxpr.outvars:
        if not isinstance(v, _compat.Literal):
            last_use[v] = end
    defined = [v for v in jaxpr.invars if v in varying]
    cuts: dict[int, tuple] = {}
    since = 0
    for i, eqn in enumerate(jaxpr.eqns[:-1]):
        defined.extend(v for v in eqn.outvars if v in varying)
        if _reads(eqn, varying):
            since += weight
        if since >= policy.fusion_cut:
            live = tuple(v for v in defined if last_use.get(v, -1) > i)
            defined = list(live)
            if live:
                cuts[i] = live
            since = 0
    return cuts


def _reads(eqn, varying: set) -> bool:
    """Whether `eqn` reads a varying value (the equations a cut counts)."""
    return any(not isinstance(v, _compat.Literal) and v in varying for v in eqn.invars)


def materialized(values: Sequence[Series]) -> list[Series]:
    """`values` through one optimization barrier: each non-constant series' stack becomes
    a buffer that no fused kernel reaches across.

    The stacks, not their rows: XLA:CPU drops a barrier of separate rows before fusion
    and fuses across it, while a barrier of a stack keeps the stack a buffer. Readers
    slice the buffer; keeping its rows as known rows instead compiled faster (2.7 s
    against 3.9 s, 20 RK4 steps at K = 2) but ran 1.5x slower under `vmap`
    (docs/EMISSION.md, "Fusion cuts").
    """
    moving = [s for s in values if not s.is_constant]
    if not moving:
        return list(values)
    out = iter(lax.optimization_barrier(tuple(s.coeffs for s in moving)))
    return [s if s.is_constant else Series(next(out)) for s in values]
