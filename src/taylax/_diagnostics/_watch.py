"""`taylax.watch()`: record every trace, lowering and compile of jitted functions."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from . import _hooks, _report
from ._events import CompileEvent, FunctionSummary

F = TypeVar("F", bound=Callable[..., Any])


class Watch:
    """A compile log: a context manager and decorator that records jit compile activity.

    Create it with `taylax.watch()`. While it is active (inside ``with``, or during a call
    of a function it decorates), every trace, lowering and compile of a jitted function
    called on the same thread (or any thread, with ``all_threads=True``) is recorded as a
    `CompileEvent` with its cause. Calls served by JAX's C++ fast path are untouched.
    """

    def __init__(self, *, recompile_budget: int | None = 10, all_threads: bool = False):
        if recompile_budget is not None and (
            isinstance(recompile_budget, bool)
            or not isinstance(recompile_budget, int)
            or recompile_budget < 0
        ):
            raise ValueError(
                "watch(recompile_budget=...) must be a non-negative int or None, got "
                f"{recompile_budget!r}. Pass the number of compiles per function to allow "
                "before a RecompileWarning, or None for no warnings."
            )
        self.recompile_budget = recompile_budget
        self.all_threads = bool(all_threads)
        self._lock = threading.Lock()
        self._events: list[CompileEvent] = []
        self._summaries: dict[tuple[str, str], FunctionSummary] = {}
        self._threads: dict[int, int] = {}  # thread id -> how many times entered
        self._warned: set[tuple[str, str]] = set()

    # ----------------------------------------------------------------------------------
    # Context manager and decorator
    # ----------------------------------------------------------------------------------

    def __enter__(self) -> Watch:
        thread = threading.get_ident()
        with self._lock:
            self._threads[thread] = self._threads.get(thread, 0) + 1
        _hooks.activate(self)
        return self

    def __exit__(self, *exc_info) -> None:
        thread = threading.get_ident()
        with self._lock:
            left = self._threads.get(thread, 0) - 1
            if left > 0:
                self._threads[thread] = left
            else:
                self._threads.pop(thread, None)
            idle = not self._threads
        if idle:
            _hooks.deactivate(self)
        _hooks.flush_warnings()

    def __call__(self, fn: F) -> F:
        """Records while `fn` runs, into this same log (available as ``fn.compile_log``)."""
        if not callable(fn):
            raise TypeError(
                f"watch() decorates a function, got {type(fn).__name__}. Use "
                "`@taylax.watch()` above a def, or `with taylax.watch() as log:`."
            )

        @functools.wraps(fn)
        def watched(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        watched.compile_log = self
        return watched  # type: ignore[return-value]

    @property
    def active(self) -> bool:
        """Whether the watch is recording now (on some thread)."""
        return bool(self._threads)

    def _wants(self, thread: int) -> bool:
        return self.all_threads or thread in self._threads

    # ----------------------------------------------------------------------------------
    # The log
    # ----------------------------------------------------------------------------------

    @property
    def events(self) -> list[CompileEvent]:
        """Every trace, lowering and compile recorded so far, in order."""
        with self._lock:
            return list(self._events)

    def summary(self) -> list[FunctionSummary]:
        """One `FunctionSummary` per function (name and code location), most costly first.

        Examples:
          >>> with taylax.watch() as log:                      # doctest: +SKIP
          ...     f(x)
          >>> [(s.function, s.compiles) for s in log.summary()]  # doctest: +SKIP
          [('f', 1)]
        """
        with self._lock:
            rows = [
                FunctionSummary(
                    **{**s.to_dict(), "causes": dict(s.causes), "details": _copy(s.details)}
                )
                for s in self._summaries.values()
            ]
        return sorted(rows, key=lambda s: (-s.seconds, s.function))

    def compiles(self, function: Any = None) -> list[CompileEvent]:
        """The compile events, optionally only those of `function` (see `expect_compiles`)."""
        match = event_matcher(function)
        return [e for e in self.events if e.phase == "compile" and match(e)]

    @property
    def seconds(self) -> float:
        """Time spent tracing, lowering and compiling (nested traces are counted once)."""
        return sum(e.seconds for e in self.events if not e.nested)

    def report(self, *, width: int = 120) -> str:
        """The log as a readable table (rich if installed, else plain text).

        Args:
          width: the width of the table in characters.

        Returns:
          The table and the reasons, as text.

        Examples:
          >>> with taylax.watch() as log:  # doctest: +SKIP
          ...     for n in range(3):
          ...         jax.jit(lambda x: x * n)(1.0)
          >>> print(log.report())          # doctest: +SKIP
        """
        return _report.render_text(self, width=width)

    def __rich__(self):
        return _report.rich_renderable(self)

    def to_json(self, path: str | None = None, *, indent: int = 2) -> str:
        """The log as JSON (events, per-function summary, totals); also written to `path`.

        Args:
          path: a file to write the JSON to (optional).
          indent: JSON indentation.

        Returns:
          The JSON text.

        Examples:
          >>> data = json.loads(log.to_json())  # doctest: +SKIP
          >>> data["events"][0]["cause"]        # doctest: +SKIP
          'first_call'
        """
        text = json.dumps(_report.as_dict(self), indent=indent, default=str)
        if path is not None:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def __repr__(self) -> str:
        n = len(self._events)
        state = "active" if self.active else "inactive"
        return f"<taylax.watch: {n} events, {self.seconds:.3g} s, {state}>"

    # ----------------------------------------------------------------------------------
    # Called by the hooks
    # ----------------------------------------------------------------------------------

    def _summary_for(self, call) -> FunctionSummary:
        key = (call.name, call.location)
        summary = self._summaries.get(key)
        if summary is None:
            summary = self._summaries[key] = FunctionSummary(call.name, call.location)
        return summary

    def _on_call(self, call) -> None:
        with self._lock:
            summary = self._summary_for(call)
            summary.calls_seen += 1
            summary.cache_hits += 1  # taken back if the call traces, lowers or compiles

    def _on_event(self, call, phase: str, seconds: float, first: bool) -> None:
        explanation = call.explanation
        with self._lock:
            summary = self._summary_for(call)
            event = CompileEvent(
                function=call.name,
                location=call.location,
                phase=phase,
                cause=explanation.cause,
                detail=explanation.detail,
                seconds=float(seconds),
                nested=call.nested,
                also=explanation.also,
                index=len(self._events),
            )
            self._events.append(event)
            if first:
                summary.cache_hits -= 1
                summary.causes[explanation.cause] = summary.causes.get(explanation.cause, 0) + 1
                details = summary.details.setdefault(explanation.cause, {})
                details[explanation.detail] = details.get(explanation.detail, 0) + 1
            summary.seconds += float(seconds)
            if phase == "trace":
                summary.traces += 1
            elif phase == "lower":
                summary.lowerings += 1
            else:
                summary.compiles += 1
            over = (
                phase == "compile"
                and self.recompile_budget is not None
                and summary.compiles > self.recompile_budget
                and (call.name, call.location) not in self._warned
            )
            if over:
                self._warned.add((call.name, call.location))
        if over:
            causes = ", ".join(f"{c} x{n}" for c, n in summary.causes.items())
            _hooks.queue_warning(
                f"`{call.name}` ({call.location}) compiled {summary.compiles} times, more than "
                f"the recompile budget of {self.recompile_budget} set by taylax.watch(); "
                f"causes: {causes}. Latest: {explanation.detail}"
            )


def watch(*, recompile_budget: int | None = 10, all_threads: bool = False) -> Watch:
    """Records every trace, lowering and compile of jitted functions, with its cause.

    Use it as a context manager (``with taylax.watch() as log:``) or a decorator
    (``@taylax.watch()``; the log is ``fn.compile_log``). Each event names the function
    and its code location, the phase (``"trace"``, ``"lower"``, ``"compile"``), a stable
    cause code (``first_call``, ``new_function``, ``static_argument``,
    ``pytree_structure``, ``pytree_aux_data``, ``shape``, ``dtype``, ``weak_type``,
    ``sharding``, ``committed``, ``config``, ``program_structure``, ``eager_trace``,
    ``unknown``; the diagnostics guide says what each means), a detail naming the argument
    and the old and new value or type, and the seconds spent. Watching never changes
    results, costs nothing on calls that JAX serves from its C++ cache, and removes its
    hooks when the last active watch exits.

    Args:
      recompile_budget: warn (`RecompileWarning`) when one function compiles more than
        this many times while watched; None for no warnings.
      all_threads: record calls on every thread, not only on the threads that entered
        the watch.

    Returns:
      A `Watch`: the log (``.events``, ``.summary()``, ``.report()``, ``.to_json()``).

    Examples:
      >>> import jax, jax.numpy as jnp, taylax
      >>> f = jax.jit(lambda x: x * 2)
      >>> with taylax.watch() as log:
      ...     _ = f(jnp.ones(3))
      ...     _ = f(jnp.ones(4))
      >>> [(e.phase, e.cause) for e in log.events if e.phase == "compile"]
      [('compile', 'first_call'), ('compile', 'shape')]
    """
    return Watch(recompile_budget=recompile_budget, all_threads=all_threads)


def event_matcher(function: Any) -> Callable[[CompileEvent], bool]:
    """Which events belong to `function`: None (all), a name, or a (jitted) callable."""
    if function is None:
        return lambda event: True
    if isinstance(function, str):
        return lambda event: function in (event.function, event.function.rsplit(".", 1)[-1])
    if callable(function):
        from .. import _compat
        from ._signature import function_name_and_location

        name, location, _ = function_name_and_location(_compat.jitted_function(function))
        return lambda event: (event.function, event.location) == (name, location)
    raise TypeError(
        f"function= must be None, a function name or a (jitted) function, got "
        f"{type(function).__name__}."
    )


def _copy(details: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {cause: dict(counts) for cause, counts in details.items()}
