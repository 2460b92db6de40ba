"""The unscaled fallback of a pass along a stretched line, run only where it is needed.

`taylax.derivatives` and `taylax.jet` at orders whose `k!` leaves a narrow dtype's range
(float32 from order 13) run their pass along `h` times the direction
(`taylax._series.derivative_scale`) and take an order from a second, unscaled pass only
where the stretched one is not finite (`merged`). Most calls never need the second pass,
so `fallback_p` runs it under `lax.cond` on whether every stretched derivative is
finite: one pass's time where it is not needed, instead of both passes and their
merge on every call (docs/EMISSION.md, "float32 past order 12"). The stretched pass
enters it as coefficients, and each branch takes their products by `k!/h^k`
(`DerivativeFactors`): a branch that returned its operand had XLA copy the output.
Under `jax.vmap`, where the policy says so (`fallback_in_loop`, XLA:CPU), the lowering
instead takes the products first and runs the second pass in a `while` loop of zero or
one trips, whose carry XLA updates in place: the products then fuse into the pass's own
kernels.

A primitive rather than a plain `lax.cond`, for `jax.vmap`: a batched `lax.cond` sees
one predicate per point and becomes a select after both passes, slower even than the
unconditional merge (same section).
`fallback_p`'s batching rule binds it again over the batched unscaled pass, with the
orders one axis further on (`axis`): one question for the whole batch (or for each chunk
of points, inside `taylax._point_chunks`), so the second pass runs, batched, when any
point needs it, and each point keeps its own merge. Differentiated, the primitive is the
plain conditional (as `taylax._point_chunks.chunked_call_p` is its pass), so reverse mode
transposes ordinary JAX operations; a Taylor pass over it runs the conditional too.

Each of the two passes is differentiated through `overflow_safe`: where a pass's higher
rows overflow, reverse mode would otherwise meet their infinite values with the zero
cotangents of the rows nobody reads (`0 * inf`) and make every gradient NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _compat, _policy
from ._count import iter_equations
from ._series import derivative_scale, times_exact

fallback_p = _compat.Primitive("taylax_unscaled_fallback")
fallback_p.multiple_results = True


def zero_trusted_orders(dtype) -> int:
    """The number of leading orders at which an unscaled pass's 0 is a value, not an
    underflow: those whose `k!` is far inside `dtype`'s range, where
    `taylax._series.derivative_scale` stretches nothing (13 for float32)."""
    k = 0
    while derivative_scale(k + 1, dtype) == 1.0:
        k += 1
    return k + 1


def merged(scaled, unscaled, zero_trusted=False):
    """Each order from the pass along `h` times the direction where it is finite, else
    from the unscaled one.

    One line scale cannot suit every order of every function: `h ~ (K!)^(1/K)` keeps
    the orders of entire functions (derivatives of size 1, coefficients `h^k/k!`) in
    range, but for a function with a nearby singularity (derivatives `k!/r^k`) it makes
    the coefficients `(h/r)^k` overflow at orders whose derivatives are representable.
    Unscaled, those coefficients are `r^-k`, below the derivatives, and they overflow
    only when the derivatives do; the scaled pass covers what underflows unscaled.
    """
    # A 0 from the unscaled pass may be an underflowed coefficient times `k!`: keep the
    # scaled pass's inf or nan then, never a silent 0, except at the orders where the
    # unscaled coefficients cannot underflow (`zero_trusted`, a mask): there a 0 is the
    # value, and the scaled pass's NaN came from an overflow elsewhere (`inf * 0`).
    usable = jnp.isfinite(unscaled) & ((unscaled != 0) | zero_trusted)
    return jnp.where(jnp.isfinite(scaled), scaled, jnp.where(usable, unscaled, scaled))


def _inexact(stacks) -> list[int]:
    return [i for i, c in enumerate(stacks) if jnp.issubdtype(c.dtype, jnp.inexact)]


def _nan_sum(x):
    """A real scalar: 0 where every value of `x` is finite, else NaN."""
    zeros = x * 0
    if jnp.issubdtype(zeros.dtype, jnp.complexfloating):
        zeros = zeros.real + zeros.imag
    return jnp.sum(zeros)


@dataclasses.dataclass(frozen=True)
class DerivativeFactors:
    """`k! / scale^k` for k = first..order, exactly (`fractions.Fraction`s): what turns
    the coefficients of a pass along `scale` times the direction into derivatives. A
    primitive's parameter, printed in a jaxpr by its three numbers."""

    order: int
    scale: float
    first: int = 1

    def values(self) -> list[Fraction]:
        h = Fraction(self.scale)
        return [Fraction(math.factorial(k)) / h**k for k in range(self.first, self.order + 1)]


