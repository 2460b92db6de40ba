"""Rules for control flow: `scan` (and `fori_loop`), `while`, `cond`/`switch`, host callbacks.

A loop is re-bound as a loop of the same kind whose body is the Taylor
interpretation of the original body, so the series of a carry is computed
inside the loop and the emitted program has the size of the body, whatever the
trip count. Degrees are static, so a carry must enter and leave the body with
the same degree: starting from the degrees of the initial values, a carry whose
degree the body raises is raised and the body traced again (abstractly, with
`jax.eval_shape`) until nothing changes. A carry that stays constant costs
nothing. Predicates and branch indices are integers or booleans computed from
primal values, which is how nested `jax.jvp` chooses them too.
"""

from __future__ import annotations

import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat
from .._interpret import eval_jaxpr_series, register_rule
from .._pass import loop_body
from .._series import Series, pad_degree

# closed jaxpr -> {(order, input degrees): output degrees}
_OUT_DEGREES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _arrays(series) -> list:
    """What crosses a loop or branch boundary: the primal of a constant, else the stack."""
    return [s.primal if s.is_constant else s.coeffs for s in series]


def _series(arrays, degrees) -> list[Series]:
    return [Series.constant(a) if d == 0 else Series(a) for a, d in zip(arrays, degrees)]


def _degree_of(array, aval) -> int:
    return 0 if np.ndim(array) == len(aval.shape) else np.shape(array)[0] - 1


def _struct(aval, degree: int) -> jax.ShapeDtypeStruct:
    shape = ((degree + 1,) if degree else ()) + tuple(aval.shape)
    return jax.ShapeDtypeStruct(shape, aval.dtype, weak_type=getattr(aval, "weak_type", False))


def _fit(s: Series, degree: int, dtype):
    """`s` as an array of exactly `degree` (a loop carry or a branch output must not vary)."""
    if degree == 0:
        out = s.primal
    else:
        out = pad_degree(s.coeffs, degree)
    return lax.convert_element_type(out, dtype) if jnp.result_type(out) != dtype else out


def _out_degrees(closed, degrees: tuple[int, ...], order: int) -> tuple[int, ...]:
    """Degrees of `closed`'s outputs for inputs of `degrees`: traced, never run (cached)."""
    per_jaxpr = _OUT_DEGREES.setdefault(closed, {})
    key = (order, degrees)
    if key not in per_jaxpr:

        def interpret(*arrays):
            ins = _series(arrays, degrees)
            return _arrays(eval_jaxpr_series(*_compat.closed_parts(closed), ins, order))

        structs = [_struct(a, d) for a, d in zip(closed.in_avals, degrees)]
        outs = jax.eval_shape(interpret, *structs)
        per_jaxpr[key] = tuple(_degree_of(o, a) for o, a in zip(outs, closed.out_avals))
    return per_jaxpr[key]


def _carry_degrees(closed, before, carry, after, order):
    """The smallest fixed point of the carry degrees, and the body's output degrees there.

    The body's inputs are `before + carry + after` and its first `len(carry)`
    outputs are the new carry. A carry raised twice keeps growing (e.g. `c * x`
    multiplies in a seed each step), so the second raise goes to `order`
    directly: each carry is raised at most twice, and the body traced at most
    `2 * len(carry) + 1` times.
    """
    carry, raised = list(carry), [False] * len(carry)
    while True:
        outs = _out_degrees(closed, tuple(before) + tuple(carry) + tuple(after), order)
        changed = False
        for i, out in enumerate(outs[: len(carry)]):
            if out > carry[i]:
                carry[i] = order if raised[i] else out
                raised[i] = changed = True
        if not changed:
            return tuple(carry), outs


def _split(seq, *sizes):
    out, start = [], 0
    for size in sizes:
        out.append(list(seq[start : start + size]))
        start += size
    out.append(list(seq[start:]))
    return out


@register_rule(_compat.scan_p)
def _scan(order, *xs, reverse, length, jaxpr, unroll, **params):
    """`lax.scan` (and a `fori_loop` with a static trip count) re-bound as one `lax.scan`.

    Sequences are scanned along their leading axis, so the stacked coefficient
    axis of a sequence (and of a stacked output) moves behind it.
    """
    # How the operands split is spelled differently by JAX versions (`_compat.scan_split`);
    # the other parameters (`linear`, `_split_transpose` in older JAX) are hints that
    # lax.scan recomputes.
    num_consts, num_carry = _compat.scan_split(params)
    del params
    consts, init, seqs = _split(xs, num_consts, num_carry)
    const_deg = tuple(s.degree for s in consts)
    seq_deg = tuple(s.degree for s in seqs)
    init_deg = tuple(s.degree for s in init)
    carry_deg, _ = _carry_degrees(jaxpr, const_deg, init_deg, seq_deg, order)
    carry_avals = jaxpr.in_avals[num_consts : num_consts + num_carry]
    const_arrays = _arrays(consts)
    init_arrays = [_fit(s, d, a.dtype) for s, d, a in zip(init, carry_deg, carry_avals)]
    seq_arrays = [s.primal if s.is_constant else jnp.moveaxis(s.coeffs, 0, 1) for s in seqs]

    def body(carry, x):
        ins = _series(const_arrays, const_deg) + _series(carry, carry_deg) + _series(x, seq_deg)
        with loop_body():
            outs = eval_jaxpr_series(*_compat.closed_parts(jaxpr), ins, order)
        new_carry = [_fit(o, d, a.dtype) for o, d, a in zip(outs, carry_deg, carry_avals)]
        return new_carry, _arrays(outs[num_carry:])

    carry_out, ys = lax.scan(
        body, init_arrays, seq_arrays, length=length, reverse=reverse, unroll=unroll
    )
    result = _series(carry_out, carry_deg)
    for y, aval in zip(ys, jaxpr.out_avals[num_carry:]):
        # Stacked per step: (length, d+1, *shape) for a series, (length, *shape) for a constant.
        constant = np.ndim(y) == len(aval.shape) + 1
        result.append(Series.constant(y) if constant else Series(jnp.moveaxis(y, 1, 0)))
    return result


