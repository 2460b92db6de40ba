"""What the recorder knows about one jitted call: the same things JAX's caches key on.

A `Signature` holds the function object (weakly), its jit options, JAX's trace-context
config, the static arguments, one pytree structure per dynamic argument and, per array
leaf, its shape, dtype, weak type, sharding and committed-ness. It is built from a call's
arguments, or from one of JAX's own trace-cache keys (for calls made before recording).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import weakref
from typing import Any

import jax
import numpy as np

from .. import _compat

_PY_SCALARS = (bool, int, float, complex)


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One dynamic array argument (a pytree leaf), as the caches see it."""

    shape: tuple[int, ...]
    dtype: str
    weak_type: bool
    aval_sharding: Any  # the abstract value's sharding: part of JAX's trace key
    sharding: Any  # a concrete jax.Array's sharding; None for host values and tracers
    committed: bool | None  # None: unknown (a tracer, or from JAX's cache key)
    kind: str  # "Python scalar", "NumPy array", "jax.Array", "tracer", "value"

    def type_str(self) -> str:
        """E.g. ``float32[3,4]``, or ``weak float32[]`` for a weakly typed value."""
        text = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return f"weak {text}" if self.weak_type else text

    def placement_str(self) -> str:
        """Where the value lives, in words (used for `committed` details)."""
        if self.kind in ("Python scalar", "NumPy array"):
            return f"a {self.kind} (uncommitted: jit may place it)"
        if self.kind == "uncommitted value":  # an earlier call known from JAX's cache
            return "an uncommitted value (a NumPy array, Python scalar or uncommitted jax.Array)"
        if self.committed is None:
            return f"a {self.kind}"
        state = "committed to" if self.committed else "uncommitted, on"
        return f"a jax.Array {state} {sharding_str(self.sharding)}"


@dataclasses.dataclass(eq=False)
class Signature:
    """One call of a jitted function, reduced to what decides a cache hit."""

    name: str
    location: str
    kind: str  # "lambda", "functools.partial", "closure", "bound method", "function", ...
    fun_id: int
    fun_ref: Any  # weakref to the function object, or None if it cannot be weakly held
    jit_info: Any
    config: tuple
    static: tuple[tuple[str, Any], ...]
    trees: tuple[tuple[str, Any], ...]  # (argument label, PyTreeDef)
    leaves: tuple[Leaf, ...]
    from_jax_cache: bool = False
    captured: tuple[tuple[str, Any], ...] = ()  # closure cells / partial arguments
    compiled: bool = False  # set once this call lowered or compiled at top level
    attributed: bool = False  # a taylax-internal program reported as the user's function

    internal: str = ""  # the taylax program's name when `attributed`
    eager: str = ""  # the taylax API whose eager call traced the user's function
    made_for: Any = None  # a taylax program's (settings, policy name, jaxpr structure)

    @property
    def key(self) -> tuple[str, str, str]:
        """The function's identity across re-created objects: name and code location (and
        which taylax program, for one reported as the user's function)."""
        return (self.name, self.location, self.internal)

    def fun(self):
        """The function object if it is still alive, else None."""
        return None if self.fun_ref is None else self.fun_ref()

    def same_function(self, other: Signature) -> bool:
        """Whether both calls used the same function object under the same `jax.jit`."""
        if self.fun_ref is None or other.fun_ref is None:
            same = self.fun_id == other.fun_id
        else:
            alive = self.fun()
            same = alive is not None and alive is other.fun()
        return same and (self.jit_info is other.jit_info or other.from_jax_cache)

    def trace_key(self) -> tuple:
        """What JAX's trace cache compares (besides the function): no concrete placement."""
        avals = tuple((x.shape, x.dtype, x.weak_type, x.aval_sharding) for x in self.leaves)
        return (self.config, self.static, self.trees, avals)

    def quick_key(self) -> tuple:
        """A cheap tuple to skip storing an exact repeat of the previous signature."""
        return (self.fun_id, id(self.jit_info), self.static, self.trees, self.leaves)

    def describe_args(self, limit: int = 4) -> str:
        """A short list of the arguments, e.g. ``x: float32[3], n=2``."""
        parts = [f"{label}={short(value)}" for label, value in self.static]
        paths = leaf_paths(self)
        parts += [f"{path}: {leaf.type_str()}" for path, leaf in zip(paths, self.leaves)]
        extra = len(parts) - limit
        text = ", ".join(parts[:limit]) or "no arguments"
        return text + (f" (and {extra} more)" if extra > 0 else "")