def _finished(stacks: list, factors: tuple, axis: int) -> list:
    """Each stack times its `DerivativeFactors` along its orders (`axis`, behind that many
    batch axes); a stack whose factors are None as it is."""
    out = []
    for c, f in zip(stacks, factors):
        if f is None:
            out.append(c)
            continue
        times = functools.partial(times_exact, factors=f.values())
        for _ in range(axis):
            times = jax.vmap(times)
        out.append(times(c))
    return out


def _merged_stacks(stacks: list, fallback: list, first: tuple, axis: int) -> list:
    """`stacks` (derivatives) with each value that is not finite taken from `fallback`'s
    where that is usable (`merged`); orders along `axis`."""
    stacks = list(stacks)
    for i in _inexact(stacks):
        c, head_rows = stacks[i], first[i]
        rows = (slice(None),) * axis + (slice(head_rows, None),)
        lead = (slice(None),) * axis + (slice(0, head_rows),)
        # The rows after the primal are orders 1, 2, ...
        orders = lax.broadcasted_iota(np.int32, c[rows].shape, axis) + 1
        trusted = orders < zero_trusted_orders(c.dtype)
        tail = merged(c[rows], fallback[i][rows], trusted)
        if head_rows:
            # The primal stays the stretched pass's where it is finite; where it is not
            # (an overflowed high coefficient reached it through a product's zeros,
            # `inf * 0`), the unscaled pass's.
            head = jnp.where(jnp.isfinite(c[lead]), c[lead], fallback[i][lead])
            stacks[i] = lax.concatenate([head, tail], axis) if c.shape[axis] > 1 else head
        else:
            stacks[i] = tail
    return stacks


def _all_finite(stacks: list):
    """A boolean scalar: whether every value of the inexact `stacks` is finite."""
    # `x * 0` is 0 where `x` is finite and NaN where not: one sum says whether all are,
    # and XLA:CPU reduces a sum faster than a conjunction of `isfinite`
    # (docs/EMISSION.md, "float32 past order 12").
    return jnp.isfinite(sum(_nan_sum(stacks[i]) for i in _inexact(stacks)))


def _conditional(
    scaled: list,
    operands: list,
    unscaled: Callable,
    first: tuple,
    axis: int,
    apart: bool,
    factors: tuple,
    loop: bool = False,
):
    """`scaled` times `factors` (`_finished`), merged with `unscaled(operands)`, the second
    pass run only when some value of `scaled` (row 0 included) is not finite. `first[i]`
    is 1 where stack `i`'s row 0 along `axis` holds the primal (merged apart), 0 where
    its rows are orders 1, 2, ... `apart` (the policy's `fallback_check_apart`): the
    check reads the stacks behind an optimization barrier. `loop` (the policy's
    `fallback_in_loop`, lowering only: a `while` loop has no reverse mode): the factors
    apply first, and the second pass runs in a `while` loop of zero or one trips that
    carries the derivatives."""
    if loop:
        # The products by the factors then fuse into the kernels that write the stacks,
        # and a loop updates its carry in place where a conditional's branch that keeps
        # its operand is a copy: on XLA:CPU two passes over the output fewer
        # (docs/EMISSION.md, "float32 past order 12"). A product overflows only where its
        # derivative leaves the dtype's range (`times_exact`), which the unscaled pass
        # cannot give either: the check may read the products.
        out = _finished(list(scaled), factors, axis)
        if apart:
            out = list(lax.optimization_barrier(out))
        needed = ~_all_finite(out)

        def merge(carry):
            _, stacks = carry
            return jnp.zeros((), bool), _merged_stacks(stacks, unscaled(operands), first, axis)

        return lax.while_loop(lambda carry: carry[0], merge, (needed, out))[1]
    # The check reads the stacks before their factors: a product that overflows is a
    # derivative past the dtype's range, which the unscaled pass cannot give either
    # (`times_exact` overflows no step unless its result does).
    if apart:
        # XLA:GPU fused the whole pass into the check's reduction (one kernel laid out
        # for a reduction) and split the rest into kernels writing every row apart: the
        # log1p chain at order 16 took 2.6 ms against 0.6 ms without the check
        # (docs/EMISSION.md, "GPU"). Behind the barrier the pass keeps its own kernels
        # and the check reads the stacks once more.
        scaled = list(lax.optimization_barrier(list(scaled)))
    # Over whole stacks, the primal's row too (a non-finite primal only runs the second
    # pass for nothing): a slice of the rows had XLA compute the stack twice.
    finite = _all_finite(scaled)

    def merge(args):
        stacks = _finished(list(args[0]), factors, axis)
        return _merged_stacks(stacks, unscaled(list(args[1])), first, axis)

    # The factors apply inside the branches: a branch that returned its operand as it is
    # made XLA copy the whole output (docs/EMISSION.md, "float32 past order 12").
    return lax.cond(
        finite,
        lambda args: _finished(list(args[0]), factors, axis),
        merge,
        (list(scaled), list(operands)),
    )