@register_rule(_compat.while_p)
def _while(order, *xs, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    """`lax.while_loop` re-bound as one `lax.while_loop`; the predicate sees primals only.

    Under `vmap` JAX's `while` may have a batched predicate (one flag per leading
    index of every carry): it loops while any flag is set and freezes the
    finished entries. The coefficient axis comes first in a stacked carry, so
    that freezing is done here, with the flags broadcast behind it.
    """
    cond_consts, body_consts, init = _split(xs, cond_nconsts, body_nconsts)
    const_deg = tuple(s.degree for s in body_consts)
    carry_deg, _ = _carry_degrees(body_jaxpr, const_deg, tuple(s.degree for s in init), (), order)
    carry_avals = body_jaxpr.in_avals[body_nconsts:]
    cond_primals = [Series.constant(s.primal) for s in cond_consts]
    const_arrays = _arrays(body_consts)
    init_arrays = [_fit(s, d, a.dtype) for s, d, a in zip(init, carry_deg, carry_avals)]
    batched = cond_jaxpr.out_avals[0].shape != ()

    def predicate(carry):
        primals = [Series.constant(s.primal) for s in _series(carry, carry_deg)]
        (pred,) = eval_jaxpr_series(
            *_compat.closed_parts(cond_jaxpr), cond_primals + primals, order
        )
        return pred.primal

    def body(carry):
        ins = _series(const_arrays, const_deg) + _series(carry, carry_deg)
        with loop_body():
            outs = eval_jaxpr_series(*_compat.closed_parts(body_jaxpr), ins, order)
        return [_fit(o, d, a.dtype) for o, d, a in zip(outs, carry_deg, carry_avals)]

    def cond_fun(carry):
        pred = predicate(carry)
        return jnp.any(pred) if batched else pred

    def body_fun(carry):
        new = body(carry)
        if not batched:
            return new
        pred = predicate(carry)
        return [_select_leading(pred, n, c, d) for n, c, d in zip(new, carry, carry_deg)]

    return _series(lax.while_loop(cond_fun, body_fun, init_arrays), carry_deg)


def _select_leading(pred, new, old, degree: int):
    """`new` where `pred` holds, else `old`; `pred` indexes the leading non-coefficient axes."""
    start = 1 if degree else 0
    dims = tuple(range(start, start + jnp.ndim(pred)))
    return lax.select(lax.broadcast_in_dim(pred, jnp.shape(new), dims), new, old)


@register_rule(_compat.cond_p)
def _cond(order, index, *ops, branches, **params):
    """`lax.cond`/`lax.switch`: the primal index picks the branch; outputs get the max degree."""
    degrees = tuple(op.degree for op in ops)
    per_branch = [_out_degrees(b, degrees, order) for b in branches]
    out_deg = tuple(max(ds) for ds in zip(*per_branch))
    out_avals = branches[0].out_avals

    def transformed(branch):
        def run(*arrays):
            ins = _series(arrays, degrees)
            outs = eval_jaxpr_series(*_compat.closed_parts(branch), ins, order)
            return [_fit(o, d, a.dtype) for o, d, a in zip(outs, out_deg, out_avals)]

        return run

    outs = _compat.switch(
        index.primal,
        [transformed(b) for b in branches],
        _arrays(ops),
        params.get("branches_platforms"),
    )
    return _series(outs, out_deg)


def _callback_rule(api: str):
    def rule(order, *xs, callback, **params):
        del order, xs, params
        func = getattr(callback, "callback_func", callback)
        name = getattr(func, "__qualname__", None) or repr(func)
        raise ValueError(
            f"taylax cannot carry a Taylor series through `{api}` (callback '{name}'): it "
            "runs Python on the host, which sees numbers, not series, and the differentiated "
            "input reaches it. Write the function with jax.numpy instead, or wrap the callback "
            "in `jax.custom_jvp` with a derivative rule written in JAX (for higher orders the "
            "rule may call the wrapped function itself); taylax follows custom_jvp rules as "
            "nested jax.jvp does."
        )

    return rule


for _api, _prim in _compat.callback_primitives().items():
    register_rule(_prim)(_callback_rule(_api))
