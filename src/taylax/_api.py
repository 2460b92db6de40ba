"""Public entry points: `taylor`, `derivatives`, `jet`."""

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

from . import (
    _point_chunks,
    _pointwise,
    _policy,
    _rules,  # noqa: F401  (registers the built-in rules)
)
from ._count import count_equations
from ._fallback import DerivativeFactors, overflow_safe, with_unscaled_fallback
from ._interpret import eval_jaxpr_series
from ._one_kernel import fits_one_kernel
from ._outputs import (
    long_pass_rows,
    materialized_rows,
    output_pair,
    output_pairs,
    output_stack,
    selected_derivatives,
    to_derivatives,
)
from ._programs import cached_program, check_inexact, check_order, trace_leaves
from ._series import (
    Series,
    check_order_for_dtype,
    derivative_scale,
    factorials,
    mark_buffer_rows,
    stack_rows,
    times_exact,
    unit_seed,
)


def _pass_scale(order: int, leaves) -> float:
    """The `derivative_scale` of a pass for derivatives of `leaves` (the narrowest dtype's:
    every input shares the one line parameter)."""
    dtypes = [jnp.result_type(x) for x in leaves]
    for d in dtypes:
        check_order_for_dtype(order, d, "taylax")
    return min((derivative_scale(order, d) for d in dtypes), default=1.0)


def _seeds(primals, directions, order: int, unit: bool = False, scale: float = 1.0):
    """Input series `x + scale s v`; with `unit`, `v` is exactly 1 (the default one),
    marked so that closed forms along the line need no powers of it."""
    if order == 0:
        return [Series.constant(p) for p in primals]
    if unit:
        return [Series(unit_seed(jnp.asarray(p), scale)) for p in primals]
    series = []
    for p, v in zip(primals, directions):
        v = jnp.asarray(v, p.dtype)
        # Rows of their own (`known_rows`): a reader takes `x` or `v`, not a slice of the
        # stack (`x - max(x)` in softmax subtracted from the stacked pair and stacked again).
        if scale == 1.0:
            stacked = mark_buffer_rows(stack_rows([p, v]))
        else:
            stacked = stack_rows([p, v * scale])
        series.append(Series(stacked))
    return series


def _taylor_pass(jaxpr, consts, x_leaves, v_leaves, order: int, unit: bool, whole: bool):
    """(primals, coefficients 1..order) of one pass along the direction: the pass of
    `derivatives` (its one kernel, `whole` as there), with the coefficients of a scalar
    output selected row by row (`selected_rows`) except at a point of a whole-array call,
    whose `vmap` puts the points last."""
    seeds = _seeds(x_leaves, v_leaves, order, unit)
    one_kernel = fits_one_kernel(jaxpr, order, of_polynomials=not whole)
    outs, long = _eval_pass(jaxpr, consts, seeds, order, one_kernel)
    pairs = output_pairs(outs, jaxpr, order, long, select=not whole)
    return [p for p, _ in pairs], [c for _, c in pairs]


def _long_pass(jaxpr, order: int) -> bool:
    """Whether a pass over `jaxpr` is long enough for the policy's
    `output_rows_apart_min_equations` (output rows apart, padded, and no fusion cuts)."""
    least = _policy.current().output_rows_apart_min_equations
    return bool(order) and least is not None and count_equations(jaxpr) >= least


def _eval_pass(jaxpr, consts, seeds, order: int, one_kernel: bool | None = None):
    """`(eval_jaxpr_series(...), long)`: a long pass (`_long_pass`) runs without fusion
    cuts, as its output rows become kernels of their own (`output_pairs`); with cuts
    XLA:CPU recomputed each cut's rows in a kernel per stack (docs/EMISSION.md)."""
    policy = _policy.current()
    long = _long_pass(jaxpr, order)
    with _policy.pass_scope(dataclasses.replace(policy, fusion_cut=None) if long else policy):
        return eval_jaxpr_series(jaxpr, consts, seeds, order, one_kernel), long