def with_unscaled_fallback(
    scaled: Callable,
    unscaled: Callable,
    operands,
    first: int | tuple[int, ...],
    factors: tuple,
) -> list:
    """The derivatives of `scaled(operands)` (the pass along `h` times the direction,
    stacked along a leading axis) merged order by order with `unscaled(operands)`'s
    (`merged`) where they are not finite. `scaled` returns coefficients along the
    stretched line, and the products by `k! / h^k` are taken here: `factors` holds one
    `DerivativeFactors` per stack, or None for a stack kept as it is.
    `first` (one for all stacks, or one per stack) is 1 where a stack's row 0 holds the
    primal, which stays the scaled pass's where that is finite (both passes compute it,
    but XLA may evaluate a long primal, float32 `lgamma`, a few ulps apart) and is the
    unscaled pass's where not; 0 where its rows are the orders 1, 2, ... (a primal alone
    is a stack of one row with `first` 1).

    `unscaled` runs only when some scaled derivative is not finite (see the module
    docstring). It is traced here, under the emission policy in force. Both are functions
    of `operands` (a pytree of arrays) alone, differentiated through `overflow_safe`.
    """
    stacks = overflow_safe(scaled)(operands)
    factors = tuple(factors)
    if not _inexact(stacks):
        return _finished(stacks, factors, 0)
    leaves, tree = jax.tree.flatten(operands)
    leaves = [jnp.asarray(a) for a in leaves]
    avals = [jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)) for a in leaves]
    safe = overflow_safe(unscaled)
    closed = jax.make_jaxpr(lambda *ls: safe(jax.tree.unflatten(tree, ls)))(*avals)
    first = tuple(first) if isinstance(first, (tuple, list)) else (first,) * len(stacks)
    return fallback_p.bind(
        *stacks,
        *leaves,
        unscaled=closed,
        first=first,
        n_scaled=len(stacks),
        factors=factors,
        axis=0,
    )


def overflow_safe(fun: Callable) -> Callable:
    """`fun` (a pytree of arrays in, a list of arrays out: one Taylor pass) with a JVP
    whose transpose reads no value that overflowed; the same function otherwise.

    A Taylor pass is causal (row k of every value depends on rows `<= k` of its inputs),
    but the transpose of its linearization is not: the cotangent of a low row sums the
    cotangents of the higher rows times the values there, so a row that overflowed meets
    the zero cotangent of a row nobody reads (`0 * inf` is NaN), and the gradient of a
    representable derivative was NaN. Here the linear map reads its values (JAX's
    residuals) with every non-finite one replaced by 1, and the tangent of an output
    that is not finite is NaN (a nonzero cotangent there comes out infinite). A tangent
    that reads a non-finite value belongs to such an output: series arithmetic divides by
    the primal row only, and a select does not read the branch it drops. So every other
    tangent and cotangent is exactly `fun`'s, and only the derivative rule differs: the
    primal outputs and the forward program are `fun`'s.
    """

    def flat(*leaves, tree):
        return list(fun(jax.tree.unflatten(tree, leaves)))

    def call(operands):
        leaves, tree = jax.tree.flatten(operands)
        safe = jax.custom_jvp(functools.partial(flat, tree=tree))
        safe.defjvp(functools.partial(_overflow_safe_jvp, functools.partial(flat, tree=tree)))
        return safe(*leaves)

    return call


