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
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _compat, _policy, _rules  # noqa: F401  (_rules registers the built-in rules)
from ._elementwise import bind_one, is_elementwise, of_varying
from ._interpret import carries_derivative, missing_rule, rule_result, taylor_rules
from ._rules._common import line_coefficients, line_reaches, linear_inputs
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


def _new_top(t: Array, weights, summed: bool) -> Array:
    """A top contribution made from lower coefficients, `t` per direction `(D, *S)`:
    `sum_d w_d t_d` in a summed pass, else `t` itself.

    `weights` is None (every weight 1), a float (every weight that number) or an array
    `(D,)`. A float carries an operator's constant factor (the Laplacian's `2 = 2!`)
    into the pass, where it meets the `1/2` of `y_2 = g''/2`: as a multiply of the
    output it was a kernel of its own, with a compile of its own on every first call
    (docs/OPERATORS.md, "Collapsed passes").
    """
    if not summed:
        return t
    if weights is None:
        return jnp.sum(t, 0)
    if isinstance(weights, float):
        return weights * jnp.sum(t, 0)
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


def linear_mask(primitive, xs: Sequence[Collapsed]) -> list[bool] | None:
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


def map_linear(eqn, xs: Sequence[Collapsed], mask: list[bool], rows) -> list:
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

    lowers = map_linear(eqn, xs, mask, lower_rows) if rows else None
    tops = map_linear(eqn, xs, mask, top_rows)
    out = []
    for k, p in enumerate(primals):
        low = None if lowers is None else lowers[k].reshape((count, rows) + lowers[k].shape[1:])
        top = None if tops is None else (tops[k][0] if summed else tops[k])
        out.append(Collapsed(p, low, top))
    return out


def checked_rule(eqn):
    """`eqn`'s Taylor rule as `call(order, *series)`: its parameters bound, its outputs a
    checked list (`rule_result`). Raises when the primitive has no rule."""
    rule = taylor_rules.get(eqn.primitive)
    if rule is None:
        raise missing_rule(eqn.primitive)

    def call(order, *series):
        return rule_result(eqn, rule(order, *series, **eqn.params), order)

    return call


def _general(eqn, xs, primals, order: int, weights, summed: bool) -> list[Collapsed]:
    """Any primitive, through its Taylor rule: per direction below the top, once for the top."""
    rule = checked_rule(eqn)
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
            if not summed or degrees[k] >= order:
                nonlinear_tops[k] = _new_top(c[:, order - 1], weights, summed)
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


def _link_derivatives(
    g, primals: list, firsts: list, seconds: list, order: int, scale: float = 1.0
) -> list:
    """`[None, y_1, c y_2]` (to `order <= 2`, `c = scale`) of `y = g(u)` where each input
    is a function of one variable `z`, `u_i = u_i0 + u_i1 z + u_i2 z^2`, given `c u_i2`
    in `seconds[i]` (None for 0):

        y_1 = g'(u_0) . u_1,    c y_2 = g'(u_0) . (c u_2) + (c / 2) g''(u_0)[u_1, u_1],

    by `jax.jvp` of `g` at the primals (JAX's own derivative rules, once per point).
    With the Laplacian's `c = 2` the `c / 2` is 1: no multiply at all."""

    def first(*us):
        return jax.jvp(g, tuple(us), tuple(firsts))[1]

    if order == 1:
        return [None, first(*primals)]
    y1, curvature = jax.jvp(first, tuple(primals), tuple(firsts))
    y2 = curvature if scale == 2.0 else curvature * jnp.asarray(scale / 2, curvature.dtype)
    if any(u2 is not None for u2 in seconds):
        zeros = [jnp.zeros_like(u1) if u2 is None else u2 for u1, u2 in zip(firsts, seconds)]
        y2 = y2 + jax.jvp(g, tuple(primals), tuple(zeros))[1]
    return [None, y1, y2]


def _varying(x) -> bool:
    return isinstance(x, Chain) or not x.is_constant


def chain_root(eqn, values: Sequence):
    """The one value whose function `eqn`'s varying inputs are, when `eqn` is an
    elementwise link of it: one output shaped and typed like that root, every varying
    input (the root or chains of it) shaped like it. None otherwise."""
    if len(eqn.outvars) != 1 or not is_elementwise(eqn):
        return None
    varying = [x for x in values if _varying(x)]
    roots = {id(r): r for r in (x.root if isinstance(x, Chain) else x for x in varying)}
    if len(roots) != 1:
        return None
    (root,) = roots.values()
    out = eqn.outvars[0].aval
    if jnp.shape(root.primal) != out.shape or jnp.result_type(root.primal) != out.dtype:
        return None
    if any(jnp.shape(x.primal) != out.shape for x in varying):
        return None
    return root


