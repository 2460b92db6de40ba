"""Differential operators in one collapsed Taylor pass.

Every operator here is a weighted sum of order-`K` directional derivatives
`D^K f[v] = K! y_K[v]` at one point, evaluated by `taylax._collapsed`: one primal,
per-direction coefficients below `K`, and the top coefficient summed over the
directions (or kept per direction where the operator needs each one).

* Laplacian: `sum_i D^2 f[e_i]`; Hutchinson's estimate `E[D^2 f[v]]` for Rademacher
  or Gaussian `v`;
* weighted Laplacian `sum_ij a_ij d_i d_j f = sum_k lambda_k D^2 f[q_k]` for
  `a = Q diag(lambda) Q^T`, or `sum_k D^2 f[s_k]` for a factor `a = S S^T`;
* biharmonic: one forward pass carrying the gradient, the packed symmetric Hessian,
  `grad Delta` and `Delta^2` of every value (`taylax._biharmonic`), or, where a
  program has an equation that pass has no rule for, the Laplacian of the Laplacian
  (two nested collapsed passes of order 2); its unbiased estimate `E[D^4 f[v]] / 3`
  for Gaussian `v`;
* any mixed partial `d^i f` with `|i| = p` by exact interpolation from the
  directions `j` with `|j| = p` (Griewank, Utke and Walther, Math. Comp. 2000):
  `d^i f = sum_j gamma_ij y_p[j]`, which gives general linear operators and
  derivative tensors.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Mapping
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _biharmonic, _policy
from ._collapsed import Collapsed, eval_jaxpr_collapsed, seed, top_or_zeros
from ._programs import cached_program, check_order, trace_leaves

Array = jax.Array


# --------------------------------------------------------------------------
# The one pass every operator runs
# --------------------------------------------------------------------------


def _check_point(x, api: str):
    try:
        x = jnp.asarray(x)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"`{api}` differentiates with respect to `x`, which must be one array; got a "
            f"{type(x).__name__} that is not one. For a pytree of arrays, pass them as one "
            "flat array (`jax.flatten_util.ravel_pytree`) and unflatten it inside `fun`."
        ) from err
    dtype = x.dtype
    if not jnp.issubdtype(dtype, np.floating):
        kind = "complex" if jnp.issubdtype(dtype, np.complexfloating) else "not floating-point"
        raise TypeError(
            f"`{api}` differentiates with respect to `x`, which must be a real floating-point "
            f"array; got dtype {dtype} ({kind}). Convert it, e.g. `x.astype(float)`"
            + (
                ", or split a complex input into real and imaginary parts."
                if kind == "complex"
                else "."
            )
        )
    return x


def _collapsed_program(order: int, summed: bool, weighted: bool, constant_weight):
    def make(jaxpr):
        def program(consts, x, arg_leaves, directions, weights):
            w = weights if weighted else constant_weight
            inputs = [seed(x, directions, order, w, summed)]
            inputs += [Collapsed(a) for a in arg_leaves]
            outs = eval_jaxpr_collapsed(jaxpr, consts, inputs, order, w, summed)
            primals, tops = [], []
            count = directions.shape[0]
            for o, v in zip(outs, jaxpr.outvars):
                aval = v.aval
                primal = jnp.broadcast_to(jnp.asarray(o.primal, aval.dtype), aval.shape)
                shape = aval.shape if summed else (count, *aval.shape)
                primals.append(primal)
                tops.append(top_or_zeros(o.top, aval, shape))
            return primals, tops

        return program

    return make


# Blocks of directions for a summed pass with many of them (`_run`), where the policy
# takes them (XLA:CPU): one pass over every direction fills a (points, d, width) buffer of
# hidden rows that page-faults afresh on every call; blocks keep the buffers small enough
# for glibc to reuse. Figures in docs/EMISSION.md ("Blocks of directions").


def _run(fun, x, args, order, directions, weights, summed, api):
    """`(top coefficients, output tree)` of one collapsed pass.

    `weights`: an array `(D,)`, a float (every direction's weight, part of the
    compiled program) or None (every weight 1). A summed pass's tops are
    `sum_d w_d y_K[v_d]`; a pass with `summed=False` takes None only.
    """
    closed, out_tree = trace_leaves(lambda x, *args: fun(x, *args), (x, *args), api)
    if x.size == 0:
        # No entry to differentiate along: every directional derivative is zero, and so
        # is every sum of them (an empty sum), as `jax.hessian` gives.
        count = directions.shape[0]
        tops = [
            jnp.zeros(a.shape if summed else (count, *a.shape), a.dtype) for a in closed.out_avals
        ]
        return tops, out_tree
    arg_leaves = jax.tree.leaves(args)
    constant_weight = weights if isinstance(weights, float) else None
    weighted = weights is not None and constant_weight is None
    static = ("collapsed", order, summed, weighted, constant_weight)
    program, consts = cached_program(
        closed, static, fun, _collapsed_program(order, summed, weighted, constant_weight)
    )
    if not weighted:
        weights = jnp.zeros((0,), x.dtype)
    count = directions.shape[0]
    # Blocks save XLA:CPU's page faults; the policy says where they are taken.
    policy = _policy.current()
    if not summed or not policy.blocked_directions or count < policy.blocked_min_directions:
        _, tops = program(consts, x, arg_leaves, directions, weights)
        return tops, out_tree
    # Summed tops add up over blocks of directions: each block's per-direction values
    # (a hidden layer's rows for every direction of the block) make buffers a fraction
    # of the size, which glibc keeps from call to call (see the policy's `unrolled_block`).

    def block_of(start, size):
        if isinstance(start, int):
            block_directions = directions[start : start + size]
            block_weights = weights[start : start + size] if weighted else weights
        else:
            block_directions = lax.dynamic_slice_in_dim(directions, start, size)
            block_weights = lax.dynamic_slice_in_dim(weights, start, size) if weighted else weights
        return consts, x, arg_leaves, block_directions, block_weights

    blocks = max(2, -(-count // policy.unrolled_block))
    if blocks <= policy.unrolled_max_blocks:
        size = -(-count // blocks)
        tops = None
        for start in range(0, count, size):
            _, block_tops = program(*block_of(start, min(size, count - start)))
            tops = block_tops if tops is None else [a + b for a, b in zip(tops, block_tops)]
        return tops, out_tree
    # Many blocks: the full ones in a loop (one copy of the pass to compile), a remainder
    # after it.
    block = policy.direction_block
    full = count // block * block

    def step(total, start):
        _, block_tops = program(*block_of(start, block))
        return [a + b for a, b in zip(total, block_tops)], None

    _, shapes = jax.eval_shape(program, *block_of(0, block))
    zeros = [jnp.zeros(t.shape, t.dtype) for t in shapes]
    tops, _ = lax.scan(step, zeros, jnp.arange(0, full, block))
    if full < count:
        _, rest = program(*block_of(full, count - full))
        tops = [a + b for a, b in zip(tops, rest)]
    return tops, out_tree


def _basis(x: Array) -> Array:
    """The unit directions `e_i` of `x`'s entries, shaped `(x.size, *x.shape)`."""
    return jnp.eye(x.size, dtype=x.dtype).reshape((x.size, *x.shape))


