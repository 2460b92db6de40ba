"""Taylor coefficients of the solution of an ODE `y' = f(t, y, args)` at `(t0, y0)`.

The solution's coefficients are known one order at a time: `y_{k+1} = F_k / (k + 1)`,
where `F(s) = f(t0 + s, y(s), args)` and `F_k` depends on `y_0..y_k` only. Evaluating
that recurrence with whole-series passes costs a pass per order, O(K^3) in all. Two ways
to O(K^2), chosen by `solution_series`:

- order by order (`_order_by_order.py`): the field's program evaluated one coefficient
  at a time, each primitive by its own recurrence. No Jacobian and no repeated pass, so
  it is the faster where it applies (3-24x, docs/ODE.md); it needs a recurrence for every
  primitive of the field.
- doubling (here), for any field taylax can differentiate: the known order doubles each
  sweep (Newton's method on the series, as in Brent and Kung's algorithms for power
  series). With `y_0..y_m` known, write the solution as `y = p + z` with `p` the known
  polynomial and `z = O(s^(m+1))`. Then

      F = f(t, p) + J(s) z + O(s^(2m+2)),     J(s) = df/dy (t0 + s, p(s)),

  so one pass of `f` along `p` (to order 2m + 1) and one pass of its Jacobian `df/dy`
  along `p` (to order m) give `y_{m+1}..y_{2m+2}` by a linear recurrence. About log2(K)
  sweeps, planned backwards from K so that the last one doubles fully; its passes, of
  orders K - 1 and about K / 2, dominate: O(K^2) coefficient work in all, times about
  (1 + n / 4) for a state of n numbers (the Jacobian's n columns at half the order).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._api import normalized_jet
from .._programs import check_inexact, check_order
from . import _order_by_order


def _check_state(y0) -> None:
    leaves = jax.tree.leaves(y0)
    if not leaves:
        raise ValueError("`y0` holds no arrays: pass the initial state as an array or a pytree.")
    check_inexact(leaves, "y0", example="y0")


def _real_view(y0):
    """`(w0, to_state, from_state)`: the state as one real vector, and back.

    A complex state goes in as its real and imaginary parts, so that a vector field that
    is not holomorphic (one that takes `conj` or `abs`) has a real-linear Jacobian.
    """
    v0, unravel = ravel_pytree(y0)
    if not jnp.issubdtype(v0.dtype, np.complexfloating):
        return v0, unravel, lambda y: ravel_pytree(y)[0]
    n = v0.shape[0]

    def to_state(w):
        return unravel(jax.lax.complex(w[..., :n], w[..., n:]))

    def from_state(y):
        v = ravel_pytree(y)[0]
        return jnp.concatenate([jnp.real(v), jnp.imag(v)], axis=-1)

    return from_state(y0), to_state, from_state


def _checked_field(vector_field, args, y0):
    """`vector_field(t, y, args)`, raising a clear error when its result is not shaped and
    typed like the state."""

    def field(t, y):
        out = vector_field(t, y, args)
        want, got = jax.tree.structure(y0), jax.tree.structure(out)
        if want != got:
            raise ValueError(
                "`vector_field(t, y, args)` must return a pytree shaped like `y0`: "
                f"`y0` is {want} but the vector field returned {got}."
            )
        for a, b in zip(jax.tree.leaves(y0), jax.tree.leaves(out)):
            if jnp.shape(a) != jnp.shape(b):
                raise ValueError(
                    "`vector_field(t, y, args)` must return arrays shaped like `y0`'s: got "
                    f"shape {jnp.shape(b)} for a state leaf of shape {jnp.shape(a)}."
                )
            if jnp.issubdtype(jnp.result_type(b), np.complexfloating) and not jnp.issubdtype(
                jnp.result_type(a), np.complexfloating
            ):
                raise TypeError(
                    "`vector_field(t, y, args)` returned a complex array for a real state "
                    "leaf: make `y0` complex (e.g. `y0.astype(complex)`) for a complex ODE."
                )
        return jax.tree.map(lambda a, b: jnp.asarray(b).astype(jnp.result_type(a)), y0, out)

    return field


def _pass(g, t0, w_series, order: int):
    """Coefficients `F_0..F_order` of `g(t0 + s, w(s))` for the coefficients `w_series`
    (`w_0` first; missing ones are zero), stacked `(order + 1, n)`."""
    w0 = w_series[0]
    if order == 0:
        return g(t0, w0)[None]
    one, zero = jnp.ones_like(t0), jnp.zeros_like(t0)
    t_terms = [one] + [zero] * (order - 1)
    w_terms = list(w_series[1 : order + 1])
    w_terms += [jnp.zeros_like(w0)] * (order - len(w_terms))
    f0, terms = normalized_jet(g, (t0, w0), (t_terms, w_terms))
    return jnp.stack([f0, *terms])


def _schedule(order: int) -> list[int]:
    """The orders known after each sweep, ending at `order`: each at most twice the one
    before plus 2, chosen backwards from `order` so that the last sweep doubles fully
    (its pass, of order `order - 1`, is then most of the work)."""
    known = [order]
    while known[-1] > 0:
        known.append(max(0, -(-(known[-1] - 2) // 2)))
    return known[::-1][1:]


def _sweep(g, jac_g, t0, w, top: int) -> list:
    """From the known coefficients `w` (`w_0..w_m`), those up to `top <= 2m + 2`."""
    m = len(w) - 1
    f = _pass(g, t0, w, top - 1)
    # J_0..J_q, the Jacobian's coefficients that the new orders read, (q + 1, n, n): a
    # pass of the Jacobian's program (about three times faster than `jax.jacfwd` of a
    # pass, benchmarks/bench_ode_coefficients.py).
    q = top - m - 2
    jac = _pass(jac_g, t0, w, q) if q >= 0 else None
    w = list(w)
    for k in range(m, top):
        # F_k = f_k + sum_{i < k - m} J_i z_{k - i}, where z_j = w_j for j > m.
        rhs = f[k]
        if k > m:
            z = jnp.stack([w[k - i] for i in range(k - m)])
            if z.ndim > 2:
                # A trailing axis of trajectories (`batched_problem`): a product and a sum,
                # which XLA fuses into one pass over the batch. As an `einsum` it is a dot
                # whose batch axis is the minor one, written with transposes of every
                # Jacobian coefficient: 1.6x the coefficients' time for 4,096 Kepler
                # orbits at order 16 (docs/ODE.md, "The batch mode").
                rhs = rhs + jnp.sum(jac[: k - m] * z[:, None], axis=(0, 2))
            else:
                rhs = rhs + jnp.einsum("inj,ij->n", jac[: k - m], z)
        w.append(rhs / (k + 1))
    return w


METHODS = ("auto", "order_by_order", "doubling")


def check_method(method, name: str = "method") -> str:
    """`method` if it names a way to the coefficients, else a clear error."""
    if method not in METHODS:
        raise ValueError(
            f"`{name}` must be one of {', '.join(repr(m) for m in METHODS)}, got {method!r}."
        )
    return method


def coefficients(
    vector_field: Callable, order: int, *, batch: bool = False, method: str = "auto"
) -> Callable:
    """Taylor coefficients of the solution of an ODE, in O(K^2) coefficient work.

    **Arguments:**

    - `vector_field`: `f(t, y, args)`, the right-hand side of `y' = f(t, y, args)` (as
      in diffrax): any JAX function of a time, a state pytree of floating-point or
      complex arrays and anything else, returning a pytree shaped like the state.
    - `order`: the truncation order `K >= 0` (a Python integer).
    - `batch`: many trajectories at once, as in `taylax.ode.integrate(..., batch=True)`:
      every leaf of `y0` ends in an axis of B trajectories, `t0` is a scalar or a `(B,)`
      array of their times, and `vector_field(t, y, args)` maps the trajectories apart
      (with `t` a `(B,)` array). Every array of the Taylor passes then has the
      trajectories as its minor axis, which XLA:CPU runs faster than `jax.vmap`'s layout.
    - `method`: `"order_by_order"` evaluates the vector field's program one coefficient at
      a time, which needs a recurrence for each of its primitives: arithmetic, powers,
      exp, log, trigonometric and hyperbolic functions and their inverses, `erf`, `erfc`,
      `dot_general`, `abs`, `max`, `min`, `clamp`, selections and every linear or
      structural primitive, through `jax.jit`, `custom_jvp` (whose primal function it
      follows) and `custom_vjp`.
      `"doubling"` takes any function taylax can differentiate (control flow, linear
      algebra, special functions), by Newton sweeps that double the known order. `"auto"`
      (default): order by order where the field allows it, else doubling.

    **Returns:** a function `(t0, y0, args=None) -> coefficients`, where `coefficients`
    has `y0`'s pytree structure with leaves stacked `(K + 1, *leaf.shape)`: entry `k` is
    the normalized coefficient `y_k = y^(k)(t0) / k!` of the solution through
    `y(t0) = y0`, so that `y(t0 + h) ~ sum_k y_k h^k`. It works under `jax.jit`,
    `jax.vmap` and `jax.grad` (with respect to `y0`, `t0` and the arrays in `args`).

    The math: `y_{k+1} = F_k / (k + 1)` with `F(s) = f(t0 + s, y(s), args)`, and `F_k`
    depends on `y_0..y_k` only. Order by order, every equation of `f`'s program adds its
    coefficient k from the known ones (`c_k = sum_j a_j b_{k-j}` for `c = a b`,
    `e_k = sum_{j >= 1} (j / k) x_j e_{k-j}` for `e = exp(x)`, ...): O(k) work per
    equation and order (`taylax/ode/_order_by_order.py`). Doubling: each sweep doubles
    the known order by Newton's method on the series, a Taylor pass of `f` along the
    known polynomial corrected by the Jacobian's coefficients along it for the orders not
    yet known (`taylax/ode/_coefficients.py`); about log2(K) sweeps, the last of order
    K - 1. Both cost O(K^2); order by order has no Jacobian and is 3-24x faster
    (docs/ODE.md).

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        # y' = 1 + y^2 through y(0) = 0 is tan(t) = t + t^3/3 + 2 t^5/15 + ...
        c = taylax.ode.coefficients(lambda t, y, args: 1 + y**2, 5)(0.0, jnp.array(0.0))
        # c == [0, 1, 0, 1/3, 0, 2/15]
        ```
    """
    order = check_order(order)
    if not isinstance(batch, bool):
        raise TypeError(f"`batch` must be True or False, got {batch!r}.")
    check_method(method)

    def solution_coefficients(t0, y0, args=None):
        if not batch:
            w0, g, to_state = real_problem(vector_field, y0, args)
            t0 = check_time(t0, w0.dtype, "t0")
            return jax.vmap(to_state)(solution_series(g, t0, w0, order, method=method))
        w0, g, to_state = batched_problem(vector_field, y0, args)
        t0 = _batch_times(t0, w0.dtype, w0.shape[-1])
        return jax.vmap(to_state)(solution_series(g, t0, w0, order, True, method))

    return solution_coefficients


def real_problem(vector_field, y0, args):
    """`(w0, g, to_state)`: the ODE as `w' = g(t, w)` on one real vector `w0`, and the map
    from such vectors back to states. Raises clear errors for a bad `y0` or a vector
    field whose result is not shaped like the state."""
    _check_state(y0)
    field = _checked_field(vector_field, args, y0)
    w0, to_state, from_state = _real_view(y0)

    def g(t, w):
        return from_state(field(t, to_state(w)))

    return w0, g, to_state


def batched_problem(vector_field, y0, args):
    """`(w0, g, to_state)` for a batch of trajectories along the last axis of every leaf
    of `y0`: the ODE as `w' = g(t, w)` on real arrays `w` shaped `(n, B)` (the batch as the
    minor axis, so that each operation of a Taylor pass runs over all trajectories at
    once) and `t` shaped `(B,)`, and the map from such arrays back to states. Raises clear
    errors for a bad `y0` or a vector field whose result is not shaped like the state."""
    _check_state(y0)
    leaves, tree = jax.tree.flatten(y0)
    batch = {jnp.shape(leaf)[-1] if jnp.ndim(leaf) else None for leaf in leaves}
    if len(batch) != 1 or None in batch:
        raise ValueError(
            "With `batch=True` every leaf of `y0` must end in the same axis of trajectories, "
            f"got leaves of shapes {[jnp.shape(leaf) for leaf in leaves]}."
        )
    (size,) = batch
    shapes = [jnp.shape(leaf)[:-1] for leaf in leaves]
    dtypes = [jnp.result_type(leaf) for leaf in leaves]
    dtype = jnp.result_type(*dtypes)
    is_complex = jnp.issubdtype(dtype, np.complexfloating)
    counts = [int(np.prod(shape, dtype=int)) for shape in shapes]
    n = sum(counts)

    def from_state(y):
        v = jnp.concatenate(
            [jnp.reshape(leaf, (-1, size)).astype(dtype) for leaf in jax.tree.leaves(y)], axis=0
        )
        return jnp.concatenate([jnp.real(v), jnp.imag(v)], axis=0) if is_complex else v

    def to_state(w):
        v = jax.lax.complex(w[:n], w[n:]) if is_complex else w
        out, start = [], 0
        for shape, count, leaf_dtype in zip(shapes, counts, dtypes):
            part = v[start : start + count]
            if is_complex and not jnp.issubdtype(leaf_dtype, np.complexfloating):
                part = jnp.real(part)  # a real leaf of a complex state
            out.append(jnp.reshape(part, (*shape, size)).astype(leaf_dtype))
            start += count
        return jax.tree.unflatten(tree, out)

    field = _checked_field(vector_field, args, y0)

    def g(t, w):
        return from_state(field(t, to_state(w)))

    return from_state(y0), g, to_state


def check_time(t, dtype, name: str):
    """`t` as a real scalar of `dtype`, or a clear error naming the argument."""
    t = jnp.asarray(t)
    if t.shape != () or jnp.issubdtype(t.dtype, np.complexfloating):
        raise ValueError(
            f"`{name}` must be a real scalar time, got a {t.dtype} array of shape {t.shape}."
        )
    return t.astype(dtype)


def _batch_times(t0, dtype, size: int):
    """`t0` as the `(size,)` real times of a batch of trajectories (a scalar is every
    trajectory's), or a clear error naming the argument."""
    t0 = jnp.asarray(t0)
    if t0.shape not in ((), (size,)) or jnp.issubdtype(t0.dtype, np.complexfloating):
        raise ValueError(
            f"With `batch=True`, `t0` must be a real scalar or a real array of shape "
            f"({size},), one time per trajectory, got a {t0.dtype} array of shape {t0.shape}."
        )
    return jnp.broadcast_to(t0.astype(dtype), (size,))


def horner(c, h):
    """`sum_k c[k] h^k` for coefficients `c` stacked `(K + 1, ...)` (Horner's rule): the
    solution's polynomial at an offset `h` from its point. `c` may also be the rows of
    `solution_rows` (`c[k][i]`); the rows' values are then stacked."""
    if isinstance(c, list):
        return jnp.stack([_horner(orders, h) for orders in zip(*c)])
    return _horner(c, h)


def _horner(c, h):
    out = c[-1]
    for k in range(len(c) - 2, -1, -1):
        out = out * h + c[k]
    return out


@jax.custom_jvp
def horner_for_vjp(c, h):
    """`horner` with its derivative written out for reverse mode (`_horner_jvp`; `h`
    broadcasts against one coefficient). Transposed as it stands, Horner's chain
    `out * h + c[k]` gives each coefficient's cotangent as a chain of products by `h`,
    which XLA:CPU fused into every consumer of the coefficients' transposed recurrences: a
    reverse-mode step of a batch cost 80x a forward one (docs/ODE.md). Forward mode keeps
    `horner`, whose own derivative runs faster there."""
    return horner(c, h)


@horner_for_vjp.defjvp
def _horner_jvp(primals, tangents):
    """`d horner = sum_k dc[k] h^k + dh sum_k k c[k] h^(k-1)`: the powers of `h` once, as
    one stacked array, so that the cotangent of `c` is one broadcast product."""
    c, h = primals
    dc, dh = tangents
    h = jnp.asarray(h, c.dtype)
    order = c.shape[0] - 1
    powers = [jnp.ones_like(h)]
    for _ in range(order):
        powers.append(powers[-1] * h)
    powers = jnp.stack(powers).reshape((order + 1,) + (1,) * (c.ndim - 1 - h.ndim) + h.shape)
    value = horner(c, h)
    tangent = jnp.sum(dc * powers, axis=0)
    if order:
        ks = jnp.arange(1, order + 1, dtype=c.dtype).reshape((order,) + (1,) * (c.ndim - 1))
        tangent = tangent + dh * horner(c[1:] * ks, h)
    return value, jnp.broadcast_to(tangent, value.shape)


def time_direction(ts, dtype):
    """The integration's direction in time over the saved times `ts`: 1 forwards (from
    `ts[0]` to `ts[-1]`), -1 backwards, as `dtype`."""
    return jnp.where(ts[-1] >= ts[0], 1.0, -1.0).astype(dtype)


def at_times(c, ts, t, t_low):
    """The polynomial `c` of a step from `t + t_low` at every time of `ts`:
    `(offsets, values)`, the offsets `ts - t - t_low` (shaped `ts.shape + t.shape`) and
    `horner(c, offset)` at each."""
    offsets = (ts.reshape(ts.shape + (1,) * t.ndim) - t) - t_low
    return offsets, jax.vmap(lambda d: horner(c, d))(offsets)


def batched_jacobian(g):
    """`(t, w) -> J`, the Jacobian of `g` for each trajectory of a batch `w` shaped `(n, B)`
    (`J[i, j, b] = d g_i / d w_j` of trajectory b, shaped `(n, n, B)`): `g` maps the
    trajectories apart, so one `jvp` along each basis vector, broadcast over the batch,
    gives one column for every trajectory at once."""

    def jac_g(t, w):
        n = w.shape[0]
        eye = jnp.eye(n, dtype=w.dtype).reshape((n, n) + (1,) * (w.ndim - 1))
        basis = jnp.broadcast_to(eye, (n, *w.shape))
        columns = jax.vmap(lambda e: jax.jvp(lambda u: g(t, u), (w,), (e,))[1])(basis)
        return jnp.swapaxes(columns, 0, 1)

    return jac_g


def solution_rows(g, t0, w0, order: int) -> list[list] | None:
    """The coefficients of `solution_series` as `c[k][i]`, coefficient k of row i of the
    state `w0` (`(n,)`, or `(n, B)` for B trajectories), each a separate array that the
    caller reads apart (`_order_by_order.solution_rows`), computed order by order; None
    where the field has a primitive without a recurrence."""
    program = _order_by_order.field_rows_program(g, t0, w0)
    if _order_by_order.unsupported_primitive(program) is not None:
        return None
    return _order_by_order.solution_rows(program, t0, w0, order)


def solution_series(g, t0, w0, order: int, batched: bool = False, method: str = "auto"):
    """Coefficients `w_0..w_order` of the solution of `w' = g(t, w)` through `w(t0) = w0`,
    stacked `(order + 1, n)`. `batched`: `w0` is `(n, B)`, B trajectories along the minor
    axis that `g` maps apart, and `t0` their times `(B,)`; the coefficients are then
    `(order + 1, n, B)`.

    `method`: `"order_by_order"` evaluates `g`'s program one coefficient at a time
    (`_order_by_order.py`; every primitive of `g` needs a recurrence there),
    `"doubling"` runs the sweeps of this module's docstring (any program taylax can
    differentiate), and `"auto"` the first where it applies (3-24x faster, docs/ODE.md).
    """
    if method != "doubling":
        program = _order_by_order.field_program(g, t0, w0)
        missing = _order_by_order.unsupported_primitive(program)
        if missing is None:
            return _order_by_order.solution_series(program, t0, w0, order)
        if method == "order_by_order":
            raise ValueError(
                "`method='order_by_order'` needs a recurrence for every primitive of the "
                f"vector field, and taylax has none for `{missing}`: use `method='auto'` "
                "(or 'doubling'), which computes these coefficients by doubling sweeps."
            )
    jac_g = batched_jacobian(g) if batched else jax.jacfwd(g, argnums=1)
    w = [w0]
    for top in _schedule(order):
        w = _sweep(g, jac_g, t0, w, top)
    return jnp.stack(w)
