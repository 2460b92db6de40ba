"""Constant folding of small constants.

An equation whose inputs are all known (literals, broadcasts of literals, small
constants of the ClosedJaxpr) is evaluated once, at optimization time, when its
inputs and outputs have at most `FOLD_LIMIT` elements. A scalar result becomes a
literal, a uniform array a broadcast of one, and any other array a new constant
(at the top level only: sub-jaxprs keep their constants). Kept equations (effects,
random, callbacks, barriers) and equations with sub-programs are never folded.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import lax

from .. import _compat
from . import _ir
from ._rewrite import Rewriter

FOLD_LIMIT = 256
"""The most elements an input or output of a folded equation may have."""


def _value(rw: Rewriter, atom) -> np.ndarray | None:
    """The concrete value of `atom` if known and small, else None."""
    if not _ir.is_var(atom):
        return np.asarray(atom.val, dtype=atom.aval.dtype)
    size = getattr(atom.aval, "size", None)
    if size is None or size > FOLD_LIMIT:
        return None
    value = rw.known.get(atom)
    if value is not None:
        return value
    eqn = rw.defs.get(atom)
    if eqn is not None and eqn.primitive is lax.broadcast_in_dim_p:
        operand = _value(rw, eqn.invars[0])
        if operand is not None:
            return np.broadcast_to(operand, eqn.params["shape"]) if operand.ndim == 0 else None
    return None


def _is_splat_broadcast(eqn) -> bool:
    return eqn.primitive is lax.broadcast_in_dim_p and not _ir.is_var(eqn.invars[0])


# Correctly rounded IEEE operations give the same bits in NumPy as in XLA, without the
# cost of compiling an eager XLA kernel per primitive the first time it is folded.
_NUMPY_ARITHMETIC = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "neg": np.negative,
}


def _evaluate_numpy(eqn, values: list[np.ndarray]) -> list[np.ndarray] | None:
    name = eqn.primitive.name
    if name == "squeeze":
        return [np.squeeze(values[0], axis=tuple(eqn.params["dimensions"]))]
    if name == "reshape" and eqn.params.get("dimensions") is None:
        return [values[0].reshape(eqn.params["new_sizes"])]
    fn = _NUMPY_ARITHMETIC.get(name)
    dtype = eqn.outvars[0].aval.dtype
    if fn is None or not all(v.dtype == dtype for v in values):
        return None
    if not np.issubdtype(dtype, np.inexact):
        return None  # integer division and overflow differ between NumPy and XLA
    with np.errstate(all="ignore"):
        return [np.asarray(fn(*values), dtype=dtype)]


def _evaluate(eqn, values: list[np.ndarray]) -> list[np.ndarray] | None:
    fast = _evaluate_numpy(eqn, values)
    if fast is not None:
        return fast
    try:
        # Folding may run while an outer jit traces: evaluate eagerly, never trace.
        with jax.ensure_compile_time_eval():
            outs = _compat.bind_outputs(eqn, values)
        return [np.asarray(o) for o in outs]
    except Exception:  # a primitive that cannot run eagerly here is simply not folded
        return None


def fold_step(rw: Rewriter, eqn) -> bool:
    """Evaluates `eqn` if all its inputs are small known constants; True if it was replaced."""
    for a in eqn.invars:  # cheap rejection first: most equations have a variable input
        if _ir.is_var(a) and a not in rw.known:
            d = rw.defs.get(a)
            if d is None or d.primitive is not lax.broadcast_in_dim_p:
                return False
    if _ir.is_kept(eqn) or _ir.has_sub_jaxprs(eqn) or _is_splat_broadcast(eqn):
        return False
    if any(getattr(v.aval, "size", FOLD_LIMIT + 1) > FOLD_LIMIT for v in eqn.outvars):
        return False
    values = [_value(rw, a) for a in eqn.invars]
    if any(v is None for v in values):
        return False
    outs = _evaluate(eqn, values)
    if outs is None:
        return False
    plans = [_plan(value, out.aval, rw.allow_new_consts) for out, value in zip(eqn.outvars, outs)]
    if any(plan is None for plan in plans):
        return False
    for out, (kind, value) in zip(eqn.outvars, plans):
        rw.forward(out, _materialize(rw, kind, value, out.aval))
    return True


def _plan(value: np.ndarray, aval, allow_new_consts: bool) -> tuple[str, Any] | None:
    """How a folded value is written: a literal, a broadcast literal, a new constant or not."""
    if value.shape != aval.shape or value.dtype != aval.dtype:
        return None
    if value.ndim == 0:
        return ("literal", value)
    flat = value.reshape(-1)
    if flat.size and np.array_equal(flat, np.full_like(flat, flat[0])):
        return ("splat", flat[0])
    return ("const", value) if allow_new_consts else None


def _materialize(rw: Rewriter, kind: str, value, aval) -> Any:
    if kind == "literal":
        return _ir.literal(value, aval)
    if kind == "splat":
        params = dict(shape=aval.shape, broadcast_dimensions=(), sharding=None)
        return rw.new_eqn(lax.broadcast_in_dim_p, [_ir.literal(value, aval)], aval, params)
    return rw.add_const(value, aval)
