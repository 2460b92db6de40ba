"""Rules for linear solves and matrix factorizations.

Every rule factorizes the primal ONCE and reuses the factors for every order.
Coefficient `k` of an implicitly defined value solves a linear equation with
the primal's factors, whose right-hand side holds only coefficients below `k`.
So each rule is one `lax.fori_loop` over `k` and the emitted program does not
grow with the order:

* solves `M(s) x(s) = b(s)` (`triangular_solve`, `tridiagonal_solve`,
  `custom_linear_solve`, and so `jnp.linalg.solve`/`inv`):
  `x_k = M_0^{-1} (b_k - sum_{j>=1} M_j x_{k-j})`;
* factorizations (`cholesky`, `lu`, `qr`, `eigh`, `eig`, `svd`): coefficient `k` of
  the defining identity (`L L^H = A`, `A V = V diag(w)`, ...) is a
  Sylvester-like equation in the new coefficient, solved the way JAX's own
  first-order jvp rule solves it (at `k = 1` the formulas are JAX's). The
  gauge of eigen- and singular vectors is the one nested `jax.jvp` follows.

Inputs of `cholesky` and `eigh` must be Hermitian series (what
`jnp.linalg.cholesky`/`eigh` and `lax.linalg.cholesky`/`eigh` pass by default),
as JAX's jvp rules assume.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.lax import linalg as lax_linalg

from .. import _compat, _series
from .._interpret import eval_jaxpr_series, register_rule
from .._series import Series

_HI = lax.Precision.HIGHEST

# --------------------------------------------------------------------------
# Small matrix helpers (stacked or not: they act on the last two axes)
# --------------------------------------------------------------------------


def _mm(a, b):
    return jnp.matmul(a, b, precision=_HI)


def _h(x):
    """Conjugate transpose of the last two axes."""
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _eye(n: int, dtype):
    return jnp.eye(n, dtype=dtype)


def _diag(x):
    return jnp.diagonal(x, axis1=-2, axis2=-1)


def _diag_matrix(d):
    return d[..., :, None] * _eye(d.shape[-1], d.dtype)


def _over_batch(fn, nbatch: int, in_axes):
    """Map a per-matrix kernel over leading batch axes.

    Stacked series carry the batch after the coefficient axis (`in_axes` 1),
    primal factors before it (`in_axes` 0); outputs are stacked series.
    """
    for _ in range(nbatch):
        fn = jax.vmap(fn, in_axes=in_axes, out_axes=1)
    return fn


# --------------------------------------------------------------------------
# Cauchy products at one coefficient of carries that are still being filled
# --------------------------------------------------------------------------


def _window(y, k, order: int):
    """`w[i] = y_{k-i}` for `i <= k` and 0 beyond (`y` stacked to `order`, `k` traced)."""
    return _series.slice_rows(_series.reversed_window_source(y, order), order - k, order + 1)


def _conv_at(spec: str, x, y, k, order: int):
    """Coefficient `k` of the Cauchy product of `x` and `y`, combined by einsum `spec`.

    Unknown coefficients are still zero in a carry, so the full sum over `j` is
    exactly the sum over the known ones.
    """
    return jnp.einsum(spec, x, _window(y, k, order), precision=_HI)


def _weighted(y, order: int):
    """`j y_j`, stacked (the series of `s y'`)."""
    return y * _series.orders(order, y.ndim - 1, y.dtype)


def _full(x: Series, order: int):
    return _series.pad_degree(x.coeffs, order)


# --------------------------------------------------------------------------
# Solves: M(s) x(s) = b(s) with one primal solver
# --------------------------------------------------------------------------


def _solve_series(x0s, bs, solve0, tail, degree: int, order: int):
    """`x_k = M_0^{-1} (b_k - sum_{j=1}^{degree} M_j x_{k-j})` for k = 1..order (push form).

    `x0s`: the primal solutions; `bs`: right-hand sides stacked to `order`;
    `solve0(rhs_list) -> x_list` applies `M_0^{-1}`; `tail(x_list)` returns,
    per leaf, `[M_1 x, ..., M_degree x]` stacked. Once `x_m` is known its
    contributions to every later coefficient are added to an accumulator.
    """
    xs = [_series.fresh(x0, order, x0.dtype) for x0 in x0s]
    accs = [jnp.zeros((order + 1 + degree,) + x0.shape, x0.dtype) for x0 in x0s]

    def body(k, carry):
        xs, accs = carry
        parts = tail([_series.get_coeff(x, k - 1) for x in xs])
        new_accs = []
        for acc, part in zip(accs, parts):
            window = _series.slice_rows(acc, k, degree) + part.astype(acc.dtype)
            new_accs.append(lax.dynamic_update_slice(acc, window, [k] + [0] * (acc.ndim - 1)))
        rhs = [_series.get_coeff(b, k) - _series.get_coeff(acc, k) for b, acc in zip(bs, new_accs)]
        new = solve0(rhs)
        return [_series.set_coeff(x, xk, k) for x, xk in zip(xs, new)], new_accs

    return _series.fori(order, body, (xs, accs))[0]


def _triangular_op(a, *, lower, transpose_a, conjugate_a, unit_diagonal):
    """The matrix `op(A)` that `triangular_solve` actually uses (one triangle, maybe unit)."""
    if lower:
        a = jnp.tril(a, -1 if unit_diagonal else 0)
    else:
        a = jnp.triu(a, 1 if unit_diagonal else 0)
    if transpose_a:
        a = jnp.swapaxes(a, -1, -2)
    return jnp.conj(a) if conjugate_a else a


@register_rule(lax_linalg.triangular_solve_p)
def _triangular_solve(order, a, b, **params):
    left = params["left_side"]

    def solve0(rhs):
        return [lax_linalg.triangular_solve_p.bind(a.primal, rhs[0], **params)]

    if a.is_constant:  # linear in b: one batched solve over the coefficients
        return Series(jax.vmap(lambda bk: solve0([bk])[0])(b.coeffs))
    op = _triangular_op(a.coeffs[1:], **{k: v for k, v in params.items() if k != "left_side"})

    def tail(xm):
        return [_mm(op, xm[0]) if left else _mm(xm[0], op)]

    x0 = solve0([b.primal])
    (x,) = _solve_series(x0, [_full(b, order)], solve0, tail, a.degree, order)
    return Series(x)


def _tridiagonal_product(dl, d, du, x):
    """`T x` for the tridiagonal `T` with diagonals `dl`, `d`, `du` (as JAX's jvp rule)."""
    y = d[..., None] * x
    y = y.at[..., 1:, :].add(dl[..., 1:, None] * x[..., :-1, :])
    return y.at[..., :-1, :].add(du[..., :-1, None] * x[..., 1:, :])


@register_rule(lax_linalg.tridiagonal_solve_p)
def _tridiagonal_solve(order, dl, d, du, b, **params):
    diags = [dl, d, du]

    def solve0(rhs):
        primals = [x.primal for x in diags]
        return [lax_linalg.tridiagonal_solve_p.bind(*primals, rhs[0], **params)]

    if all(x.is_constant for x in diags):  # linear in b
        return Series(jax.vmap(lambda bk: solve0([bk])[0])(b.coeffs))
    degree = max(x.degree for x in diags)
    tails = [_series.pad_degree(x.coeffs, degree)[1:] for x in diags]

    def tail(xm):
        return [_tridiagonal_product(*tails, xm[0][None])]

    x0 = solve0([b.primal])
    (x,) = _solve_series(x0, [_full(b, order)], solve0, tail, degree, order)
    return Series(x)


@register_rule(_compat.linear_solve_p)
def _custom_linear_solve(order, *args, const_lengths, jaxprs):
    """`x = M^{-1} b` with the user's solver as `M_0^{-1}`; nested jvp ignores the series of
    the solver's own constants (it trusts the solver to invert `matvec`), and so do we."""
    params = dict(const_lengths=const_lengths, jaxprs=jaxprs)
    n_consts = sum(const_lengths)
    consts, bs = list(args[:n_consts]), list(args[n_consts:])
    matvec_consts = consts[: const_lengths.matvec]
    primal_consts = [c.primal for c in consts]
    outs0 = _compat.linear_solve_p.bind(*primal_consts, *[b.primal for b in bs], **params)
    x0s, aux = outs0[: len(bs)], outs0[len(bs) :]

    def solve0(rhs):
        return _compat.linear_solve_p.bind(*primal_consts, *rhs, **params)[: len(bs)]

    if all(c.is_constant for c in matvec_consts):
        # A constant operator: linear in b, one batched solve over the coefficients.
        degree = max(b.degree for b in bs)
        stacked = [_series.pad_degree(b.coeffs, degree) for b in bs]
        xs = jax.vmap(solve0)(stacked)
    else:
        matvec = jaxprs.matvec

        def tail(xm):
            outs = eval_jaxpr_series(
                *_compat.closed_parts(matvec),
                matvec_consts + [Series.constant(x) for x in xm],
                order,
            )
            return [_full(o, order)[1:] for o in outs]

        full_bs = [_full(b, order) for b in bs]
        xs = _solve_series(x0s, full_bs, solve0, tail, order, order)
    result = [Series(_series.with_primal(x, x0)) for x, x0 in zip(xs, x0s)]
    return result + [Series.constant(a) for a in aux]


# --------------------------------------------------------------------------
# Cholesky: L_0 L_k^H + L_k L_0^H = A_k - sum_{0<j<k} L_j L_{k-j}^H
# --------------------------------------------------------------------------


def _phi(w):
    """Lower triangle with the diagonal halved (the inverse of `X -> X + X^H` on it)."""
    n = w.shape[-1]
    return jnp.tril(w) / (1 + _eye(n, w.dtype))


def _cholesky_kernel(a, l0, *, order):
    def body(k, l):
        r = _series.get_coeff(a, k) - _conv_at("jab,jcb->ac", l, jnp.conj(l), k, order)
        tmp = lax_linalg.triangular_solve(
            l0, r, left_side=False, lower=True, transpose_a=True, conjugate_a=True
        )
        w = lax_linalg.triangular_solve(l0, tmp, left_side=True, lower=True)
        return _series.set_coeff(l, _mm(l0, _phi(w)), k)

    return _series.fori(order, body, _series.fresh(l0, order, a.dtype))


@register_rule(lax_linalg.cholesky_p)
def _cholesky(order, a, **params):
    l0 = jnp.tril(lax_linalg.cholesky_p.bind(a.primal, **params))
    kernel = _over_batch(
        lambda a, l0: _cholesky_kernel(a, l0, order=order), len(a.shape) - 2, (1, 0)
    )
    return Series(kernel(_full(a, order), l0))


# --------------------------------------------------------------------------
# LU: P A = L U, L unit lower. W = L_0^{-1} R_k U_0^{-1} splits into L_k and U_k.
# --------------------------------------------------------------------------


def _lu_factors(lu0, m: int, n: int):
    """Square `l` (m, m) and `u` (n, n) padded with identity blocks, as JAX's jvp rule does."""
    kk = min(m, n)
    dtype = lu0.dtype
    l = jnp.pad(jnp.tril(lu0[:, :kk], -1), ((0, 0), (0, m - kk))) + _eye(m, dtype)
    u = jnp.pad(jnp.triu(lu0[:kk, :]), ((0, n - kk), (0, 0)))
    u = u + jnp.pad(_eye(n - kk, dtype), ((kk, 0), (kk, 0)))
    return l, u


def _lu_kernel(a, lu0, perm, *, order):
    m, n = lu0.shape
    kk = min(m, n)
    a = a[:, perm, :]
    l0, u0 = _lu_factors(lu0, m, n)
    unit = jnp.pad(_eye(kk, a.dtype)[None], ((0, order), (0, m - kk), (0, 0)))

    def body(k, lu):
        lower = jnp.tril(lu[:, :, :kk], -1) + unit  # L_j, with L_0's unit diagonal
        upper = jnp.triu(lu[:, :kk, :])
        r = _series.get_coeff(a, k) - _conv_at("jab,jbc->ac", lower, upper, k, order)
        la = lax_linalg.triangular_solve(l0, r, left_side=True, lower=True, unit_diagonal=True)
        w = lax_linalg.triangular_solve(u0, la, left_side=False, lower=False)
        return _series.set_coeff(lu, _mm(l0, jnp.tril(w, -1)) + _mm(jnp.triu(w), u0), k)

    return _series.fori(order, body, _series.fresh(lu0, order, a.dtype))


@register_rule(lax_linalg.lu_p)
def _lu(order, a, **params):
    lu0, pivots, perm = lax_linalg.lu_p.bind(a.primal, **params)
    kernel = _over_batch(
        lambda a, lu0, p: _lu_kernel(a, lu0, p, order=order), len(a.shape) - 2, (1, 0, 0)
    )
    lu = kernel(_full(a, order), lu0, perm)
    return [Series(lu), Series.constant(pivots), Series.constant(perm)]


# --------------------------------------------------------------------------
# QR (thin, m >= n): with C = Q_0^H P_k R_0^{-1}, Y = Q_0^H Q_k and X = R_k R_0^{-1}
# upper triangular with a real diagonal: X + Y = C, Y + Y^H = -sum_{0<j<k} Q_j^H Q_{k-j}.
# --------------------------------------------------------------------------


def _qr_kernel(a, q0, r0, *, order):
    real = not jnp.issubdtype(a.dtype, np.complexfloating)

    def body(k, carry):
        q, r = carry
        p = _series.get_coeff(a, k) - _conv_at("jab,jbc->ac", q, r, k, order)
        s = _conv_at("jba,jbc->ac", jnp.conj(q), q, k, order)
        p_rinv = lax_linalg.triangular_solve(r0, p, left_side=False, lower=False)
        c = _mm(_h(q0), p_rinv)
        c_low = jnp.tril(c, -1)
        y = (
            c_low
            - _h(c_low)
            - jnp.triu(s, 1)
            - _diag_matrix(jnp.real(_diag(s))).astype(c.dtype) / 2
        )
        if not real:
            y = y + _diag_matrix(1j * jnp.imag(_diag(c)))
        x = c - y
        q = _series.set_coeff(q, p_rinv - _mm(q0, x), k)
        return q, _series.set_coeff(r, _mm(jnp.triu(x), r0), k)

    return _series.fori(
        order, body, (_series.fresh(q0, order, a.dtype), _series.fresh(r0, order, a.dtype))
    )


def _qr_wide_kernel(a, q0, r0, *, order):
    """m < n: the square block gives Q and R_1; R_2 = Q^H A_2."""
    m = q0.shape[-1]
    q, r1 = _qr_kernel(a[:, :, :m], q0, r0[:, :m], order=order)
    r2 = _series.cauchy_bilinear(lambda x, y: _mm(_h(x), y), q, a[:, :, m:], order)
    r2 = _series.with_primal(_series.pad_degree(r2, order), r0[:, m:])
    return q, jnp.concatenate([r1, r2], axis=-1)


@register_rule(lax_linalg.qr_p)
def _qr(order, a, *, pivoting, full_matrices, **params):
    m, n = a.shape[-2:]
    if full_matrices and m > n:
        raise NotImplementedError(
            "taylax's rule for `qr` supports full_matrices=True only for square or wide "
            f"matrices, got shape {a.shape}. Use `jnp.linalg.qr(x, mode='reduced')` (or "
            "`lax.linalg.qr(x, full_matrices=False)`) for tall matrices."
        )
    outs = lax_linalg.qr_p.bind(a.primal, pivoting=pivoting, full_matrices=full_matrices, **params)
    q0, r0 = outs[0], outs[1]
    coeffs = _full(a, order)
    if pivoting:  # the column permutation is fixed by the primal
        coeffs = jnp.take_along_axis(coeffs, outs[2][None, ..., None, :], axis=-1)
    kernel = _qr_wide_kernel if m < n else _qr_kernel
    batched = _over_batch(
        lambda a, q0, r0: kernel(a, q0, r0, order=order), len(a.shape) - 2, (1, 0, 0)
    )
    q, r = batched(coeffs, q0, r0)
    return [Series(q), Series(r)] + [Series.constant(p) for p in outs[2:]]


# --------------------------------------------------------------------------
# eigh: V = V_0 U, B = V_0^H A V_0: B U = U diag(w); the off-diagonal of U_k and w_k come
# from the coefficient-k identity, the diagonal of U_k from the gauge diag(U^H U') = 0.
# --------------------------------------------------------------------------


def _reciprocal_gaps(w, dtype):
    """`F[a, b] = 1 / (w_b - w_a)` off the diagonal, 0 on it (as JAX builds it)."""
    n = w.shape[-1]
    eye = _eye(n, dtype)
    w = w.astype(dtype)
    return 1 / (eye + w[None, :] - w[:, None]) - eye


def _transport_diagonal(u, k, order):
    """The diagonal of `U_k` that keeps `diag(U^H U') = 0` (parallel transport)."""
    acc = _conv_at("jca,jca->a", jnp.conj(u), _weighted(u, order), k, order)
    return -acc / lax.convert_element_type(k, _series.real_dtype(u.dtype))


def _eigh_kernel(a, v0, w0, *, order):
    n = w0.shape[-1]
    dtype = a.dtype
    b = _mm(_mm(_h(v0)[None], a), v0[None])
    gaps = _reciprocal_gaps(w0, dtype)

    def body(k, carry):
        u, w = carry
        t = _conv_at("jab,jbc->ac", b, u, k, order) - _conv_at("jab,jb->ab", u, w, k, order)
        u_k = gaps * t + _diag_matrix(_transport_diagonal(u, k, order))
        w_k = jnp.real(_diag(t)).astype(dtype)
        return _series.set_coeff(u, u_k, k), _series.set_coeff(w, w_k, k)

    init = (_series.fresh(_eye(n, dtype), order, dtype), _series.fresh(w0, order, dtype))
    u, w = _series.fori(order, body, init)
    return _mm(v0[None], u), jnp.real(w).astype(w0.dtype)


@register_rule(lax_linalg.eigh_p)
def _eigh(order, a, *, subset_by_index, **params):
    n = a.shape[-1]
    if subset_by_index is not None and tuple(subset_by_index) != (0, n):
        raise NotImplementedError(
            "taylax's rule for `eigh` needs the full eigendecomposition (JAX defines no "
            f"derivative of a partial one), got subset_by_index={subset_by_index}. Leave "
            "`subset_by_index` at None."
        )
    # JAX's jvp rule symmetrizes the primal before factorizing; nested jvp returns that.
    x = a.primal
    v0, w0 = lax_linalg.eigh_p.bind((x + _h(x)) / 2, subset_by_index=subset_by_index, **params)
    kernel = _over_batch(
        lambda a, v0, w0: _eigh_kernel(a, v0, w0, order=order), len(a.shape) - 2, (1, 0, 0)
    )
    v, w = kernel(_full(a, order), v0, w0)
    return [Series(v), Series(w)]


# --------------------------------------------------------------------------
# eig (general matrices, distinct eigenvalues): V = V_0 U, B = V_0^{-1} A V_0, B U = U diag(w)
# as for eigh; the free multiple of each v_j in V_k is fixed by LAPACK's normalization, which
# JAX differentiates through: ||v_j(s)|| = 1 and v_j(s) real at the index where |v_j(0)| is
# largest.
# --------------------------------------------------------------------------


def _eig_kernel(a, v0, w0, *, order):
    """Series of eigenvalues and normalized right eigenvectors of the stacked matrix `a`."""
    dtype = v0.dtype
    a = a.astype(dtype)
    b = _mm(jnp.linalg.solve(v0, a), v0[None])  # V_0^{-1} A_k V_0, stacked
    gaps = _reciprocal_gaps(w0, dtype)
    # The gauge index of every column and v_0 there (real up to rounding, as in JAX's rule).
    largest = jnp.argmax(jnp.abs(v0), axis=0)
    pivot = jnp.real(jnp.take_along_axis(v0, largest[None], axis=0)[0])

    def body(k, carry):
        u, v, w = carry
        t = _conv_at("jab,jbc->ac", b, u, k, order) - _conv_at("jab,jb->ab", u, w, k, order)
        particular = _mm(v0, gaps * t)
        # Coefficient k of ||v_j||^2 = 1: 2 Re(v_0^H v_k) = -sum_{0<p<k} v_p^H v_{k-p}.
        inner = _conv_at("jca,jca->a", jnp.conj(v), v, k, order)
        c_real = -0.5 * jnp.real(inner) - jnp.real(jnp.sum(jnp.conj(v0) * particular, axis=0))
        at_pivot = jnp.take_along_axis(particular, largest[None], axis=0)[0]
        c = lax.complex(c_real, -jnp.imag(at_pivot) / pivot)
        u_k = gaps * t + _diag_matrix(c)
        v_k = particular + v0 * c[None, :]
        w_k = _diag(t)
        return (
            _series.set_coeff(u, u_k, k),
            _series.set_coeff(v, v_k, k),
            _series.set_coeff(w, w_k, k),
        )

    n = w0.shape[-1]
    init = (
        _series.fresh(_eye(n, dtype), order, dtype),
        _series.fresh(v0, order, dtype),
        _series.fresh(w0, order, dtype),
    )
    _, v, w = _series.fori(order, body, init)
    return w, v


@register_rule(lax_linalg.eig_p)
def _eig(order, a, *, compute_left_eigenvectors, compute_right_eigenvectors, **params):
    wants_vectors = compute_left_eigenvectors or compute_right_eigenvectors
    if wants_vectors and not _compat.eig_vector_derivatives_enabled(params):
        raise NotImplementedError(
            "Derivatives of the eigenvectors of a general (non-symmetric) matrix are only "
            "valid under assumptions JAX cannot check (distinct eigenvalues, LAPACK's "
            "normalization), so JAX and taylax refuse them by default. Pass "
            "enable_eigvec_derivs=True to jax.lax.linalg.eig to opt in, or use "
            "jnp.linalg.eigvals if only the eigenvalues are needed."
        )
    # The primal with right (and, if asked for, left) eigenvectors, as JAX's jvp rule has it.
    outs = lax_linalg.eig_p.bind(
        a.primal,
        compute_left_eigenvectors=compute_left_eigenvectors,
        compute_right_eigenvectors=True,
        **params,
    )
    w0, vr0 = outs[0], outs[-1]
    nbatch = len(a.shape) - 2
    kernel = _over_batch(lambda a, v0, w0: _eig_kernel(a, v0, w0, order=order), nbatch, (1, 0, 0))
    coeffs = _full(a, order)
    w, vr = kernel(coeffs, vr0, w0)
    results = [Series(w)]
    if compute_left_eigenvectors:
        # Left eigenvectors of A are the right eigenvectors of A^H, eigenvalues conj(w).
        _, vl = kernel(_h(coeffs), outs[1], jnp.conj(w0))
        results.append(Series(vl))
    if compute_right_eigenvectors:
        results.append(Series(vr))
    return results


# --------------------------------------------------------------------------
# SVD (m >= n, thin): U = U_0 P + N (N orthogonal to U_0), V = V_0 Q, G = U_0^H A V_0.
# G Q = P diag(s) at coefficient k, with the Hermitian parts of P_k and Q_k fixed by
# unitarity, the skew parts by the 2x2 systems below, and one factor's phase by the gauge.
# --------------------------------------------------------------------------


def _svd_tall_kernel(a, u0, s0, v0, *, order, gauge_on_u):
    m, n = u0.shape
    dtype = a.dtype
    real = not jnp.issubdtype(dtype, np.complexfloating)
    s = s0.astype(dtype)
    g = _mm(_mm(_h(u0)[None], a), v0[None])
    gaps = _reciprocal_gaps(s0 * s0, dtype)  # 1 / (s_b^2 - s_a^2)
    complement = _eye(m, dtype) - _mm(u0, _h(u0))

    def body(k, carry):
        u, p, q, sig = carry
        t = _conv_at("jab,jbc->ac", g, q, k, order) - _conv_at("jab,jb->ab", p, sig, k, order)
        sp = _conv_at("jba,jbc->ac", jnp.conj(u), u, k, order)
        sq = _conv_at("jba,jbc->ac", jnp.conj(q), q, k, order)
        mm = t - s[:, None] * sq / 2 + sp * s[None, :] / 2
        mm_h = _h(mm)
        skew_q = gaps * (s[:, None] * mm + s[None, :] * mm_h)
        skew_p = gaps * (s[None, :] * mm + s[:, None] * mm_h)
        t_d = _diag(t)
        if gauge_on_u:
            p_d = _transport_diagonal(u, k, order)
            q_d = -jnp.real(_diag(sq)).astype(dtype) / 2
            if not real:
                q_d = q_d + 1j * (jnp.imag(p_d) - jnp.imag(t_d) / s0)
        else:
            q_d = _transport_diagonal(q, k, order)
            p_d = -jnp.real(_diag(sp)).astype(dtype) / 2
            if not real:
                p_d = p_d + 1j * (jnp.imag(q_d) + jnp.imag(t_d) / s0)
        sig_k = jnp.real(t_d) + s0 * (jnp.real(q_d) - jnp.real(p_d))
        off = 1 - _eye(n, dtype)
        p_k = off * (skew_p - sp / 2) + _diag_matrix(p_d)
        q_k = off * (skew_q - sq / 2) + _diag_matrix(q_d)
        q = _series.set_coeff(q, q_k, k)
        sig = _series.set_coeff(sig, sig_k.astype(dtype), k)
        u_k = _mm(u0, p_k)
        if m > n:  # the part of U_k outside the span of U_0
            v = _mm(v0[None], q)
            rest = _conv_at("jab,jbc->ac", a, v, k, order) - _conv_at(
                "jab,jb->ab", u, sig, k, order
            )
            u_k = u_k + _mm(complement, rest) / s[None, :]
        return _series.set_coeff(u, u_k, k), _series.set_coeff(p, p_k, k), q, sig

    eye = _series.fresh(_eye(n, dtype), order, dtype)
    init = (_series.fresh(u0, order, dtype), eye, eye, _series.fresh(s, order, dtype))
    u, _, q, sig = _series.fori(order, body, init)
    return u, jnp.real(sig).astype(s0.dtype), _mm(v0[None], q)


def _svd_kernel(a, u0, s0, vt0, *, order):
    m, n = a.shape[-2:]
    if m >= n:
        u, s, v = _svd_tall_kernel(a, u0, s0, _h(vt0), order=order, gauge_on_u=False)
    else:  # A^H = V S U^H is tall; JAX keeps the gauge on V, now the tall factor
        v, s, u = _svd_tall_kernel(_h(a), _h(vt0), s0, u0, order=order, gauge_on_u=True)
    return s, u, _h(v)


@register_rule(lax_linalg.svd_p)
def _svd(order, a, *, full_matrices, compute_uv, subset_by_index, algorithm):
    m, n = a.shape[-2:]
    if subset_by_index is not None and tuple(subset_by_index) != (0, min(m, n)):
        raise NotImplementedError(
            "taylax's rule for `svd` needs all singular values, got "
            f"subset_by_index={subset_by_index}. Leave `subset_by_index` at None."
        )
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError(
            "taylax's rule for `svd` supports full_matrices=True only for square matrices "
            f"(as JAX's own jvp rule), got shape {a.shape}. Use "
            "`jnp.linalg.svd(x, full_matrices=False)`."
        )
    # As JAX's jvp rule: the thin factorization with vectors, whatever was asked for.
    s0, u0, vt0 = lax_linalg.svd_p.bind(
        a.primal,
        full_matrices=False,
        compute_uv=True,
        subset_by_index=subset_by_index,
        algorithm=algorithm,
    )
    kernel = _over_batch(
        lambda a, u0, s0, vt0: _svd_kernel(a, u0, s0, vt0, order=order),
        len(a.shape) - 2,
        (1, 0, 0, 0),
    )
    s, u, vt = kernel(_full(a, order), u0, s0, vt0)
    if not compute_uv:
        return [Series(s)]
    return [Series(s), Series(u), Series(vt)]