def is_overflow_safe(jvp_jaxpr_fun) -> bool:
    """Whether a `custom_jvp_call`'s rule (its `jvp_jaxpr_fun` parameter) is
    `overflow_safe`'s: a Taylor pass over it may run the wrapped pass itself, since forward
    mode never meets an overflowed row with a zero cotangent."""
    key = _compat.custom_jvp_rule_key(jvp_jaxpr_fun)
    rule = key[1] if key is not None else None
    return isinstance(rule, functools.partial) and rule.func is _overflow_safe_jvp


def _overflow_safe_jvp(fun: Callable, primals, tangents):
    primals = list(primals)
    # Integer arguments (closed-over indices) have no tangent: the map is over the others.
    diff = [i for i, p in enumerate(primals) if jnp.issubdtype(jnp.result_type(p), jnp.inexact)]

    def of_inexact(*xs):
        args = list(primals)
        for i, x in zip(diff, xs):
            args[i] = x
        return fun(*args)

    outs, linear = jax.linearize(of_inexact, *[primals[i] for i in diff])
    t_in = [tangents[i] for i in diff]
    avals = [jax.ShapeDtypeStruct(np.shape(t), jnp.result_type(t)) for t in t_in]
    # The linear map's program, its residuals made explicit inputs.
    closed, residuals = _compat.consts_to_invars(jax.make_jaxpr(linear)(*avals))
    # 1, not 0: a residual may be a divisor, and `0 / 1` keeps a zero cotangent 0.
    clean = [
        jnp.where(jnp.isfinite(r), r, jnp.ones_like(r))
        if jnp.issubdtype(jnp.result_type(r), jnp.inexact)
        else r
        for r in residuals
    ]
    t_out = []
    for y, t in zip(outs, _run_linear(closed, [*clean, *t_in])):
        if not jnp.issubdtype(jnp.result_type(y), jnp.inexact):
            t_out.append(t)
            continue
        ok = jnp.isfinite(y)
        # Forward: NaN. Reverse: a zero cotangent stays 0 and any other becomes infinite:
        # three factors of the dtype's largest value, run-time values that XLA cannot fold
        # into one infinite factor (which would make `0 * inf` again).
        big = jnp.where(ok, 0, jnp.finfo(t.dtype).max).astype(t.dtype)
        unknown = jnp.where(ok, jnp.zeros_like(t), t) * big * big * big + jnp.nan
        t_out.append(jnp.where(ok, t, unknown))
    return outs, t_out


def _run_linear(closed, args: list) -> list:
    """The linear map `closed` on `args`, each conditional in it as a select of all its
    branches. JAX batches a conditional whose index varies so, but puts a `stop_gradient`
    on the operands, which reverse mode cannot transpose when they are tangents (here they
    are: this is a JVP rule, and `jax.vmap` batches the program it is traced into)."""
    if not any(e.primitive is _compat.cond_p for e in iter_equations(closed)):
        return list(_compat.jaxpr_as_fun(closed)(*args))
    jaxpr, consts = _compat.closed_parts(closed)
    return _selected(jaxpr, list(consts), args)