def unwrap(fun) -> tuple[Any, str]:
    """The underlying Python function of `fun` and what kind of callable `fun` is."""
    if isinstance(fun, functools.partial):
        return unwrap(fun.func)[0], "functools.partial"
    if inspect.ismethod(fun):
        return fun.__func__, "bound method"
    base = inspect.unwrap(fun) if callable(fun) else fun
    if not hasattr(base, "__code__") and callable(base):
        return type(base).__call__, "callable object"
    if getattr(base, "__name__", "") == "<lambda>":
        return base, "lambda"
    if getattr(base, "__closure__", None):
        return base, "closure"
    return base, "function"


def _module_of(fun) -> str:
    base = fun
    while isinstance(base, functools.partial):
        base = base.func
    base = getattr(base, "__func__", base)
    return getattr(base, "__module__", None) or ""


def is_jax_internal(fun) -> bool:
    """Whether `fun` belongs to JAX itself (jnp functions, eagerly applied primitives)."""
    if getattr(fun, "_apply_primitive", False):
        return True
    module = _module_of(fun)
    return module == "jax" or module.startswith(("jax.", "jaxlib"))


# taylax's own jitted helpers: one per (sub-program, order), each created once on purpose.
_TAYLAX_INTERNAL = (
    "taylax._api",
    "taylax._derivative",
    "taylax._emitted",
    "taylax._interpret",
    "taylax._optimize",
    "taylax._programs",
    "taylax._rules",
    "taylax._series",
)


def is_taylax_internal(fun) -> bool:
    """Whether `fun` is one of taylax's internal jitted helpers.

    Traced inside a user's function (while it is traced or lowered), they are part of that
    function's cost, not separate events: reporting each as a `new_function` would suggest
    the user re-creates them.
    """
    return _module_of(fun).startswith(_TAYLAX_INTERNAL)


def function_name_and_location(fun) -> tuple[str, str, str]:
    """(qualified name, ``file:line`` of its code, kind of callable)."""
    base, kind = unwrap(fun)
    name = getattr(fun, "__qualname__", None) or getattr(base, "__qualname__", None)
    code = getattr(base, "__code__", None)
    if code is None:
        return str(name or type(fun).__name__), "?", kind
    return str(name or code.co_name), f"{_relative(code.co_filename)}:{code.co_firstlineno}", kind


def signature_from_call(fun, jit_info, args, kwargs) -> Signature:
    """The signature of a call ``jitted(*args, **kwargs)`` of the jitted `fun`."""
    static_argnums, static_argnames, py_signature = _compat.jit_info_static(jit_info)
    arg_signature, dynamic = _compat.parse_jit_arguments(
        args, kwargs, static_argnums, static_argnames
    )
    static_positions = [i for i in range(len(args)) if i in static_argnums]
    dynamic_positions = [i for i in range(len(args)) if i not in static_argnums]
    return _build(
        fun,
        jit_info,
        py_signature,
        _compat.trace_context(),
        arg_signature,
        static_positions,
        dynamic_positions,
        tuple(_leaf(x) for x in dynamic),
        from_jax_cache=False,
    )


def signatures_from_jax_cache(fun) -> list[Signature]:
    """Signatures of the calls of `fun` that JAX's trace cache still holds."""
    found = []
    for context, jit_info, arg_signature, avals, _mesh in _compat.jit_trace_cache_keys(fun):
        static_argnums, _, py_signature = _compat.jit_info_static(jit_info)
        n_static = len(arg_signature.static_args) - len(arg_signature.static_arg_names)
        n_dynamic = len(arg_signature.dynamic_arg_treedefs) - len(arg_signature.dynamic_arg_names)
        static_positions, dynamic_positions, i = [], [], 0
        while len(static_positions) < n_static or len(dynamic_positions) < n_dynamic:
            if i in static_argnums and len(static_positions) < n_static:
                static_positions.append(i)
            else:
                dynamic_positions.append(i)
            i += 1
        leaves = tuple(_leaf_from_aval(aval) for aval in avals)
        found.append(
            _build(
                fun,
                jit_info,
                py_signature,
                context,
                arg_signature,
                static_positions,
                dynamic_positions,
                leaves,
                from_jax_cache=True,
            )
        )
    return found