def _check_samples(key, samples, api: str) -> int:
    if key is None:
        if samples is not None:
            raise ValueError(f"`{api}`: `samples` needs `key` (a jax.random key) to draw them.")
        return 0
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise ValueError(
            f"`{api}`: `samples` must be a positive Python integer when `key` is given, got "
            f"{samples!r}."
        )
    return int(samples)


# --------------------------------------------------------------------------
# Laplacian, Hessian diagonal, weighted Laplacian
# --------------------------------------------------------------------------


_DISTRIBUTIONS = ("rademacher", "gaussian")


def _draw(key, samples: int, x: Array, distribution: str) -> Array:
    shape = (samples, *x.shape)
    if distribution == "rademacher":
        return jax.random.rademacher(key, shape, x.dtype)
    if distribution == "gaussian":
        return jax.random.normal(key, shape, x.dtype)
    raise ValueError(f"`distribution` must be 'rademacher' or 'gaussian', got {distribution!r}.")


def laplacian(fun: Callable, *, key=None, samples: int | None = None, distribution="rademacher"):
    """The Laplacian `sum_i d^2 f / dx_i^2` of `fun` at one point, in one collapsed pass.

    **Arguments:**

    - `fun`: a function `fun(x, *args)` of a real floating-point array `x` (any
      shape; the sum runs over all its entries), returning any pytree of arrays.
      Extra positional arguments are held fixed (they may be parameters you
      differentiate with `jax.grad`).
    - `key`, `samples`: with a `jax.random` key, an unbiased stochastic estimate
      from `samples` random directions instead (Hutchinson): `mean_s D^2 f[v_s]`.
    - `distribution`: the directions' distribution, `'rademacher'` (entries
      +-1, the default) or `'gaussian'`.

    **Returns:** a function `(x, *args) -> lap` with `fun`'s output structure, each
    leaf the Laplacian of that output entry. Use `jax.vmap` over a batch of points.

    The math: with the directions `e_i`, `Delta f = sum_i D^2 f[e_i] = 2 sum_i
    y_2[e_i]` for the normalized coefficients `y_2`. The primal and the gradient
    coefficients are computed once per point (the gradient per direction), and the
    second-order coefficient is summed over the directions as it goes (so a linear
    layer maps one summed array, not one per direction), as folx's forward
    Laplacian does. The estimator's variance per sample is `2 sum_{i != j} H_ij^2`
    for Rademacher directions and `2 ||H||_F^2` for Gaussian ones (`H` the
    Hessian); divide by `samples` for the mean.

    !!! Example

        ```python
        import jax, jax.numpy as jnp
        import taylax

        f = lambda x: jnp.sum(jnp.sin(x)) * jnp.exp(x[0])
        taylax.laplacian(f)(jnp.array([0.1, 0.2, 0.3]))
        jax.vmap(taylax.laplacian(f))(jnp.ones((256, 3)))   # a batch of points
        ```
    """
    count = _check_samples(key, samples, "taylax.laplacian")
    if distribution not in _DISTRIBUTIONS:
        raise ValueError(
            "`taylax.laplacian`: `distribution` must be 'rademacher' or 'gaussian', got "
            f"{distribution!r}."
        )
    if not count and distribution != "rademacher":
        raise ValueError(
            "`taylax.laplacian`: `distribution` chooses the random directions of the "
            "stochastic estimate; pass `key` and `samples` too, or leave `distribution` out "
            "for the exact Laplacian."
        )

    def evaluate(x, *args):
        # 2 = 2!: the pass sums normalized coefficients y_2 = D^2 f / 2.
        directions = _draw(key, count, x, distribution) if count else _basis(x)
        weight = 2.0 / count if count else 2.0
        tops, tree = _run(fun, x, args, 2, directions, weight, True, "taylax.laplacian")
        return jax.tree.unflatten(tree, tops)

    return _wrap(fun, evaluate, "taylax.laplacian")


