"""Unrolled loops rolled back into `lax.scan` before a long pass.

A Python `for` loop over a step function (an RK4 integrator, a fixed number of
iterations) traces to one program holding the step's equations once per trip. Unrolled,
taylax's pass over it grew worse than linearly with the trips in both of its forms: the
full form runs in time exponential in the length of the loop (XLA:CPU recomputes the
shared expressions of its long kernels), and the compact form past the budget runs 5-10x
slower per step and compiles slowly (docs/EMISSION.md, "Past the budget"). Rolled back
into a `lax.scan` (when the pass is larger than `EmissionPolicy.roll_past`), the loop's
body is traced, compiled and fused once, and the scan's Taylor rule
(`taylax._rules._control`) carries its series from trip to trip: a kernel never spans
more than one trip (docs/EMISSION.md, "Rolled loops").

`rolled(jaxpr, num_consts, min_saved)` finds the longest run of equations that repeats
with one period (the same primitives, parameters and types, trip after trip) and whose
data flow is a loop's: each trip reads its own values, the previous trip's (the carry),
values from before the run (the same in every trip) and literals (the same in every trip,
or a sequence the scan reads one per trip). Values the rest of the program reads from the
run come out of the scan as its final carry or stacked per trip. The rolled program
computes the same operations in the same order, so its values are the unrolled ones.

!!! Example

    ```python
    import jax, jax.numpy as jnp
    from taylax import _compat, _rolled

    def f(y):
        for _ in range(8):
            y = y + 0.1 * jnp.sin(y)
        return y

    jaxpr, consts = _compat.closed_parts(jax.make_jaxpr(f)(1.0))
    closed = _rolled.rolled(jaxpr, len(consts), min_saved=4)  # one scan of 8 trips
    ```
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax import lax

from . import _compat

__all__ = ["rolled"]

# The candidate runs checked per search, the most equations saved first: each check is
# linear in the run's length, and a program's real loop is among the first.
_MAX_CANDIDATES = 32
# The periods tried are bounded so that the search's work, periods times equations,
# stays within this many comparisons: a large program with no loop pays for the search
# on every trace past `roll_past`.
_MAX_SEARCH_WORK = 50_000_000


@dataclasses.dataclass(frozen=True)
class _Loop:
    """A run of `repeats` trips of `period` equations from equation `start`.

    `sources[j][k]` says where operand `k` of the trip's equation `j` comes from:
    `("local", j', o)` output `o` of the same trip's equation `j'`; `("carry", i)` carry
    `i`; `("outer", var)` a variable from before the run; `("literal", lit)` a literal
    the same in every trip; `("sequence", i)` the `i`-th per-trip sequence.
    """

    start: int
    period: int
    repeats: int
    sources: tuple
    carry: tuple  # (j, o) per carry: the trip output that the next trip reads
    carry_init: tuple  # the operand (variable or literal) the first trip reads instead
    sequences: tuple  # per sequence, the stacked literal values, one row per trip
    outside: dict  # variable read after the run -> (trip, j, o)


def _signature(eqn):
    """What two equations share when they are the same step of a loop: primitive,
    parameters, operand and result types and which operands are literals; None for an
    equation that never repeats (effects, unhashable parameters)."""
    if eqn.effects:
        return None
    try:
        key = (
            eqn.primitive,
            tuple(sorted(eqn.params.items())),
            tuple(v.aval for v in eqn.invars),
            tuple(isinstance(v, _compat.Literal) for v in eqn.invars),
            tuple(v.aval for v in eqn.outvars),
        )
        hash(key)
    except TypeError:
        return None
    return key


def _codes(eqns) -> np.ndarray:
    """One integer per equation, equal where the signatures are (unique where None)."""
    seen: dict = {}
    codes = np.empty(len(eqns), np.int64)
    for i, eqn in enumerate(eqns):
        key = _signature(eqn)
        codes[i] = seen.setdefault(key, len(seen)) if key is not None else -1 - i
    return codes


def _candidates(codes: np.ndarray, min_saved: int) -> list[tuple[int, int, int]]:
    """`(start, period, repeats)` of the periodic runs of `codes`, the most equations
    saved first (then the shorter period)."""
    n = len(codes)
    max_period = min(n // 2, max(1, _MAX_SEARCH_WORK // max(n, 1)))
    found = []
    for period in range(1, max_period + 1):
        same = np.concatenate(([0], (codes[:-period] == codes[period:]).astype(np.int8), [0]))
        edges = np.diff(same)
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        repeats = (ends - starts + period) // period
        saved = (repeats - 1) * period
        keep = (repeats >= 2) & (saved >= min_saved)
        for start, r, s in zip(starts[keep], repeats[keep], saved[keep], strict=True):
            found.append((int(s), -period, int(start), int(r)))
    found.sort(reverse=True)
    return [(start, -neg_period, r) for _, neg_period, start, r in found[:_MAX_CANDIDATES]]


def _same_literal(a, b) -> bool:
    va, vb = np.asarray(a.val), np.asarray(b.val)
    return va.dtype == vb.dtype and va.shape == vb.shape and bool(np.all(va == vb))


def _loop_at(jaxpr, start: int, period: int, repeats: int) -> _Loop | None:
    """The loop of `repeats` trips of `period` equations from `start`, or None where the
    data flow is not a loop's (a trip reads a value two trips back, or operands that
    differ from trip to trip other than as literals)."""
    eqns = jaxpr.eqns
    end = start + period * repeats
    where = {}
    for r in range(repeats):
        for j in range(period):
            for o, v in enumerate(eqns[start + r * period + j].outvars):
                if not isinstance(v, _compat.DropVar):
                    where[v] = (r, j, o)

    def kind(v, r):
        if isinstance(v, _compat.Literal):
            return ("literal",)
        if v not in where:
            return ("outer", v)
        r_def, j, o = where[v]
        if r_def == r:
            return ("local", j, o)
        if r_def == r - 1:
            return ("carry", j, o)
        return None

    carry_index: dict = {}
    carry_init: list = []
    sequences: list = []
    sources = []
    for j in range(period):
        row = []
        for k in range(len(eqns[start + j].invars)):
            operands = [eqns[start + r * period + j].invars[k] for r in range(repeats)]
            kinds = [kind(v, r) for r, v in enumerate(operands)]
            later = kinds[1:]
            if any(x is None or x != later[0] for x in later):
                return None
            first, rest = kinds[0], later[0]
            if rest[0] in ("local", "outer") and first == rest:
                row.append(rest)
            elif rest[0] == "carry" and first[0] in ("outer", "literal"):
                slot = rest[1:]
                init = operands[0]
                if slot in carry_index:
                    known = carry_init[carry_index[slot]]
                    literals = isinstance(known, _compat.Literal) and isinstance(
                        init, _compat.Literal
                    )
                    if not (known is init or (literals and _same_literal(known, init))):
                        return None
                else:
                    carry_index[slot] = len(carry_init)
                    carry_init.append(init)
                row.append(("carry", carry_index[slot]))
            elif rest[0] == "literal" and first[0] == "literal":
                if all(_same_literal(operands[0], v) for v in operands[1:]):
                    row.append(("literal", operands[0]))
                else:
                    dtype = operands[0].aval.dtype
                    stacked = np.stack([np.asarray(v.val, dtype) for v in operands])
                    row.append(("sequence", len(sequences)))
                    sequences.append(stacked)
            else:
                return None
        sources.append(tuple(row))

    outside = {}
    readers = [eqn.invars for eqn in eqns[end:]] + [jaxpr.outvars]
    for operands in readers:
        for v in operands:
            if not isinstance(v, _compat.Literal) and v in where:
                outside[v] = where[v]
    slots = tuple(slot for slot, _ in sorted(carry_index.items(), key=lambda item: item[1]))
    return _Loop(
        start, period, repeats, tuple(sources), slots, tuple(carry_init), tuple(sequences), outside
    )


def _find_loop(jaxpr, min_saved: int) -> _Loop | None:
    codes = _codes(jaxpr.eqns)
    for start, period, repeats in _candidates(codes, min_saved):
        loop = _loop_at(jaxpr, start, period, repeats)
        if loop is None and repeats - 1 >= 2 and (repeats - 2) * period >= min_saved:
            # The first trip may read differently (a value built before the loop).
            loop = _loop_at(jaxpr, start + period, period, repeats - 1)
        if loop is not None:
            return loop
    return None


def _roll(jaxpr, num_consts: int, loop: _Loop):
    """The closed jaxpr of the program with `loop` run as one `lax.scan`; its inputs are
    the constants and then the arguments of `jaxpr`."""
    eqns = jaxpr.eqns
    constvars, invars = _compat.input_vars(jaxpr, num_consts)
    inputs = [*constvars, *invars]
    end = loop.start + loop.period * loop.repeats
    last = loop.repeats - 1
    carried = {slot: i for i, slot in enumerate(loop.carry)}
    stacked = sorted(
        {(j, o) for r, j, o in loop.outside.values() if not (r == last and (j, o) in carried)}
    )
    stacked_index = {slot: i for i, slot in enumerate(stacked)}

    def run(*values):
        env = dict(zip(inputs, values, strict=True))

        def read(v):
            return v.val if isinstance(v, _compat.Literal) else env[v]

        def write(eqn, outs):
            for v, x in zip(eqn.outvars, outs, strict=True):
                if not isinstance(v, _compat.DropVar):
                    env[v] = x

        for eqn in eqns[: loop.start]:
            write(eqn, _compat.bind_outputs(eqn, [read(v) for v in eqn.invars]))

        def trip(carry, per_trip):
            local: dict = {}
            for j, sources in enumerate(loop.sources):
                operands = []
                for source in sources:
                    if source[0] == "local":
                        operands.append(local[source[1:]])
                    elif source[0] == "carry":
                        operands.append(carry[source[1]])
                    elif source[0] == "outer":
                        operands.append(env[source[1]])
                    elif source[0] == "literal":
                        operands.append(source[1].val)
                    else:
                        operands.append(per_trip[source[1]])
                for o, x in enumerate(_compat.bind_outputs(eqns[loop.start + j], operands)):
                    local[(j, o)] = x
            return [local[slot] for slot in loop.carry], [local[slot] for slot in stacked]

        init = [
            lax.convert_element_type(read(v), v.aval.dtype)
            if isinstance(v, _compat.Literal)
            else read(v)
            for v in loop.carry_init
        ]
        final, per_trip = lax.scan(trip, init, list(loop.sequences), length=loop.repeats)
        for v, (r, j, o) in loop.outside.items():
            env[v] = (
                final[carried[(j, o)]]
                if r == last and (j, o) in carried
                else per_trip[stacked_index[(j, o)]][r]
            )
        for eqn in eqns[end:]:
            write(eqn, _compat.bind_outputs(eqn, [read(v) for v in eqn.invars]))
        return [read(v) for v in jaxpr.outvars]

    structs = [
        jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, weak_type=v.aval.weak_type) for v in inputs
    ]
    return jax.make_jaxpr(run)(*structs)


def rolled(jaxpr, num_consts: int, min_saved: int):
    """`jaxpr` with its longest unrolled loop run as a `lax.scan` (a closed jaxpr), or None
    where no run of repeated equations saves `min_saved` equations or more.

    Args:
      jaxpr: an open jaxpr, run on `num_consts` constants and then its arguments.
      num_consts: how many of its inputs are constants (`_compat.input_vars`).
      min_saved: the fewest equations a rolled loop must remove.

    Returns:
      A closed jaxpr whose inputs are those of `jaxpr` (its constants, then its
      arguments) and which returns what `jaxpr` returns.
    """
    loop = _find_loop(jaxpr, min_saved)
    if loop is None:
        return None
    return _roll(jaxpr, num_consts, loop)
