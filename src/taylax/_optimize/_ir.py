"""Shared helpers of the optimizer passes: what may be touched, typed literals, keys.

An equation is *kept* (never dropped, never merged, never folded) when it has
effects, is a random, callback or barrier primitive, or carries a sub-program
that contains one. An equation is *mergeable* by CSE when it is not kept and is
not a ``remat`` with ``prevent_cse`` (nor carries one).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import _compat

_KEEP_NAMES = frozenset(
    {
        "optimization_barrier",
        "threefry2x32",
        "create_token",
        "after_all",
        "dce_sink",
        "pure_callback",
        "io_callback",
        "debug_callback",
        "debug_print",
    }
)
_KEEP_PREFIXES = ("random_", "rng_")

# Primitives whose operands may be reordered: CSE sorts their operand keys.
COMMUTATIVE = frozenset({"add", "add_any", "mul", "max", "min", "and", "or", "xor", "eq", "ne"})


def is_keep_primitive(primitive) -> bool:
    """Whether `primitive` is random, a callback or a barrier: never merged or dropped."""
    name = primitive.name
    return name in _KEEP_NAMES or name.startswith(_KEEP_PREFIXES) or "callback" in name


@functools.cache
def _program_type() -> type:
    """`taylax._derivative.Program`: the wrapper of a derivative's program (imported lazily)."""
    from .._programs import Program

    return Program


def sub_jaxprs(value: Any) -> Iterator[Any]:
    """Yields every Jaxpr or ClosedJaxpr held by one parameter value (tuples included)."""
    if _compat.is_jaxpr(value):
        yield value
    elif isinstance(value, _program_type()):
        yield value.closed
    elif isinstance(value, tuple | list):
        for item in value:
            yield from sub_jaxprs(item)


def _open(jaxpr) -> Any:
    return _compat.open_jaxpr(jaxpr)


# Per-jaxpr facts, computed once: (contains a kept equation, contains prevent_cse).
_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _jaxpr_facts(jaxpr) -> tuple[bool, bool]:
    jaxpr = _open(jaxpr)
    facts = _FACTS.get(jaxpr)
    if facts is None:
        keep = no_merge = False
        for eqn in jaxpr.eqns:
            keep = keep or is_kept(eqn)
            no_merge = no_merge or not is_mergeable(eqn)
        facts = _FACTS[jaxpr] = (keep, no_merge)
    return facts


def is_kept(eqn) -> bool:
    """Whether `eqn` must never be dropped, merged or folded."""
    if eqn.effects or is_keep_primitive(eqn.primitive):
        return True
    if not eqn.params:
        return False
    return any(_jaxpr_facts(j)[0] for v in eqn.params.values() for j in sub_jaxprs(v))


def is_mergeable(eqn) -> bool:
    """Whether CSE may merge `eqn` with an equal equation."""
    if eqn.effects or is_keep_primitive(eqn.primitive):
        return False
    if not eqn.params:
        return True
    if eqn.primitive is _compat.remat_p and eqn.params.get("prevent_cse", False):
        return False
    return not any(_jaxpr_facts(j)[1] for v in eqn.params.values() for j in sub_jaxprs(v))


def has_sub_jaxprs(eqn) -> bool:
    """Whether `eqn` carries a sub-program."""
    return any(True for v in eqn.params.values() for _ in sub_jaxprs(v))


def map_params(params: dict, fn: Callable[[Any], Any]) -> dict:
    """`params` with every (Closed)Jaxpr replaced by `fn(jaxpr)`; the same dict if none changed."""
    changed = False

    def visit(value):
        nonlocal changed
        if _compat.is_jaxpr(value):
            new = fn(value)
            changed = changed or new is not value
            return new
        program = _program_type()
        if isinstance(value, program):
            new = fn(value.closed)
            if new is value.closed:
                return value
            changed = True
            return program(new)
        if isinstance(value, tuple) and any(True for _ in sub_jaxprs(value)):
            return tuple(visit(item) for item in value)
        return value

    new_params = {k: visit(v) for k, v in params.items()}
    return new_params if changed else params


