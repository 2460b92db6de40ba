"""The records of a compile log: cause codes, one event per phase, one summary per function."""

from __future__ import annotations

import dataclasses
from typing import Any

# Stable cause codes, in the order used to pick the primary cause when several things
# changed at once (the first is the root: a new function object or a new config makes
# JAX miss its cache whatever the arguments are).
CAUSES: tuple[str, ...] = (
    "first_call",
    "new_function",
    "config",
    "static_argument",
    "pytree_structure",
    "pytree_aux_data",
    "shape",
    "dtype",
    "weak_type",
    "sharding",
    "committed",
    "program_structure",
    "eager_trace",
    "unknown",
)

CAUSE_HELP: dict[str, str] = {
    "first_call": "the first trace of this function that the recorder saw",
    "new_function": "same code, new function object (a lambda, partial or closure re-created)",
    "config": "a config value in JAX's trace context changed (e.g. jax_enable_x64)",
    "static_argument": "a static argument's value changed",
    "pytree_structure": "an argument's pytree structure changed (containers, keys, lengths)",
    "pytree_aux_data": "the aux data of a custom pytree node changed (its static fields)",
    "shape": "an array argument's shape changed",
    "dtype": "an array argument's dtype changed",
    "weak_type": "an argument's weak type changed (Python scalar vs array)",
    "sharding": "an argument's sharding or device changed (compiled again, maybe retraced)",
    "committed": "an argument's committed-ness changed (NumPy/uncommitted vs committed array)",
    "program_structure": "an eager taylax call traced the function to a jaxpr of another "
    "structure, so a new program was compiled",
    "eager_trace": "an eager taylax call traced the function again to look up its program",
    "unknown": "nothing the recorder compares changed (caches cleared or evicted?)",
}

PHASES: tuple[str, ...] = ("trace", "lower", "compile")


@dataclasses.dataclass(frozen=True)
class CompileEvent:
    """One trace, lowering or compile of a jitted function.

    Attributes:
      function: the function's qualified name, e.g. ``"train_step"`` or ``"<lambda>"``.
      location: where its code is defined, ``"path.py:line"`` (``"?"`` if unknown).
      phase: ``"trace"``, ``"lower"`` or ``"compile"``.
      cause: a stable code from ``CAUSES``: why JAX could not reuse a cached result.
      detail: a sentence naming the argument path (or config, or function object) and the
        old vs new value or type.
      seconds: time spent in this phase (from ``jax.monitoring`` when JAX reports it).
      nested: True for a trace of a jitted function called inside another one's trace
        (its time is part of the enclosing trace, and it is never lowered on its own).
      also: the other causes found in the same comparison (after the primary one).
      index: position in the log (0, 1, ...).
    """

    function: str
    location: str
    phase: str
    cause: str
    detail: str
    seconds: float
    nested: bool = False
    also: tuple[str, ...] = ()
    index: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The event as a JSON-ready dict."""
        return dataclasses.asdict(self) | {"also": list(self.also)}


@dataclasses.dataclass
class FunctionSummary:
    """What one jitted function (one code location) cost while recording.

    Attributes:
      function, location: as in ``CompileEvent``.
      calls_seen: calls that reached JAX's Python dispatch. Calls served by JAX's C++ fast
        path (a repeat of an already compiled signature) never reach Python and are not
        counted: they cost no tracing or compiling.
      traces, lowerings, compiles: how many of each phase.
      cache_hits: calls seen that neither traced, lowered nor compiled.
      seconds: time spent tracing, lowering and compiling this function.
      causes: how many traces-or-compiles each cause code explains (one per call).
      details: for each cause, the distinct details with their counts.
    """

    function: str
    location: str
    calls_seen: int = 0
    traces: int = 0
    lowerings: int = 0
    compiles: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    causes: dict[str, int] = dataclasses.field(default_factory=dict)
    details: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return dataclasses.asdict(self)
