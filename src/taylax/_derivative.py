"""The order-raising derivative primitive, and `derivative` / `jacfwd` built on it.

`derivative_p` carries the jaxpr of the function it differentiates instead of
first-order code for the derivative. Its operands are `(*consts, t)`; for each
output `y_i` of the jaxpr it returns

    d^{n_i}/ds^{n_i} y_i(*consts, t + s)  at s = 0,   n_i = orders[i],

with `s` real. `t` is a scalar, except after `vmap`, whose batch elements are
independent, so the all-ones direction gives every element its own derivative.

How it is evaluated:

- On its own (impl and lowering): one Taylor pass of order `max(orders)`.
- Inside an enclosing Taylor pass of order `K` whose series reaches `t`: the
  sub-program is evaluated once at order `K + n` along a unit seed, and the
  n-th derivative's series is read off by shifting (`(f')_m = (m+1) f_{m+1}`)
  and composing with the series of `t`. A `jit` call of the same sub-program on
  the same inputs in the same jaxpr shares that one evaluation (see
  `_interpret._shared_call_groups`). So `k` nested derivatives, also through a
  user's jitted recursion, cost one pass of order `k`.
- When the constants move with the enclosing variable too, the derivative is
  expanded into its Taylor pass and that program is interpreted (correct, and
  polynomial, but no longer collapsed).
- `jax.jvp`/`grad`: through the Taylor pass itself. `vmap`: the primitive is
  re-bound on the vmapped sub-program, so it stays collapsible.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import math
import operator
import weakref
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from . import _compat, _policy, _rules, _series  # noqa: F401  (_rules registers the built-in rules)
from ._interpret import (
    eval_jaxpr_series,
    register_rule,
    shared_call_evaluator,
    shared_call_keys,
)
from ._programs import (
    Program,
    ProgramCache,
    Uncacheable,
    check_order,
    const_key,
    jaxpr_token,
    trace_scalar,
)
from ._rules._calls import as_outputs, from_outputs, jit_per_jaxpr
from ._series import Series, along_line, compose, pad_degree, unit_seed

derivative_p = _compat.Primitive("taylax_derivative")
derivative_p.multiple_results = True


# --------------------------------------------------------------------------
# Evaluation on its own: one Taylor pass.
# --------------------------------------------------------------------------


def _scaled_coefficient(y: Series, n: int, scale: float):
    """`n! y_n / scale^n`, the n-th derivative, from the series of a pass along `scale`
    times the unit direction (zero past its degree)."""
    if n > y.degree:
        return jnp.zeros(y.shape, y.dtype)
    c = y.primal if n == 0 else y.coeffs[n]
    if scale != 1.0:
        return _series.times_exact(c, Fraction(math.factorial(n)) / Fraction(scale) ** n)
    return c * np.asarray(math.factorial(n), c.dtype) if n > 1 else c


def evaluate(*args, program: Program, orders: tuple[int, ...]):
    """The primitive's meaning: one Taylor pass of order `max(orders)` along `t + s`."""
    jaxpr = program.closed
    *consts, t = args
    top = max(orders, default=0)
    if top == 0:
        return _compat.jaxpr_as_fun(jaxpr)(*consts, t)
    outs, scale = _unit_seed_series(jaxpr, consts, t, top)
    return [_scaled_coefficient(y, n, scale) for y, n in zip(outs, orders, strict=True)]


# Compiled programs of eager calls, keyed by structure (`taylax._programs`).
_EAGER_DERIVATIVES = ProgramCache()


def sub_jaxprs(eqn: _compat.JaxprEqn) -> list[_compat.Jaxpr]:
    """The sub-jaxprs of an equation, a derivative's program included."""
    subs = [_compat.open_jaxpr(j) for j in _compat.jaxprs_in_params(eqn.params)]
    if eqn.primitive is derivative_p:
        subs.append(_compat.open_jaxpr(eqn.params["program"].closed))
    return subs


