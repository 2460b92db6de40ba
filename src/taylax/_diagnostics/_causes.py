"""Why a call traced or compiled: the differences from the nearest earlier signature.

`explain(new, earlier)` compares a call's `Signature` with every earlier signature of the
same function (same name and code location), picks the nearest one (fewest differences,
then the most recent), and names the differences as stable cause codes with details that
name the argument path and the old and new value or type. One change gives one cause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from .. import _compat
from ._events import CAUSES
from ._signature import Opaque, Signature, leaf_paths, sharding_str, short, unwrap

_PRIORITY = {cause: i for i, cause in enumerate(CAUSES)}
_BUILTIN_CONTAINERS = (tuple, list, dict, type(None))


@dataclasses.dataclass(frozen=True)
class Difference:
    """One reason for a cache miss: a cause code and a sentence."""

    cause: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The primary cause, its detail (with the other differences), and the other causes."""

    cause: str
    detail: str
    also: tuple[str, ...] = ()


def explain_trace(new: Signature, earlier: Sequence[Signature]) -> Explanation:
    """Why `new` was traced: its differences from the nearest of `earlier`."""
    if new.eager and earlier:
        return Explanation(
            "eager_trace",
            f"an eager call of `{new.eager}` traces {_fun_text(new)} again on every call, to "
            "find the compiled program for what it computes now (a changed global or "
            "captured value is seen); the program itself is reused when only values "
            "changed. To trace once, call it inside a function under `jax.jit`",
        )
    if not earlier:
        return Explanation(
            "first_call",
            f"first trace of {_fun_text(new)} seen while recording, for {new.describe_args()}",
        )
    if new.attributed:
        return _nearest(new, earlier, compile_only=False)
    # Another function object made by the same code that is still alive is a separate
    # function (two closures from one line, one per thread), not a re-creation of it.
    compared = [old for old in earlier if new.same_function(old) or not _alive_other(new, old)]
    if not compared:
        others = len({old.fun_id for old in earlier})
        return Explanation(
            "first_call",
            f"first trace of this function object {_fun_text(new)}, for "
            f"{new.describe_args()}; {others} other object(s) made by the same code are "
            "alive, and each has its own cache entries (JAX caches by function identity)",
        )
    return _nearest(new, compared, compile_only=False)


def _alive_other(new: Signature, old: Signature) -> bool:
    """Whether `old` was called with another function object that is still alive."""
    old_fun = old.fun()
    return old_fun is not None and old_fun is not new.fun()


def explain_compile(
    new: Signature, earlier: Sequence[Signature], cached_placements: Sequence[tuple] = ()
) -> Explanation:
    """Why `new` was compiled although its trace was reused (placement, usually).

    `cached_placements`: per lowering that JAX's cache holds for the same jaxpr, each
    leaf's sharding (None: jit was free to place it). They stand in for the earlier calls
    when those came before recording started.
    """
    same = [old for old in earlier if new.same_function(old) and not old.from_jax_cache]
    if not same:
        placed = [_placed_like(new, shardings) for shardings in cached_placements]
        placed = [old for old in placed if old is not None]
        if placed:
            return _nearest(new, placed, compile_only=True)
    if same and not any(old.compiled for old in same):
        return Explanation(
            "first_call",
            f"first compile of {_fun_text(new)} seen while recording (it was traced before, "
            f"but only inside another jitted function or by `.trace()`), for "
            f"{new.describe_args()}",
        )
    same = [old for old in same if old.compiled]
    if not same:
        return Explanation(
            "unknown",
            f"{_fun_text(new)} was compiled again without tracing again, and the recorder saw "
            "no earlier call of this function object to compare its arguments' placement "
            f"with (it was traced before recording started); arguments: {new.describe_args()}",
        )
    return _nearest(new, same, compile_only=True)


def _placed_like(new: Signature, shardings: tuple) -> Signature | None:
    """`new` with each leaf placed as in an earlier lowering (from JAX's cache)."""
    if len(shardings) != len(new.leaves):
        return None
    leaves = tuple(
        dataclasses.replace(leaf, sharding=None, committed=False, kind="uncommitted value")
        if sharding is None
        else dataclasses.replace(leaf, sharding=sharding, committed=True, kind="jax.Array")
        for leaf, sharding in zip(new.leaves, shardings)
    )
    if leaves == new.leaves:
        return None  # the lowering this call is making, or an identical one
    return dataclasses.replace(new, leaves=leaves, compiled=True)