def _derivatives_pass(
    jaxpr, consts, x_leaves, v_leaves, order, unit, scale, exact=False, finish=True, whole=False
):
    """Derivatives 0..order of each output, stacked along a leading axis, from one pass
    along `scale` times the direction (`to_derivatives` on every row: `0!` is 1). With
    `finish=False` the stacks stay coefficients: the caller multiplies them by
    `DerivativeFactors(order, scale, 0)`.

    `whole`: the pass at one point of a whole-array call (`_over_points`). Its one kernel
    holds no function of polynomials: marked, such a pass runs in chunks of points, up to
    1.2x faster there (docs/EMISSION.md, "One kernel with exponentials, logarithms...")."""

    def done(c):
        return to_derivatives(c, order, scale, exact, first=0) if finish else c

    seeds = _seeds(x_leaves, v_leaves, order, unit, scale)
    one_kernel = fits_one_kernel(jaxpr, order, of_polynomials=not whole)
    outs, long = _eval_pass(jaxpr, consts, seeds, order, one_kernel)
    policy = _policy.current()
    stacks = []
    for o, v in zip(outs, jaxpr.outvars):
        inexact = bool(order) and jnp.issubdtype(v.aval.dtype, jnp.inexact)
        apart = policy.output_rows_apart_min_order
        rows = None
        if inexact and long:
            rows = long_pass_rows(o, v.aval, order)
        elif inexact and apart is not None and order >= apart:
            rows = materialized_rows(o, v.aval, order)
        if rows is not None:
            stacks.append(done(rows))
        # The rows selected between the policy's orders; else the pass's own stack up to
        # its order, and past it the rows concatenated.
        elif (
            inexact
            and finish
            and scale == 1.0
            and not (exact or whole)
            and ((selected := selected_derivatives(o, v.aval, order)) is not None)
        ):
            stacks.append(selected)
        elif order <= policy.stacked_output_max_order:
            c = output_stack(o, v.aval, order)
            stacks.append(done(c) if inexact else c)
        else:
            # Stacked first, then scaled (row 0 by `0! = 1`): one scaling of one stack,
            # where a concatenate of the primal and the scaled rows was slower on XLA:CPU
            # (docs/EMISSION.md, "float32 past order 12").
            p, c = output_pair(o, v.aval, order)
            c = lax.concatenate([p[None], c], 0)
            stacks.append(done(c) if inexact else c)
    return stacks


def _output_factors(jaxpr, order: int, scale: float, first: int) -> tuple:
    """The `DerivativeFactors` (rows `first..order`) of each of `jaxpr`'s outputs, None for
    those that are not inexact: a stretched pass's stacks go to the fallback as
    coefficients, with the factors `k! / h^k` to apply (`with_unscaled_fallback`)."""
    return tuple(
        DerivativeFactors(order, scale, first)
        if jnp.issubdtype(v.aval.dtype, jnp.inexact)
        else None
        for v in jaxpr.outvars
    )


def _guarded(unscaled: Callable) -> Callable:
    """`unscaled` traced with the policy's `guarded_products` on: the fallback runs only
    where the stretched pass overflowed, which is where a product's `inf * 0` would put
    NaN in the rows below the overflow. Off in the stretched pass itself, where it cost
    17-66% of the pass on XLA:CPU (docs/EMISSION.md, "Overflow")."""

    def run(ops):
        guarded = dataclasses.replace(_policy.current(), guarded_products=True)
        with _policy.pass_scope(guarded):
            return unscaled(ops)

    return run


def _safe(run: Callable, ops, order: int) -> list:
    """`run(ops)` (one pass, a list of arrays) through `overflow_safe` from order 1 on:
    reverse mode then reads no overflowed coefficient (`0 * inf` made the gradients of
    the orders below it NaN). The forward program is `run`'s."""
    return overflow_safe(run)(ops) if order else run(ops)


def _safe_pairs(run: Callable, ops, order: int) -> tuple[list, list]:
    """`_safe` for a pass that returns `(primals, coefficients)`."""
    flat = _safe(lambda o: [x for part in run(o) for x in part], ops, order)
    n = len(flat) // 2
    return flat[:n], flat[n:]


def _taylor_program(order: int, unit: bool = False, whole: bool = False):
    def make(jaxpr):
        def program(consts, x_leaves, v_leaves):
            return _safe_pairs(
                lambda ops: _taylor_pass(jaxpr, *ops, order, unit, whole),
                (list(consts), list(x_leaves), list(v_leaves)),
                order,
            )

        return program

    return make


def _derivatives_program(order: int, unit: bool = False, whole: bool = False):
    def make(jaxpr):
        def program(consts, x_leaves, v_leaves):
            scale = _pass_scale(order, x_leaves)
            d = functools.partial(_derivatives_pass, jaxpr, whole=whole)
            if scale == 1.0:
                return _safe(
                    lambda ops: d(*ops, order, unit, 1.0),
                    (list(consts), list(x_leaves), list(v_leaves)),
                    order,
                )
            return with_unscaled_fallback(
                lambda ops: d(*ops, order, unit, scale, finish=False),
                _guarded(lambda ops: d(*ops, order, unit, 1.0, exact=True)),
                (list(consts), list(x_leaves), list(v_leaves)),
                first=1,
                factors=_output_factors(jaxpr, order, scale, 0),
            )

        return program

    return make


