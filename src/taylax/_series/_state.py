"""What the rules being traced need to know about the pass around them: its order,
whether it compiles into one kernel, whether it traces a loop body, and the emission
policy in force (`taylax._policy`). Per thread and context, like JAX's own trace state."""

from __future__ import annotations

import contextlib
import contextvars

from .. import _policy

# The order of the Taylor pass being traced (`pass_order`), per thread and context.
_PASS_ORDER: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "taylax_pass_order", default=None
)


# Whether the pass being traced compiles into one kernel (`taylax._one_kernel`).
_ONE_KERNEL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "taylax_one_kernel", default=False
)


@contextlib.contextmanager
def taylor_pass(order: int, one_kernel: bool = False):
    """Mark the rules run inside as part of a Taylor pass of `order` (`pass_order`);
    `one_kernel`: the pass keeps no value in a buffer (`one_kernel_pass`)."""
    token = _PASS_ORDER.set(order)
    one_kernel_token = _ONE_KERNEL.set(one_kernel)
    try:
        yield
    finally:
        _ONE_KERNEL.reset(one_kernel_token)
        _PASS_ORDER.reset(token)


def one_kernel_pass() -> bool:
    """Whether the pass now being traced compiles into one kernel, with no value marked
    `computed_once` (`taylax._one_kernel.fits_one_kernel`)."""
    return _ONE_KERNEL.get()


def pass_order() -> int | None:
    """The order of the Taylor pass now being traced, or None outside one (`taylor_pass`)."""
    return _PASS_ORDER.get()


def policy():
    """The emission policy in force (`taylax._policy.current`): every choice below of rows
    or stacks, unrolled or looped, reads it; its measurements are in docs/EMISSION.md."""
    return _policy.current()


# Whether a loop body is being traced (per thread and context, like JAX's own trace state).
_IN_LOOP_BODY: contextvars.ContextVar[bool] = contextvars.ContextVar("in_loop_body", default=False)


@contextlib.contextmanager
def loop_body():
    """Mark the rules run inside as the body of a loop (`in_loop_body`)."""
    token = _IN_LOOP_BODY.set(True)
    try:
        yield
    finally:
        _IN_LOOP_BODY.reset(token)


def in_loop_body() -> bool:
    """Whether the rules now running trace the body of a `while` or `scan` (`loop_body`).

    There, past the policy's `loop_rows_max_order`, stacks stay stacks: closed forms and powers are
    built stacked (`rows_wanted`) and readers slice them (no `known_rows`). A stack of
    rows is a concatenate whose rows XLA:CPU computes as kernels of their own, and a
    linear operation on rows stacks its result's rows again; a loop runs each of those
    kernels once per step, where a stack's few vector operations fuse into one. RK4
    along a direction at order 8 (100 steps, unvmapped) ran 136 kernels per step with
    rows against 83, 1.2-1.3x slower; vmapped over 4,096 initial values, 1.23x slower.
    """
    return _IN_LOOP_BODY.get()