# --------------------------------------------------------------------------------------
# Literals and constants.
# --------------------------------------------------------------------------------------


def is_var(atom) -> bool:
    """Whether `atom` is a variable (not a literal)."""
    return not isinstance(atom, _compat.Literal)


def literal(value, aval) -> Any:
    """A scalar literal of `aval`'s dtype and weak type holding `value`."""
    scalar_aval = _compat.shaped_array((), aval.dtype, aval.weak_type)
    return _compat.Literal(np.asarray(value, dtype=aval.dtype)[()], scalar_aval)


def literal_key(lit) -> tuple:
    """A hashable key equal for literals of equal dtype, weak type and bits."""
    aval = lit.aval
    value = np.asarray(lit.val, dtype=aval.dtype)
    return ("lit", str(aval.dtype), bool(aval.weak_type), value.shape, value.tobytes())


def concrete(value) -> np.ndarray | None:
    """`value` as a NumPy array, or None when it is only known at run time (a tracer)."""
    if _compat.is_tracer(value):
        return None
    try:
        return np.asarray(value)
    except Exception:  # opaque values (keys, tokens) are never folded
        return None


def same_type(a, b) -> bool:
    """Whether two atoms have the same shape, dtype and weak type (forwarding is then exact)."""
    return a.aval == b.aval


# --------------------------------------------------------------------------------------
# Structural keys: equal keys mean equal programs (up to variable names).
# --------------------------------------------------------------------------------------

_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Key:
    """A structural key with its hash computed once (keys of large jaxprs are deep tuples)."""

    __slots__ = ("hash", "key")

    def __init__(self, key: tuple):
        self.key, self.hash = key, hash(key)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _Key) and self.hash == other.hash and self.key == other.key


_SMALL_CONST = 1024  # constants up to this many elements are keyed by value, others by id


def value_key(value: Any) -> Any:
    """A hashable key of a parameter value: structural for sub-jaxprs, by value otherwise."""
    if _compat.is_closed_jaxpr(value):
        jaxpr, consts = _compat.closed_parts(value)
        return ("closed", jaxpr_key(jaxpr), tuple(_const_key(c) for c in consts))
    if _compat.is_jaxpr(value):
        return ("jaxpr", jaxpr_key(value))
    if isinstance(value, _program_type()):
        return ("program", value_key(value.closed))
    if isinstance(value, tuple | list):
        return (type(value).__name__, *(value_key(v) for v in value))
    if isinstance(value, np.ndarray):
        return _const_key(value)
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return ("v", type(value).__name__, value)


def _const_key(value: Any) -> Any:
    array = concrete(value)
    if array is None or array.dtype == object or array.size > _SMALL_CONST:
        return ("id", id(value))
    return ("nd", str(array.dtype), array.shape, array.tobytes())


def params_key(params: dict, ignore: frozenset[str] = frozenset()) -> tuple:
    """A hashable key of an equation's parameters (`ignore` names are left out)."""
    if not params:
        return ()
    return tuple((k, value_key(v)) for k, v in sorted(params.items()) if k not in ignore)


def jaxpr_key(jaxpr) -> _Key:
    """A structural key of an open jaxpr: variables are numbered in order of definition."""
    key = _KEYS.get(jaxpr)
    if key is not None:
        return key
    numbers: dict[Any, int] = {}

    def define(v) -> Any:
        numbers[v] = len(numbers)
        return v.aval

    def use(a) -> Any:
        if not is_var(a):
            return literal_key(a)
        return numbers.get(a, ("free", a.aval))

    head = (
        tuple(define(v) for v in jaxpr.constvars),
        tuple(define(v) for v in jaxpr.invars),
    )
    body = []
    for eqn in jaxpr.eqns:
        ins = tuple(use(a) for a in eqn.invars)
        body.append(
            (
                eqn.primitive,
                ins,
                params_key(eqn.params),
                tuple(define(v) for v in eqn.outvars),
                bool(eqn.effects),
            )
        )
    key = _Key((head, tuple(body), tuple(use(a) for a in jaxpr.outvars)))
    _KEYS[jaxpr] = key
    return key
