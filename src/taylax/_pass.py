"""What the rules being traced know about the Taylor pass around them, in one object.

A rule is called with the pass's order and its operands' series; everything else it may
ask about the pass lives in one `PassState`, per thread and context like JAX's own trace
state: whether a pass is being traced at all and its order, whether it compiles into one
kernel (`taylax._one_kernel`), whether it traces the body of a loop, and whether the
outputs of the equation being evaluated are read only row by row. The emission policy in
force is `taylax._policy`'s (a user's choice is JAX trace context, to key `jax.jit`'s
caches; a pass's is not).

Example:

    >>> from taylax import _pass
    >>> with _pass.taylor_pass(4):
    ...     with _pass.loop_body():
    ...         _pass.state()
    PassState(order=4, one_kernel=False, loop_body=True, read_by_rows=False)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class PassState:
    """The pass being traced (see the module docstring).

    - `order`: the order of the outermost pass's rules now running, None outside a pass.
    - `one_kernel`: the pass keeps no value in a buffer (`taylax._one_kernel`).
    - `loop_body`: the rules trace the body of a `while` or `scan`, where stacks stay
      stacks past the policy's `loop_rows_max_order` (docs/EMISSION.md, "Rows").
    - `read_by_rows`: every output of the equation being evaluated is read one
      coefficient row at a time, by readers that take each row as its own buffer (a
      network's next layer: `taylax._interpret.row_readers`).
    """

    order: int | None = None
    one_kernel: bool = False
    loop_body: bool = False
    read_by_rows: bool = False


# The default is frozen, hence safe to share.
_STATE: contextvars.ContextVar[PassState] = contextvars.ContextVar(
    "taylax_pass_state",
    default=PassState(),  # noqa: B039
)


def state() -> PassState:
    """The state of the pass now being traced (the default state outside one)."""
    return _STATE.get()


@contextlib.contextmanager
def _replaced(**changes) -> Iterator[PassState]:
    token = _STATE.set(dataclasses.replace(_STATE.get(), **changes))
    try:
        yield _STATE.get()
    finally:
        _STATE.reset(token)


def taylor_pass(order: int, one_kernel: bool = False):
    """Trace the rules run inside as a Taylor pass of `order`; `one_kernel`: the pass keeps
    no value in a buffer. A loop body around it stays one (a sub-program's pass)."""
    return _replaced(order=order, one_kernel=one_kernel)


def loop_body():
    """Trace the rules run inside as the body of a loop (`in_loop_body`)."""
    return _replaced(loop_body=True)


def reading_by_rows(read_by_rows: bool):
    """Evaluate one equation's rule, whose outputs are (or are not) read only row by row.

    Entered for every equation of a pass: where the state already says so (most
    equations), nothing is set."""
    if _STATE.get().read_by_rows == read_by_rows:
        return contextlib.nullcontext()
    return _replaced(read_by_rows=read_by_rows)


def pass_order() -> int | None:
    """The order of the Taylor pass now being traced, or None outside one."""
    return _STATE.get().order


def one_kernel_pass() -> bool:
    """Whether the pass now being traced compiles into one kernel, with no value marked
    `computed_once` (`taylax._one_kernel.fits_one_kernel`)."""
    return _STATE.get().one_kernel


def in_loop_body() -> bool:
    """Whether the rules now running trace the body of a `while` or `scan`."""
    return _STATE.get().loop_body


def read_row_by_row() -> bool:
    """Whether every output of the equation being evaluated is read one coefficient row at
    a time: only by `row_readers` whose other operands do not depend on the input.

    Such readers take each row as its own buffer anyway, so a rule may let XLA fuse its
    rows freely instead of marking them `computed_once`, or give its rows as buffers of
    their own (a product). False outside a rule, and for outputs of the jaxpr or read
    inside a sub-program.
    """
    return _STATE.get().read_by_rows
