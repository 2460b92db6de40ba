"""The recurrences that define nonlinear functions of a series: quotients, powers,
square roots, linear ODEs (exp, sin/cos), Riccati equations (tanh, logistic) and
composition.

Each runs unrolled at low orders (and at higher ones where the known factor has a low
degree: a few terms per coefficient), and above as one `lax.fori_loop` over blocks of a
few coefficients (`unrolled`, the emission policy's choice). The loops are written in
"push" form: once coefficient m of the unknown is known, its contribution to every later
coefficient is added to an accumulator with one fused elementwise update. The "pull" form
(a dot over the known coefficients for each new one) reduces along the coefficient axis,
which XLA:CPU runs an order of magnitude slower for arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax.numpy as jnp
from jax import lax

from .. import _once, _policy
from .._pass import in_loop_body, pass_order
from ._coeffs import (
    Array,
    as_real,
    degree_of,
    derivative_stack,
    fori,
    forward_source,
    fresh,
    get_coeff,
    lift,
    orders,
    pad_degree,
    push_window,
    row_start,
    slice_rows,
)
from ._marks import computed_once, opaque_one, shielded
from ._products import derivative_rows, dot_rows, shifted_sum, toeplitz
from ._rows import has_separate_rows, rows_of, stack_rows_as, with_primal


def unrolled(order: int, degree: int | None = None, separate_rows: bool = False) -> bool:
    """Whether a recurrence of `order` whose known factor has `degree` (and, with
    `separate_rows`, rows of its own: `has_separate_rows`) runs unrolled: up to the
    policy's `unroll_max_order` (`loop_unroll_max_order` in a loop body), up to
    `rows_max_order` for rows of their own, and up to
    `unroll_low_degree_max_order` where the factor's degree is at most
    `unroll_max_degree` (a coefficient then sums a few terms: linear in the order)."""
    p = _policy.current()
    limit = p.loop_unroll_max_order if in_loop_body() else p.unroll_max_order
    if order <= limit or (separate_rows and order <= p.rows_max_order):
        return True
    low = degree is not None and degree <= p.unroll_max_degree
    return low and order <= p.unroll_low_degree_max_order


# Above the unrolled range, recurrences run by blocks of the policy's `recurrence_block`
# rows: a `lax.fori_loop` over blocks whose body computes its rows unrolled and then adds
# the block's contributions to every later row of an accumulator, so the loop sweeps the
# stacked state once per block instead of once per row. The order is rounded up to whole
# blocks, so the body is the whole program: its size does not depend on the order.
def recurrence_block() -> int:
    """Rows per step of a blocked recurrence (the policy's `recurrence_block`)."""
    return _policy.current().recurrence_block


def _blocked_rows(
    order: int,
    shape,
    dtype,
    y0s: Sequence[Array],
    one: Array,
    mix: Callable[[int, list], Array],
    pair: Callable[[int, Array, Array], Array],
    push: Callable[[Array, object, Array], Array],
    finish: Callable[[Array, Array], Array],
) -> list[Array]:
    """Rows `0..order` of coupled series `y_i` with `y_i[0] = y0s[i]` and, for k >= 1,

    `y_i[k] = finish(k, sum_{m<k} pair(k - m, m, g_i[m]))`, `g_i[m] = mix(i, [y_j[m]])`.

    `pair(j, m, g)` is the contribution of `g` at row `m` to row `m + j` (one row) and
    `push(acc, m, g)` adds it to every row of a stacked accumulator at once. `order` is
    a whole number of blocks (`blocked_span`); `m` is 0 for the first push and traced
    inside the loop, as is `k`.
    """
    n = len(y0s)
    block = recurrence_block()
    y0s = [jnp.broadcast_to(jnp.asarray(y0, dtype), shape) for y0 in y0s]
    ys = [fresh(y0, order, dtype) for y0 in y0s]
    zeros = jnp.zeros((order + 1,) + tuple(shape), dtype)
    accs = [push(zeros, 0, mix(i, y0s)) for i in range(n)]

    def body(b, carry):
        ys, accs = carry
        start = 1 + b * block
        acc_rows = [rows_of(slice_rows(acc, start, block), block) for acc in accs]
        rows: list[list] = [[] for _ in range(n)]
        gs: list[list] = [[] for _ in range(n)]
        for r in range(block):
            for i in range(n):
                total = acc_rows[i][r]
                for q in range(r):
                    total = total + pair(r - q, start + q, gs[i][q])
                rows[i].append(computed_once(finish(start + r, total), one))
            for i in range(n):
                gs[i].append(mix(i, [rows[j][r] for j in range(n)]))
        ys = [
            lax.dynamic_update_slice(y, stack_rows_as(r, shape, dtype), row_start(y, start))
            for y, r in zip(ys, rows)
        ]
        accs = list(accs)
        for i in range(n):
            for q, g in enumerate(gs[i]):
                accs[i] = push(accs[i], start + q, g)
        return ys, accs

    return lax.fori_loop(0, order // block, body, (ys, accs))[0]


def blocked_span(order: int) -> int:
    """`order` rounded up to whole blocks: the rows past it are computed and dropped."""
    block = recurrence_block()
    return -(-order // block) * block


def _weighted_sum(weights, rows: list[Array]) -> Array | None:
    """`sum_j weights[j] rows[j]` over the non-zero constant weights (a row of `M Y`)."""
    total = None
    for weight, row in zip(weights, rows):
        if weight == 0:
            continue
        term = row if weight == 1 else row * float(weight)
        total = term if total is None else total + term
    return total


def linear_ode(
    x: Array, y0s: Sequence[Array], matrix, order: int, wanted: int | None = None
) -> list[Array]:
    """Solve `Y' = x' (M Y)` for a small constant matrix `M` (exp, sin/cos, sinh/cosh).

    `k y_k = sum_{m<k} u_{k-1-m} (M y)_m` with `u = x'`. `wanted`: the index of the one
    solution the caller reads (sin of sin/cos), where it reads one; see
    `_linear_ode_unrolled`.
    """
    if unrolled(order, degree_of(x), has_separate_rows(x)):
        return _linear_ode_unrolled(x, y0s, matrix, order, wanted)
    dtype = jnp.result_type(x, *y0s)
    shape = jnp.broadcast_shapes(x.shape[1:], *[jnp.shape(y0) for y0 in y0s])
    span = blocked_span(order)
    x = jnp.broadcast_to(pad_degree(x, span), (span + 1,) + shape).astype(dtype)
    xs, jx = derivative_rows(x, dtype, recurrence_block() - 1)
    source = forward_source(derivative_stack(x), span, 1)
    ys = _blocked_rows(
        span,
        shape,
        dtype,
        y0s,
        opaque_one(xs[0]),
        mix=lambda i, rows: _weighted_sum(matrix[i], rows),
        pair=lambda j, m, g: jx[j] * g,
        push=lambda acc, m, g: acc + push_window(source, m, span, 1) * g[None],
        finish=lambda k, total: total / as_real(k, dtype),
    )
    return [y[: order + 1] for y in ys]


def _linear_ode_unrolled(
    x: Array, y0s: Sequence[Array], matrix, order: int, wanted: int | None
) -> list[Array]:
    """`linear_ode` one coefficient at a time. Each row is computed once into a buffer,
    except, from the policy's `partner_rows_unmarked_min_order`, the rows of a partner
    the caller does not read (cos beside sin): XLA recomputes those few products inside
    the kernels of the wanted rows that read them, which halves the kernels and writes
    no buffer for the partner (docs/EMISSION.md, "Only the wanted rows of sin/cos")."""
    bound = _policy.current().partner_rows_unmarked_min_order
    if bound is None or order < bound:
        wanted = None
    dtype = jnp.result_type(x, *y0s)
    shape = jnp.broadcast_shapes(x.shape[1:], *[jnp.shape(y0) for y0 in y0s])
    xs, jx = derivative_rows(x, dtype, order)
    ys = [[jnp.asarray(y0, dtype)] for y0 in y0s]
    mixed: list[list] = [[] for _ in y0s]  # (M y)_m per output
    one = opaque_one(xs[0])

    for k in range(1, order + 1):
        for i in range(len(y0s)):
            mixed[i].append(_weighted_sum(matrix[i], [y[k - 1] for y in ys]))
        new = []
        for i in range(len(y0s)):
            acc = dot_rows((jx[j], mixed[i][k - j]) for j in range(1, k + 1))
            if acc is None:
                new.append(jnp.zeros(shape, dtype))
            elif wanted is None or i == wanted:
                new.append(computed_once(acc / float(k), one))
            else:
                new.append(acc / float(k))
        for i, value in enumerate(new):
            ys[i].append(value)
    return [stack_rows_as(y, shape, dtype) for y in ys]


def divide(a: Array, b: Array, order: int, q0: Array | None = None) -> Array:
    """`q = a / b`: `q_k = (a_k - sum_{j<k} b_{k-j} q_j) / b_0`."""
    if degree_of(b) == 0:
        out = a / b
        return out if q0 is None else with_primal(out, q0)
    ndim = max(a.ndim, b.ndim) - 1
    a, b = lift(a, ndim), lift(b, ndim)
    shape = jnp.broadcast_shapes(a.shape[1:], b.shape[1:])
    dtype = jnp.result_type(a, b)
    split = _policy.current().split_numerator_min_order
    if (
        split is not None
        and order >= split
        and unrolled(order, degree_of(b))
        and degree_of(a) > degree_of(b)
        and not has_separate_rows(a)
    ):
        # Rows of their own, each computed once: the recurrence below reads them. The
        # product with the reciprocal past order 16 was one kernel of K^2 products over
        # shifted slices of the points' minor axis under vmap, 5x the whole pass. `a`
        # goes to a buffer first: else XLA computed it again in every row's kernel
        # (3x the compile time). Figures: docs/EMISSION.md, "Recurrences unrolled to
        # order 16".
        a = a.astype(dtype)
        a = computed_once(a, opaque_one(a))
        one = opaque_one(lax.index_in_dim(a, 0, keepdims=False))
        a = stack_rows_as([computed_once(r, one) for r in rows_of(a, a.shape[0])], shape, dtype)
    if (
        order >= _policy.current().reciprocal_min_order
        and unrolled(order, degree_of(b))
        and degree_of(a) > degree_of(b)
        and not has_separate_rows(a)
    ):
        # Row k of the recurrence reads a_k: under vmap a column of the stacked `a`, one
        # pass over all of it per row, unless `a`'s rows are buffers or closed forms of
        # their own (`has_separate_rows`: then the recurrence below reads them).
        # `a * (1/b)` reads `a` once: the reciprocal's rows come from b's few
        # coefficients, the product is one kernel, not a stack built by selects. `a` is
        # computed once first, marked with ones of its own shape: XLA then keeps it in a
        # buffer, where per-point ones let a product `a` fuse into the pad (or into every
        # row of a stacked form). Figures: docs/EMISSION.md, "Recurrences unrolled to
        # order 16".
        b0 = lax.index_in_dim(b, 0, keepdims=False).astype(dtype)
        reciprocal = _divide_rows(jnp.ones((1,) + shape, dtype), b, order, None, shape, dtype)
        a = a.astype(dtype)
        q = shifted_sum(
            lambda i: jnp.broadcast_to(reciprocal[i], shape)[None],
            order + 1,
            computed_once(a, opaque_one(a)),
            order,
        )
        return with_primal(q, lax.index_in_dim(a, 0, keepdims=False) / b0 if q0 is None else q0)
    if unrolled(order, degree_of(b), has_separate_rows(a) and has_separate_rows(b)):
        return stack_rows_as(_divide_rows(a, b, order, q0, shape, dtype), shape, dtype)
    span = blocked_span(order)
    a = jnp.broadcast_to(pad_degree(a, span), (span + 1,) + shape).astype(dtype)
    b = jnp.broadcast_to(pad_degree(b, span), (span + 1,) + shape).astype(dtype)
    b_rows = rows_of(b, recurrence_block())
    source = forward_source(b, span, 0)
    return _blocked_rows(
        span,
        shape,
        dtype,
        [a[0] / b[0] if q0 is None else q0],
        opaque_one(b_rows[0]),
        mix=lambda i, rows: rows[0],
        pair=lambda j, m, q: -(b_rows[j] * q),
        push=lambda acc, m, q: acc - push_window(source, m, span, 0) * q[None],
        finish=lambda k, total: (get_coeff(a, k) + total) / b_rows[0],
    )[0][: order + 1]


def _divide_rows(a: Array, b: Array, order: int, q0, shape, dtype) -> list[Array]:
    """The rows of `a / b`, unrolled: `q_k = (a_k - sum_{j=1..k} b_j q_{k-j}) / b_0`.

    Past `unmarked_max_order` and up to the policy's `quotient_rows_unmarked_max_order`
    the rows are marked only while small, as `_riccati`'s (docs/EMISSION.md, "A
    quotient's rows by size"); by a series of full degree, up to its
    `series_quotient_rows_unmarked_max_order`, counted in the pass's order ("A quotient
    by a series")."""
    policy = _policy.current()
    bound, reach = policy.quotient_rows_unmarked_max_order, order
    by_series = degree_of(b) >= order
    if by_series:
        # A divisor of full degree (a transcendental's series): each row reads every row
        # before it, as tanh's do, where a polynomial's few coefficients give few reads.
        # Bounded by the pass's order: `log` and `atan` divide at one order less, and in a
        # pass of order 11 their rows of order 10 unmarked read 1.24-1.40x slower. Only
        # at one point under `vmap` (`per_point`): over a whole array, slower unmarked.
        bound = policy.series_quotient_rows_unmarked_max_order
        reach = max(order, pass_order() or 0)
    while_small = order > policy.unmarked_max_order and _rows_while_small(bound, reach)
    a_rows = rows_of(a.astype(dtype), order + 1)
    b_rows = rows_of(b.astype(dtype), order + 1)
    b0 = shielded(b_rows[0])
    q = [shielded(a_rows[0]) / b0 if q0 is None else jnp.asarray(q0, dtype)]
    one = opaque_one(b_rows[0])
    # One division, then products: where the rows stay unmarked (`computed_once`), XLA
    # copies products into their readers but keeps each division in a kernel of its own.
    reciprocal = 1 / b0
    # XLA:CPU keeps a quotient `a / b` with several readers in a kernel of its own but
    # fuses a reciprocal `1 / b` into its readers. At orders where nothing batched by
    # `vmap` is marked (`_once.unmarked_at_any_size`) the recurrence reads `a_0 (1 / b_0)`,
    # and the exact `a_0 / b_0` is only the primal row: the whole quotient is then one
    # kernel (docs/EMISSION.md, "Values computed once"). A whole-array pass of those
    # orders reads the same form; its small values are marked when lowered.
    q0_read = q[0]
    if _once.unmarked_at_any_size(pass_order()) and a_rows[0] is not None:
        q0_read = shielded(a_rows[0]) * reciprocal
    for k in range(1, order + 1):
        known = dot_rows((b_rows[j], q0_read if j == k else q[k - j]) for j in range(1, k + 1))
        top = a_rows[k]
        if known is not None:
            top = -known if top is None else top - known
        if top is None:
            q.append(jnp.zeros(shape, dtype))
            continue
        row = shielded(top) * reciprocal
        q.append(computed_once(row, one, while_small=while_small, per_point=by_series))
    return q


def power(x: Array, p, y0: Array, order: int) -> Array:
    """`y = x ** p` for an exponent `p` without a series, by the recurrence

    `k x_0 y_k = sum_{m<k} (p (k-m) - m) x_{k-m} y_m`.
    Divides by `x_0`: callers that need nested jvp's values at `x_0 = 0` use
    `compose` there.
    """
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0), jnp.shape(p))
    if unrolled(order, degree_of(x), has_separate_rows(x)):
        xs = rows_of(x.astype(dtype), order + 1)
        x0 = jnp.asarray(xs[0], dtype)
        ys = [jnp.asarray(y0, dtype)]
        one = opaque_one(x0)
        reciprocal = 1 / shielded(x0)  # one division, then products: see `_divide_rows`
        for k in range(1, order + 1):
            terms = []
            for m in range(k):
                j = k - m
                if xs[j] is None:
                    continue
                weight = p * float(j) - float(m)
                terms.append((xs[j], ys[m] * weight))
            acc = dot_rows(terms)
            ys.append(
                jnp.zeros(shape, dtype)
                if acc is None
                else computed_once(acc * reciprocal * (1 / k), one)
            )
        return stack_rows_as(ys, shape, dtype)
    span = blocked_span(order)
    x = jnp.broadcast_to(pad_degree(x, span), (span + 1,) + shape).astype(dtype)
    x_rows = rows_of(x, recurrence_block())
    ks = orders(span, len(shape), dtype)
    jx_source = forward_source(ks * x, span, 0)
    x_source = forward_source(x, span, 0)

    def push(acc, m, y_m):
        w = p * push_window(jx_source, m, span, 0) - as_real(m, dtype) * push_window(
            x_source, m, span, 0
        )
        return acc + w * y_m[None]

    return _blocked_rows(
        span,
        shape,
        dtype,
        [y0],
        opaque_one(x_rows[0]),
        mix=lambda i, rows: rows[0],
        pair=lambda j, m, y_m: x_rows[j] * (y_m * (p * float(j) - as_real(m, dtype))),
        push=push,
        finish=lambda k, total: total / (as_real(k, dtype) * x_rows[0]),
    )[0][: order + 1]


def folded_square_terms(ys: list[Array], k: int) -> list[Array]:
    """The terms of `sum_{0<i<k} y_i y_{k-i}` folded by its symmetry: twice the sum over
    `i < k/2`, then `y_{k/2}^2` for even k (about k/2 products; none for k = 1)."""
    terms = []
    folded = dot_rows((ys[i], ys[k - i]) for i in range(1, (k + 1) // 2))
    if folded is not None:
        terms.append(2 * folded)
    if k % 2 == 0:
        terms.append(ys[k // 2] * ys[k // 2])
    return terms


def _rows_while_small(bound: int | None, order: int) -> bool:
    """Whether a recurrence of `order` whose rows a policy field leaves unmarked up to
    `bound` (None: never) marks them only while small (`computed_once`'s `while_small`)."""
    return bound is not None and order <= bound


def square_root(x: Array, y0: Array, order: int) -> Array:
    """`y = sqrt(x)` from `y^2 = x`: `y_k = (x_k - sum_{0<i<k} y_i y_{k-i}) / (2 y_0)`.

    The sum is folded by its symmetry, about k/2 products for row k where `power`'s
    recurrence takes k, for a series of full degree (docs/EMISSION.md, "The log1p chain
    at K = 16"). Over a polynomial of low degree `power` sums fewer (min(k, degree)
    terms), so callers keep it there. Unrolled only (`unrolled`).

    Up to the policy's `root_rows_unmarked_max_order` the rows past `y_0` are marked only
    while small (`computed_once(..., while_small=True)`), as `_riccati`'s are: large, XLA
    fuses them into their readers; past it each is computed once (docs/EMISSION.md,
    "tanh's rows unmarked").
    """
    while_small = _rows_while_small(_policy.current().root_rows_unmarked_max_order, order)
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0))
    xs = rows_of(x.astype(dtype), order + 1)
    one = opaque_one(xs[0])
    # y_0 once: every row reads it, and XLA would recompute the root in each.
    ys = [computed_once(jnp.asarray(y0, dtype), one)]
    reciprocal = 1 / (2 * shielded(ys[0]))  # one division, then products (`_divide_rows`)
    for k in range(1, order + 1):
        square = None
        for term in folded_square_terms(ys, k):
            square = term if square is None else square + term
        top = xs[k]
        if square is not None:
            top = -square if top is None else top - square
        if top is None:
            ys.append(jnp.zeros(shape, dtype))
        else:
            ys.append(computed_once(top * reciprocal, one, while_small=while_small))
    return stack_rows_as(ys, shape, dtype)


def tanh(x: Array, y0: Array, order: int, rows_once: bool = True) -> Array:
    """`tanh(x) = s (1 - e) / (1 + e)` with `e = exp(-2 s x)`, `s = sign(x_0)`: no overflow.

    Unrolled (small orders), its Riccati equation instead: `y' = z x'` with
    `z = 1 - y^2`, one recurrence instead of an exponential and a division
    (`rows_once`: see `tanh_riccati`).
    """
    if unrolled(order):
        return tanh_riccati(x, y0, order, rows_once)
    x = pad_degree(x, order)
    sign = jnp.where(x[0] >= 0, 1, -1).astype(x.dtype)
    z = -2 * sign * x
    (e,) = linear_ode(z, [lax.exp(z[0])], [[1]], order)
    num = with_primal(-e, 1 - e[0])
    den = with_primal(e, 1 + e[0])
    q = divide(num, den, order)
    return with_primal(sign * q, y0)


def sech_squared(x0: Array) -> Array:
    """`1 / cosh(x0)^2`, for real `x0` as `4 e / (1 + e)^2` with `e = exp(-2 |x0|)`.

    One exponential instead of cosh's two, and no overflow: `e` underflows to 0 only
    where the result does.
    """
    if jnp.iscomplexobj(x0):
        return 1 / lax.square(lax.cosh(x0))
    e = lax.exp(-2 * lax.abs(x0))
    return 4 * e / lax.square(1 + e)


def logistic_slope(x0: Array) -> Array:
    """`logistic'(x0) = s (1 - s)` with `s = logistic(-|x0|)`, accurate at every `x0`.

    `y0 (1 - y0)` loses its digits where `y0` nears 1; `s <= 1/2` keeps them in `1 - s`,
    and `logistic(x) logistic(-x)` is even in `x`.
    """
    s = lax.logistic(-lax.abs(x0))
    return s * (1 - s)


def logistic(x: Array, y0: Array, order: int, rows_once: bool = True) -> Array:
    """`logistic(x)` from its Riccati equation `y' = z x'`, `z = y - y^2` (unrolled
    orders only: `_riccati`), `z_0` from `logistic_slope` (`rows_once`: see `_riccati`)."""
    return _riccati(x, y0, logistic_slope, 1.0, order, rows_once)


def tanh_riccati(x: Array, y0: Array, order: int, rows_once: bool = True) -> Array:
    """`tanh(x)` from its Riccati equation `y' = z x'`, `z = 1 - y^2` (`_riccati`).

    `z_0 = 1 - y_0^2` loses all its digits where tanh saturates; `1 / cosh(x_0)^2` keeps
    them (it underflows to 0 only where every coefficient past 0 does).
    """
    return _riccati(x, y0, sech_squared, 0.0, order, rows_once)


def _riccati(x: Array, y0, slope, linear: float, order: int, rows_once: bool) -> Array:
    """`y` with `y' = z x'` and `z = c + linear y - y^2` (`c` a constant), from `y_0` and
    `z_0 = slope(x_0)`: `k y_k = sum_{j=1..k} j x_j z_{k-j}`, and for m >= 1
    `z_m = linear y_m - sum_{i<=m} y_i y_{m-i}`.

    `rows_once=False` leaves the rows past 0 unmarked, for readers that take each row
    as its own buffer (a matmul per row): XLA then fuses each row's few products with
    its neighbours. Read as one stack instead, unmarked rows are recomputed in every
    later row (docs/EMISSION.md, "Recurrences"); up to the policy's
    `riccati_rows_unmarked_max_order` that recomputation costs less than a kernel and a
    buffer per row for large values, and they are marked only while small
    (docs/EMISSION.md, "tanh's rows unmarked", "Rows marked by size").
    """
    while_small = _rows_while_small(_policy.current().riccati_rows_unmarked_max_order, order)
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0))
    xs, jx = derivative_rows(x, dtype, order)
    one = opaque_one(xs[0])
    # y_0 too: every later row reads it, and XLA would recompute tanh in each of them.
    ys = [computed_once(jnp.asarray(y0, dtype), one)]
    zs = [computed_once(slope(xs[0]), one)]
    for k in range(1, order + 1):
        acc = dot_rows((jx[j], zs[k - j]) for j in range(1, k + 1))
        if acc is None:
            ys.append(jnp.zeros(shape, dtype))
        else:
            row = acc / float(k)
            ys.append(computed_once(row, one, while_small=while_small) if rows_once else row)
        if k < order:
            terms = folded_square_terms(ys, k)
            # (linear - 2 y_0) y_k: one product, as `2 y_0 y_k` alone was for tanh.
            total = (2 * ys[0] - linear) * ys[k] if linear else 2 * ys[0] * ys[k]
            for term in terms:
                total = total + term
            # Not computed once: a few products that XLA fuses into the next row, cheaper
            # than a buffer written and read back (docs/EMISSION.md, "Recurrences").
            zs.append(-total)
    return stack_rows_as(ys, shape, dtype)


def erf_inv(x: Array, y0: Array, order: int) -> Array:
    """`y = erfinv(x)` unrolled, from its inverse-function equation `y' = c w x'` with
    `c = sqrt(pi) / 2`, `w = exp(q)` and `q = y^2`:

    `k y_k = c sum_{j=1..k} j x_j w_{k-j}`, `q_m = sum_{i<=m} y_i y_{m-i}` and
    `k w_k = sum_{j=1..k} j q_j w_{k-j}`.

    The rows of `y` and `w` are computed once; those of `q` (a few products, folded by
    the square's symmetry) fuse into the rows of `w` that read them, as `_riccati`'s
    slope does. The loop form this replaces at unrolled orders kept (points, K + 1)
    stacks under `vmap` (docs/EMISSION.md, "Stacks under vmap").
    """
    dtype = jnp.result_type(x, y0)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(y0))
    xs, jx = derivative_rows(x, dtype, order)
    one = opaque_one(xs[0])
    c = math.sqrt(math.pi) / 2
    y0 = jnp.asarray(y0, dtype)
    ys = [computed_once(y0, one)]
    ws = [computed_once(lax.exp(y0 * y0), one)]
    jq: list = [None]  # m q_m
    for k in range(1, order + 1):
        acc = dot_rows((jx[j], ws[k - j]) for j in range(1, k + 1))
        ys.append(jnp.zeros(shape, dtype) if acc is None else computed_once(acc * (c / k), one))
        if k == order:
            break
        q = 2 * ys[0] * ys[k]
        for term in folded_square_terms(ys, k):
            q = q + term
        jq.append(q * float(k))
        acc = dot_rows((jq[j], ws[k - j]) for j in range(1, k + 1))
        ws.append(jnp.zeros(shape, dtype) if acc is None else computed_once(acc / float(k), one))
    return stack_rows_as(ys, shape, dtype)