def _flat_program(closed, fun, order: int, kind: str, unit: bool, num_x: int, whole=False):
    """The cached `kind` program for `closed` as a function of flat arrays (constants, then
    `x`'s and `v`'s leaves) returning a list, its constants, and a box that holds its
    result's tree once it has been traced. `whole`: the pass at one point of a whole-array
    call (`_over_points`)."""
    if kind == "taylor":
        make = _taylor_program(order, unit, whole)
    else:
        make = _derivatives_program(order, unit, whole)
    # What a recompilation's diagnostic shows (order and options): `whole` only when set.
    static = (kind, order, unit) + (("whole arrays",) if whole else ())
    program, consts = cached_program(closed, static, fun, make)
    sizes = (len(consts), num_x)
    result_tree = []

    def flat_program(*args):
        c, xs, vs = args[: sizes[0]], args[sizes[0] : sum(sizes)], args[sum(sizes) :]
        leaves, tree = jax.tree.flatten(program(list(c), list(xs), list(vs)))
        result_tree[:] = [tree]
        return leaves

    return flat_program, consts, result_tree


def _taylor_leaves(fun, order, x, v, kind, api, unit=False):
    """Trace `fun(x)` and run the cached `kind` program on `x`'s and `v`'s leaves.

    `unit`: `v` is the default direction 1, known statically (no powers of it needed).
    """
    x_leaves, in_tree = jax.tree.flatten(x)
    v_leaves = jax.tree.leaves(v)
    closed, out_tree = trace_leaves(fun, (x,), api)
    over_points = _over_points(fun, order, x, v, kind, api, unit, closed)
    if over_points is not None:
        return over_points, out_tree
    flat_program, consts, result_tree = _flat_program(closed, fun, order, kind, unit, len(x_leaves))
    # Flat arrays in and out, so that a large batch can run in chunks of points.
    flat = _point_chunks.call(flat_program, [*consts, *x_leaves, *v_leaves])
    return jax.tree.unflatten(result_tree[0], flat), out_tree


def _over_points(fun, order, x, v, kind, api, unit, closed):
    """`_taylor_leaves`'s result for an elementwise `fun` on whole arrays, as a `jax.vmap`
    of its pass at one point over the flattened arrays, run in chunks of points
    (`taylax._pointwise`); None where `fun` is not elementwise, where its series are
    smaller than the policy's `elementwise_by_points_min_bytes` (its
    `elementwise_by_points_narrow_min_bytes` for float32 past `high_order`) and have fewer
    wide kernels than `elementwise_by_points_min_wide_kernels`, or where that `vmap` would
    not run in chunks: there the whole-array pass, whose rows are contiguous, was as fast
    or faster (docs/EMISSION.md, "Whole arrays")."""
    policy = _policy.current()
    x_leaves, v_leaves = jax.tree.leaves(x), jax.tree.leaves(v)
    itemsizes = [jnp.result_type(a).itemsize for a in x_leaves]
    min_bytes = policy.elementwise_by_points_min_bytes
    if (
        min_bytes is not None
        and policy.elementwise_by_points_narrow_min_bytes is not None
        and order > policy.high_order
        and _point_chunks.narrow(x_leaves)
    ):
        # Past order 16 a float32 whole-array pass ran as fast as the vmap in chunks, or
        # faster, up to 32 MiB of series, where float64 and lower orders gained up to 4x
        # from 12 MiB (docs/EMISSION.md, "Whole arrays").
        min_bytes = max(min_bytes, policy.elementwise_by_points_narrow_min_bytes)
    series_bytes = (order + 1) * sum(np.size(a) * i for a, i in zip(x_leaves, itemsizes))
    by_bytes = min_bytes is not None and series_bytes >= min_bytes
    # Fewer bytes, but many kernels that each read many kept values: over a whole array
    # each is a pass over memory, which the chunks keep in cache. Not float32, whose rows
    # of half the bytes gained nothing (docs/EMISSION.md, "Whole arrays"). Asked only
    # where a batch could be chunked.
    min_wide = policy.elementwise_by_points_min_wide_kernels
    by_kernels = (
        not by_bytes
        and min_bytes is not None
        and min_wide is not None
        and not _point_chunks.narrow(x_leaves)
        and _point_chunks.may_run_in_chunks(max((np.size(a) for a in x_leaves), default=0))
    )
    if not (by_bytes or by_kernels):
        return None
    shape = _pointwise.points_shape(closed, x_leaves)
    if shape is None:
        return None
    if by_kernels:
        # Counted on the whole-array pass, traced as the call that runs it would trace it:
        # `jax.jit` keeps that trace, so a call left whole traces nothing more.
        whole, consts, _ = _flat_program(closed, fun, order, kind, unit, len(x_leaves))
        args = [*consts, *x_leaves, *v_leaves]
        avals = [jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)) for a in args]
        program = _point_chunks.PointProgram(whole, avals)
        if _point_chunks.wide_kernels(program, policy.wide_kernel_min_operands) < min_wide:
            return None
    point_x = _pointwise.point_avals(x)
    point_closed, _ = trace_leaves(fun, (point_x,), api)
    if not _pointwise.same_computation(closed, point_closed, shape):
        return None
    flat_program, consts, result_tree = _flat_program(
        point_closed, fun, order, kind, unit, len(x_leaves), whole=True
    )
    avals = [jax.ShapeDtypeStruct(np.shape(c), jnp.result_type(c)) for c in consts]
    avals += jax.tree.leaves(point_x) + jax.tree.leaves(_pointwise.point_avals(v))
    program = _point_chunks.PointProgram(flat_program, avals)
    if not _point_chunks.runs_in_chunks(math.prod(shape), program):
        return None
    flat = [jnp.reshape(leaf, (-1,)) for leaf in [*x_leaves, *v_leaves]]
    # Points last: each output keeps the whole-array layout `(..., *shape)`.
    out = jax.vmap(
        lambda *args: _point_chunks.chunked_call_p.bind(*args, program=program, points_last=True),
        in_axes=[None] * len(consts) + [0] * len(flat),
        out_axes=-1,
    )(*consts, *flat)
    out = [jnp.reshape(o, o.shape[:-1] + shape) for o in out]
    return jax.tree.unflatten(result_tree[0], out)