def distinct_jaxprs(jaxpr: _compat.Jaxpr) -> Iterator[_compat.Jaxpr]:
    """`jaxpr` and every sub-jaxpr under it (`sub_jaxprs`), each distinct object once: a
    sub-program reached from many call sites (each level of a jitted recursion reaches
    the one below twice) is walked once."""
    seen: set[int] = set()
    stack = [jaxpr]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for eqn in current.eqns:
            stack.extend(sub_jaxprs(eqn))


def _small_values(program: Program, limit: int) -> bool:
    """Whether every value of `program` (its inputs, and every equation's outputs in it
    and its sub-programs) has at most `limit` elements."""
    for jaxpr in distinct_jaxprs(_compat.open_jaxpr(program.closed)):
        values = [*jaxpr.invars, *(v for e in jaxpr.eqns for v in e.outvars)]
        if any(math.prod(getattr(v.aval, "shape", ())) > limit for v in values):
            return False
    return True


def _final_shapes_policy(program: Program):
    """The policy for evaluating `program` where its shapes are final (lowered, or
    compiled for an eager call; not under a transformation that batches it later): the
    one in force, without rows where every value is small (`nested_rowless_max_elements`;
    docs/EMISSION.md, "Nested derivatives of small values")."""
    policy = _policy.current()
    limit = policy.nested_rowless_max_elements
    if limit is None or policy.rows_max_order == 0 or not _small_values(program, limit):
        return contextlib.nullcontext()
    return _policy.pass_scope(dataclasses.replace(policy, rows_max_order=0, loop_rows_max_order=0))


def evaluate_final(*args, program: Program, orders: tuple[int, ...]):
    """`evaluate` where the shapes are final: lowered, compiled for an eager call, or
    expanded by `taylax.emitted_jaxpr` (not under a transformation that batches the pass
    afterwards), with `_final_shapes_policy`."""
    with _final_shapes_policy(program):
        return evaluate(*args, program=program, orders=orders)


def _impl(*args, program, orders):
    # Reached by eager calls only (under jit the primitive is lowered); a fresh trace of
    # the same function is a new jaxpr object, so look the program up by structure.
    try:
        key = (
            jaxpr_token(_compat.open_jaxpr(program.closed)),
            tuple(const_key(c) for c in program.closed.consts),
            orders,
            _policy.current(),
        )
    except Uncacheable:
        key = None

    def make():
        return jax.jit(functools.partial(evaluate_final, program=program, orders=orders))

    return _EAGER_DERIVATIVES.get(key, make)(*args)


def _abstract_eval(*avals, program, orders):
    del avals, orders
    return list(program.closed.out_avals)


derivative_p.def_impl(_impl)
derivative_p.def_abstract_eval(_abstract_eval)