def compose(x: Array, taylor_coeffs: Array, order: int) -> Array:
    """`y_k = sum_{m<=k} d_m ((x - x_0)^m)_k` (Faa di Bruno).

    `taylor_coeffs[m] = d_m = f^(m)(x_0) / m!`, stacked `(order+1, *S)`. Only
    `m <= k` enters coefficient `k`, so a non-finite `d_m` (a power past its
    smooth order at 0) poisons exactly the coefficients nested jvp poisons.
    O(order^3): used only where the recurrences would divide by zero.
    """
    dtype = jnp.result_type(x, taylor_coeffs)
    shape = jnp.broadcast_shapes(x.shape[1:], jnp.shape(taylor_coeffs)[1:])
    if order <= _policy.current().rows_max_order:
        return _compose_rows(x, taylor_coeffs, order, shape, dtype)
    x = pad_degree(x, order)
    x = jnp.broadcast_to(x, (order + 1,) + shape).astype(dtype)
    d = jnp.broadcast_to(taylor_coeffs, (order + 1,) + shape).astype(dtype)
    delta = with_primal(x, jnp.zeros(shape, dtype))
    table = toeplitz(delta, order + 1, order + 1)
    ks = orders(order, len(shape), dtype)
    acc = fresh(d[0], order, dtype)

    def body(m, carry):
        acc, power = carry
        term = get_coeff(d, m, keepdims=True) * power
        acc = acc + jnp.where(ks >= as_real(m, dtype), term, jnp.zeros_like(term))
        return acc, jnp.sum(table * power[None], axis=1)

    return fori(order, body, (acc, delta))[0]