def _check_direction(x, v):
    x_leaves, x_tree = jax.tree.flatten(x)
    v_leaves, v_tree = jax.tree.flatten(v)
    if x_tree != v_tree:
        raise ValueError(
            f"`v` must have the same pytree structure as `x`; got {v_tree} for `v` and {x_tree} "
            "for `x`."
        )
    out = []
    for xl, vl in zip(x_leaves, v_leaves):
        if jnp.shape(xl) != jnp.shape(vl):
            raise ValueError(
                f"`v` must have the same shape as `x`, leaf by leaf; got {jnp.shape(vl)} for `v` "
                f"and {jnp.shape(xl)} for `x`."
            )
        x_dtype, v_dtype = jnp.result_type(xl), jnp.result_type(vl)
        if jnp.issubdtype(v_dtype, np.complexfloating) and not jnp.issubdtype(
            x_dtype, np.complexfloating
        ):
            raise TypeError(
                f"`v` is complex ({v_dtype}) but `x` is real ({x_dtype}); the direction must "
                "live in the same space as `x`."
            )
        out.append(jnp.asarray(vl, x_dtype))
    return jax.tree.unflatten(x_tree, out)


def taylor(fun: Callable, order: int) -> Callable:
    """Taylor coefficients of `fun` along a line, in one pass of order `order`.

    **Arguments:**

    - `fun`: a function of one pytree of floating-point or complex arrays,
      returning any pytree of arrays.
    - `order`: the truncation order `K >= 0` (a Python integer).

    **Returns:** a function `(x, v) -> (primal_out, coefficients)` where
    `primal_out = fun(x)` and `coefficients` has `fun(x)`'s pytree structure
    with leaves stacked `(K, *leaf.shape)`: entry `k-1` is the normalized
    coefficient `y_k = (1/k!) d^k/ds^k fun(x + s v)` at `s = 0`.

    The math: every value in the program becomes `y(s) = y_0 + y_1 s + ... + y_K s^K`,
    products are Cauchy products and nonlinear functions follow their ODEs, so
    the cost is O(K^2) times the program, not O(2^K).

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        y, c = taylax.taylor(jnp.exp, 3)(0.0, 1.0)
        # y == 1.0, c == [1, 1/2, 1/6]
        ```
    """
    order = check_order(order)

    def taylor_fun(x, v):
        check_inexact(jax.tree.leaves(x), "x")
        v = _check_direction(x, v)
        (primals, coeffs), out_tree = _taylor_leaves(fun, order, x, v, "taylor", "taylax.taylor")
        return jax.tree.unflatten(out_tree, primals), jax.tree.unflatten(out_tree, coeffs)

    return taylor_fun