def hessian_diagonal(fun: Callable):
    """The un-summed diagonal `d^2 f / dx_i^2` of the Hessian of `fun` at one point.

    **Arguments:**

    - `fun`: a function `fun(x, *args)` of a real floating-point array `x`,
      returning any pytree of arrays; extra arguments are held fixed.

    **Returns:** a function `(x, *args) -> diag` with `fun`'s output structure; a
    leaf of shape `S` gives `S + x.shape` (entry `[..., i]` is `d^2 y / dx_i^2`),
    the diagonal of what `jax.hessian` gives.

    One pass with one shared primal; the second-order coefficient is kept per
    direction instead of summed.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda x: jnp.sum(x**3)
        taylax.hessian_diagonal(f)(jnp.array([1.0, 2.0]))   # [6, 12]
        ```
    """

    def evaluate(x, *args):
        api = "taylax.hessian_diagonal"
        tops, tree = _run(fun, x, args, 2, _basis(x), None, False, api)
        return jax.tree.unflatten(tree, [_directions_last(2 * t, x.shape) for t in tops])

    return _wrap(fun, evaluate, "taylax.hessian_diagonal")


def _directions_last(t: Array, x_shape) -> Array:
    """`(x.size, *S)` -> `(*S, *x.shape)`, JAX's Jacobian layout (inputs last)."""
    moved = jnp.moveaxis(t, 0, -1)
    return moved.reshape(moved.shape[:-1] + tuple(x_shape))