def _along_line(eqn, xs: Sequence[Collapsed], primal, order: int, weights, summed: bool):
    """`y = f(x)` for an elementwise `f` with a closed form and `x` of degree 1 per
    direction (orders past the elementwise chains of `eval_jaxpr_collapsed`); None when
    the closed form does not apply."""
    if len(xs) != 1 or xs[0].rows > 1 or xs[0].lower is None:
        return None
    x = xs[0]
    entry = line_coefficients.get(eqn.primitive)
    if entry is None or not line_reaches(entry[1], order, jnp.result_type(x.primal)):
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
    top = d[order] * _new_top(top_power, weights, summed)
    if x.top is not None:
        top = top + d[1] * x.top
    return Collapsed(primal, lower, top)


def _product(x: Collapsed, y: Collapsed, primal, order: int, weights, summed: bool):
    """`x * y` (both carry a series): a Cauchy product per direction, the top collapsed.

    `z_k = sum_i x_i y_{k-i}` below the top; the top is `x_0 y_K + x_K y_0 +
    sum_{0<i<K} x_i y_{K-i}`, whose last sum is weighted over the directions.
    """
    x0, y0 = x.primal, y.primal
    rows = min(x.rows + y.rows if x.rows and y.rows else max(x.rows, y.rows), order - 1)

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
        top = _new_top(inner, weights, summed)
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
    shifted = _shifted_by_constant(eqn, xs, primals)
    if shifted is not None:
        return [shifted]
    mask = linear_mask(eqn.primitive, xs)
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
    """`(jaxpr, consts)` of a call-like primitive interpreted inline, else None. Not
    `custom_jvp_call`: its rule, not its primal function, gives its derivatives."""
    if eqn.primitive is _compat.custom_jvp_call_p:
        return None
    return _compat.call_body(eqn)


@dataclasses.dataclass(frozen=True)
class Chain:
    """A value that is an elementwise function of one value `root`, kept unexpanded:
    `state` is what its interpreter expands it from (its derivatives in the root). A run
    of elementwise equations then costs one composition with the root's coefficients."""

    primal: Array
    root: object
    state: object


def eval_with_chains(jaxpr, consts, args, *, wrap, link, expand, apply) -> list:
    """The interpreter of the multi-direction passes (this module's and the biharmonic's).

    - `wrap(primal)`: a constant value;
    - `link(eqn, values, only_elementwise_readers)`: a `Chain` continuing or starting an
      elementwise chain, or None; `only_elementwise_readers(v)` says whether only
      elementwise equations read `v` (so a chain through it stays one);
    - `expand(chain)`: the value a chain stands for, where something else reads it;
    - `apply(eqn, values, primals)`: the output values of any other equation.

    Constant equations run on primals, and call-like equations (`jit`, `closed_call`,
    `custom_vjp_call`, `checkpoint`) are interpreted inline.
    """
    env: dict = {}

    def peek(v):
        return wrap(v.val) if isinstance(v, _compat.Literal) else env[v]

    def read(v):
        value = peek(v)
        if isinstance(value, Chain):
            value = env[v] = expand(value)
        return value

    def write(v, value) -> None:
        if not isinstance(v, _compat.DropVar):
            env[v] = value

    @functools.cache
    def readers() -> dict:
        found: dict = {}
        for eqn in jaxpr.eqns:
            for v in eqn.invars:
                if not isinstance(v, _compat.Literal):
                    found.setdefault(v, []).append(eqn)
        for v in jaxpr.outvars:
            if not isinstance(v, _compat.Literal):
                found.setdefault(v, []).append(None)  # returned: not a chain link
        return found

    def only_elementwise_readers(v) -> bool:
        found = readers().get(v)
        return bool(found) and all(e is not None and is_elementwise(e) for e in found)

    constvars, invars = _compat.input_vars(jaxpr, len(consts))
    for v, c in zip(constvars, consts, strict=True):
        write(v, wrap(c))
    for v, a in zip(invars, args, strict=True):
        write(v, a)

    for eqn in jaxpr.eqns:
        values = [peek(v) for v in eqn.invars]
        carries = [carries_derivative(v.aval) for v in eqn.outvars]
        if not any(carries) or not any(_varying(x) for x in values):
            outs = _compat.bind_outputs(eqn, [x.primal for x in values])
            for v, o in zip(eqn.outvars, outs, strict=True):
                write(v, wrap(o))
            continue
        chain = link(eqn, values, only_elementwise_readers)
        if chain is not None:
            write(eqn.outvars[0], chain)
            continue
        xs = [read(v) for v in eqn.invars]
        sub = _sub_jaxpr(eqn)
        if sub is not None:
            callbacks = dict(wrap=wrap, link=link, expand=expand, apply=apply)
            outs = eval_with_chains(sub[0], sub[1], xs, **callbacks)
        else:
            outs = apply(eqn, xs, _compat.bind_outputs(eqn, [x.primal for x in xs]))
        for v, o, carry in zip(eqn.outvars, outs, carries, strict=True):
            write(v, o if carry else wrap(o.primal))
    return [read(v) for v in jaxpr.outvars]