def derivatives(fun: Callable, order: int) -> Callable:
    """All derivatives of `fun` along a line up to `order`, in one Taylor pass.

    **Arguments:**

    - `fun`: a function of one pytree of floating-point or complex arrays.
    - `order`: the highest derivative order `K >= 0` (a Python integer).

    **Returns:** a function `(x, v=None) -> derivs` where `derivs` has
    `fun(x)`'s pytree structure with leaves stacked `(K+1, *leaf.shape)`:
    entry `k` is `d^k/ds^k fun(x + s v)` at `s = 0` (entry 0 is `fun(x)`).
    `s` is real, also for complex `x`. `v` defaults to 1 when `x` is a scalar
    and is required otherwise.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda t: 0.3 * jnp.sin(t) * t**10
        d = taylax.derivatives(f, 10)(1.1)   # d[k] = f^(k)(1.1)
        ```
    """
    order = check_order(order)

    def derivatives_fun(x, v=None):
        leaves = jax.tree.leaves(x)
        check_inexact(leaves, "x")
        if v is None:
            if len(leaves) != 1 or jnp.ndim(leaves[0]) != 0:
                raise ValueError(
                    "`v` (the direction) is required when `x` is not a scalar: pass an array "
                    "(or pytree) shaped like `x`, e.g. `derivatives(f, k)(x, jnp.ones_like(x))`."
                )
            v = jax.tree.map(lambda leaf: jnp.ones_like(leaf), x)
            unit = True
        else:
            unit = False
        v = _check_direction(x, v)
        out, out_tree = _taylor_leaves(
            fun, order, x, v, "derivatives", "taylax.derivatives", unit=unit
        )
        return jax.tree.unflatten(out_tree, out)

    return derivatives_fun


def _jet_pass(
    jaxpr,
    consts,
    primals,
    terms,
    order: int,
    scale: float | None,
    exact: bool,
    finish: bool = True,
):
    """Outputs of one pass along `scale` times the input series, in derivative terms
    (`scale=None`: normalized terms in and out, as `factorial_scaled=False` has them).
    With `finish=False` the output terms stay coefficients along the stretched series:
    the caller multiplies them by `DerivativeFactors(order, scale)`."""
    series = []
    for p, ts in zip(primals, terms):
        if order == 0:
            series.append(Series.constant(p))
            continue
        rows = [jnp.asarray(t, p.dtype) for t in ts]
        if scale == 1.0 and not exact:
            k_factorial = factorials(order, 0, p.dtype)
            rows = [r / k_factorial[k + 1].astype(r.dtype) for k, r in enumerate(rows)]
        elif scale is not None:
            h = Fraction(scale)
            factors = [h ** (k + 1) / math.factorial(k + 1) for k in range(len(rows))]
            rows = [times_exact(r, q) for r, q in zip(rows, factors)]
        # Rows of their own (`known_rows`), as a line's seed has: products of two such
        # series sum row products rather than shifted stacks, which XLA:CPU fused into
        # kernels that recomputed their operands (docs/EMISSION.md, "float32 past
        # order 12").
        series.append(Series(stack_rows([p, *rows])))
    outs, long = _eval_pass(jaxpr, consts, series, order)
    pairs = output_pairs(outs, jaxpr, order, long)
    coeffs = [
        to_derivatives(c, order, scale, exact)
        if finish and scale is not None and jnp.issubdtype(c.dtype, jnp.inexact)
        else c
        for _, c in pairs
    ]
    return [p for p, _ in pairs], coeffs


