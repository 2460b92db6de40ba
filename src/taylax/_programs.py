"""Tracing user functions, and the caches of the Taylor programs compiled for them.

An eager call traces the user's function again every time (cheap, and the only way to
see the current value of a global or a mutated object), then looks its compiled Taylor
program up by the jaxpr's *structure*: primitives, parameters, literal values, avals and
wiring (`closed_key`). The jaxpr's top-level constants are arguments of the compiled
program, never baked in, so a changed closed-over array reuses the program with its new
value, and a changed Python scalar (a literal) is a different structure. The tables are
LRUs (`ProgramCache`), so memory stays flat however many distinct functions are called.
`taylax.derivatives`, `taylax.derivative` and the operators all trace and cache here.
"""

from __future__ import annotations

import collections
import itertools
import weakref
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _compat, _policy


class Program:
    """The differentiated program of a `derivative_p` equation (its `program` parameter).

    A wrapper rather than a bare `ClosedJaxpr`, so that JAX's generic walkers over
    sub-jaxprs (sharding and effect checks at lowering) do not descend into it: they do
    not memoize, and in a jitted recursion each level references the previous one twice
    (its primal call and its derivative), so they would visit 2^depth sub-programs.
    taylax's own walkers unwrap it. Equal when it holds the same jaxpr object.
    """

    __slots__ = ("closed",)

    def __init__(self, closed: _compat.ClosedJaxpr):
        self.closed = closed

    def __eq__(self, other) -> bool:
        return isinstance(other, Program) and other.closed is self.closed

    def __hash__(self) -> int:
        return id(self.closed)

    def __repr__(self) -> str:
        jaxpr = _compat.open_jaxpr(self.closed)
        return f"<program: {len(jaxpr.invars)} inputs, {len(jaxpr.eqns)} equations>"


class Uncacheable(Exception):
    """A jaxpr holds something with no stable key (a tracer of an enclosing transformation)."""


class _Identity:
    """Keys an unhashable parameter by identity, keeping it alive so its id is not reused."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


# Constants of sub-jaxprs up to this many elements are keyed by value; larger ones by identity.
_CONST_BY_VALUE_SIZE = 4096


_INTERN_SIZE = 4096


_PROGRAM_CACHE_SIZE = 64


# Structure -> token (an int never reused), so that a key mentions a sub-jaxpr by its token:
# hashing a key then costs the size of one jaxpr, not of every program it calls (a jitted
# recursion references each level twice, so expanded keys would grow as 2^depth).
_INTERNED: collections.OrderedDict = collections.OrderedDict()


_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Jaxpr -> token


_next_token = itertools.count()


def _intern(structure) -> int:
    token = _INTERNED.get(structure)
    if token is None:
        token = _INTERNED[structure] = next(_next_token)
        if len(_INTERNED) > _INTERN_SIZE:
            _INTERNED.popitem(last=False)
    else:
        _INTERNED.move_to_end(structure)
    return token


def _array_key(x):
    if _compat.is_tracer(x):
        raise Uncacheable
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        # A typed PRNG key has no NumPy view: key it by its implementation and raw data.
        data = np.asarray(jax.random.key_data(x))
        return ("key", str(x.dtype), data.shape, data.tobytes())
    a = np.asarray(x)
    return ("array", a.dtype.str, a.shape, a.tobytes(), getattr(x, "weak_type", None))


def const_value_key(c):
    """A key for a concrete constant's value (dtype, shape, bytes, weak type)."""
    return _array_key(c)


def const_key(c):
    """A key for a constant of a sub-jaxpr: its value up to `_CONST_BY_VALUE_SIZE`
    elements, its identity above (raises `Uncacheable` for a tracer)."""
    if _compat.is_tracer(c):
        raise Uncacheable
    if np.size(c) <= _CONST_BY_VALUE_SIZE:
        return _array_key(c)
    return _Identity(c)


def _value_key(v):
    if _compat.is_closed_jaxpr(v):
        jaxpr, consts = _compat.closed_parts(v)
        return ("closed", jaxpr_token(jaxpr), tuple(const_key(c) for c in consts))
    if _compat.is_jaxpr(v):
        return ("jaxpr", jaxpr_token(v))
    if isinstance(v, Program):
        return ("program", _value_key(v.closed))
    if isinstance(v, (tuple, list)):
        return (type(v), tuple(_value_key(x) for x in v))
    if isinstance(v, dict):
        return (dict, tuple((k, _value_key(x)) for k, x in v.items()))
    if _compat.is_tracer(v):
        raise Uncacheable
    if isinstance(v, (np.ndarray, np.generic, jax.Array)):
        return _array_key(v)
    try:
        hash(v)
    except TypeError:
        return _Identity(v)
    return (type(v), v)


