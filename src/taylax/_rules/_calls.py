"""Rules for primitives that carry sub-programs: jit, closed_call, remat, custom_jvp/vjp,
and taylax's own unscaled fallback.

A `jit` sub-program is transformed once per (jaxpr, order, input degrees) and
re-bound as a `jit`, so a function called from many places is transformed and
traced once and the structure of the program is kept. A custom_jvp rule is
followed the way nested jvp follows it; a custom_vjp function has no forward
rule, so its primal function is expanded.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _compat, _pass, _policy, _rare
from .._fallback import fallback_p, impl_jaxpr, is_overflow_safe
from .._interpret import eval_jaxpr_series, register_rule
from .._series import Series, derivative_series, integrate
from . import _logaddexp, _own_output

_TRANSFORMED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _as_inputs(arrays, degrees) -> list[Series]:
    return [Series.constant(a) if d == 0 else Series(a) for a, d in zip(arrays, degrees)]


def as_outputs(outs: list[Series]) -> list:
    return [o.primal if o.is_constant else o.coeffs for o in outs]


def from_outputs(arrays, avals) -> list[Series]:
    return [
        Series.constant(a) if jnp.ndim(a) == len(aval.shape) else Series(a)
        for a, aval in zip(arrays, avals)
    ]


def jit_per_jaxpr(cache: weakref.WeakKeyDictionary, closed, key, body: Callable, name: str):
    """`jax.jit` of `body(closed, *args)`, cached per `closed` (a weak key), `key` and the
    emission policy in force (which shapes what `body` emits).

    The jitted function reaches `closed` through a weak reference: it is the value of the
    cache's entry for `closed`, so a strong one would keep that entry alive for ever. It
    only runs while `closed` lives.
    """
    per_jaxpr = cache.setdefault(closed, {})
    key = (key, _policy.current())
    fn = per_jaxpr.get(key)
    if fn is None:
        closed_ref = weakref.ref(closed)

        def call(*args):
            return body(closed_ref(), *args)

        call.__name__ = name
        fn = per_jaxpr[key] = jax.jit(call)
    return fn


def transformed_call(closed: _compat.ClosedJaxpr, order: int, degrees: tuple[int, ...], name):
    """A jitted function evaluating `closed` on series of the given input degrees (cached),
    as part of the enclosing pass (one kernel or not: `ks.one_kernel_pass`)."""
    one_kernel = _pass.one_kernel_pass()

    def taylor_call(closed, *arrays):
        inputs = _as_inputs(arrays, degrees)
        outs = eval_jaxpr_series(*_compat.closed_parts(closed), inputs, order, one_kernel)
        return as_outputs(outs)

    key = (order, degrees, one_kernel)
    return jit_per_jaxpr(_TRANSFORMED, closed, key, taylor_call, f"taylor_{name}")


@register_rule(_compat.jit_p)
def _jit(order, *xs, jaxpr, name="jit", **params):
    del params
    degrees = tuple(x.degree for x in xs)
    fn = transformed_call(jaxpr, order, degrees, name)
    arrays = [x.primal if x.is_constant else x.coeffs for x in xs]
    return from_outputs(fn(*arrays), jaxpr.out_avals)


@register_rule(_compat.closed_call_p)
def _closed_call(order, *xs, call_jaxpr, **params):
    del params
    return eval_jaxpr_series(*_compat.closed_parts(call_jaxpr), xs, order)


def _tangent_series(x: Series, degree: int) -> Series:
    if not jnp.issubdtype(x.dtype, np.inexact):
        return Series.constant(np.zeros(x.shape, jax.dtypes.float0))
    if x.is_constant:
        return Series.constant(jnp.zeros(x.shape, x.dtype))
    return Series(derivative_series(x.coeffs)[: degree + 1])


def _outputs_only(jaxpr, consts, outvars):
    """`jaxpr` returning only `outvars`, with the equations they do not need removed."""
    from .._optimize._dce import dce_jaxpr

    pruned, pruned_consts, _ = dce_jaxpr(jaxpr.replace(outvars=list(outvars)), consts)
    return pruned, pruned_consts


@register_rule(_compat.custom_jvp_call_p)
def _custom_jvp_call(order, *xs, call_jaxpr, jvp_jaxpr_fun, num_consts, symbolic_zeros):
    """Follow the custom jvp rule, as nested jvp does.

    With `y(s) = f(x(s))`, nested jvp computes `y' = T(x, x')` with the rule's
    tangent function `T` and differentiates `T`'s own implementation for higher
    orders. So the series of `y'` is `T` evaluated on the series of `x` and
    `x'` at order `K-1`, and `y` is its integral from `f(x_0)`.

    The rule's tangent outputs alone are evaluated as series: its primal outputs are
    needed only at `x_0` (the constant of integration) unless `T` reads them. Evaluated
    at order `K-1` they would call the rule again, one order lower, down to order 0:
    a chain of K passes for a rule such as relu's, whose tangent never reads `relu(x)`
    (which JAX's tracing of the rule still computes). A rule with effects is evaluated
    whole, so that they happen once.
    """
    if is_overflow_safe(jvp_jaxpr_fun):
        # taylax's own rule for a pass whose rows may overflow: it differs from the pass's
        # derivative only in reverse mode, so the pass itself is carried (as before the
        # rule, and without tracing the linear map it builds).
        return eval_jaxpr_series(*_compat.closed_parts(call_jaxpr), xs, order)
    # Some input carries a series, so order >= 1 (order 0 never reaches a rule).
    low = order - 1
    args = xs[num_consts:]
    out = _one_pass(order, jvp_jaxpr_fun, call_jaxpr, xs[:num_consts], args)
    if out is not None:  # one pass instead of the rule's K nested ones
        return [out]
    del call_jaxpr  # the rule's own primal outputs are what nested jvp returns
    if symbolic_zeros:
        zero_tangent = [x.is_constant or not jnp.issubdtype(x.dtype, np.inexact) for x in args]
    else:
        # The rule expects every tangent instantiated (as jax.jvp passes them).
        zero_tangent = [False] * len(args)
    jvp_jaxpr, jvp_consts, out_zeros = jvp_jaxpr_fun.call_wrapped(*zero_tangent)
    primals_in = [x if x.degree <= low else Series(x.coeffs[: low + 1]) for x in args]
    tangents_in = [_tangent_series(x, low) for x, zero in zip(args, zero_tangent) if not zero]
    n_primal = len(out_zeros)
    if jvp_jaxpr.effects:
        outs = eval_jaxpr_series(jvp_jaxpr, jvp_consts, primals_in + tangents_in, low)
        primal_outs, tangent_outs = outs[:n_primal], outs[n_primal:]
    else:
        at_x0 = [Series.constant(x.primal) for x in primals_in + tangents_in]
        primal_jaxpr = _outputs_only(jvp_jaxpr, jvp_consts, jvp_jaxpr.outvars[:n_primal])
        primal_outs = eval_jaxpr_series(*primal_jaxpr, at_x0, low)
        tangent_jaxpr = _outputs_only(jvp_jaxpr, jvp_consts, jvp_jaxpr.outvars[n_primal:])
        tangent_outs = eval_jaxpr_series(*tangent_jaxpr, primals_in + tangents_in, low)
    tangents = iter(tangent_outs)
    result = []
    for y, zero in zip(primal_outs, out_zeros):
        if zero:
            result.append(Series.constant(y.primal))
            continue
        t = next(tangents)
        # The integral of a series of degree d has degree d + 1: rows past it stay known
        # zeros (relu's tangent, a select of x', keeps the degree of x).
        result.append(Series(integrate(t.coeffs, y.primal, min(order, t.degree + 1))))
    return result


def _one_pass(order, jvp_jaxpr_fun, call_jaxpr, consts, args) -> Series | None:
    """The series of a `custom_jvp_call` whose rule is one of JAX's that read the
    function's own output (`_logaddexp`, `_own_output`), solved in one pass; None for any
    other rule. The arity is checked first: the rule's identity is looked up only where
    it can match."""
    if len(args) == 2:
        known = _logaddexp.rule_for(jvp_jaxpr_fun)
        return None if known is None else known(order, *args)
    # One argument carrying the series, the constants JAX's function closes over not.
    if len(args) != 1 or args[0].is_constant or not all(c.is_constant for c in consts):
        return None
    known = _own_output.rule_for(jvp_jaxpr_fun)
    if known is None:
        return None
    run = _compat.jaxpr_as_fun(call_jaxpr)
    const_values = [c.primal for c in consts]
    return known(order, args[0], lambda x0: run(*const_values, x0)[0])


@register_rule(_compat.custom_vjp_call_p)
def _custom_vjp_call(order, *xs, call_jaxpr, **params):
    del params
    return eval_jaxpr_series(*_compat.closed_parts(call_jaxpr), xs, order)


@register_rule(_compat.remat_p)
def _remat(order, *xs, jaxpr, prevent_cse, differentiated, policy):
    del differentiated
    degrees = tuple(x.degree for x in xs)

    def body(*arrays):
        return as_outputs(eval_jaxpr_series(jaxpr, (), _as_inputs(arrays, degrees), order))

    arrays = [x.primal if x.is_constant else x.coeffs for x in xs]
    outs = jax.checkpoint(body, prevent_cse=prevent_cse, policy=policy)(*arrays)
    return from_outputs(outs, [v.aval for v in jaxpr.outvars])


def _through_its_program(impl_jaxpr: Callable, order, xs, params) -> list[Series]:
    """A pass over one of taylax's own conditional primitives (met in a program a pass
    emitted: a nested derivative) runs the primitive's program, `impl_jaxpr(avals,
    **params)`: the conditional itself."""
    avals = [jax.ShapeDtypeStruct(np.shape(x.primal), jnp.result_type(x.primal)) for x in xs]
    closed = impl_jaxpr(avals, **params)
    return eval_jaxpr_series(*_compat.closed_parts(closed), xs, order)


@register_rule(_rare.where_any_p)
def _where_any(order, *xs, **params):
    (out,) = _through_its_program(_rare.impl_jaxpr, order, xs, params)
    return out


@register_rule(fallback_p)
def _unscaled_fallback(order, *xs, **params):
    # A pass over `taylax.derivatives` at a high order.
    return _through_its_program(impl_jaxpr, order, xs, params)