def _compose_rows(x: Array, taylor_coeffs: Array, order: int, shape, dtype) -> Array:
    """`compose` unrolled: the powers `(x - x_0)^m` as rows, row `k` of the m-th power a
    sum over rows of the (m-1)-th (zero below row m, which is never formed or added).

    About order^3 / 6 products of rows that XLA fuses. The loop's Toeplitz table is a
    batched matmul, a reduce-window and transposes under `vmap`, where `lax.cond` runs
    both branches, and those took most of a pass's time (docs/EMISSION.md, "Rows").
    """
    deltas = [None] + rows_of(x.astype(dtype), order + 1)[1:]
    ds = rows_of(jnp.asarray(taylor_coeffs, dtype), order + 1)
    out = [ds[0]] + [None] * order
    power = deltas  # (delta^m)_k for the current m; None where known to be zero
    for m in range(1, order + 1):
        if m > 1:
            power = [None] * m + [
                dot_rows((deltas[i], power[k - i]) for i in range(1, k - m + 2))
                for k in range(m, order + 1)
            ]
        if ds[m] is None:
            continue
        for k in range(m, order + 1):
            if power[k] is not None:
                term = ds[m] * power[k]
                out[k] = term if out[k] is None else out[k] + term
    return stack_rows_as([jnp.zeros(shape, dtype) if r is None else r for r in out], shape, dtype)