def leaf_paths(signature: Signature) -> list[str]:
    """A readable path for every leaf, e.g. ``params['w']`` or ``batch[0]``."""
    paths: list[str] = []
    for label, treedef in signature.trees:
        paths += [label + key for key in tree_keys(treedef)]
    if len(paths) != len(signature.leaves):  # defensive: never mislabel a leaf
        return [f"leaf {i}" for i in range(len(signature.leaves))]
    return paths


def tree_keys(treedef) -> list[str]:
    """The key path (as text) of each leaf of `treedef`, or ``[i]`` where none is known."""
    try:
        tree = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
        flat, _ = jax.tree_util.tree_flatten_with_path(tree)
        keys = [jax.tree_util.keystr(path) for path, _ in flat]
        if len(keys) == treedef.num_leaves:
            return keys
    except Exception:  # a custom node whose unflatten rejects placeholder leaves
        pass
    return [f"[{i}]" for i in range(treedef.num_leaves)]


def _build(
    fun,
    jit_info,
    py_signature,
    config,
    arg_signature,
    static_positions,
    dynamic_positions,
    leaves,
    *,
    from_jax_cache,
) -> Signature:
    name, location, kind = function_name_and_location(fun)
    static_labels = [_positional_label(py_signature, i) for i in static_positions]
    static_labels += list(arg_signature.static_arg_names)
    dynamic_labels = [_positional_label(py_signature, i) for i in dynamic_positions]
    dynamic_labels += list(arg_signature.dynamic_arg_names)
    fun_ref = _weak_ref(fun)
    return Signature(
        name=name,
        location=location,
        kind=kind,
        fun_id=id(fun),
        fun_ref=fun_ref,
        jit_info=jit_info,
        config=tuple(config),
        static=tuple(zip(static_labels, arg_signature.static_args)),
        trees=tuple(zip(dynamic_labels, arg_signature.dynamic_arg_treedefs)),
        leaves=leaves,
        from_jax_cache=from_jax_cache,
        captured=captured_values(fun),
    )


def _weak_ref(fun):
    """A weak reference to `fun`, or None where it has none (a builtin: compared by id)."""
    try:
        return weakref.ref(fun)
    except TypeError:
        return None


# Stands for the jit options of an attributed call: taylax makes one jitted program per
# program structure on purpose, so only the user's function object tells calls apart.
_ATTRIBUTED = object()


def attributed_to(signature: Signature, fun, *, eager: str = "", made_for=None) -> Signature:
    """`signature` of one of taylax's internal jitted programs, reported as `fun`'s: the
    user's function whose derivatives it computes (its name, location and identity).
    `eager`: the taylax API, when the program is its per-call trace of `fun`; `made_for`:
    what a compiled taylax program was made for (its settings, policy and jaxpr)."""
    name, location, kind = function_name_and_location(fun)
    fun_ref = _weak_ref(fun)
    return dataclasses.replace(
        signature,
        name=name,
        location=location,
        kind=kind,
        fun_id=id(fun),
        fun_ref=fun_ref,
        jit_info=_ATTRIBUTED,
        captured=captured_values(fun),
        attributed=True,
        internal=f"{signature.name} ({signature.location})",
        eager=eager,
        made_for=made_for,
    )


class Opaque:
    """A captured value that is not kept (it may be large): its type and, if possible, a
    weak reference, so that "same object" can still be told apart from "changed"."""

    def __init__(self, value):
        self.type_name = type(value).__qualname__
        try:
            self.ref = weakref.ref(value)
        except TypeError:
            self.ref = None

    def same_as(self, other: Opaque) -> bool:
        if self.ref is None or other.ref is None:
            return False
        alive = self.ref()
        return alive is not None and alive is other.ref()

    def __repr__(self) -> str:
        return f"a `{self.type_name}` object"