def _params_key(eqn: _compat.JaxprEqn):
    params = eqn.params
    if eqn.primitive is _compat.custom_jvp_call_p:
        # The jvp rule reaches the jaxpr as a fresh thunk on every trace; key it by the
        # user's rule function instead (its identity, as `jax.jit` keys a function).
        rest = {k: v for k, v in params.items() if k != "jvp_jaxpr_fun"}
        rule = _compat.custom_jvp_rule_key(params["jvp_jaxpr_fun"])
        return (_value_key(rest), _Identity(params["jvp_jaxpr_fun"]) if rule is None else rule)
    return _value_key(params)


def jaxpr_token(jaxpr: _compat.Jaxpr) -> int:
    """A token equal for two jaxprs exactly when they compute the same thing the same way.

    Raises `Uncacheable` when the jaxpr holds a tracer.
    """
    token = _TOKENS.get(jaxpr)
    if token is not None:
        return token
    names: dict = {}

    def bind(v):
        names[v] = len(names)
        return v.aval

    def use(v):
        if isinstance(v, _compat.Literal):
            return ("literal", v.aval, _array_key(v.val))
        return names[v]

    parts = [tuple(bind(v) for v in jaxpr.constvars), tuple(bind(v) for v in jaxpr.invars)]
    for eqn in jaxpr.eqns:
        ctx = eqn.ctx  # compute type, threefry mode, ... (they change the lowering)
        try:
            hash(ctx)
        except TypeError:
            ctx = _Identity(ctx)
        outs = tuple(
            ("drop", v.aval) if isinstance(v, _compat.DropVar) else bind(v) for v in eqn.outvars
        )
        parts.append(
            (eqn.primitive, tuple(use(v) for v in eqn.invars), _params_key(eqn), outs, ctx)
        )
    parts.append(tuple(use(v) for v in jaxpr.outvars))
    parts.append(_value_key(sorted(map(repr, jaxpr.effects))))
    token = _TOKENS[jaxpr] = _intern(tuple(parts))
    return token


def closed_key(closed: _compat.ClosedJaxpr):
    """The structural key of a closed jaxpr whose constants are passed as arguments, or None.

    Only the constants' avals are part of it (they are in the jaxpr's constvars). None
    when the jaxpr cannot be keyed (it holds a tracer).
    """
    try:
        return jaxpr_token(_compat.open_jaxpr(closed))
    except Uncacheable:
        return None


class ProgramCache:
    """A bounded LRU of compiled programs keyed by structure (see `closed_key`)."""

    def __init__(self, size: int = _PROGRAM_CACHE_SIZE):
        self.size = size
        self.entries: collections.OrderedDict = collections.OrderedDict()

    def get(self, key, make: Callable[[], Callable]) -> Callable:
        """The cached program for `key`, made by `make()` on a miss (not stored if key is None)."""
        if key is None:
            return make()
        fn = self.entries.get(key)
        if fn is None:
            fn = self.entries[key] = make()
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        else:
            self.entries.move_to_end(key)
        return fn

    def clear(self) -> None:
        """Drop every compiled program."""
        self.entries.clear()


def traced_value_error(api: str, err: Exception) -> TypeError:
    """The error for Python control flow on a traced value inside a taylax transformation."""
    return TypeError(
        f"`{api}` traces the function with an abstract value of its differentiated input "
        "(as `jax.jit` does, and unlike eager `jax.jacfwd`), so Python control flow or "
        "conversion on that value (`if x > 0:`, `float(x)`, `int(x)`) cannot run. Use "
        "`jnp.where`, `jax.lax.cond` or `jax.lax.select` instead, or pass the value as an "
        f"argument that is not differentiated. JAX's own message: {err}"
    )


def make_jaxpr_explained(fun: Callable, api: str, *args) -> _compat.ClosedJaxpr:
    """`jax.make_jaxpr(fun)(*args)`, explaining a concretization error in terms of `api`."""
    try:
        return jax.make_jaxpr(fun)(*args)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError) as err:
        raise traced_value_error(api, err) from err


def check_inexact(leaves, what: str, example: str = "x") -> None:
    """Raise a clear error naming `what` when a leaf is not floating-point or complex."""
    for leaf in leaves:
        dtype = jnp.result_type(leaf)
        if not jnp.issubdtype(dtype, np.inexact):
            raise TypeError(
                f"`{what}` must hold floating-point or complex arrays to be differentiated, got "
                f"dtype {dtype}. Convert it first, e.g. `{example}.astype(float)`."
            )