def _symmetric_eigen(a: Array):
    """NumPy's `(values, vectors)` of the symmetric part of `a` where `a` is concrete,
    else None."""
    try:
        concrete = np.asarray(a)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        concrete = None
    if concrete is not None:
        return np.linalg.eigh((concrete + concrete.T) / 2)
    return None


def weighted_laplacian(fun: Callable, a=None, *, factor=None):
    """`sum_ij a_ij d^2 f / dx_i dx_j` of `fun` at one point, in one collapsed pass.

    **Arguments:**

    - `fun`: a function `fun(x, *args)` of a real floating-point array `x` with
      `d = x.size` entries (the indices `i, j` run over them in C order),
      returning any pytree of arrays.
    - `a`: the coefficients, a `(d, d)` array or a function `a(x)` returning one
      (a point-dependent operator).
    - `factor`: instead of `a`, a factor `s` with `a = s s^T`, a `(d, r)` array or
      a function `s(x)`: then `r` directions (the columns of `s`) suffice.

    **Returns:** a function `(x, *args)` with `fun`'s output structure.

    How many directions: a concrete `a` is diagonalized once, in NumPy (`a = Q
    diag(lambda) Q^T`, `d` directions `q_k` weighted `lambda_k`; only the
    symmetric part of `a` matters); a traced or point-dependent `a` uses the
    polarization `sum_i e_i^T H a_i = sum_i (D^2 f[e_i + a_i] - D^2 f[e_i - a_i]) / 4`
    with `a_i` row `i` of `a` (`2d` directions, no decomposition, differentiable
    in `a`); a factor uses its `r` columns.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda x: jnp.sin(x[0]) * x[1] ** 2
        a = jnp.array([[2.0, 0.5], [0.5, 1.0]])
        taylax.weighted_laplacian(f, a)(jnp.array([0.3, 0.7]))
        ```
    """
    if (a is None) == (factor is None):
        raise ValueError("`taylax.weighted_laplacian` needs exactly one of `a` and `factor`.")

    def evaluate(x, *args):
        d = x.size
        if factor is not None:
            s = jnp.asarray(factor(x) if callable(factor) else factor, x.dtype)
            _check_matrix(s, (d, None), "factor", d)
            directions, weights = jnp.moveaxis(s, 1, 0).reshape((s.shape[1], *x.shape)), 2.0
        else:
            m = jnp.asarray(a(x) if callable(a) else a, x.dtype)
            _check_matrix(m, (d, d), "a", d)
            eigen = _symmetric_eigen(m)
            if eigen is not None:
                values, vectors = eigen
                directions = jnp.asarray(vectors.T.reshape((d, *x.shape)), x.dtype)
                weights = jnp.asarray(2 * values, x.dtype)
            else:
                eye = jnp.eye(d, dtype=x.dtype)
                directions = jnp.concatenate([eye + m, eye - m]).reshape((2 * d, *x.shape))
                weights = jnp.asarray(np.repeat([0.5, -0.5], d), x.dtype)
        # Each weight carries 2 = 2!: the pass sums normalized coefficients y_2 = D^2 f / 2.
        api = "taylax.weighted_laplacian"
        tops, tree = _run(fun, x, args, 2, directions, weights, True, api)
        return jax.tree.unflatten(tree, tops)

    return _wrap(fun, evaluate, "taylax.weighted_laplacian")


def _check_matrix(m, shape, name: str, d: int) -> None:
    rows, cols = shape
    if m.ndim != 2 or m.shape[0] != rows or (cols is not None and m.shape[1] != cols):
        want = f"({rows}, {cols})" if cols is not None else f"({rows}, r)"
        raise ValueError(
            f"`{name}` must be a {want} matrix for an `x` with {d} entries, got shape {m.shape}."
        )


# --------------------------------------------------------------------------
# Biharmonic, general linear operators and derivative tensors (order p)
# --------------------------------------------------------------------------


# Cached biharmonic programs whose trace met an equation without a rule there: later
# calls go straight to nested Laplacians instead of tracing the pass again to fail.
_UNSUPPORTED_PROGRAMS: weakref.WeakSet = weakref.WeakSet()