@contextlib.contextmanager
def _collection_paused():
    """Pause Python's cyclic garbage collector, restoring its previous state on exit.

    Lowering a derivative traces its Taylor pass, which allocates many short-lived objects
    while JAX's caches keep a large heap alive, so generation-2 collections land inside it
    and walk that heap (docs/DERIVATIVES.md). Reference counting still frees everything
    acyclic at once; cycles wait for the next collection after the lowering.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_lower_evaluate = _compat.mlir.lower_fun(evaluate_final, multiple_results=True)


def _lower(ctx, *args, **params):
    with _collection_paused():
        return _lower_evaluate(ctx, *args, **params)


_compat.mlir.register_lowering(derivative_p, _lower)


def _jvp(primals, tangents, *, program, orders):
    # The derivative is a smooth function of (consts, t) computed by the Taylor
    # pass; differentiating that pass is exact (and transposable, for grad).
    tangents = [_compat.ad.instantiate_zeros(t) for t in tangents]
    fn = functools.partial(evaluate, program=program, orders=orders)
    return jax.jvp(fn, list(primals), tangents)


_compat.ad.primitive_jvps[derivative_p] = _jvp


def _batch(axis_data, args, dims, *, program, orders):
    in_axes = list(dims)  # None: not batched
    if all(d is None for d in in_axes):  # nothing batched: neither is the result
        return derivative_p.bind(*args, program=program, orders=orders), [None] * len(orders)
    # The vmap keeps the enclosing axis' name and size, so collectives over it in the
    # program (`psum(x, name)`, `axis_index(name)`) are batched here, as jax.vmap does.
    batched = jax.vmap(
        _compat.jaxpr_as_fun(program.closed),
        in_axes=in_axes,
        out_axes=0,
        axis_name=axis_data.name,
        axis_size=axis_data.size,
        spmd_axis_name=axis_data.spmd_name,
    )
    shapes = [jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)) for a in args]
    closed = jax.make_jaxpr(batched)(*shapes)
    sub, consts = _compat.consts_to_invars(closed)
    if consts:
        # vmap's own constants (e.g. an iota) come first, as in `derivative`.
        outs = derivative_p.bind(*consts, *args, program=Program(sub), orders=orders)
    else:
        outs = derivative_p.bind(*args, program=Program(sub), orders=orders)
    return outs, [0] * len(outs)


_compat.batching.fancy_primitive_batchers[derivative_p] = _batch


def _checkify(error, enabled_errors, *args, program, orders):
    # `jax.experimental.checkify` functionalizes `checkify.check`s (and its automatic
    # checks) equation by equation; one inside the differentiated function would reach
    # the lowering unchecked ("not functionalized"). Trace the Taylor pass, where the
    # checks stand on their primal values, and let checkify evaluate that program.
    closed = jax.make_jaxpr(functools.partial(evaluate, program=program, orders=orders))(*args)
    return _compat.checkify_jaxpr(closed, enabled_errors, error, *args)


_compat.register_checkify_rule(derivative_p, _checkify)


# --------------------------------------------------------------------------
# Inside an enclosing Taylor pass.
# --------------------------------------------------------------------------


_UNIT_SEED_CALLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# The highest order at which each sub-program will be evaluated, found when a
# derivative is bound (before anything is lowered). Every evaluation of a
# sub-program is rounded up to it, so that a jitted recursion `f_k = g(f_{k-1},
# f_{k-1}')` evaluates each `f_j` at ONE order: the chains of derivatives that
# each level's own primal program contains are then the same functions on the
# same inputs, which XLA's CSE merges, and the compiled program grows linearly
# with the depth instead of quadratically.
_NEEDED_ORDER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _note_needed_order(sub: _compat.ClosedJaxpr, order: int) -> None:
    if _NEEDED_ORDER.get(sub, -1) >= order:
        return
    _NEEDED_ORDER[sub] = order
    uses = []
    for eqn in _compat.open_jaxpr(sub).eqns:
        if eqn.primitive is derivative_p:
            needed = order + max(eqn.params["orders"], default=0)
            uses.append((needed, eqn.params["program"].closed))
        elif eqn.primitive is _compat.jit_p:
            uses.append((order, eqn.params["jaxpr"]))
    # Highest order first: a later use at a lower order then stops at once, so a
    # recursion referencing each level twice is walked once, not 2^depth times.
    for needed, inner in sorted(uses, key=lambda use: -use[0]):
        _note_needed_order(inner, needed)


def _unit_seed_series(
    sub: _compat.ClosedJaxpr, consts, t0, order: int
) -> tuple[list[Series], float]:
    """Series of `sub(*consts, t0 + h u)` in `u` up to (at least) `order`, and `h`.

    One jitted Taylor pass per (sub-program, order), cached, so a sub-program
    reached from many places is traced once; the seed is built inside, where
    its direction is known to be exactly `h`: 1, or at high orders the power of two
    `_series.derivative_scale` that keeps the coefficients in the dtype's range.
    """
    order = max(order, _NEEDED_ORDER.get(sub, 0))
    _series.check_order_for_dtype(order, jnp.result_type(t0), "taylax.derivative")
    scale = _series.derivative_scale(order, jnp.result_type(t0))

    def taylor_call(sub, *args):
        *consts, t0 = args
        inputs = [Series.constant(c) for c in consts] + [Series(unit_seed(t0, scale))]
        return as_outputs(eval_jaxpr_series(*_compat.closed_parts(sub), inputs, order))

    key = (order, len(consts), scale)
    fn = jit_per_jaxpr(_UNIT_SEED_CALLS, sub, key, taylor_call, f"taylor_derivative_{order}")
    return from_outputs(fn(*consts, t0), sub.out_avals), scale


def _shifted(a: Series, n: int, order: int, scale: float = 1.0, direction: float = 1.0):
    """`d_m = f^(n+m)(t0) direction^m / m!` for m = 0..order, from the coefficients
    `a_j = f^(j)(t0) scale^j / j!` of a pass along `scale` times the unit direction."""
    if n > a.degree:
        return None
    coeffs = pad_degree(a.coeffs, n + order)
    if scale != 1.0 or direction != 1.0:
        # Exact rational ratios applied without leaving the dtype's range on the way.
        h, v = Fraction(scale), Fraction(direction)
        ratios = [Fraction(math.perm(n + m, n)) * v**m / h ** (n + m) for m in range(order + 1)]
        return _series.times_exact(coeffs[n:], ratios)
    if n == 0:
        # No shift: a slice, which XLA does not copy. (The identity as a product would
        # cost a dot kernel per level, each compiled: docs/DERIVATIVES.md.)
        return coeffs
    m = np.arange(order + 1)
    ratio = np.array([math.perm(n + k, n) for k in m], dtype=np.float64)  # (n+m)!/m!
    if coeffs[0].size <= _policy.current().shift_by_product_max_size:
        # As a product with a constant (order+1, n+order+1) matrix: XLA materializes a dot
        # instead of fusing the shift, so a chain of nested derivatives (each level a
        # shift of the next) does not become one fused expression per consumer, whose
        # size (and compile time) would grow with the depth of the chain.
        shift = np.zeros((order + 1, n + order + 1), np.float64)
        shift[m, n + m] = ratio
        return jnp.tensordot(jnp.asarray(shift, coeffs.dtype), coeffs, axes=1)
    shape = (order + 1,) + (1,) * (coeffs.ndim - 1)
    return coeffs[n:] * ratio.reshape(shape).astype(coeffs.dtype)


def _evaluate_shared(
    order: int, sub: _compat.ClosedJaxpr, xs: Sequence[Series], member_orders
) -> list[list[Series]] | None:
    """One evaluation of `sub` serving every member (a jit call has orders all 0).

    Applies when only `t` carries a series and `t` is a scalar: then with
    `f(t0 + u) = sum_j a_j u^j`, the n-th derivative along the enclosing
    variable is `sum_m a_{n+m} (n+m)!/m! (t(s) - t0)^m`: a shift of one series
    of order `K + n`, composed with `t`'s series (a scaling when `t` is affine).
    """
    *consts, t = xs
    if t.is_constant or t.shape != () or any(not c.is_constant for c in consts):
        return None
    top = max(max(o, default=0) for o in member_orders)
    a, scale = _unit_seed_series(sub, [c.primal for c in consts], t.primal, order + top)
    # A known direction (the enclosing pass's own scale, say) goes into the shift's
    # ratios: `f^(n+m)/m!` alone can leave the dtype's range where the product does not.
    direction = _series.line_direction(t.coeffs) if t.degree == 1 else None
    if isinstance(direction, complex):
        direction = None
    result = []
    for orders in member_orders:
        outs = []
        for y, n in zip(a, orders, strict=True):
            d = _shifted(y, n, order, scale, 1.0 if direction is None else direction)
            if d is None:
                outs.append(Series.constant(jnp.zeros(y.shape, y.dtype)))
            elif direction is not None:
                outs.append(Series(d))
            elif t.degree == 1:
                outs.append(Series(along_line(t.coeffs, d, order)))
            else:
                outs.append(Series(compose(t.coeffs, d, order)))
        result.append(outs)
    return result


def _evaluate_group(order, sub, xs, member_orders):
    # A jit call on a seed is cheapest evaluated directly; share only then.
    if xs[-1].degree != 1:
        return None
    return _evaluate_shared(order, sub, xs, member_orders)


shared_call_evaluator.append(_evaluate_group)
shared_call_keys[derivative_p] = lambda eqn: (eqn.params["program"].closed, eqn.params["orders"])
shared_call_keys[_compat.jit_p] = lambda eqn: (eqn.params["jaxpr"], (0,) * len(eqn.outvars))


@register_rule(derivative_p)
def _derivative_rule(order, *xs, program, orders):
    shared = _evaluate_shared(order, program.closed, xs, [orders])
    if shared is not None:
        return shared[0]
    # The constants move too: interpret the derivative's own Taylor pass.
    primals = [x.primal for x in xs]
    fn = functools.partial(evaluate, program=program, orders=orders)
    closed = jax.make_jaxpr(fn)(*primals)
    return eval_jaxpr_series(*_compat.closed_parts(closed), list(xs), order)


# --------------------------------------------------------------------------
# Binding: trace, canonicalize, bind.
# --------------------------------------------------------------------------


def _forwards_all(jaxpr: _compat.Jaxpr) -> _compat.JaxprEqn | None:
    """The single equation of `jaxpr` when it maps the inputs straight to the outputs."""
    if len(jaxpr.eqns) != 1:
        return None
    eqn = jaxpr.eqns[0]
    if list(eqn.invars) != list(jaxpr.invars) or list(eqn.outvars) != list(jaxpr.outvars):
        return None
    return eqn


def _canonical(sub: _compat.ClosedJaxpr, orders: tuple[int, ...]):
    """Peel wrappers so that equal sub-programs are the same object.

    `derivative(g)` where `g` is one jit call becomes a derivative of the jitted
    program itself (shared with the direct call of it), and a derivative of a
    derivative adds the orders: `derivative(derivative(f))` is one primitive.
    """
    while not sub.consts:
        eqn = _forwards_all(_compat.open_jaxpr(sub))
        if eqn is None:
            break
        if eqn.primitive is _compat.jit_p:
            sub = eqn.params["jaxpr"]
        elif eqn.primitive is derivative_p:
            inner = eqn.params["orders"]
            orders = tuple(a + b for a, b in zip(orders, inner, strict=True))
            sub = eqn.params["program"].closed
        else:
            break
    return sub, orders


def _bind(sub: _compat.ClosedJaxpr, consts: list, t, orders: tuple[int, ...]) -> list:
    sub, orders = _canonical(sub, orders)
    _note_needed_order(sub, max(orders, default=0))
    return derivative_p.bind(*consts, t, program=Program(sub), orders=orders)


# --------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------


def _check_scalar(t, holomorphic: bool, name: str, api: str):
    if isinstance(t, (list, tuple, dict)) or not hasattr(jnp.asarray(t), "dtype"):
        raise TypeError(f"`{name}` of `{api}` must be a scalar array, got {type(t).__name__}.")
    t = jnp.asarray(t)
    if t.ndim != 0:
        raise ValueError(
            f"`{api}` differentiates with respect to a scalar, but `{name}` has shape {t.shape}. "
            "For array inputs use `taylax.jacfwd` (a Jacobian) or `taylax.derivatives(f, k)(x, v)` "
            "(derivatives along a direction `v`)."
        )
    dtype = t.dtype
    if holomorphic and not jnp.issubdtype(dtype, np.complexfloating):
        raise TypeError(
            f"`{api}` with holomorphic=True requires a complex `{name}`, got {dtype}. Convert it, "
            "e.g. `t.astype(complex)`, or drop holomorphic=True."
        )
    if not holomorphic and not jnp.issubdtype(dtype, np.floating):
        hint = (
            " For a holomorphic function of a complex variable pass holomorphic=True."
            if jnp.issubdtype(dtype, np.complexfloating)
            else " Convert it first, e.g. `t.astype(float)`."
        )
        raise TypeError(f"`{api}` needs a real floating-point `{name}`, got {dtype}.{hint}")
    return t


def _check_outputs(sub: _compat.ClosedJaxpr, orders, api: str):
    for aval, n in zip(sub.out_avals, orders):
        if n > 0 and not jnp.issubdtype(aval.dtype, np.inexact):
            raise TypeError(
                f"`{api}` can only differentiate floating-point or complex outputs, but the "
                f"function returns an array of dtype {aval.dtype}. Return `x.astype(float)` "
                "or leave integer values out of the differentiated output."
            )


def derivative(fun: Callable, order: int = 1, *, holomorphic: bool = False) -> Callable:
    """The `order`-th derivative of `fun` with respect to its first (scalar) argument.

    **Arguments:**

    - `fun`: a function `fun(t, *args, **kwargs)` of a scalar `t`, returning any
      pytree of floating-point or complex arrays.
    - `order`: the derivative order `n >= 0` (a Python integer).
    - `holomorphic`: pass True to differentiate a holomorphic function of a
      complex `t` (as in `jax.jacfwd`); a real `t` is required otherwise.

    **Returns:** a function with `fun`'s signature returning a pytree like
    `fun(t)` whose leaves are `d^n/dt^n` of `fun`'s leaves.

    Unlike nesting `jax.jacfwd`, nesting `derivative` does not multiply the
    program: `derivative` binds one primitive that carries `fun`'s program, and
    an enclosing Taylor evaluation raises its order instead of differentiating
    first-order code, so `k` nested derivatives (also through a jitted user
    recursion) cost one Taylor pass of order `k`. It works under `jax.jit`,
    `jax.vmap`, `jax.jvp` and `jax.grad`.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda t: 0.3 * jnp.sin(t) * t**10
        g = f
        for _ in range(10):
            g = taylax.derivative(g)
        g(1.1)  # == taylax.derivative(f, 10)(1.1) == taylax.derivatives(f, 10)(1.1)[10]
        ```
    """

    order = check_order(order)

    def derivative_fun(t, *args, **kwargs):
        t = _check_scalar(t, holomorphic, "t", "taylax.derivative")
        sub, consts, out_tree = trace_scalar(
            lambda t: fun(t, *args, **kwargs), t, "taylax.derivative"
        )
        orders = (order,) * len(sub.out_avals)
        _check_outputs(sub, orders, "taylax.derivative")
        return jax.tree.unflatten(out_tree, _bind(sub, consts, t, orders))

    return _wraps(derivative_fun, fun)


def _wraps(wrapper: Callable, fun: Callable) -> Callable:
    """`functools.wraps` without `__wrapped__`, with `fun`'s signature computed once.

    With `__wrapped__`, `inspect.signature` (which `jax.jit` calls) walks the whole chain
    of `jax.jit(derivative(jax.jit(derivative(...))))` at every level, so its work grows
    geometrically with the depth (docs/DERIVATIVES.md).
    """
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, name, getattr(fun, name))
        except (AttributeError, TypeError):
            pass
    try:
        wrapper.__signature__ = inspect.signature(fun)
    except (TypeError, ValueError):  # a callable without a signature keeps the wrapper's own
        pass
    return wrapper


def _is_scalar_leaf(x) -> bool:
    if isinstance(x, (list, tuple, dict)) or x is None:
        return False
    try:
        return jnp.ndim(x) == 0 and jnp.issubdtype(jnp.result_type(x), np.inexact)
    except TypeError:
        return False


def jacfwd(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
) -> Callable:
    """Drop-in replacement for `jax.jacfwd` whose nesting collapses for scalar inputs.

    **Arguments:** as `jax.jacfwd`:

    - `fun`: the function to differentiate.
    - `argnums`: an int or a sequence of ints, the positional arguments to
      differentiate with respect to.
    - `has_aux`: whether `fun` returns `(output, aux)`; `aux` is returned as is.
    - `holomorphic`: whether `fun` is holomorphic (complex inputs and outputs).

    **Returns:** a function returning the Jacobian exactly as `jax.jacfwd`
    does (and `(jacobian, aux)` with `has_aux`).

    When every differentiated argument is a scalar, the Jacobian is
    `taylax.derivative` of order 1, so `taylax.jacfwd` nested k times (e.g. in
    a recursion through `jax.jit`) costs one Taylor pass of order k instead of
    3^k first-order passes. Array arguments are handed to `jax.jacfwd`: the
    result is the same Jacobian, and nesting over them does not collapse.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        d2 = taylax.jacfwd(taylax.jacfwd(jnp.sin))(0.5)   # -sin(0.5)
        ```
    """
    single, nums = _check_argnums(argnums)

    def jac_fun(*args, **kwargs):
        if any(i >= len(args) or i < -len(args) for i in nums):
            raise ValueError(
                f"`argnums` {argnums!r} refers to positional arguments that were not passed: "
                f"the function was called with {len(args)} positional arguments."
            )
        if not all(_is_scalar_leaf(args[i]) for i in nums):
            argnums_ = nums[0] if single else nums
            return jax.jacfwd(fun, argnums_, has_aux=has_aux, holomorphic=holomorphic)(
                *args, **kwargs
            )
        per_arg = []
        aux = None
        for i in nums:
            i %= len(args)  # a negative index counts from the end, as in jax.jacfwd
            t = _check_scalar(args[i], holomorphic, f"args[{i}]", "taylax.jacfwd")

            def at(t, i=i):
                return fun(*args[:i], t, *args[i + 1 :], **kwargs)

            jac, aux = _first_derivative(at, t, has_aux, holomorphic)
            per_arg.append(jac)
        if single:
            jac = per_arg[0]
        else:
            jac = jax.tree.map(lambda *js: tuple(js), *per_arg)
        return (jac, aux) if has_aux else jac

    return jac_fun


def _check_argnums(argnums) -> tuple[bool, tuple[int, ...]]:
    """(whether `argnums` is a single index, the indices), accepting what jax.jacfwd accepts."""
    try:
        return True, (operator.index(argnums),)
    except TypeError:
        pass
    try:
        nums = tuple(operator.index(i) for i in argnums)
    except TypeError:
        raise TypeError(
            "`argnums` of `taylax.jacfwd` must be an integer or a sequence of integers, got "
            f"{argnums!r}."
        ) from None
    if not nums:
        raise ValueError(
            "`argnums` of `taylax.jacfwd` is empty: pass the index (or indices) of the "
            "positional arguments to differentiate with respect to, e.g. `argnums=0`."
        )
    return False, nums


def _first_derivative(fun: Callable, t, has_aux: bool, holomorphic: bool):
    aux_tree_box = []

    def split(t):
        out = fun(t)
        if not has_aux:
            return out
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            raise TypeError(
                "`taylax.jacfwd` with has_aux=True expects the function to return a pair "
                f"(output, aux), got {type(out).__name__}."
            )
        main, aux = out
        aux_leaves, aux_tree = jax.tree.flatten(aux)
        aux_tree_box.append((aux_tree, len(aux_leaves)))
        return main, aux_leaves

    sub, consts, out_tree = trace_scalar(split, t, "taylax.jacfwd")
    n_out = len(sub.out_avals)
    n_aux = aux_tree_box[0][1] if has_aux else 0
    orders = (1,) * (n_out - n_aux) + (0,) * n_aux
    _check_outputs(sub, orders, "taylax.jacfwd")
    if holomorphic:
        for aval, n in zip(sub.out_avals, orders):
            if n and not jnp.issubdtype(aval.dtype, np.complexfloating):
                raise TypeError(
                    "`taylax.jacfwd` with holomorphic=True requires outputs with complex dtype, "
                    f"but got {aval.dtype}."
                )
    outs = _bind(sub, consts, t, orders)
    tree = jax.tree.unflatten(out_tree, outs)
    if not has_aux:
        return tree, None
    main, aux_leaves = tree
    return main, jax.tree.unflatten(aux_tree_box[0][0], aux_leaves)
