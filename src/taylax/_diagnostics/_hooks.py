"""The process-wide hooks behind `watch()`: installed while any watch is active, only then.

JAX's `jax.jit` wrapper is C++: a call whose signature is already compiled never reaches
Python, so the recorder costs nothing there. A call that misses the C++ cache goes through
three module functions of `jax._src.pjit` (see `_compat.JIT_DISPATCH_FUNCTIONS`); wrapping
them gives each such call's function object and arguments. The trace, lowering and compile
durations come from `jax.monitoring` listeners. Each thread keeps a stack of the calls in
progress, so a duration is attributed to the call whose scope it happens in; JAX's own
functions (`jnp.*`, eagerly applied primitives) get an "ignore" scope, so their compiles are
never counted.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import threading
import time
import warnings
import weakref
from typing import Any

import jax.monitoring

from .. import _compat
from .._programs import EAGER_TRACE, PROGRAM_MADE_FOR
from ._causes import Explanation, explain_compile, explain_trace
from ._signature import (
    Signature,
    attributed_to,
    function_name_and_location,
    is_jax_internal,
    is_taylax_internal,
    signature_from_call,
    signatures_from_jax_cache,
)
from ._warnings import RecompileWarning

_EVENTS = {
    _compat.JAXPR_TRACE_EVENT: "trace",
    _compat.JAXPR_TO_MLIR_MODULE_EVENT: "lower",
    _compat.BACKEND_COMPILE_EVENT: "compile",
}
_HISTORY_PER_FUNCTION = 32
_IGNORE = object()  # the scope of a JAX-internal call


@dataclasses.dataclass(eq=False)
class Call:
    """One jitted call that reached JAX's Python dispatch while someone was watching."""

    fun: Any
    name: str
    location: str
    signature: Signature | None
    watchers: tuple
    nested: bool
    error: str | None = None
    traced: bool = False
    trace_seconds: float | None = None
    explanation: Explanation | None = None
    had_work: bool = False
    ran: bool = False
    jaxpr_ref: Any = None  # weakref to the traced jaxpr this call runs (set at dispatch)


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[Any] = []  # Call or _IGNORE, innermost last
        self.last: Call | None = None  # the last call whose arguments were inferred
        self.traced_only: dict[str, Call] = {}  # by name: traced but not run (AOT .lower())
        self.warnings: list[str] = []


_lock = threading.RLock()
_active: tuple = ()  # the active watches (copy-on-write: read without the lock)
_originals: dict[str, Any] = {}
_history: dict[tuple[str, str], collections.deque] = {}
_tls = _State()


def activate(watch) -> None:
    """Starts sending events to `watch`; installs the hooks if it is the first one."""
    global _active
    with _lock:
        if watch in _active:
            return
        if not _active:
            _install()
        _active = (*_active, watch)


def deactivate(watch) -> None:
    """Stops sending events to `watch`; removes the hooks after the last one."""
    global _active
    with _lock:
        _active = tuple(w for w in _active if w is not watch)
        if not _active:
            _uninstall()
            _history.clear()


def installed() -> bool:
    """Whether the hooks are installed (True only while some watch is active)."""
    return bool(_originals)


def flush_warnings() -> None:
    """Emits the recompile-budget warnings queued on this thread (outside JAX's code)."""
    queued, _tls.warnings = _tls.warnings, []
    for message in queued:
        filename, lineno, module = _user_frame()
        warnings.warn_explicit(
            message, RecompileWarning, filename, lineno, module=module, registry={}
        )


def queue_warning(message: str) -> None:
    """Queues a warning; it is emitted when the outermost jitted call returns."""
    _tls.warnings.append(message)


# --------------------------------------------------------------------------------------
# Installing and removing
# --------------------------------------------------------------------------------------


def _install() -> None:
    wrappers = {
        "_infer_params": _wrap_infer_params,
        "_trace_for_jit": _wrap_trace_for_jit,
        "_run_python_pjit": _wrap_run_python_pjit,
    }
    for name, make in wrappers.items():
        original = _compat.jit_dispatch_function(name)
        _originals[name] = original
        _compat.set_jit_dispatch_function(name, make(original))
    jax.monitoring.register_event_duration_secs_listener(_on_duration)


def _uninstall() -> None:
    jax.monitoring.unregister_event_duration_listener(_on_duration)
    for name, original in _originals.items():
        current = _compat.jit_dispatch_function(name)
        # Restore only our own wrapper: never undo a hook someone installed on top.
        if getattr(current, "_taylax_original", None) is original:
            _compat.set_jit_dispatch_function(name, original)
    _originals.clear()