def _exact_biharmonic(fun: Callable, x, args):
    """One symmetric-Hessian pass (`taylax._biharmonic`) where every equation has a rule
    there, else the Laplacian of the Laplacian."""
    closed, out_tree = trace_leaves(lambda x, *args: fun(x, *args), (x, *args), "taylax.biharmonic")
    program, consts = cached_program(closed, ("biharmonic",), fun, _biharmonic.program_of)
    if program not in _UNSUPPORTED_PROGRAMS and x.size:
        try:
            outs = program(consts, x, jax.tree.leaves(args))
            return jax.tree.unflatten(out_tree, outs)
        except _biharmonic.Unsupported:
            _UNSUPPORTED_PROGRAMS.add(program)
    return _exact_laplacian(_exact_laplacian(fun))(x, *args)


def _exact_laplacian(fun: Callable) -> Callable:
    """`(x, *args) -> Delta fun(x, *args)`: one collapsed pass along the basis of `x`."""

    def evaluate(x, *args):
        tops, tree = _run(fun, x, args, 2, _basis(x), 2.0, True, "taylax.biharmonic")
        return jax.tree.unflatten(tree, tops)

    return evaluate


def biharmonic(fun: Callable, *, key=None, samples: int | None = None):
    """The biharmonic `Delta^2 f = sum_ij d^4 f / dx_i^2 dx_j^2` of `fun` at one point.

    **Arguments:**

    - `fun`: a function `fun(x, *args)` of a real floating-point array `x` (the sums
      run over its `d = x.size` entries), returning any pytree of arrays.
    - `key`, `samples`: with a `jax.random` key, an unbiased stochastic estimate
      from `samples` Gaussian directions: `Delta^2 f = E[D^4 f[v]] / 3` for
      `v ~ N(0, I)` (since `E[v_i v_j v_k v_l]` pairs the indices in 3 ways).

    **Returns:** a function `(x, *args)` with `fun`'s output structure.

    Exact evaluation is one forward pass in which every value carries its gradient,
    its Hessian packed to `d (d+1) / 2` entries, `grad Delta` and `Delta^2`: half the
    `d^2` mixed derivatives that nested forward Laplacians carry. Linear maps,
    elementwise functions (runs of them composed once) and products and quotients of
    two values have rules there; a program with anything else (control flow, other
    bilinear maps of two values) is evaluated as `Delta (Delta f)`, a collapsed
    Laplacian pass over the program of another.
    The estimator's variance per sample is `(E[D^4 f[v]^2] - 9 (Delta^2 f)^2) / 9`.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda x: jnp.sum(x**4)
        taylax.biharmonic(f)(jnp.array([1.0, 2.0]))   # 24 * 2
        ```
    """
    count = _check_samples(key, samples, "taylax.biharmonic")

    def evaluate(x, *args):
        if not count:
            return _exact_biharmonic(fun, x, args)
        directions = _draw(key, count, x, "gaussian")
        # D^4 f = 4! y_4 and E[D^4 f[v]] = 3 Delta^2 f: each weight is 4! / (3 count).
        weight = 24.0 / (3.0 * count)
        tops, tree = _run(fun, x, args, 4, directions, weight, True, "taylax.biharmonic")
        return jax.tree.unflatten(tree, tops)

    return _wrap(fun, evaluate, "taylax.biharmonic")


def _multi_indices(d: int, p: int, support=None) -> list[tuple[int, ...]]:
    """Every `j` in N^d with `|j| = p` (supported in `support`), in lexicographic order."""
    axes = range(d) if support is None else sorted(support)
    out = set()
    for combo in itertools.combinations_with_replacement(axes, p):
        j = [0] * d
        for a in combo:
            j[a] += 1
        out.add(tuple(j))
    return sorted(out, reverse=True)


def _generalized_binomial(r: Fraction, n: int) -> Fraction:
    out = Fraction(1)
    for m in range(n):
        out = out * (r - m) / (m + 1)
    return out


