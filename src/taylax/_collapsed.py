"""Collapsed multi-direction Taylor passes: many directions, one shared primal.

Differential operators need the order-`K` derivative of `f` along many directions
`v_1..v_D` at one point, and usually only a weighted sum of them: the Laplacian is
`sum_i D^2 f[e_i]`. Evaluating `D` separate Taylor passes repeats the primal `D`
times and carries `D` top coefficients through every operation. Here every value
of the program is a `Collapsed`:

* `primal`, shape `S`: computed once;
* `lower`, shape `(D, r, *S)`: the normalized coefficients `1..r` (`r <= K-1`) along
  each direction (None when all are zero; a seed has `r = 1`);
* `top`: coefficient `K`, either summed over the directions with weights
  (`sum_d w_d y_K[v_d]`, shape `S`) or kept per direction (shape `(D, *S)`).

The summed top is what makes the pass cheap (folx's forward Laplacian at order 2,
collapsed Taylor mode at any order): coefficient `K` of `y = g(x)` is linear in
coefficient `K` of its inputs,

    y_K[v_d] = g'(x_0) x_K[v_d] + N_K(x_0, x_1[v_d], ..., x_{K-1}[v_d]),

so the weighted sum over `d` needs `g'(x_0)` applied once to the summed input top,
plus the weighted sum of the nonlinear parts `N_K`, which depend only on the lower
coefficients. Both parts come from the engine's own Taylor rules, so every
primitive taylax supports works here too:

* `N_K` (and the new lower coefficients) is the rule at order `K`, `jax.vmap`ped
  over the directions, on the series `x_0 + x_1 s + ... + x_{K-1} s^{K-1}` (top
  zero) whose primal is shared, so what the rule computes from the primal alone
  (`exp(x_0)`, `tanh`'s derivatives) is computed once, not per direction;
* the linear part is coefficient 1 of the rule at order 1 on `x_0 + x_K s`.

Linear primitives (sums, reshapes, slices, a matmul with a constant matrix) skip
both and map every coefficient at once, and `jit`/`closed_call`/`checkpoint`
bodies are interpreted inline, so the collapse goes through them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _compat, _rules  # noqa: F401  (_rules registers the built-in rules)
from ._interpret import _carries_derivative, _missing_rule, _rule_result, taylor_rules
from ._rules._common import line_coefficients, linear_inputs
from ._series import Series, pad_degree

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Collapsed:
    """One value of a collapsed multi-direction pass (see the module docstring).

    `lower` holds only the coefficients that can be nonzero: shape `(D, r, *S)` for
    coefficients `1..r`, `r <= K-1` (a seed has `r = 1` whatever `K`).
    """

    primal: Array
    lower: Array | None = None
    top: Array | None = None

    @property
    def is_constant(self) -> bool:
        return self.lower is None and self.top is None

    @property
    def rows(self) -> int:
        return 0 if self.lower is None else self.lower.shape[1]


def _row(x: Collapsed, k: int):
    """Coefficient `k` (1 <= k <= r) along every direction, `(D, *S)`; None when zero."""
    if k > x.rows:
        return None
    return x.lower[:, k - 1]


def _weighted_sum(t: Array, weights) -> Array:
    """`sum_d w_d t_d` over the leading (direction) axis."""
    if weights is None:
        return jnp.sum(t, 0)
    return jnp.tensordot(weights.astype(t.dtype), t, (0, 0))


def _add(a, b):
    return b if a is None else (a if b is None else a + b)


def _stack_rows(rows: list) -> Array | None:
    """`(D, r, *S)` from `r` rows `(D, *S)`, trailing zero rows dropped; None when empty."""
    while rows and rows[-1] is None:
        rows.pop()
    if not rows:
        return None
    zero = jnp.zeros_like(next(r for r in rows if r is not None))
    return jnp.stack([zero if r is None else r for r in rows], 1)


# Primitives that are linear in some inputs only when their other operands are constant
# (bilinear ones), with the inputs that may carry a series.
_BILINEAR = {lax.mul_p: (0, 1), lax.dot_general_p: (0, 1), lax.conv_general_dilated_p: (0, 1)}
_LINEAR_EXTRA = {
    lax.broadcast_in_dim_p: lambda i, x: i == 0,
    lax.reshape_p: lambda i, x: i == 0,
    lax.transpose_p: lambda i, x: True,
    lax.reduce_sum_p: lambda i, x: True,
    lax.concatenate_p: lambda i, x: True,
    lax.cumsum_p: lambda i, x: True,
    lax.convert_element_type_p: lambda i, x: True,
    lax.select_n_p: lambda i, x: i > 0,
}
# Not linear although their Taylor rule maps coefficients one by one.
_NOT_LINEAR = {lax.reduce_precision_p}


def _linear_mask(primitive, xs: Sequence[Collapsed]) -> list[bool] | None:
    """Which inputs the primitive is jointly linear in, given which inputs are constant.

    None when the primitive is not linear in the inputs that carry a series.
    """
    if primitive in _NOT_LINEAR:
        return None
    predicate = linear_inputs.get(primitive) or _LINEAR_EXTRA.get(primitive)
    if predicate is not None:
        mask = [bool(predicate(i, Series.constant(x.primal))) for i, x in enumerate(xs)]
    elif primitive in _BILINEAR:
        varying = [i for i, x in enumerate(xs) if not x.is_constant]
        if len(varying) != 1 or varying[0] not in _BILINEAR[primitive]:
            return None
        mask = [i == varying[0] for i in range(len(xs))]
    elif primitive is lax.div_p and xs[1].is_constant:
        mask = [True, False]
    else:
        return None
    if any(not m and not x.is_constant for m, x in zip(mask, xs)):
        return None
    return mask


def _map_linear(eqn, xs: Sequence[Collapsed], mask: list[bool], rows) -> list:
    """The primitive on coefficient rows of its linear inputs (a leading axis), others as-is.

    A constant linear input contributes zero to every coefficient above the primal.
    `rows(x)` gives an input's rows, or None where they are all zero.
    """
    args, axes, size = [], [], None
    for x, linear in zip(xs, mask):
        if not linear:
            args.append(x.primal)
            axes.append(None)
            continue
        r = rows(x)
        if r is None:
            args.append(jnp.zeros_like(x.primal))
            axes.append(None)
        else:
            args.append(r)
            axes.append(0)
            size = r.shape[0]
    if size is None:
        return None
    out = jax.vmap(lambda *a: eqn.primitive.bind(*a, **eqn.params), in_axes=axes)(*args)
    return list(out) if eqn.primitive.multiple_results else [out]


def _padded_lower(x: Collapsed, rows: int) -> Array:
    """`x.lower` with zero rows appended up to `rows`."""
    extra = rows - x.rows
    if extra == 0:
        return x.lower
    pad = [(0, 0, 0), (0, extra, 0)] + [(0, 0, 0)] * (x.lower.ndim - 2)
    return lax.pad(x.lower, np.zeros((), x.lower.dtype), pad)


def _linear(
    eqn, xs: Sequence[Collapsed], mask: list[bool], primals: list, summed: bool
) -> list[Collapsed]:
    rows = max(x.rows for x in xs)
    count = next((x.lower.shape[0] for x in xs if x.lower is not None), None)

    def lower_rows(x):
        if x.lower is None:
            return None
        low = _padded_lower(x, rows)
        return low.reshape((-1,) + low.shape[2:])

    def top_rows(x):
        return None if x.top is None else (x.top[None] if summed else x.top)

    lowers = _map_linear(eqn, xs, mask, lower_rows) if rows else None
    tops = _map_linear(eqn, xs, mask, top_rows)
    out = []
    for k, p in enumerate(primals):
        low = None if lowers is None else lowers[k].reshape((count, rows) + lowers[k].shape[1:])
        top = None if tops is None else (tops[k][0] if summed else tops[k])
        out.append(Collapsed(p, low, top))
    return out


def _rule(eqn):
    rule = taylor_rules.get(eqn.primitive)
    if rule is None:
        raise _missing_rule(eqn.primitive)

    def call(order, *series):
        return _rule_result(eqn, rule(order, *series, **eqn.params), order)

    return call


def _general(eqn, xs, primals, order: int, weights, summed: bool) -> list[Collapsed]:
    """Any primitive, through its Taylor rule: per direction below the top, once for the top."""
    rule = _rule(eqn)
    n_out = len(primals)
    with_lower = [x.lower is not None or (not summed and x.top is not None) for x in xs]
    lowers: list = [None] * n_out
    nonlinear_tops: list = [None] * n_out
    if any(with_lower):
        degrees: list[int] = []

        def per_direction(*rows):
            series = []
            rows = iter(rows)
            for x, has in zip(xs, with_lower):
                if not has:
                    series.append(Series.constant(x.primal))
                    continue
                c = next(rows)  # coefficients 1.. of this direction
                c = jnp.concatenate([jnp.asarray(x.primal, c.dtype)[None], c], 0)
                series.append(Series(c, primal=x.primal))
            outs = rule(order, *series)
            degrees[:] = [o.degree for o in outs]
            return [pad_degree(o.coeffs, order)[1:] for o in outs]

        def rows_of(x):
            if summed or x.top is None:
                return x.lower
            if x.lower is None:
                lower = jnp.zeros((x.top.shape[0], order - 1) + x.top.shape[1:], x.top.dtype)
            else:
                lower = _padded_lower(x, order - 1)
            return jnp.concatenate([lower, x.top[:, None]], 1)

        direction_rows = [rows_of(x) for x, has in zip(xs, with_lower) if has]
        coeffs = jax.vmap(per_direction)(*direction_rows)  # each (D, K, *S_out)
        for k, c in enumerate(coeffs):
            if degrees[k] == 0:
                continue
            rows = min(degrees[k], order - 1)
            if rows:
                lowers[k] = c[:, :rows]
            if not summed:
                nonlinear_tops[k] = c[:, order - 1]
            elif degrees[k] >= order:
                nonlinear_tops[k] = _weighted_sum(c[:, order - 1], weights)
    linear_tops: list = [None] * n_out
    if summed and any(x.top is not None for x in xs):
        series = [
            Series.constant(x.primal)
            if x.top is None
            else Series(jnp.stack([jnp.asarray(x.primal, x.top.dtype), x.top]))
            for x in xs
        ]
        for k, o in enumerate(rule(1, *series)):
            if o.degree >= 1:
                linear_tops[k] = o.coeffs[1]
    return [
        Collapsed(p, low, _add(a, b))
        for p, low, a, b in zip(primals, lowers, nonlinear_tops, linear_tops)
    ]


# Elementwise primitives: a jaxpr built only from these (scalar literals aside) maps
# every element on its own, so its derivatives along a line are elementwise too.
_ELEMENTWISE = {
    getattr(lax, f"{name}_p")
    for name in (
        "abs acos acosh add asin asinh atan atan2 atanh cbrt cos cosh digamma div eq erf "
        "erf_inv erfc exp exp2 expm1 ge gt integer_pow is_finite le lgamma log log1p "
        "logistic lt max min mul ne neg pow rem rsqrt select_n sign sin sinh sqrt square "
        "sub tan tanh"
    ).split()
} | {lax.convert_element_type_p, _compat.add_any_p}
# Orders at which the derivatives of an elementwise function come from JAX's own
# derivative rules (nested `jax.jvp` of the function at the primal): one small fused
# expression per order, shared by every direction. Past this, nested jvp grows
# exponentially and the engine's closed forms take over. The precision is then JAX's
# (tanh' = 1 - tanh^2 loses relative accuracy where tanh saturates, as in jax.hessian
# and folx); the engine's stacked closed forms (1 / cosh^2) cost 2x the compile time
# here, because XLA:CPU copies their producers into every row's kernel.
_JVP_MAX_ORDER = 2


def _is_elementwise(eqn) -> bool:
    """Whether `eqn` maps elements independently: an elementwise primitive, or a
    `custom_jvp` function (softplus, relu) whose body is built only from them."""
    if eqn.primitive in _ELEMENTWISE:
        return True
    if eqn.primitive is _compat.custom_jvp_call_p:
        return all(_is_elementwise(e) for e in eqn.params["call_jaxpr"].jaxpr.eqns)
    return False


def _link_derivatives(g, primals: list, firsts: list, seconds: list, order: int) -> list:
    """`[None, y_1, y_2]` (to `order <= 2`) of `y = g(u)` where each input is a function of
    one variable `z` with `u_i = u_i0 + u_i1 z + u_i2 z^2` (`seconds[i]` None for 0):

        y_1 = g'(u_0) . u_1,    y_2 = g'(u_0) . u_2 + g''(u_0)[u_1, u_1] / 2,

    by `jax.jvp` of `g` at the primals (JAX's own derivative rules, once per point)."""

    def first(*us):
        return jax.jvp(g, tuple(us), tuple(firsts))[1]

    if order == 1:
        return [None, first(*primals)]
    y1, curvature = jax.jvp(first, tuple(primals), tuple(firsts))
    y2 = curvature * jnp.asarray(0.5, curvature.dtype)
    if any(u2 is not None for u2 in seconds):
        zeros = [jnp.zeros_like(u1) if u2 is None else u2 for u1, u2 in zip(firsts, seconds)]
        y2 = y2 + jax.jvp(g, tuple(primals), tuple(zeros))[1]
    return [None, y1, y2]


def _bind_one(eqn, args):
    out = _compat.bind_equation(eqn, args)
    return out[0] if eqn.primitive.multiple_results else out


def _chain_link(eqn, xs: Sequence, root) -> bool:
    """Whether `eqn` continues an elementwise function of the one value `root`: an
    elementwise equation with a single real output shaped and typed like `root`, whose
    inputs are constants or functions of `root` alone (see `eval_jaxpr_collapsed`)."""
    if len(eqn.outvars) != 1 or not _is_elementwise(eqn):
        return False
    x0 = root.primal
    out = eqn.outvars[0].aval
    if not jnp.issubdtype(jnp.result_type(x0), jnp.floating):
        return False  # complex: only holomorphic functions would be C-linear here
    if jnp.shape(x0) != out.shape or jnp.result_type(x0) != out.dtype:
        return False
    return all(
        jnp.shape(x.primal) == out.shape for x in xs if isinstance(x, _Chain) or not x.is_constant
    )


def _along_line(eqn, xs: Sequence[Collapsed], primal, order: int, weights, summed: bool):
    """`y = f(x)` for an elementwise `f` with a closed form and `x` of degree 1 per
    direction (orders past the elementwise chains of `eval_jaxpr_collapsed`); None when
    the closed form does not apply."""
    if len(xs) != 1 or xs[0].rows > 1 or xs[0].lower is None:
        return None
    x = xs[0]
    entry = line_coefficients.get(eqn.primitive)
    if entry is None or (entry[1] is not None and order > entry[1]):
        return None
    d = entry[0](x.primal, order).astype(x.lower.dtype)  # (K+1, *S): once, unbatched
    return _compose_line(x, d, primal, order, weights, summed)


def _compose_line(x: Collapsed, d, primal, order: int, weights, summed: bool) -> Collapsed:
    """`f(x)` from `d_k = f^(k)(x_0)/k!` (indexable by k) for `x` of degree <= 1 per
    direction: `y_k = d_k x_1^k` below the top, top `d_1 x_K + d_K sum_d w_d x_1^K`."""
    if x.lower is None:  # order 1: the direction is the top
        return Collapsed(primal, None, None if x.top is None else d[1] * x.top)
    x1 = x.lower[:, 0]
    powers = [None, x1]
    for _ in range(2, order + 1):
        powers.append(powers[-1] * x1)
    lower = _stack_rows([d[k] * powers[k] for k in range(1, order)])
    top_power = powers[order]
    nonlinear = top_power if not summed else _weighted_sum(top_power, weights)
    top = d[order] * nonlinear
    if x.top is not None:
        top = top + d[1] * x.top
    return Collapsed(primal, lower, top)


def _product(x: Collapsed, y: Collapsed, primal, order: int, weights, summed: bool):
    """`x * y` (both carry a series): a Cauchy product per direction, the top collapsed.

    `z_k = sum_i x_i y_{k-i}` below the top; the top is `x_0 y_K + x_K y_0 +
    sum_{0<i<K} x_i y_{K-i}`, whose last sum is weighted over the directions.
    """
    x0, y0 = x.primal, y.primal
    rows = min(x.rows + y.rows, order - 1) if x.rows and y.rows else max(x.rows, y.rows)
    rows = min(rows, order - 1)

    def coefficient(k):
        total = None
        for i in range(0, k + 1):
            a = x0 if i == 0 else _row(x, i)
            b = y0 if i == k else _row(y, k - i)
            if a is None or b is None:
                continue
            if i == 0 and k == 0:
                continue
            total = _add(total, a * b)
        return total

    lower = _stack_rows([coefficient(k) for k in range(1, rows + 1)])
    inner = None
    for i in range(1, order):
        a, b = _row(x, i), _row(y, order - i)
        if a is not None and b is not None:
            inner = _add(inner, a * b)
    top = None
    if inner is not None:
        top = _weighted_sum(inner, weights) if summed else inner
    if y.top is not None:
        top = _add(top, x0 * y.top)
    if x.top is not None:
        top = _add(top, x.top * y0)
    return Collapsed(primal, lower, top)


def _shifted_by_constant(eqn, xs: Sequence[Collapsed], primals) -> Collapsed | None:
    """`x + c`, `c + x`, `x - c` or `c - x` with a constant `c` of the same shape: the
    coefficients of `x` (negated for `c - x`), with no zero array added to them."""
    if eqn.primitive not in (lax.add_p, lax.sub_p, _compat.add_any_p) or len(xs) != 2:
        return None
    varying = [i for i, x in enumerate(xs) if not x.is_constant]
    if len(varying) != 1 or jnp.shape(xs[varying[0]].primal) != jnp.shape(primals[0]):
        return None
    x = xs[varying[0]]
    if eqn.primitive is lax.sub_p and varying[0] == 1:
        negate = lambda a: None if a is None else -a  # noqa: E731
        return Collapsed(primals[0], negate(x.lower), negate(x.top))
    return Collapsed(primals[0], x.lower, x.top)


def _fast_path(eqn, xs, primals, order, weights, summed) -> list[Collapsed] | None:
    """Linear maps, elementwise functions of a line and products, without the general rule."""
    mask = _linear_mask(eqn.primitive, xs)
    shifted = _shifted_by_constant(eqn, xs, primals)
    if shifted is not None:
        return [shifted]
    if mask is not None:
        return _linear(eqn, xs, mask, primals, summed)
    if eqn.primitive is lax.mul_p and len(primals) == 1:
        x, y = xs
        # Equal ranks: lax.mul broadcasts size-1 dimensions, and every term of the
        # product has one factor from each side, so it broadcasts to the output's shape.
        if jnp.ndim(x.primal) == jnp.ndim(y.primal):
            return [_product(x, y, primals[0], order, weights, summed)]
    if len(xs) == 1 and len(primals) == 1:
        out = _along_line(eqn, xs, primals[0], order, weights, summed)
        return None if out is None else [out]
    return None


def _sub_jaxpr(eqn):
    """`(jaxpr, consts)` of a call-like primitive interpreted inline, else None."""
    params = eqn.params
    if eqn.primitive in (_compat.jit_p,):
        return params["jaxpr"].jaxpr, params["jaxpr"].consts
    if eqn.primitive in (_compat.closed_call_p, _compat.custom_vjp_call_p):
        return params["call_jaxpr"].jaxpr, params["call_jaxpr"].consts
    if eqn.primitive is _compat.remat_p:
        return params["jaxpr"], ()
    return None


@dataclasses.dataclass(frozen=True)
class _Chain:
    """A value that is an elementwise function of one collapsed value `root`, kept as its
    derivatives in the root, point by point: `derivatives[k] = (d^k/dz^k y)/k!` (k = 1,
    2). A run of elementwise equations then costs one composition along the line."""

    primal: Array
    root: Collapsed
    derivatives: list


def _expand(chain: _Chain, order: int, weights, summed: bool) -> Collapsed:
    return _compose_line(chain.root, chain.derivatives, chain.primal, order, weights, summed)


def eval_jaxpr_collapsed(
    jaxpr: _compat.Jaxpr,
    consts: Sequence,
    args: Sequence[Collapsed],
    order: int,
    weights: Array | None = None,
    summed: bool = True,
) -> list[Collapsed]:
    """Evaluate `jaxpr` on collapsed multi-direction inputs of top order `order >= 1`.

    `weights` (shape `(D,)`, None for all ones) weigh the directions in the summed top;
    with `summed=False` the top stays per direction and `weights` is unused.
    """
    env: dict = {}

    def peek(v):
        return Collapsed(v.val) if isinstance(v, _compat.Literal) else env[v]

    def read(v) -> Collapsed:
        value = peek(v)
        if isinstance(value, _Chain):
            value = env[v] = _expand(value, order, weights, summed)
        return value

    readers: dict = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if not isinstance(v, _compat.Literal):
                readers.setdefault(v, []).append(eqn)
    returned = {v for v in jaxpr.outvars if not isinstance(v, _compat.Literal)}

    def feeds_chains(v) -> bool:
        """Whether only elementwise equations read `v` (so a chain through it stays one)."""
        found = readers.get(v)
        return bool(found) and v not in returned and all(_is_elementwise(e) for e in found)

    def extend(eqn) -> bool:
        """At orders <= 2, continue an elementwise chain instead of expanding it."""
        if order > _JVP_MAX_ORDER:
            return False
        values = [peek(v) for v in eqn.invars]
        roots = {
            id(x.root if isinstance(x, _Chain) else x): x.root if isinstance(x, _Chain) else x
            for x in values
            if isinstance(x, _Chain) or not x.is_constant
        }
        if len(roots) != 1:
            return False
        (root,) = roots.values()
        if root.rows > 1 or not _chain_link(eqn, values, root):
            return False
        if (
            not any(isinstance(x, _Chain) for x in values)
            and _linear_mask(eqn.primitive, values) is not None
            and not feeds_chains(eqn.outvars[0])
        ):
            return False  # a linear map of a collapsed value costs nothing to apply as is
        primals = [x.primal for x in values]
        varying = [i for i, x in enumerate(values) if isinstance(x, _Chain) or not x.is_constant]
        firsts, seconds = [], []
        for i in varying:
            x = values[i]
            if isinstance(x, _Chain):
                firsts.append(x.derivatives[1])
                seconds.append(x.derivatives[2] if order > 1 else None)
            else:  # the root itself: z
                firsts.append(jnp.ones_like(x.primal))
                seconds.append(None)

        def g(*us, eqn=eqn, primals=primals, varying=varying):
            args = list(primals)
            for i, u in zip(varying, us):
                args[i] = u
            return _bind_one(eqn, args)

        derivatives = _link_derivatives(g, [primals[i] for i in varying], firsts, seconds, order)
        write(eqn.outvars[0], _Chain(_bind_one(eqn, primals), root, derivatives))
        return True

    def write(v, value: Collapsed) -> None:
        if not isinstance(v, _compat.DropVar):
            env[v] = value

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        write(v, Collapsed(c))
    for v, a in zip(jaxpr.invars, args, strict=True):
        write(v, a)

    for eqn in jaxpr.eqns:
        primitive = eqn.primitive
        if not any(_carries_derivative(v.aval) for v in eqn.outvars) or all(
            not isinstance(peek(v), _Chain) and peek(v).is_constant for v in eqn.invars
        ):
            out = _compat.bind_equation(eqn, [peek(v).primal for v in eqn.invars])
            outs = out if primitive.multiple_results else [out]
            for v, o in zip(eqn.outvars, outs, strict=True):
                write(v, Collapsed(o))
            continue
        if extend(eqn):
            continue
        xs = [read(v) for v in eqn.invars]
        sub = _sub_jaxpr(eqn)
        if sub is not None:
            outs = eval_jaxpr_collapsed(sub[0], sub[1], xs, order, weights, summed)
        else:
            out = _compat.bind_equation(eqn, [x.primal for x in xs])
            primals = list(out) if primitive.multiple_results else [out]
            outs = _fast_path(eqn, xs, primals, order, weights, summed)
            if outs is None:
                outs = _general(eqn, xs, primals, order, weights, summed)
        for v, o in zip(eqn.outvars, outs, strict=True):
            if not _carries_derivative(v.aval):
                o = Collapsed(o.primal)
            write(v, o)

    return [read(v) for v in jaxpr.outvars]


def seed(
    x: Array, directions: Array, order: int, weights: Array | None = None, summed: bool = True
) -> Collapsed:
    """The input `x + s v_d` for every direction `v_d` (`directions` shaped `(D, *x.shape)`).

    At order 1 the direction is the top coefficient: summed with the weights, or per
    direction.
    """
    directions = jnp.asarray(directions, jnp.result_type(x))
    if order == 1:
        if not summed:
            return Collapsed(x, None, directions)
        if weights is None:
            return Collapsed(x, None, jnp.sum(directions, 0))
        return Collapsed(x, None, jnp.tensordot(weights.astype(directions.dtype), directions, 1))
    lower = directions[:, None]
    return Collapsed(x, lower, None)