def check_order(order, name: str = "order") -> int:
    """Validate a derivative order: a non-negative Python integer."""
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise TypeError(
            f"`{name}` must be a non-negative Python integer, got {order!r} of type "
            f"{type(order).__name__}."
        )
    if order < 0:
        raise ValueError(f"`{name}` must be a non-negative integer, got {order}.")
    return int(order)


# The attribute that marks `trace_leaves`'s function: `taylax.watch()` names its traces
# as eager taylax calls (a per-call lookup), not as a re-created function of the user's.
EAGER_TRACE = "_taylax_eager_trace"
# The attribute that holds what a cached program was made for (see `cached_program`).
PROGRAM_MADE_FOR = "_taylax_made_for"


def trace_leaves(fun: Callable, args: tuple, api: str):
    """Trace `fun(*args)` to a closed jaxpr over the flat leaves of `args`; return it and the
    output tree."""
    flat_args, in_tree = jax.tree.flatten(args)
    out_tree_box = []

    def flat_fun(*leaves):
        out = fun(*jax.tree.unflatten(in_tree, leaves))
        out_leaves, out_tree = jax.tree.flatten(out)
        out_tree_box.append(out_tree)
        return out_leaves

    setattr(flat_fun, EAGER_TRACE, api)

    closed = make_jaxpr_explained(flat_fun, api, *flat_args)
    return closed, out_tree_box[0]


def trace_scalar(fun: Callable, t, api: str):
    """Trace `fun(t)` for a scalar array `t` to a jaxpr whose constants are explicit
    leading inputs; return it, the constants and the output tree."""
    closed, out_tree = trace_leaves(fun, (t,), api)
    sub, consts = _compat.consts_to_invars(closed)
    return sub, consts, out_tree


# Compiled Taylor programs of eager calls. Every call traces `fun` again (so a changed
# global or mutated object is seen), then reuses the program compiled for a jaxpr of the
# same structure; the jaxpr's array constants are arguments of that program, and the
# scalar ones baked in are part of the key, so no changed value is ever served from a
# stale program.
_PROGRAMS = ProgramCache()


def _consts_read_by_rules(jaxpr, num_consts: int) -> set[int]:
    """Indices of `jaxpr`'s constants whose value a rule reads: the exponent of `pow`
    (directly or through a dtype conversion), where an integer-valued exponent keeps the
    power exact at a zero or negative base."""
    constvars, _ = _compat.input_vars(jaxpr, num_consts)
    index = {v: i for i, v in enumerate(constvars)}

    def is_const(atom) -> bool:  # a Literal (unhashable) is never one
        return not isinstance(atom, _compat.Literal) and atom in index

    read = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "convert_element_type" and is_const(eqn.invars[0]):
            index[eqn.outvars[0]] = index[eqn.invars[0]]
        elif eqn.primitive.name == "pow" and is_const(eqn.invars[1]):
            read.add(index[eqn.invars[1]])
    return read


def cached_program(closed, static: tuple, fun: Callable, make: Callable):
    """The jitted `make(jaxpr)` for `closed`, cached by structure, and its const arguments.

    Returns `(program, consts)`: call `program(consts, *inputs)`. Constants are arguments
    of the program, so a closed-over array with a new value (a 0-d one too) reuses it; the
    few scalar constants whose value a rule reads (the exponent of a power) are baked in
    and keyed by value, like Python numbers (which are literals). The emission policy in
    force (`taylax.emission_policy`) is part of the key.
    """
    jaxpr, consts = _compat.closed_parts(closed)
    consts = list(consts)
    read = _consts_read_by_rules(jaxpr, len(consts))
    baked = {
        i: c
        for i, c in enumerate(consts)
        if i in read and np.ndim(c) == 0 and not _compat.is_tracer(c)
    }
    key = closed_key(closed)
    if key is not None:
        # The policy in force shapes the program: one program per policy.
        baked_key = tuple((i, const_value_key(c)) for i, c in baked.items())
        key = (static, _policy.current(), key, baked_key)

    def build():
        inner = make(jaxpr)

        def program(passed, *inputs):
            rest = iter(passed)
            return inner(
                [baked[i] if i in baked else next(rest) for i in range(len(consts))], *inputs
            )

        # Named after the user's function, so that compile logs and diagnostics show it.
        name = getattr(fun, "__name__", type(fun).__name__)
        program.__name__ = program.__qualname__ = f"{static[0]}_{name}"
        # What this program was made for, so that `taylax.watch()` can say why a new one
        # was compiled: the API's settings, the policy, and the traced jaxpr's structure.
        setattr(program, PROGRAM_MADE_FOR, (static, _policy.current().name, key and key[2:]))
        return jax.jit(program)

    passed = [c for i, c in enumerate(consts) if i not in baked]
    return _PROGRAMS.get(key, build), passed
