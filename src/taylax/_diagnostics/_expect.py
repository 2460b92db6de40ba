"""`taylax.expect_compiles(max=1)`: a test helper that fails when jit compiles too often."""

from __future__ import annotations

from typing import Any

from .. import _compat
from . import _hooks
from ._signature import function_name_and_location
from ._watch import Watch, event_matcher


class CompileBudgetExceeded(AssertionError):
    """More compiles happened inside `expect_compiles` than it allowed.

    An `AssertionError`, so that pytest reports it as a failed check; its message lists
    each compile's function, cause and detail.

    !!! Example

        ```python
        import jax
        import jax.numpy as jnp
        import taylax

        f = jax.jit(lambda x: x + 1)
        try:
            with taylax.expect_compiles(max=0):
                f(jnp.ones(3))  # a first call compiles
        except taylax.CompileBudgetExceeded as error:
            print(error)  # names `<lambda>` and the cause, first_call
        ```
    """


class ExpectCompiles(Watch):
    """A `Watch` that raises `CompileBudgetExceeded` on exit if too many compiles happened."""

    def __init__(self, max: int, function: Any = None):
        if isinstance(max, bool) or not isinstance(max, int) or max < 0:
            raise ValueError(
                f"expect_compiles(max=...) must be a non-negative int, got {max!r}. "
                "Pass max=0 to forbid any compile, max=1 to allow the first one."
            )
        super().__init__(recompile_budget=None)
        self.max = max
        self.function = function
        self._match = event_matcher(function)  # validates `function` now, not at exit

    def __exit__(self, exc_type, exc, tb) -> None:
        super().__exit__(exc_type, exc, tb)
        if exc_type is None and not self.active:
            self.check()

    def check(self) -> None:
        """Raises `CompileBudgetExceeded` (with every compile's cause) if over budget, and
        ValueError if `function` is a name that no jitted function has."""
        if isinstance(self.function, str) and not self._name_known(self.function):
            raise ValueError(
                f"expect_compiles(function={self.function!r}): no jitted function named "
                f"{self.function!r} was called in this block or before it, so its compiles "
                "cannot be counted. Check the spelling (the function's __name__ or "
                "__qualname__), or pass the function object itself."
            )
        compiles = [e for e in self.events if e.phase == "compile" and self._match(e)]
        if len(compiles) <= self.max:
            return
        which = "" if self.function is None else f" of {self.function!r}"
        lines = [f"Expected at most {self.max} compile(s){which}, but {len(compiles)} happened:"]
        for i, e in enumerate(compiles, 1):
            lines.append(f"  {i}. `{e.function}` ({e.location}): {e.cause}: {e.detail}")
        raise CompileBudgetExceeded("\n".join(lines))

    def _name_known(self, name: str) -> bool:
        """Whether a jitted function called `name` was seen here, by an earlier watch, or
        is in JAX's trace cache (its calls may be served by JAX's C++ cache unseen)."""
        if any(self._match(e) for e in self.events) or _hooks.seen_name(name):
            return True
        for fun in _compat.jit_trace_cache_functions():
            try:
                known = function_name_and_location(fun)[0]
            except Exception:  # an odd callable: not the one named
                continue
            if name in (known, known.rsplit(".", 1)[-1]):
                return True
        return False


def expect_compiles(max: int = 1, *, function: Any = None) -> ExpectCompiles:
    """Fails if jitted functions compile more than `max` times inside the block.

    A context manager (or decorator) built on `taylax.watch()`: it counts backend
    compiles on the current thread and, on exit, raises `CompileBudgetExceeded` (an
    AssertionError) listing each compile's function, cause and detail. JAX's own eager
    operations are never counted, and results are unchanged.

    Args:
      max: the number of compiles allowed (0 forbids any).
      function: count only this function's compiles: a (jitted) function or its name.

    Returns:
      The active watch (``.events``, ``.summary()``, ... are available inside and after).

    Examples:
      >>> import jax, jax.numpy as jnp, taylax
      >>> f = jax.jit(lambda x: x + 1)
      >>> _ = f(jnp.ones(3))                  # compiled here, outside the check
      >>> with taylax.expect_compiles(max=0):
      ...     _ = f(jnp.zeros(3))             # same shape and dtype: no compile
    """
    return ExpectCompiles(max, function)