def captured_values(fun) -> tuple[tuple[str, Any], ...]:
    """The values a closure captures or a partial binds: small plain values kept as they
    are, anything else as an `Opaque` (never a strong reference to an array)."""
    found: list[tuple[str, Any]] = []
    if isinstance(fun, functools.partial):
        found += [(f"bound argument {i}", _snapshot(v)) for i, v in enumerate(fun.args)]
        found += [(f"bound keyword `{k}`", _snapshot(v)) for k, v in fun.keywords.items()]
        return tuple(found)
    base = unwrap(fun)[0]
    cells = getattr(base, "__closure__", None) or ()
    names = getattr(getattr(base, "__code__", None), "co_freevars", ())
    for name, cell in zip(names, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and not isinstance(value, type):
            continue  # helper functions: their own re-creation is reported elsewhere
        found.append((f"captured `{name}`", _snapshot(value)))
    return tuple(found)


def _snapshot(value):
    if value is None or isinstance(value, (*_PY_SCALARS, str, bytes)):
        return value
    if isinstance(value, tuple) and len(value) <= 8:
        return tuple(_snapshot(v) for v in value)
    return Opaque(value)


def _positional_label(py_signature, i: int) -> str:
    if py_signature is None:
        return f"args[{i}]"
    params = list(py_signature.parameters.values())
    for j, param in enumerate(params):
        if param.kind == inspect.Parameter.VAR_POSITIONAL:
            return f"{param.name}[{i - j}]"
        if j == i and param.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            return param.name
    return f"args[{i}]"


def _leaf(x) -> Leaf:
    aval = jax.typeof(x)
    if isinstance(x, jax.core.Tracer):
        kind, sharding, committed = "tracer", None, None
    elif isinstance(x, jax.Array):
        kind, sharding, committed = "jax.Array", x.sharding, _compat.is_committed(x)
    elif isinstance(x, (np.ndarray, np.generic)):
        kind, sharding, committed = "NumPy array", None, False
    elif isinstance(x, _PY_SCALARS):
        kind, sharding, committed = "Python scalar", None, False
    else:
        kind, sharding, committed = "value", None, None
    return _leaf_from_aval(aval, kind=kind, sharding=sharding, committed=committed)


def _leaf_from_aval(aval, *, kind="value", sharding=None, committed=None) -> Leaf:
    return Leaf(
        shape=tuple(getattr(aval, "shape", ())),
        dtype=str(getattr(aval, "dtype", type(aval).__name__)),
        weak_type=bool(getattr(aval, "weak_type", False)),
        aval_sharding=getattr(aval, "sharding", None),
        sharding=sharding,
        committed=committed,
        kind=kind,
    )


def sharding_str(sharding) -> str:
    """A short text of a sharding: its device, or its mesh shape and spec."""
    if sharding is None:
        return "no sharding"
    try:
        devices = getattr(sharding, "_device_assignment", None) or ()
    except Exception:  # an abstract mesh has no devices
        devices = ()
    if type(sharding).__name__ == "SingleDeviceSharding" and len(devices) == 1:
        return f"device {devices[0]}"
    spec = getattr(sharding, "spec", None)
    mesh = getattr(sharding, "mesh", None)
    if spec is not None and mesh is not None:
        shape = dict(getattr(mesh, "shape", {}))
        return f"NamedSharding(mesh {shape}, spec {spec})"
    return str(sharding)


def short(value, limit: int = 60) -> str:
    """A short, address-free description of a value for details."""
    if isinstance(value, (jax.Array, np.ndarray)):
        return f"an array {jax.typeof(value).str_short()}"
    if callable(value) and hasattr(unwrap(value)[0], "__code__"):
        name, location, kind = function_name_and_location(value)
        return f"{kind} `{name}` at {location}"
    text = repr(value)
    if " at 0x" in text:  # an identity-based repr: keep only the type
        return f"a `{type(value).__qualname__}` object"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith("..") else rel
