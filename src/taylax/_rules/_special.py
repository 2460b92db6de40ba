"""Rules for special functions and the remaining `jax.lax` primitives.

* igamma, igammac, regularized_incomplete_beta: `y' = g(x) x'` with `g` an
  elementary function of `x` (the one JAX's jvp uses), integrated;
* bessel_i0e, bessel_i1e: the coupled ODE JAX's jvps define,
  `i0e' = (i1e - sign(x) i0e) x'`, `i1e' = (i0e - (sign(x) + 1/x) i1e) x'`,
  solved in one `fori_loop` (with JAX's constant slope 1/2 for i1e at |x| <= eps);
* zeta with respect to `q`: `d^m/dq^m zeta(x, q) = (-1)^m (x)_m zeta(x + m, q)`;
* choices made by the primal (scatter-max/min, approx_top_k, the windowed
  select-and-gather/scatter pair): every coefficient goes through the same
  choice, exactly as JAX's jvp routes the tangent;
* general `reduce` (a user's reducer): a tree of pairwise reductions with the
  reducer evaluated on scalar series, as JAX's jvp does with (primal, tangent);
* `checkpoint_name` and `stage` are the identity on every coefficient;
  `bitcast_convert_type` has a zero derivative in JAX (its series is its primal).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat, _series
from .._interpret import eval_jaxpr_series, register_rule
from .._series import Series
from ._arithmetic import log_series
from ._common import (
    defconstant,
    deflinear,
    is_inexact,
    over_element_chunks,
    pad_for_window,
    window_output_shape,
)
from ._transcendental import integral


def _derivative_only_in(prim, argument: str, other: str) -> NotImplementedError:
    return NotImplementedError(
        f"taylax differentiates `{prim.name}` with respect to `{argument}` only, as JAX's own "
        f"jvp does beyond first order; `{other}` must not depend on the differentiated input."
    )


def _exp_series(w, w0, order: int):
    """`exp(w)` for a stacked series `w` (degree `order`), with primal `exp(w0)`."""
    (e,) = _series.linear_ode(w, [lax.exp(w0)], [[1]], order)
    return e


def _log_series_of(c, y0, order: int):
    """`log` of the stacked series `c` at `order`, with primal `y0` (order 0: just `y0`)."""
    if order == 0:
        return jnp.asarray(y0)[None]
    return log_series(c, y0, order)


# --------------------------------------------------------------------------------------------
# Incomplete gamma and beta functions: y' = g(x) x' with g elementary.
# --------------------------------------------------------------------------------------------


def _incomplete_gamma(prim, sign: float):
    def rule(order, a, x, **params):
        y0 = _series.once(prim.bind(a.primal, x.primal, **params))
        a0, x0 = a.primal, x.primal
        # JAX: d/dx igamma(a, x) = exp(-x + (a - 1) log(x) - lgamma(a)).
        w0 = -x0 + (a0 - 1) * lax.log(x0) - lax.lgamma(a0)
        if not a.is_constant:
            if order > 1:
                raise _derivative_only_in(prim, "x", "a")
            # Order 1 is what JAX's jvp gives: igamma_grad_a has no derivative of its own.
            slope_a = sign * lax.igamma_grad_a(a0, x0)
            y1 = slope_a * _series.pad_degree(a.coeffs, 1)[1]
            if not x.is_constant:
                y1 = y1 + sign * lax.exp(w0) * x.coeffs[1]
            return Series(_series.stack_primal(y0, y1[None]))
        low = order - 1
        c = _series.pad_degree(x.coeffs, low)
        w = _series.with_primal((a0 - 1) * _log_series_of(c, lax.log(x0), low) - c, w0)
        return integral(x, sign * _exp_series(w, w0, low), y0, order)

    register_rule(prim)(over_element_chunks(rule))


_incomplete_gamma(lax.igamma_p, 1.0)
_incomplete_gamma(lax.igammac_p, -1.0)


@register_rule(lax.regularized_incomplete_beta_p)
@over_element_chunks
def _regularized_incomplete_beta(order, a, b, x, **params):
    if not (a.is_constant and b.is_constant):
        # JAX's jvp raises for these too.
        raise _derivative_only_in(lax.regularized_incomplete_beta_p, "x", "a` or `b")
    a0, b0, x0 = a.primal, b.primal, x.primal
    y0 = _series.once(lax.regularized_incomplete_beta_p.bind(a0, b0, x0, **params))
    # JAX: d/dx betainc(a, b, x) = exp((b - 1) log1p(-x) + (a - 1) log(x) - lbeta(a, b)).
    lbeta = lax.lgamma(a0) + lax.lgamma(b0) - lax.lgamma(a0 + b0)
    w0 = (b0 - 1) * lax.log1p(-x0) + (a0 - 1) * lax.log(x0) - lbeta
    low = order - 1
    c = _series.pad_degree(x.coeffs, low)
    one_minus = _series.with_primal(-c, 1 - x0)
    w = (b0 - 1) * _log_series_of(one_minus, lax.log1p(-x0), low) + (a0 - 1) * _log_series_of(
        c, lax.log(x0), low
    )
    w = _series.with_primal(w, w0)
    return integral(x, _exp_series(w, w0, low), y0, order)


# --------------------------------------------------------------------------------------------
# Exponentially scaled Bessel functions: one coupled recurrence.
# --------------------------------------------------------------------------------------------


def _bessel_pair(x: Series, order: int):
    """Series of `(i0e(x), i1e(x))`, as nested jvp of JAX's jvp rules computes them.

    `k I0_k = sum_m u_{k-1-m} (I1 - s I0)_m` and
    `k I1_k = sum_m u_{k-1-m} (I0 - s I1 - r I1)_m` with `u = x'`, `s = sign(x_0)`
    and `r = 1/x`; where `|x_0| <= eps`, JAX's i1e slope is the constant 1/2.
    """
    c = _series.pad_degree(x.coeffs, order)
    x0 = x.primal
    dtype = c.dtype
    tiny = jnp.abs(x0) <= jnp.finfo(dtype).eps
    safe = _series.with_primal(c, jnp.where(tiny, jnp.finfo(dtype).eps, x0))
    s = lax.sign(x0)
    u_source = _series.reversed_window_source(_series.derivative_series(c), order)
    r = _series.divide(jnp.ones((1,) + x0.shape, dtype), safe[:order], order - 1)
    r_source = _series.reversed_window_source(r, order)
    half = _series.fresh(jnp.full(x0.shape, 0.5, dtype), order, dtype)
    i0 = _series.fresh(lax.bessel_i0e(x0), order, dtype)
    i1 = _series.fresh(lax.bessel_i1e(x0), order, dtype)
    q = jnp.zeros_like(i1)  # (r * I1)_m, filled one coefficient per step

    def body(k, carry):
        i0, i1, q = carry
        kk = lax.convert_element_type(k, dtype)
        q = _series.set_coeff(q, _series.conv_at(r_source, order, i1, k - 1, order), k - 1)
        f0 = i1 - s * i0
        f1 = jnp.where(tiny, half, i0 - s * i1 - q)
        new_i0 = _series.conv_at(u_source, order, f0, k - 1, order) / kk
        new_i1 = _series.conv_at(u_source, order, f1, k - 1, order) / kk
        return _series.set_coeff(i0, new_i0, k), _series.set_coeff(i1, new_i1, k), q

    i0, i1, _ = _series.fori(order, body, (i0, i1, q))
    return i0, i1


def _bessel(prim, index: int):
    def rule(order, x, **params):
        return Series(_bessel_pair(x, order)[index])

    register_rule(prim)(over_element_chunks(rule))


_bessel(lax.bessel_i0e_p, 0)
_bessel(lax.bessel_i1e_p, 1)


# --------------------------------------------------------------------------------------------
# Hurwitz zeta with respect to q.
# --------------------------------------------------------------------------------------------


def _zeta_taylor_coeffs(s0, q0, order: int):
    """`d_m = (-1)^m (s)_m / m! zeta(s + m, q0)` for m = 0..order ((s)_m: rising factorial)."""
    shape = jnp.shape(q0)
    ms = _series.orders(order, len(shape), q0.dtype)
    s = jnp.broadcast_to(s0, shape)[None]
    steps = (s + ms[:-1]) / (-ms[1:])  # m-th step: -(s + m - 1) / m
    scale = jnp.cumprod(jnp.concatenate([jnp.ones((1,) + shape, q0.dtype), steps]), 0)
    return scale * lax.zeta(s + ms, jnp.broadcast_to(q0, (order + 1,) + shape))


@register_rule(lax.zeta_p)
@over_element_chunks
def _zeta(order, s, q, **params):
    if not s.is_constant:
        raise NotImplementedError(
            "taylax differentiates `lax.zeta(x, q)` with respect to `q` only (JAX defines no "
            "derivative of the primitive at all); `jax.scipy.special.zeta` has a custom jvp "
            "in both arguments, which taylax follows."
        )
    d = _zeta_taylor_coeffs(s.primal, q.primal, order)
    d = _series.with_primal(d, lax.zeta_p.bind(s.primal, q.primal, **params))
    if q.degree == 1:
        return Series(_series.along_line(q.coeffs, d, order))
    return Series(_series.compose(q.coeffs, d, order))


# --------------------------------------------------------------------------------------------
# Choices made by the primal.
# --------------------------------------------------------------------------------------------


def _by_linear_jvp(prim):
    """Register a primitive whose JAX jvp is linear in the tangents with weights fixed by the
    primals (max-like choices). Nested jvp then applies that same map to every higher
    derivative, so coefficient k is JAX's jvp applied to coefficient k (ties as JAX has them).
    """

    def rule(order, *xs, **params):
        del order
        primals = [x.primal for x in xs]
        which = [is_inexact(x) for x in xs]
        degree = max(x.degree for x in xs)

        def f(*inexact):
            it = iter(inexact)
            return prim.bind(*[next(it) if w else p for p, w in zip(primals, which)], **params)

        at = tuple(p for p, w in zip(primals, which) if w)
        rows = [_series.pad_degree(x.coeffs, degree) for x, w in zip(xs, which) if w]
        out = jax.vmap(lambda *t: jax.jvp(f, at, t)[1])(*rows)
        return Series(_series.with_primal(out, prim.bind(*primals, **params)))

    register_rule(prim)(rule)


_by_linear_jvp(lax.scatter_max_p)
_by_linear_jvp(lax.scatter_min_p)

# The transpose JAX uses for max pooling: linear in the first operand, the second (the
# operand that is compared) only chooses (`select_and_gather_add`: `_structural`).
deflinear(lax.select_and_scatter_add_p, lambda i, x: i == 0)


@register_rule(lax.approx_top_k_p)
def _approx_top_k(order, x, **params):
    del order
    values, indices = lax.approx_top_k_p.bind(x.primal, **params)
    axis = params["reduction_dimension"] % len(x.shape)
    index = jnp.broadcast_to(indices[None], (x.degree + 1,) + indices.shape)
    taken = jnp.take_along_axis(x.coeffs, index, axis=axis + 1)
    return [Series(_series.with_primal(taken, values)), Series.constant(indices)]


# `jax.ad_checkpoint.checkpoint_name`: the identity, named for remat policies.
@register_rule(_compat.name_p)
def _checkpoint_name(order, x, **params):
    del order
    return Series(_compat.name_p.bind(x.coeffs, **params))


# `lax.stage` (an identity that marks a value for staging) and bit reinterpretation, whose
# JAX derivative is zero.
if _compat.stage_p is not None:
    deflinear(_compat.stage_p)
defconstant(lax.bitcast_convert_type_p)


# --------------------------------------------------------------------------------------------
# General reductions with a user's reducer.
# --------------------------------------------------------------------------------------------


def _check_constant_inits(inits, api: str) -> None:
    if not all(i.is_constant for i in inits):
        raise NotImplementedError(
            f"taylax differentiates a general `{api}` only when its initial values do not "
            "depend on the differentiated input (JAX's jvp has the same limit)."
        )


def _series_reducer(jaxpr, consts, inexact, order: int):
    """A user's scalar reducer on scalar series, vmapped over one axis of every operand.

    Series operands are stacked `(order+1, n)` (mapped over axis 1), integer ones `(n,)`
    (axis 0); arguments are the left operands then the right ones, as the reducer takes them.
    """
    n_ops = len(inexact)

    def pair(*args):
        a, b = args[:n_ops], args[n_ops:]
        wrap = [Series(v) if w else Series.constant(v) for v, w in zip(a + b, inexact * 2)]
        outs = eval_jaxpr_series(jaxpr, consts, wrap, order)
        return [
            _series.pad_degree(o.coeffs, order) if w else o.primal for o, w in zip(outs, inexact)
        ]

    axes = [1 if w else 0 for w in inexact] * 2
    return jax.vmap(pair, in_axes=axes, out_axes=axes[:n_ops]), axes


@register_rule(lax.reduce_p)
def _reduce(order, *xs, computation, jaxpr, dimensions):
    """A tree of pairwise reductions, as JAX's jvp of `reduce` does it.

    The reduced axes are flattened into one; each level combines the two halves with the
    reducer evaluated on scalar series (vmapped over the elements). XLA's own reduction
    regions only take scalar code, so the reducer cannot run inside `lax.reduce`.
    """
    del computation
    n_ops = len(xs) // 2
    operands, inits = xs[:n_ops], xs[n_ops:]
    _check_constant_inits(inits, "lax.reduce")
    inexact = [is_inexact(x) for x in operands]
    shape = operands[0].shape
    kept = [d for d in range(len(shape)) if d not in dimensions]
    kept_shape = tuple(shape[d] for d in kept)
    size = int(np.prod([shape[d] for d in dimensions], dtype=int))
    width = int(np.prod(kept_shape, dtype=int))
    perm = tuple(dimensions) + tuple(kept)

    def flat(x: Series, w: bool):
        # (order+1, size, width) for a series, (size, width) for an integer operand.
        if not w:
            return lax.transpose(x.primal, perm).reshape(size, width)
        c = lax.transpose(_series.pad_degree(x.coeffs, order), (0,) + tuple(p + 1 for p in perm))
        return c.reshape(order + 1, size, width)

    combine, axes = _series_reducer(*_compat.closed_parts(jaxpr), inexact, order)

    def init_rows(init: Series, w: bool, count: int):
        row = jnp.broadcast_to(init.primal, (1, count, width))
        return _series.pad_degree(row, order) if w else row[0]

    vals = [flat(x, w) for x, w in zip(operands, inexact)]
    while size > 1:
        half = (size + 1) // 2
        first = [v[:, :half] if w else v[:half] for v, w in zip(vals, inexact)]
        second = [v[:, half:] if w else v[half:] for v, w in zip(vals, inexact)]
        if size % 2:
            second = [
                lax.concatenate([v, init_rows(i, w, 1)], 1 if w else 0)
                for v, i, w in zip(second, inits, inexact)
            ]
        merged = jax.vmap(combine, in_axes=axes, out_axes=axes[:n_ops])(*first, *second)
        vals, size = list(merged), half
    out = []
    for v, i, w in zip(vals, inits, inexact):
        if size == 0:  # an empty reduction is its initial value
            out.append(Series.constant(jnp.broadcast_to(i.primal, kept_shape)))
        elif w:
            out.append(Series(v.reshape((order + 1,) + kept_shape)))
        else:
            out.append(Series.constant(v.reshape(kept_shape)))
    return out


def _window_slices(
    x,
    pad_value,
    out_shape,
    *,
    window_dimensions,
    window_strides,
    padding,
    base_dilation,
    window_dilation,
):
    """`(prod(window_dimensions), *out_shape)`: window element `i` of every output position.

    The operand is dilated and padded with `pad_value` as `reduce_window` does; element
    `i` (row-major over the window) of all windows is one strided slice.
    """
    padded = pad_for_window(x, pad_value, padding, base_dilation)
    slices = []
    for offset in np.ndindex(*window_dimensions):
        start = [o * d for o, d in zip(offset, window_dilation)]
        limit = [s + (n - 1) * st + 1 for s, n, st in zip(start, out_shape, window_strides)]
        slices.append(lax.slice(padded, start, limit, window_strides))
    return jnp.stack(slices)


@register_rule(lax.reduce_window_p)
def _reduce_window(order, *xs, jaxpr, consts, **window):
    """`reduce_window` with a user's reducer: a left fold over the window, as XLA runs it.

    Every window element is one strided slice of the padded operand; the reducer, evaluated
    on scalar series (vmapped over the output positions), folds them into the initial value
    in row-major window order. JAX's jvp runs the same fold inside XLA's `reduce_window`, so
    ties of a max-like reducer resolve the same way. The program grows with the window
    size, not with the order.
    """
    n_ops = len(xs) // 2
    operands, inits = xs[:n_ops], xs[n_ops:]
    _check_constant_inits(inits, "lax.reduce_window")
    out_shape = window_output_shape(operands[0].shape, **window)
    inexact = [is_inexact(x) for x in operands]
    count = int(np.prod(out_shape, dtype=int))

    def stacked_windows(x: Series, init: Series, w: bool):
        # (window, order+1, count) for a series, (window, count) for an integer operand.
        primal = _window_slices(x.primal, init.primal, out_shape, **window)
        if not w:
            return primal.reshape(-1, count)
        rest = _series.pad_degree(x.coeffs, order)[1:]
        higher = jax.vmap(lambda c: _window_slices(c, 0, out_shape, **window), out_axes=1)(rest)
        return lax.concatenate([primal[:, None], higher], 1).reshape(
            primal.shape[0], order + 1, count
        )

    combine, _ = _series_reducer(jaxpr, consts, inexact, order)
    windows = [stacked_windows(x, i, w) for x, i, w in zip(operands, inits, inexact)]
    acc = []
    for init, w in zip(inits, inexact):
        row = jnp.broadcast_to(init.primal, (count,))
        acc.append(_series.pad_degree(row[None], order) if w else row)
    for element in range(windows[0].shape[0]):
        acc = list(combine(*acc, *[v[element] for v in windows]))
    return [
        Series(v.reshape((order + 1,) + out_shape)) if w else Series.constant(v.reshape(out_shape))
        for v, w in zip(acc, inexact)
    ]


@register_rule(_compat.random_gamma_p)
def _random_gamma(order, key, a, *, log_space):
    """A Gamma(a) sample as a function of `a`: `x' = G(x, a) a'`, solved coefficient by coefficient.

    `G` is JAX's own implicit derivative of the sample (what its jvp rule multiplies `da`
    by), so nested jvp differentiates the same equation. `x_m = [G(x, a) a']_{m-1} / m` needs
    `x` only up to `m - 1`: one Taylor pass of `G` per order, so this program grows linearly
    with the order (`G` has no closed-form series).
    """
    if not key.is_constant:
        raise NotImplementedError("A PRNG key cannot carry a Taylor series.")
    x0 = _compat.random_gamma_p.bind(key.primal, a.primal, log_space=log_space)
    grad = jax.make_jaxpr(lambda x, a: _compat.gamma_sample_grad(x, a, log_space))(x0, a.primal)
    a_coeffs = _series.pad_degree(a.coeffs, order).astype(x0.dtype)
    da = _series.derivative_series(a_coeffs)  # (a')_j, degree order - 1
    x = x0[None]
    for m in range(1, order + 1):
        ins = [Series(x), Series(a_coeffs[:m])]
        (g,) = eval_jaxpr_series(*_compat.closed_parts(grad), ins, m - 1)
        rate = _series.cauchy(_series.pad_degree(g.coeffs, m - 1), da[:m], m - 1)
        x = lax.concatenate([x, rate[m - 1 :] / m], 0)
    return Series(x)