def differences(new: Signature, old: Signature) -> list[Difference]:
    """Every difference between two signatures of the same function, by cause priority."""
    if new.attributed:  # taylax keys its programs by structure, not function identity
        found = _program_differences(new, old)
    else:
        found = _function_differences(new, old)
    found += _config_differences(new, old)
    found += _static_differences(new, old)
    tree_found = _tree_differences(new, old)
    found += tree_found
    if not tree_found and len(new.leaves) == len(old.leaves):
        found += _leaf_differences(new, old)
    return sorted(found, key=lambda d: _PRIORITY[d.cause])


def _nearest(new: Signature, earlier: Sequence[Signature], *, compile_only: bool) -> Explanation:
    best: list[Difference] | None = None
    for old in earlier:  # oldest first: ties go to the most recent
        found = differences(new, old)
        if compile_only:
            found = [d for d in found if d.cause in ("sharding", "committed")] or found
        if best is None or len(found) <= len(best):
            best = found
    assert best is not None
    if not best:
        what = "compiled again without tracing again" if compile_only else "traced again"
        return Explanation(
            "unknown",
            f"{_fun_text(new)} was {what}, but its function object, jit options, static "
            "arguments, pytree structure, shapes, dtypes, weak types, shardings and config "
            "all equal an earlier call's (were JAX's caches cleared, or an entry evicted?); "
            f"arguments: {new.describe_args()}",
        )
    primary = best[0]
    others = [d for d in best[1:] if d.detail != primary.detail]
    detail = primary.detail
    if others:
        shown = "; ".join(d.detail for d in others[:2])
        more = f" (and {len(others) - 2} more)" if len(others) > 2 else ""
        detail += f". Also changed: {shown}{more}"
    also = tuple(dict.fromkeys(d.cause for d in best[1:] if d.cause != primary.cause))
    return Explanation(primary.cause, detail, also)


def _fun_text(sig: Signature) -> str:
    return f"`{sig.name}` ({sig.location})"


# --------------------------------------------------------------------------------------
# Function objects
# --------------------------------------------------------------------------------------


def _function_differences(new: Signature, old: Signature) -> list[Difference]:
    if new.same_function(old):
        return []
    fun, old_fun = new.fun(), old.fun()
    if fun is not None and fun is old_fun:
        return [
            Difference(
                "new_function",
                f"`jax.jit` was applied again to the same function {_fun_text(new)}: each new "
                "jitted wrapper has its own cache entries; create the jitted function once",
            )
        ]
    return [Difference("new_function", _new_function_detail(new, old))]


def _program_differences(new: Signature, old: Signature) -> list[Difference]:
    """Why taylax compiled a new program for the user's function (eager calls)."""
    if new.made_for is None or old.made_for is None:
        return []
    (settings, policy, structure), (old_settings, old_policy, old_structure) = (
        new.made_for,
        old.made_for,
    )
    api = f"`taylax.{settings[0]}`"
    found = []
    if settings != old_settings:
        found.append(
            Difference(
                "static_argument",
                f"{api} was called with other settings (order and options): "
                f"{short(old_settings[1:])} -> {short(settings[1:])}",
            )
        )
    if policy != old_policy:
        found.append(
            Difference("config", f"the emission policy in force changed: {old_policy} -> {policy}")
        )
    if structure is None:
        found.append(
            Difference(
                "program_structure",
                f"{_fun_text(new)} traced to a jaxpr that holds a tracer of an enclosing "
                "transformation, so its program cannot be cached and is compiled on every "
                f"call; call {api} inside that transformation's function instead",
            )
        )
    elif structure != old_structure:
        found.append(
            Difference(
                "program_structure",
                f"{_fun_text(new)} traced to a jaxpr of another structure (a Python branch, "
                "a global, a captured Python number or a power's exponent changed), so "
                f"{api} compiled a program for it; pass values that change as arguments",
            )
        )
    return found


