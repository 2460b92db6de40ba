"""Whole-array calls of elementwise functions, run as passes over points.

`derivatives(f, K)(x, v)` on an array `x` of an elementwise `f` is `N` independent
passes, one per element. Run as one pass over whole arrays, every row of every series
is an `N`-element array: at `N` = 1,048,576 and K = 32 each row leaves the caches
before the next one reads it. The same pass under `jax.vmap` over points runs in
chunks of points that stay in cache (`taylax._point_chunks`), and on XLA:CPU it is
2-3x faster and keeps half the memory (docs/EMISSION.md, "Whole arrays"). So a
whole-array call whose function maps elements independently is run as that `vmap`
where it pays (large series, a `vmap` that runs in chunks: `taylax._api._over_points`):
users need not know to write it.

The function is traced twice: once on the whole arrays (its jaxpr says whether it is
elementwise) and once on single points (the program that runs). Both traces must be the
same computation, equation by equation, before the point trace is used: a function that
reads its argument's shape (`t / t.size`) traces to other constants at a point, and is
run as a whole-array pass.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from . import _compat
from ._elementwise import ELEMENTWISE
from ._programs import const_value_key

# Equations that only broadcast a scalar or restate a value's type: a point trace has
# none of them where the whole-array trace does, so both skip them.
_SHAPE_ONLY = frozenset({"broadcast_in_dim", "copy"})


class _NotPointwise(Exception):
    """The jaxpr does something other than map elements independently."""


def _params_key(params: dict) -> tuple:
    key = []
    for name, value in sorted(params.items()):
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        key.append((name, value))
    return tuple(key)


def _atom_key(atom, env: dict):
    if isinstance(atom, _compat.Literal):
        value = np.asarray(atom.val)
        return ("literal", value.dtype.str, value.tobytes())
    return env[atom]


def _walk(jaxpr, operands: list, shape: tuple, out: list) -> list:
    """Append `jaxpr`'s equations to `out` as `(what, operand keys)` with the shape-only
    equations removed, and return the keys of its outputs; raise `_NotPointwise` where an
    equation is not elementwise or a value has a shape other than `shape` or `()`."""
    env = dict(zip(jaxpr.invars, operands))
    for eqn in jaxpr.eqns:
        ins = [_atom_key(a, env) for a in eqn.invars]
        for var in eqn.outvars:
            if var.aval.shape not in (shape, ()):
                raise _NotPointwise
        name = eqn.primitive.name
        same_type = name == "convert_element_type" and (
            eqn.invars[0].aval.dtype == eqn.outvars[0].aval.dtype
        )
        if name in _SHAPE_ONLY or same_type:
            env[eqn.outvars[0]] = ins[0]
            continue
        if eqn.primitive is _compat.jit_p:
            inner, consts = _compat.closed_parts(eqn.params["jaxpr"])
            if consts:
                raise _NotPointwise
            env.update(zip(eqn.outvars, _walk(inner, ins, shape, out)))
            continue
        if eqn.primitive is _compat.custom_jvp_call_p:
            body, consts = _compat.closed_parts(eqn.params["call_jaxpr"])
            if consts:
                raise _NotPointwise
            inner: list = []
            results = _walk(body, [("operand", i) for i in range(len(ins))], shape, inner)
            what = ("custom_jvp", tuple(inner), tuple(results))
        elif eqn.primitive in ELEMENTWISE:
            what = (name, _params_key(eqn.params))
        else:
            raise _NotPointwise
        if len(eqn.outvars) != 1:
            raise _NotPointwise
        out.append((what, tuple(ins)))
        env[eqn.outvars[0]] = ("equation", len(out) - 1)
    return [_atom_key(v, env) for v in jaxpr.outvars]


def _structure(closed, shape: tuple):
    """`closed`'s computation with shapes left out, or None where it is not elementwise
    over `shape` (its constants must be scalars: an array constant holds data per point)."""
    jaxpr, consts = _compat.closed_parts(closed)
    constvars, invars = _compat.input_vars(jaxpr, len(consts))
    if any(np.ndim(c) != 0 or _compat.is_tracer(c) for c in consts):
        return None
    if any(v.aval.shape != shape for v in invars):
        return None
    if any(v.aval.shape != shape for v in jaxpr.outvars):
        return None
    keys = [("const", const_value_key(c)) for c in consts]
    keys += [("input", i) for i in range(len(invars))]
    equations: list = []
    try:
        results = _walk(jaxpr, keys, shape, equations)
    except (_NotPointwise, KeyError):
        return None
    return tuple(equations), tuple(results)


def points_shape(closed, x_leaves: list) -> tuple | None:
    """The shape every input and output of `closed` shares, where `closed` (traced on the
    whole arrays `x_leaves`) maps their elements independently and has more than one;
    None otherwise."""
    shapes = {np.shape(leaf) for leaf in x_leaves}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    if math.prod(shape) < 2 or any(isinstance(a, _compat.BatchTracer) for a in x_leaves):
        return None  # a batched call is chunked over its batch (`taylax._point_chunks`)
    if _structure(closed, shape) is None:
        return None
    return shape


def same_computation(whole, point, shape: tuple) -> bool:
    """Whether the point trace `point` computes what the whole-array trace `whole` does
    at each element (the same equations, parameters, literals and constants)."""
    expected = _structure(whole, shape)
    return expected is not None and expected == _structure(point, ())


def point_avals(x):
    """`x` with every leaf replaced by one point of its dtype (for tracing)."""
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct((), jax.numpy.result_type(leaf)), x)