def _watchers() -> tuple:
    active = _active
    if not active:
        return ()
    thread = threading.get_ident()
    return tuple(w for w in active if w._wants(thread))


# --------------------------------------------------------------------------------------
# The three wrappers
# --------------------------------------------------------------------------------------


def _wrap_infer_params(original):
    def infer_params(fun, jit_info, args, kwargs):
        watchers = _watchers()
        if not watchers:
            return original(fun, jit_info, args, kwargs)
        stack = _tls.stack
        if is_jax_internal(fun) or (stack and is_taylax_internal(fun)):
            stack.append(_IGNORE)
            try:
                return original(fun, jit_info, args, kwargs)
            finally:
                stack.pop()
        call = _new_call(fun, jit_info, args, kwargs, watchers, nested=bool(stack))
        for watch in watchers:
            watch._on_call(call)
        stack.append(call)
        try:
            return original(fun, jit_info, args, kwargs)
        finally:
            stack.pop()
            _remember(call)
            _tls.last = call
            if call.traced and not call.nested:
                _tls.traced_only[call.name] = call
            if not stack:
                flush_warnings()

    infer_params._taylax_original = original
    return infer_params


def _wrap_trace_for_jit(original):
    def trace_for_jit(fun, *args, **kwargs):
        stack = _tls.stack
        call = stack[-1] if stack else None
        if not isinstance(call, Call) or call.fun is not fun:
            return original(fun, *args, **kwargs)
        start = time.perf_counter()
        result = original(fun, *args, **kwargs)
        elapsed = time.perf_counter() - start
        call.traced = True
        # JAX's own duration when it reports one (top-level traces), else ours.
        seconds = call.trace_seconds if call.trace_seconds is not None else elapsed
        _emit(call, "trace", seconds)
        return result

    trace_for_jit._taylax_original = original
    return trace_for_jit


def _wrap_run_python_pjit(original):
    def run_python_pjit(params, args_flat, fun, args, kwargs):
        if not _active:
            return original(params, args_flat, fun, args, kwargs)
        stack = _tls.stack
        call = _tls.last
        if call is not None and call.fun is fun:
            _tls.last = None
            call.ran = True
            try:
                call.jaxpr_ref = weakref.ref(params.params["jaxpr"])
            except Exception:  # explained with less: no lowering-cache lookup
                pass
            if _tls.traced_only.get(call.name) is call:
                del _tls.traced_only[call.name]
            scope = call
        elif is_jax_internal(fun):
            scope = _IGNORE
        else:
            return original(params, args_flat, fun, args, kwargs)
        stack.append(scope)
        try:
            return original(params, args_flat, fun, args, kwargs)
        finally:
            stack.pop()
            if not stack:
                flush_warnings()

    run_python_pjit._taylax_original = original
    return run_python_pjit


def _on_duration(event: str, duration: float, **kwargs) -> None:
    phase = _EVENTS.get(event)
    if phase is None:
        return
    stack = _tls.stack
    scope = stack[-1] if stack else None
    if scope is None:  # outside any dispatch: only an AOT `.lower()`/`.compile()` of a call
        name = str(kwargs.get("fun_name", ""))
        if name.startswith("jit(") and name.endswith(")"):
            name = name[4:-1]
        scope = _tls.traced_only.get(name)
        if scope is None:
            return
    if scope is _IGNORE:
        return
    if phase == "trace":  # reported inside `_trace_for_jit`, which emits the event
        scope.trace_seconds = duration
        return
    _emit(scope, phase, duration)


# --------------------------------------------------------------------------------------
# Calls, history and explanations
# --------------------------------------------------------------------------------------


def _new_call(fun, jit_info, args, kwargs, watchers, *, nested: bool) -> Call:
    user = _taylax_user_function() if not nested and is_taylax_internal(fun) else None
    try:
        signature = signature_from_call(fun, jit_info, args, kwargs)
        if user is not None:
            signature = attributed_to(
                signature,
                user,
                eager=getattr(fun, EAGER_TRACE, ""),
                made_for=getattr(fun, PROGRAM_MADE_FOR, None),
            )
        name, location, error = signature.name, signature.location, None
    except Exception as exc:  # never let the recorder break a call: explain with less
        signature = None
        name, location, _ = function_name_and_location(user if user is not None else fun)
        error = f"{type(exc).__name__}: {exc}"
    _seen_names.add(name)
    return Call(fun, name, location, signature, watchers, nested, error=error)