def _new_function_detail(new: Signature, old: Signature) -> str:
    where = _fun_text(new)
    hint = "JAX caches by function identity: create it once, outside the loop or call"
    changed = _captured_change(new, old)
    if new.kind == "functools.partial":
        if changed:
            return (
                f"a new functools.partial of {where} whose {changed}; pass values that change "
                "as arguments (static if they must be) instead of binding them"
            )
        return f"a new functools.partial object of {where} with the same arguments; {hint}"
    if new.kind == "lambda":
        captured = f"; its {changed}" if changed else ""
        return f"a new lambda object from {where} (same code, re-created){captured}; {hint}"
    if new.kind == "closure":
        captured = f"; its {changed}" if changed else " over equal captured values"
        return f"a new closure object from {where} (the `def` ran again){captured}; {hint}"
    if new.kind == "bound method":
        owner = type(getattr(new.fun(), "__self__", None)).__qualname__
        return f"{where} is bound to a different `{owner}` instance; {hint}"
    return f"a new {new.kind} object from {where} (same code, created again); {hint}"


def _captured_change(new: Signature, old: Signature) -> str | None:
    """The first captured value (closure cell or partial argument) that changed."""
    before = dict(old.captured)
    for label, value in new.captured:
        if label not in before:
            return f"{label} is new"
        old_value = before[label]
        if _captured_equal(value, old_value):
            continue
        if isinstance(value, Opaque) or isinstance(old_value, Opaque):
            return f"{label} is a different object ({short(value)})"
        return f"{label} changed: {short(old_value)} -> {short(value)}"
    return None


def _captured_equal(a, b) -> bool:
    if isinstance(a, Opaque) and isinstance(b, Opaque):
        return a.same_as(b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_captured_equal(x, y) for x, y in zip(a, b))
    return _safe_equal(a, b)