def _jet_program(order: int, factorial_scaled: bool, safe: bool = True):
    def make(jaxpr):
        def program(consts, primals, terms):
            ops = (list(consts), list(primals), [list(ts) for ts in terms])
            if not factorial_scaled and not safe:
                return _jet_pass(jaxpr, *ops, order, None, False)
            if not factorial_scaled:
                return _safe_pairs(lambda o: _jet_pass(jaxpr, *o, order, None, False), ops, order)
            # Derivative terms go in as `x^(k) h^k / k!` and come out divided by the same:
            # a pass along `h` times the input series (see `derivative_scale`), merged
            # order by order with an unscaled pass where it overflows (`taylax._fallback`).
            scale = _pass_scale(order, primals)
            if scale == 1.0 or not order:
                return _safe_pairs(lambda o: _jet_pass(jaxpr, *o, order, scale, False), ops, order)

            # The primals go with the terms: an overflowed high term reaches the stretched
            # pass's primal through a product's zeros (`inf * 0`), and the fallback's
            # primal is then the one to keep (as in `derivatives`). Each primal goes as a
            # stack of one row beside its terms, not on top of them: a concatenate of
            # the two was a fused kernel that recomputed the pass's rows (3x the time of
            # the log1p chain's pass at K = 24, float32; docs/EMISSION.md).
            def apart(ops, scale, exact, finish=True):
                primals_out, coeffs = _jet_pass(jaxpr, *ops, order, scale, exact, finish)
                heads = [p[None].astype(c.dtype) for p, c in zip(primals_out, coeffs)]
                return [*heads, *coeffs]

            n = len(jaxpr.outvars)
            stacks = with_unscaled_fallback(
                lambda ops: apart(ops, scale, False, finish=False),
                _guarded(lambda ops: apart(ops, 1.0, True)),
                ops,
                first=(1,) * n + (0,) * n,
                factors=(None,) * n + _output_factors(jaxpr, order, scale, 1),
            )
            return [s[0] for s in stacks[:n]], stacks[n:]

        return program

    return make


def jet(fun: Callable, primals, series, factorial_scaled: bool = True):
    """Drop-in replacement for `jax.experimental.jet.jet`.

    **Arguments:**

    - `fun`: a function of `len(primals)` array arguments.
    - `primals`: a tuple or list of arrays, the point of expansion.
    - `series`: a tuple or list (one entry per primal) of lists of `K` arrays,
      the input Taylor terms.
    - `factorial_scaled`: as in `jax.experimental.jet`: when True (default)
      the terms are derivatives (`x^(k)`); when False, normalized coefficients
      (`x^(k)/k!`).

    **Returns:** `(primals_out, series_out)` with the conventions of
    `jax.experimental.jet.jet`: `series_out` has `fun`'s output structure with
    a list of `K` terms at each leaf.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        y0, (y1, y2) = taylax.jet(jnp.sin, (0.5,), ((1.0, 0.0),))
        ```
    """
    return _jet(fun, primals, series, factorial_scaled, safe=True)


def normalized_jet(fun: Callable, primals, series):
    """`jet(fun, primals, series, factorial_scaled=False)` with reverse mode through the
    pass as it is, not through `taylax._fallback.overflow_safe`: for callers whose
    coefficients cannot overflow, such as an ODE's Taylor steps, whose size is chosen
    from them. The wrapper cost the integrator's gradient programs a quarter to a third
    more compile time (docs/EMISSION.md, "Overflow")."""
    return _jet(fun, primals, series, False, safe=False)


def _jet(fun: Callable, primals, series, factorial_scaled: bool, safe: bool):
    if not isinstance(primals, (tuple, list)) or not isinstance(series, (tuple, list)):
        raise TypeError("`primals` and `series` must be tuples or lists, as in jax's `jet`.")
    if len(primals) != len(series):
        raise ValueError(
            f"`series` must have one entry per primal: got {len(series)} series for "
            f"{len(primals)} primals."
        )
    lengths = {len(terms) for terms in series}
    if len(lengths) > 1:
        raise ValueError("jet terms have inconsistent lengths for different arguments.")
    order = lengths.pop() if lengths else 0
    primals = [jnp.asarray(p) for p in primals]
    if order:  # an integer primal with terms has no series to carry them
        check_inexact(primals, "primals")
    for i, (p, terms) in enumerate(zip(primals, series)):
        for j, t in enumerate(terms):
            if jnp.shape(t) != jnp.shape(p):
                raise ValueError(
                    f"term {j} for argument {i} has shape {jnp.shape(t)}, but the primal has "
                    f"shape {jnp.shape(p)}."
                )
    closed, out_tree = trace_leaves(fun, tuple(primals), "taylax.jet")
    program, consts = cached_program(
        closed,
        ("jet", order, bool(factorial_scaled), safe),
        fun,
        _jet_program(order, factorial_scaled, safe),
    )
    terms_in = [list(terms) for terms in series] if order else [[] for _ in series]
    primals_out, coeffs = program(consts, primals, terms_in)
    terms = [[c[k] for k in range(order)] for c in coeffs]
    return jax.tree.unflatten(out_tree, primals_out), jax.tree.unflatten(out_tree, terms)