# The names of every function recorded by any watch in this process, so that
# `expect_compiles(function="name")` can tell a typo from a function served by JAX's C++
# cache (never seen by Python) after an earlier watch saw it. Names are short strings.
_seen_names: set[str] = set()


def seen_name(name: str) -> bool:
    """Whether a function named `name` (or ending in ``.name``) was ever recorded."""
    return any(name in (seen, seen.rsplit(".", 1)[-1]) for seen in _seen_names)


# The locals that taylax's entry points keep the user's function in (their argument name).
_USER_FUNCTION_NAMES = ("fun", "f", "func", "fn", "function")


def _taylax_user_function():
    """The user's function of the taylax call in progress (eager `derivatives(f, k)(x)`,
    `derivative(f)(x)`, ...), found in the locals of taylax's frames nearest to the user's
    code; None if there is none. Its internal jitted programs are reported under it."""
    frame = sys._getframe(2)
    taylax_frames = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "") or ""
        if module.startswith("taylax.") and not module.startswith("taylax._diagnostics"):
            taylax_frames.append(frame)
        elif not (
            module in ("jax", "functools", "contextlib")
            or module.startswith(("jax.", "jaxlib", "taylax._diagnostics"))
        ):
            break  # the user's code
        frame = frame.f_back
    for frame in reversed(taylax_frames):  # nearest to the user's code first
        local = frame.f_locals
        for key in _USER_FUNCTION_NAMES:
            candidate = local.get(key)
            if callable(candidate) and not isinstance(candidate, type):
                if not is_taylax_internal(candidate):
                    return candidate
    return None


def _remember(call: Call) -> None:
    sig = call.signature
    if sig is None:
        return
    with _lock:
        entries = _history.setdefault(sig.key, collections.deque(maxlen=_HISTORY_PER_FUNCTION))
        if entries and entries[-1].quick_key() == sig.quick_key():
            sig.compiled = sig.compiled or entries[-1].compiled
            entries[-1] = sig  # the same call again: keep one entry
        else:
            entries.append(sig)


def _earlier(sig: Signature) -> list[Signature]:
    with _lock:
        seen = [old for old in _history.get(sig.key, ()) if old is not sig]
    if not any(sig.same_function(old) for old in seen):
        # Calls made before recording started: ask JAX's trace cache, minus this call.
        fun = sig.fun()
        if fun is not None and not sig.attributed:  # JAX never saw the user's function
            key = sig.trace_key()
            cached = [old for old in signatures_from_jax_cache(fun) if old.trace_key() != key]
            seen = cached + seen
    return seen


def _explain(call: Call) -> Explanation:
    if call.signature is None:
        return Explanation(
            "unknown", f"the recorder could not read this call's arguments ({call.error})"
        )
    earlier = _earlier(call.signature)
    if call.traced:
        return explain_trace(call.signature, earlier)
    return explain_compile(call.signature, earlier, _cached_placements(call))


def _cached_placements(call: Call) -> list[tuple]:
    """Per earlier lowering of this call's jaxpr (JAX's own cache): each leaf's sharding,
    None where jit was free to place it. Covers calls made before recording started."""
    jaxpr = call.jaxpr_ref() if call.jaxpr_ref is not None else None
    if jaxpr is None:
        return []
    n = len(call.signature.leaves)
    # The cache's shardings cover the jaxpr's consts first, then the dynamic arguments.
    return [shardings[-n:] if n else () for shardings in _compat.jit_lowering_in_shardings(jaxpr)]


def _emit(call: Call, phase: str, seconds: float) -> None:
    try:
        if call.explanation is None:
            call.explanation = _explain(call)
    except Exception as exc:  # a bug here must never break the user's program
        call.explanation = Explanation("unknown", f"the recorder failed to explain it ({exc!r})")
    first = not call.had_work
    call.had_work = True
    if phase != "trace" and call.signature is not None:
        call.signature.compiled = True
    for watch in call.watchers:
        watch._on_event(call, phase, seconds, first)


def _user_frame() -> tuple[str, int, str]:
    """The innermost frame outside JAX and this package: where the warning points."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in ("/jax/", "/jaxlib/", "/_diagnostics/")):
            return filename, frame.f_lineno, frame.f_globals.get("__name__", "")
        frame = frame.f_back
    return "<unknown>", 0, ""