def _safe_equal(a, b) -> bool:
    """Equality that never runs an array computation (no eager JAX work while recording)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (jax.Array, np.ndarray, np.generic)):
        return False  # different array objects: say so rather than compute
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_safe_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_safe_equal(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # an object whose equality is not a bool
        return False


# --------------------------------------------------------------------------------------
# Config and static arguments
# --------------------------------------------------------------------------------------


def _config_differences(new: Signature, old: Signature) -> list[Difference]:
    if new.config == old.config:
        return []
    names = _compat.trace_context_names()
    found = []
    for name, a, b in zip(names, new.config, old.config):
        if not _safe_equal(a, b):
            found.append(Difference("config", f"config `{name}` changed: {b!r} -> {a!r}"))
    return found


def _static_differences(new: Signature, old: Signature) -> list[Difference]:
    found = []
    old_static = dict(old.static)
    for label, value in new.static:
        if label not in old_static:
            found.append(
                Difference("static_argument", f"static argument `{label}` was not passed before")
            )
            continue
        before = old_static.pop(label)
        if _safe_equal(value, before):
            continue
        if callable(value) and callable(before) and _same_code(value, before):
            found.append(
                Difference(
                    "new_function",
                    f"static argument `{label}` is a new function object with the same code "
                    f"({short(value)}): it is re-created between calls; create it once",
                )
            )
        else:
            found.append(
                Difference(
                    "static_argument",
                    f"static argument `{label}` changed{_change_text(before, value)}",
                )
            )
    for label in old_static:
        found.append(Difference("static_argument", f"static argument `{label}` is not passed"))
    return found


def _change_text(old, new) -> str:
    """``": old -> new"`` for two unequal values, or ``" at `path`: old -> new"`` naming the
    first part that changed inside tuples, lists, dicts, dataclasses, objects and pytrees:
    a static value such as equinox's aux data ``(names, static names, static values)``
    otherwise reads "a `tuple` object -> a `tuple` object"."""
    path, a, b = _first_changed_part(old, new, "", 0)
    return f" at `{path}`: {short(a)} -> {short(b)}" if path else f": {short(a)} -> {short(b)}"


def _first_changed_part(old, new, path: str, depth: int):
    """(path, old part, new part) of the innermost part that explains ``old != new``."""
    if depth > 8 or type(old) is not type(new):
        return path, old, new
    parts = _parts(old, new)
    if parts is None:
        return path, old, new
    for key, a, b in parts:
        if not _safe_equal(a, b):
            return _first_changed_part(a, b, path + key, depth + 1)
    return path, old, new  # equal parts, yet unequal (identity equality): stop here


def _parts(old, new) -> list[tuple[str, object, object]] | None:
    """The parts of two values of one type, each with its key; None for an atom."""
    if isinstance(old, (tuple, list)) and not _is_namedtuple(type(old)):
        if len(old) != len(new):
            return None
        keys = [f"[{i}]" for i in range(len(old))]
        # (names, values) side by side, as equinox and flax keep static fields: name them.
        labelled = list(zip(keys, old, new))
        for i in range(1, len(old)):
            names, values = old[i - 1], old[i]
            if (
                isinstance(names, tuple)
                and isinstance(values, tuple)
                and len(names) == len(values) == len(new[i])
                and names == new[i - 1]
                and all(isinstance(n, str) for n in names)
            ):
                labelled[i] = ("", _Named(names, values), _Named(names, new[i]))
        return labelled
    if isinstance(old, _Named):
        return [(f".{n}", a, b) for n, a, b in zip(old.names, old.values, new.values)]
    if isinstance(old, dict):
        if old.keys() != new.keys():
            return None
        return [(f"[{k!r}]", old[k], new[k]) for k in old]
    if dataclasses.is_dataclass(old) and not isinstance(old, type):
        return [
            (f".{f.name}", getattr(old, f.name, None), getattr(new, f.name, None))
            for f in dataclasses.fields(old)
        ]
    if _is_namedtuple(type(old)):
        return [(f".{n}", getattr(old, n), getattr(new, n)) for n in old._fields]
    if callable(old):
        return None  # functions: their name and location say enough
    old_vars, new_vars = getattr(old, "__dict__", None), getattr(new, "__dict__", None)
    if (
        isinstance(old_vars, dict)
        and isinstance(new_vars, dict)
        and old_vars.keys() == new_vars.keys()
    ):
        return [(f".{k}", old_vars[k], new_vars[k]) for k in old_vars]
    return None


class _Named:
    """Values with field names (a pair of aux-data tuples), compared field by field."""

    def __init__(self, names: tuple, values: tuple):
        self.names, self.values = names, values

    def __eq__(self, other) -> bool:
        return isinstance(other, _Named) and _safe_equal(self.values, other.values)

    __hash__ = None  # type: ignore[assignment]


def _same_code(a, b) -> bool:
    code_a = getattr(unwrap(a)[0], "__code__", None)
    return code_a is not None and code_a is getattr(unwrap(b)[0], "__code__", None)


# --------------------------------------------------------------------------------------
# Pytree structure and aux data
# --------------------------------------------------------------------------------------


def _tree_differences(new: Signature, old: Signature) -> list[Difference]:
    found = []
    old_trees = dict(old.trees)
    for label, treedef in new.trees:
        if label not in old_trees:
            found.append(
                Difference("pytree_structure", f"argument `{label}` was not passed before")
            )
            continue
        before = old_trees.pop(label)
        if treedef != before:
            found.append(_walk(label, treedef, before))
    for label in old_trees:
        found.append(Difference("pytree_structure", f"argument `{label}` is not passed"))
    return found


def _walk(path: str, new, old) -> Difference:
    """The first node where two treedefs differ (they are known to differ)."""
    new_node, old_node = new.node_data(), old.node_data()
    if new_node is None or old_node is None:
        return Difference(
            "pytree_structure",
            f"argument `{path}`: pytree structure changed: {_td_text(old)} -> {_td_text(new)}",
        )
    (new_type, new_aux), (old_type, old_aux) = new_node, old_node
    if new_type is not old_type:
        return Difference(
            "pytree_structure",
            f"argument `{path}` was a {old_type.__qualname__} and is now a "
            f"{new_type.__qualname__}: {_td_text(old)} -> {_td_text(new)}",
        )
    builtin = new_type in _BUILTIN_CONTAINERS or _is_namedtuple(new_type)
    if not _safe_equal(new_aux, old_aux):
        if builtin or isinstance(new_aux, (list, tuple)) and new_type is dict:
            return Difference(
                "pytree_structure",
                f"argument `{path}`: {new_type.__qualname__} keys changed: "
                f"{short(old_aux)} -> {short(new_aux)}",
            )
        same_repr = repr(new_aux) == repr(old_aux)
        hint = (
            " (equal reprs: the aux data compares by identity; give its type __eq__ and __hash__)"
            if same_repr
            else ""
        )
        return Difference(
            "pytree_aux_data",
            f"argument `{path}`: aux data of the pytree node `{new_type.__qualname__}` "
            f"changed{_change_text(old_aux, new_aux)}{hint}",
        )
    new_children, old_children = new.children(), old.children()
    if len(new_children) != len(old_children):
        return Difference(
            "pytree_structure",
            f"argument `{path}`: a {new_type.__qualname__} with {len(old_children)} children "
            f"now has {len(new_children)}: {_td_text(old)} -> {_td_text(new)}",
        )
    keys = _child_keys(new, len(new_children))
    for key, a, b in zip(keys, new_children, old_children):
        if a != b:
            return _walk(path + key, a, b)
    return Difference(  # equal node data and children, yet unequal: say what was seen
        "pytree_structure",
        f"argument `{path}`: pytree structure changed: {_td_text(old)} -> {_td_text(new)}",
    )


def _child_keys(treedef, n: int) -> list[str]:
    """The key of each child of the root of `treedef` (``['a']``, ``[0]``, ``.field``)."""
    try:
        node = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
        flat, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
        keys = [jax.tree_util.keystr(path) for path, _ in flat]
        if len(keys) == n:
            return keys
    except Exception:  # a custom node whose unflatten rejects placeholder leaves
        pass
    return [f"[{i}]" for i in range(n)]


def _is_namedtuple(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def _td_text(treedef, limit: int = 80) -> str:
    text = str(treedef).removeprefix("PyTreeDef(").removesuffix(")")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# Leaves: shape, dtype, weak type, sharding, committed
# --------------------------------------------------------------------------------------


def _leaf_differences(new: Signature, old: Signature) -> list[Difference]:
    per_cause: dict[str, list[str]] = {}
    paths = None
    for i, (a, b) in enumerate(zip(new.leaves, old.leaves)):
        if a == b:
            continue
        for cause, text in _leaf_change(a, b):
            paths = paths or leaf_paths(new)
            per_cause.setdefault(cause, []).append(f"argument `{paths[i]}`: {text}")
    found = []
    for cause, texts in per_cause.items():
        more = f" (and {len(texts) - 3} more leaves)" if len(texts) > 3 else ""
        found.append(Difference(cause, "; ".join(texts[:3]) + more))
    return found


def _leaf_change(a, b) -> list[tuple[str, str]]:
    changes = []
    types = f"{b.type_str()} -> {a.type_str()}"
    if a.shape != b.shape:
        changes.append(("shape", f"shape {b.shape} -> {a.shape} ({types})"))
    if a.dtype != b.dtype:
        changes.append(("dtype", f"dtype {b.dtype} -> {a.dtype} ({types})"))
    if a.weak_type != b.weak_type:
        changes.append(
            ("weak_type", f"weak type {b.weak_type} -> {a.weak_type} ({_weak_text(b, a)})")
        )
    known = a.committed is not None and b.committed is not None
    if known and a.committed != b.committed:
        changes.append(("committed", f"{b.placement_str()} -> {a.placement_str()}"))
    elif a.committed and b.committed and not _safe_equal(a.sharding, b.sharding):
        old_text, new_text = _sharding_texts(b.sharding, a.sharding)
        changes.append(("sharding", f"sharding {old_text} -> {new_text}"))
    elif a.shape == b.shape and not _safe_equal(a.aval_sharding, b.aval_sharding):
        old_text, new_text = _sharding_texts(b.aval_sharding, a.aval_sharding)
        text = f"sharding in the type {old_text} -> {new_text}"
        if a.committed is not None and a.sharding is not None:
            # The type omits mesh axes that are not Explicit: name the concrete placement.
            text += f"; the argument is now {a.placement_str()}"
        changes.append(("sharding", text))
    return changes


def _sharding_texts(old, new) -> tuple[str, str]:
    """Short texts of two different shardings, never equal (else a spec-only text would
    read ``P(None,) -> P(None,)`` for shardings that differ in their mesh or devices)."""
    old_text, new_text = sharding_str(old), sharding_str(new)
    if old_text == new_text:
        old_text, new_text = repr(old), repr(new)
    return old_text, new_text


def _weak_text(old, new) -> str:
    def one(leaf):
        what = "a Python scalar" if leaf.kind == "Python scalar" else f"a {leaf.kind}"
        return f"{leaf.type_str()}, {what}"

    return f"{one(old)} -> {one(new)}"
