"""Public entry points: `taylor`, `derivatives`, `jet`."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _rules  # noqa: F401  (registers the built-in rules)
from ._interpret import eval_jaxpr_series
from ._series import Series, factorials, pad_degree


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


def _check_inexact(leaves, what: str) -> None:
    for leaf in leaves:
        dtype = jnp.result_type(leaf)
        if not jnp.issubdtype(dtype, np.inexact):
            raise TypeError(
                f"`{what}` must hold floating-point or complex arrays to be differentiated, got "
                f"dtype {dtype}. Convert it first, e.g. `x.astype(float)`."
            )


def _flat_jaxpr(fun: Callable, args: tuple, kind: str):
    """Trace `fun(*args)` to a closed jaxpr over flat leaves; return it and the output tree."""
    flat_args, in_tree = jax.tree.flatten(args)
    out_tree_box = []

    def flat_fun(*leaves):
        out = fun(*jax.tree.unflatten(in_tree, leaves))
        out_leaves, out_tree = jax.tree.flatten(out)
        out_tree_box.append(out_tree)
        return out_leaves

    closed = jax.make_jaxpr(flat_fun)(*flat_args)
    return closed, flat_args, out_tree_box[0]


def run_series(fun: Callable, args: tuple, in_series: list, order: int):
    """Evaluate `fun(*args)` with stacked input series (one per leaf) at `order`.

    Returns the output tree and a list of output `Series`.
    """
    closed, _, out_tree = _flat_jaxpr(fun, args, "fun")
    outs = eval_jaxpr_series(closed.jaxpr, closed.consts, in_series, order)
    return out_tree, outs


def _seeds(primals, directions, order: int) -> list[Series]:
    if order == 0:
        return [Series.constant(p) for p in primals]
    return [Series(jnp.stack([p, jnp.asarray(v, p.dtype)])) for p, v in zip(primals, directions)]


def _full_coeffs(s: Series, order: int):
    return pad_degree(s.coeffs, order)


def _jit_on_fun(impl):
    """`jax.jit(impl)` with the user function and the order static, falling back to a plain
    call when the function is not hashable (jit caches on the function's identity)."""
    jitted = jax.jit(impl, static_argnums=(0, 1))

    @functools.wraps(impl)
    def call(fun, order, *args):
        try:
            hash(fun)
        except TypeError:
            return impl(fun, order, *args)
        return jitted(fun, order, *args)

    return call


def _taylor_impl(fun, order, x, v):
    x_leaves, in_tree = jax.tree.flatten(x)
    v_leaves = jax.tree.leaves(v)
    seeds = _seeds(x_leaves, v_leaves, order)
    out_tree, outs = run_series(
        lambda *a: fun(jax.tree.unflatten(in_tree, a)), tuple(x_leaves), seeds, order
    )
    primal_out = [o.primal for o in outs]
    coeffs = [_full_coeffs(o, order)[1:] for o in outs]
    return jax.tree.unflatten(out_tree, primal_out), jax.tree.unflatten(out_tree, coeffs)


_taylor_jit = _jit_on_fun(_taylor_impl)


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
        _check_inexact(jax.tree.leaves(x), "x")
        v = _check_direction(x, v)
        return _taylor_jit(fun, order, x, v)

    return taylor_fun


def _derivatives_impl(fun, order, x, v):
    primal_out, coeffs = _taylor_impl(fun, order, x, v)

    def stack(p, c):
        scale = factorials(order, p.ndim, p.dtype)[1:] if order else None
        rest = c * scale.astype(c.dtype) if order else c
        return lax.concatenate([p[None], rest], 0)

    return jax.tree.map(stack, primal_out, coeffs)


_derivatives_jit = _jit_on_fun(_derivatives_impl)


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
        _check_inexact(leaves, "x")
        if v is None:
            if len(leaves) != 1 or jnp.ndim(leaves[0]) != 0:
                raise ValueError(
                    "`v` (the direction) is required when `x` is not a scalar: pass an array "
                    "(or pytree) shaped like `x`, e.g. `derivatives(f, k)(x, jnp.ones_like(x))`."
                )
            v = jax.tree.map(lambda leaf: jnp.ones_like(leaf), x)
        v = _check_direction(x, v)
        return _derivatives_jit(fun, order, x, v)

    return derivatives_fun


def _jet_impl(fun, order, primals, stacked):
    series = [Series.constant(p) if s is None else Series(s) for p, s in zip(primals, stacked)]
    out_tree, outs = run_series(fun, tuple(primals), series, order)
    return (
        jax.tree.unflatten(out_tree, [o.primal for o in outs]),
        [_full_coeffs(o, order)[1:] for o in outs],
        out_tree,
    )


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
    stacked = []
    for i, (p, terms) in enumerate(zip(primals, series)):
        for j, t in enumerate(terms):
            if jnp.shape(t) != jnp.shape(p):
                raise ValueError(
                    f"term {j} for argument {i} has shape {jnp.shape(t)}, but the primal has "
                    f"shape {jnp.shape(p)}."
                )
        if order == 0:
            stacked.append(None)
            continue
        c = jnp.stack([p] + [jnp.asarray(t, p.dtype) for t in terms])
        if factorial_scaled:
            c = c / factorials(order, p.ndim, p.dtype).astype(c.dtype)
        stacked.append(c)
    primals_out, coeffs, out_tree = _jet_impl(fun, order, primals, stacked)
    if factorial_scaled and order:
        coeffs = [c * factorials(order, c.ndim - 1, c.dtype)[1:].astype(c.dtype) for c in coeffs]
    terms = [[c[k] for k in range(order)] for c in coeffs]
    return primals_out, jax.tree.unflatten(out_tree, terms)