def _selected(jaxpr, consts: list, args: list) -> list:
    """`jaxpr` on `consts` and `args`, with conditionals as selects, inside `jit` calls and
    `scan` bodies too."""
    env = {}
    constvars, invars = _compat.input_vars(jaxpr, len(consts))

    def read(v):
        return v.val if isinstance(v, _compat.Literal) else env[v]

    env.update(zip(constvars, consts))
    env.update(zip(invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive is _compat.cond_p:
            index, *ops = ins
            per_branch = []
            for i, branch in enumerate(eqn.params["branches"]):
                # Each branch reads its operands only where it is taken: the cotangents of a
                # branch not taken (NaN where it divides by its zero residuals) stop here.
                taken = index == i
                masked = [jnp.where(taken, x, jnp.zeros_like(x)) for x in ops]
                per_branch.append(_selected(*_compat.closed_parts(branch), masked))
            outs = [lax.select_n(index, *cases) for cases in zip(*per_branch)]
        elif eqn.primitive is _compat.jit_p:
            outs = _selected(*_compat.closed_parts(eqn.params["jaxpr"]), ins)
        elif eqn.primitive is _compat.scan_p:
            outs = _scan_selected(eqn.params, ins)
        else:
            outs = _compat.bind_outputs(eqn, ins)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _scan_selected(params, ins: list) -> list:
    num_consts, num_carry = _compat.scan_split(params)
    consts, init, xs = (
        ins[:num_consts],
        ins[num_consts : num_consts + num_carry],
        ins[num_consts + num_carry :],
    )
    body_jaxpr, body_consts = _compat.closed_parts(params["jaxpr"])

    def body(carry, x):
        outs = _selected(body_jaxpr, list(body_consts), [*consts, *carry, *x])
        return outs[:num_carry], outs[num_carry:]

    carry, ys = lax.scan(
        body, init, xs, length=params["length"], reverse=params["reverse"], unroll=params["unroll"]
    )
    return [*carry, *ys]


def _run(closed):
    return lambda ops: _compat.jaxpr_as_fun(closed)(*ops)


def _impl(
    *args, unscaled, first: tuple, n_scaled: int, factors: tuple, axis: int, policy=None, loop=False
):
    scaled, operands = list(args[:n_scaled]), list(args[n_scaled:])
    apart = (policy or _policy.current()).fallback_check_apart
    return _conditional(scaled, operands, _run(unscaled), first, axis, apart, factors, loop)


def _lower(ctx, *args, **params):
    # Lowered for a known platform: its policy decides, unless a user set one. Only the
    # lowering takes the loop: differentiated (reverse mode transposes it), the primitive
    # is the conditional. A whole array keeps the conditional: there any loop, even one
    # with an empty body, made XLA:CPU run the log1p chain's pass at K = 24 and 32 up to
    # 14% slower (docs/EMISSION.md, "float32 past order 12").
    policy = _policy.for_lowering(ctx.module_context.platforms)
    loop = policy.fallback_in_loop and params["axis"] > 0
    impl = _compat.mlir.lower_fun(lambda *a: _impl(*a, **params, policy=policy, loop=loop), True)
    return impl(ctx, *args)


def _abstract_eval(*avals, unscaled, first: tuple, n_scaled: int, factors: tuple, axis: int):
    del unscaled, first, factors, axis
    return [_compat.shaped_array(a.shape, a.dtype) for a in avals[:n_scaled]]


def _batch(axis_data, args, dims, *, unscaled, first, n_scaled: int, factors, axis: int):
    params = dict(unscaled=unscaled, first=first, n_scaled=n_scaled, factors=factors, axis=axis)
    if all(d is None for d in dims):
        return fallback_p.bind(*args, **params), [None] * n_scaled
    size = axis_data.size
    # The stretched stacks with the batch axis in front (broadcast where a stack does not
    # depend on the batch), so that one predicate covers every point; the orders one
    # axis further on.
    scaled = [
        jnp.broadcast_to(a, (size,) + a.shape) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args[:n_scaled], dims[:n_scaled])
    ]
    operands, operand_dims = list(args[n_scaled:]), list(dims[n_scaled:])
    run = _compat.jaxpr_as_fun(unscaled)
    batched = jax.make_jaxpr(
        jax.vmap(
            lambda *o: list(run(*o)),
            in_axes=operand_dims,
            axis_name=axis_data.name,
            axis_size=size,
            spmd_axis_name=axis_data.spmd_name,
        )
    )(*[jax.ShapeDtypeStruct(np.shape(o), jnp.result_type(o)) for o in operands])
    params.update(unscaled=batched, axis=axis + 1)
    # The batched primitive again, not its conditional: lowered, it takes the policy's
    # form (`fallback_in_loop`), and nested `vmap`s keep one predicate.
    return fallback_p.bind(*scaled, *operands, **params), [0] * n_scaled


# The primitive's program (the conditional) as a closed jaxpr: what an interpreter that
# has no rule of its own for it (a Taylor pass) runs instead. Differentiated, the
# primitive is that conditional.
impl_jaxpr = _compat.define_as_function(fallback_p, _impl, _abstract_eval, _batch, _lower)