@functools.lru_cache(maxsize=4096)
def interpolation_weight(i: tuple[int, ...], j: tuple[int, ...]) -> Fraction:
    """`gamma_ij` with `d^i f = sum_{|j|=p} gamma_ij y_p[j]` (`p = |i|`, exact rationals).

    `gamma_ij = sum_{0 < k <= i} (-1)^{|i-k|} binom(i, k) binom(p k/|k|, j) (|k|/p)^p`
    (Griewank, Utke and Walther 2000), with multi-index binomials taken entry by
    entry; `y_p[j] = D^p f[j] / p!` is the normalized coefficient along `j`.
    """
    p = sum(i)
    total = Fraction(0)
    for k in itertools.product(*[range(m + 1) for m in i]):
        size = sum(k)
        if size == 0:
            continue
        term = Fraction((-1) ** (p - size)) * Fraction(size, p) ** p
        for il, kl, jl in zip(i, k, j):
            term *= math.comb(il, kl) * _generalized_binomial(Fraction(p * kl, size), jl)
            if term == 0:
                break
        total += term
    return total


def _check_multi_index(alpha, d: int) -> tuple[int, ...]:
    try:
        alpha = tuple(int(a) for a in alpha)
    except TypeError:
        raise TypeError(
            f"`coefficients` keys must be multi-indices (tuples of {d} non-negative integers), "
            f"got {alpha!r}."
        ) from None
    if len(alpha) != d or any(a < 0 for a in alpha):
        raise ValueError(
            f"`coefficients` keys must be multi-indices of {d} non-negative integers (one per "
            f"entry of `x`), got {alpha}."
        )
    return alpha


def _operator_directions(coefficients: Mapping, d: int) -> dict[int, dict[tuple, Fraction]]:
    """Per order `p`: the directions `j` and their weights `sum_alpha c_alpha gamma_alpha,j`."""
    by_order: dict[int, dict[tuple, object]] = {}
    for alpha, c in coefficients.items():
        alpha = _check_multi_index(alpha, d)
        p = sum(alpha)
        weights = by_order.setdefault(p, {})
        if p == 0:
            weights[alpha] = weights.get(alpha, 0) + c
            continue
        support = [a for a, n in enumerate(alpha) if n]
        for j in _multi_indices(d, p, support):
            g = interpolation_weight(alpha, j)
            if g:
                weights[j] = weights.get(j, 0) + c * float(g)
    return by_order


def differential_operator(fun: Callable, coefficients: Mapping):
    """A linear differential operator with constant coefficients, `sum_alpha c_alpha d^alpha f`.

    **Arguments:**

    - `fun`: a function `fun(x, *args)` of a real floating-point array `x` with
      `d = x.size` entries, returning any pytree of arrays.
    - `coefficients`: a mapping from multi-indices (tuples of `d` non-negative
      integers, one per entry of `x` in C order) to coefficients, e.g.
      `{(2, 0): 1.0, (0, 2): 1.0}` for the 2-d Laplacian or `{(1, 1): 1.0}` for
      `d^2 f / dx_0 dx_1`. Coefficients may be traced values.

    **Returns:** a function `(x, *args)` with `fun`'s output structure.

    Each order `p` present is one collapsed Taylor pass of order `p` along the
    directions `j` with `|j| = p` supported where the multi-indices are (exact
    interpolation, Griewank, Utke and Walther 2000: `d^i f = sum_j gamma_ij
    D^p f[j] / p!`), their weights summed over the multi-indices that share them.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda x: x[0] ** 3 * x[1] ** 2
        mixed = taylax.differential_operator(f, {(1, 1): 1.0})   # d^2 f / dx0 dx1
        mixed(jnp.array([1.0, 2.0]))                              # 6 x0^2 x1 = 12
        ```
    """
    if not isinstance(coefficients, Mapping) or not coefficients:
        raise TypeError(
            "`coefficients` must be a non-empty mapping from multi-indices to coefficients, "
            "e.g. `{(2, 0): 1.0, (0, 2): 1.0}`."
        )

    def evaluate(x, *args):
        api = "taylax.differential_operator"
        total = None
        tree = None
        for p, weighted in sorted(_operator_directions(coefficients, x.size).items()):
            if not weighted:
                continue
            weights = jnp.stack([jnp.asarray(w, x.dtype) for w in weighted.values()])
            if p == 0:
                outs, tree = jax.tree.flatten(fun(x, *args))
                terms = [o * jnp.sum(weights).astype(jnp.result_type(o)) for o in outs]
            else:
                directions = jnp.asarray(np.array(list(weighted)), x.dtype)
                directions = directions.reshape((-1, *x.shape))
                tops, tree = _run(fun, x, args, p, directions, weights, True, api)
                terms = tops
            total = terms if total is None else [a + b for a, b in zip(total, terms)]
        return jax.tree.unflatten(tree, total)

    return _wrap(fun, evaluate, "taylax.differential_operator")