def _collapsed_link(
    eqn, values, only_elementwise_readers, order: int, scale: float
) -> Chain | None:
    """At orders <= 2, continue (or start) an elementwise chain of a real value of degree
    <= 1 per direction, with its derivatives in the root from `_link_derivatives`
    (coefficient 2 times `scale`, the pass's constant weight).

    Up to the policy's `collapsed_jvp_max_order` the chain's derivatives come from JAX's
    own derivative rules (nested `jax.jvp` at the primal): one small fused expression per
    order, shared by every direction. Their precision is then JAX's (tanh' = 1 - tanh^2
    loses relative accuracy where tanh saturates, as in jax.hessian and folx); the
    engine's stacked closed forms (1 / cosh^2) compiled slower here, because XLA:CPU
    copies their producers into every row's kernel (docs/OPERATORS.md, "Collapsed
    passes")."""
    if order > _policy.current().collapsed_jvp_max_order:
        return None
    root = chain_root(eqn, values)
    if root is None or root.rows > 1:
        return None
    if not jnp.issubdtype(jnp.result_type(root.primal), jnp.floating):
        return None  # complex: only holomorphic functions would be C-linear here
    if (
        not any(isinstance(x, Chain) for x in values)
        and linear_mask(eqn.primitive, values) is not None
        and not only_elementwise_readers(eqn.outvars[0])
    ):
        return None  # a linear map of a collapsed value costs nothing to apply as is
    primals = [x.primal for x in values]
    varying = [i for i, x in enumerate(values) if _varying(x)]
    firsts, seconds = [], []
    for i in varying:
        x = values[i]
        if isinstance(x, Chain):
            firsts.append(x.state[1])
            seconds.append(x.state[2] if order > 1 else None)
        else:  # the root itself: z
            firsts.append(jnp.ones_like(x.primal))
            seconds.append(None)
    g = of_varying(eqn, primals, varying)
    derivatives = _link_derivatives(g, [primals[i] for i in varying], firsts, seconds, order, scale)
    return Chain(bind_one(eqn, primals), root, derivatives)


def eval_jaxpr_collapsed(
    jaxpr: _compat.Jaxpr,
    consts: Sequence,
    args: Sequence[Collapsed],
    order: int,
    weights: Array | float | None = None,
    summed: bool = True,
) -> list[Collapsed]:
    """Evaluate `jaxpr` on collapsed multi-direction inputs of top order `order >= 1`.

    `weights` (an array `(D,)`, a float for all equal, None for all ones) weigh the
    directions in the summed top; with `summed=False` the top stays per direction and
    `weights` is unused.
    """

    # A float weight goes into a chain's top coefficient as the chain is built (where it
    # meets the 1 / 2 of y_2 = g'' / 2), not onto the sum over directions: XLA:CPU
    # moved a constant multiply there onto the sum before a per-point product, a
    # kernel of its own when the sum is the same at every point (a first layer's).
    constant = isinstance(weights, float) and summed
    chain_weights = None if constant else weights
    chain_scale = weights if constant else 1.0

    def expand(chain: Chain) -> Collapsed:
        return _compose_line(chain.root, chain.state, chain.primal, order, chain_weights, summed)

    def apply(eqn, xs, primals):
        outs = _fast_path(eqn, xs, primals, order, weights, summed)
        return _general(eqn, xs, primals, order, weights, summed) if outs is None else outs

    return eval_with_chains(
        jaxpr,
        consts,
        args,
        wrap=Collapsed,
        link=functools.partial(_collapsed_link, order=order, scale=chain_scale),
        expand=expand,
        apply=apply,
    )


def top_or_zeros(top: Array | None, aval, shape) -> Array:
    """An output's top quantity broadcast to `shape` in the output's dtype, or zeros where
    the output is constant or not inexact (its derivatives are zero, as jax.jacfwd has)."""
    if top is None or not jnp.issubdtype(aval.dtype, jnp.inexact):
        return jnp.zeros(shape, aval.dtype)
    return jnp.broadcast_to(top.astype(aval.dtype), shape)


def seed(
    x: Array,
    directions: Array,
    order: int,
    weights: Array | float | None = None,
    summed: bool = True,
) -> Collapsed:
    """The input `x + s v_d` for every direction `v_d` (`directions` shaped `(D, *x.shape)`).

    At order 1 the direction is the top coefficient: summed with the weights, or per
    direction.
    """
    directions = jnp.asarray(directions, jnp.result_type(x))
    if order == 1:
        return Collapsed(x, None, _new_top(directions, weights, summed))
    lower = directions[:, None]
    return Collapsed(x, lower, None)