def derivative_tensor(fun: Callable, order: int, *, unique: bool = False):
    """All mixed partial derivatives of one order, as a symmetric tensor, in one pass.

    **Arguments:**

    - `fun`: a function `fun(x, *args)` of a real floating-point array `x` with
      `d = x.size` entries, returning any pytree of arrays.
    - `order`: the order `p >= 1` of the derivatives.
    - `unique`: when True, return only the `binom(d + p - 1, p)` distinct entries.

    **Returns:** a function `(x, *args)`. With `unique=False`, a leaf of shape `S`
    gives shape `S + x.shape * p`, equal to `p` nested `jax.jacfwd`s. With
    `unique=True`, a pair `(indices, values)`: `indices` an integer array
    `(n, d)` of multi-indices (entry `[m, i]` is how often `x_i` is
    differentiated), and `values` `fun`'s structure with leaves `(n, *S)`.

    One Taylor pass of order `p` along the `n` directions `j` with `|j| = p`
    (primal shared, top kept per direction), then exact interpolation:
    `d^i f = sum_j gamma_ij D^p f[j] / p!` (Griewank, Utke and Walther 2000).

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        f = lambda x: x[0] ** 2 * x[1]
        taylax.derivative_tensor(f, 3)(jnp.array([1.0, 2.0]))   # shape (2, 2, 2)
        ```
    """

    order = check_order(order)
    if order < 1:
        raise ValueError("`order` must be at least 1 for `taylax.derivative_tensor`.")

    def evaluate(x, *args):
        d = x.size
        indices = _multi_indices(d, order)
        n = len(indices)  # 0 for an empty `x`: shapes below stay (n, d) and (n, n)
        gamma = np.array([[float(interpolation_weight(i, j)) for j in indices] for i in indices])
        gamma = gamma.reshape((n, n))
        index_array = np.array(indices, dtype=np.int64).reshape((n, d))
        directions = jnp.asarray(index_array, x.dtype).reshape((n, *x.shape))
        api = "taylax.derivative_tensor"
        tops, tree = _run(fun, x, args, order, directions, None, False, api)
        values = [jnp.tensordot(jnp.asarray(gamma, t.dtype), t, 1) for t in tops]
        if unique:
            return jnp.asarray(index_array), jax.tree.unflatten(tree, values)
        positions = _unique_positions(d, order, indices)
        full = []
        for v in values:
            dense = jnp.take(v, jnp.asarray(positions.reshape(-1)), axis=0)
            dense = dense.reshape(positions.shape + v.shape[1:])
            moved = jnp.moveaxis(dense, tuple(range(order)), tuple(range(-order, 0)))
            full.append(moved.reshape(moved.shape[:-order] + tuple(x.shape) * order))
        return jax.tree.unflatten(tree, full)

    return _wrap(fun, evaluate, "taylax.derivative_tensor")


def _unique_positions(d: int, order: int, indices) -> np.ndarray:
    """For every index tuple `(i_1..i_p)`, the row of its multi-index in `indices`."""
    where = {j: m for m, j in enumerate(indices)}
    out = np.empty((d,) * order, dtype=np.int32)
    for combo in itertools.product(range(d), repeat=order):
        j = [0] * d
        for a in combo:
            j[a] += 1
        out[combo] = where[tuple(j)]
    return out


def _wrap(fun: Callable, evaluate: Callable, api: str) -> Callable:
    if not callable(fun):
        raise TypeError(f"`{api}` expects a callable `fun`, got {type(fun).__name__}.")

    def op(x, *args):
        return evaluate(_check_point(x, api), *args)

    name = getattr(fun, "__name__", type(fun).__name__)
    op.__name__ = op.__qualname__ = f"{api.split('.')[-1]}_{name}"
    op.__doc__ = f"`{api}` of `{name}`: call as `op(x, *args)`."
    return op
