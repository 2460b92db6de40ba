"""Linear algebra Taylor rules against the nested-jvp oracle.

Every case builds its matrices from a nonlinear function of the input (so every coefficient of
the series reaching the primitive is nonzero) and checks `taylax.derivatives` at orders 1 and 6
(the order-6 result holds orders 0..6), in float64 and, where JAX supports it, complex128.
Factorizations are checked factor by factor, so the gauge of eigen- and singular vectors must be
the one nested `jax.jvp` follows. The oracle is the expensive part: cases share one 4x4 shape
so that its op-by-op compilations are reused.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.lax import linalg as lax_linalg

import taylax
from reference import (
    all_equations,
    assert_series_close,
    check_against_oracle,
    direction,
    oracle,
    seeded_rng,
)
from taylax._count import equation_counts

_RNG = np.random.default_rng(3)
M4 = _RNG.normal(size=(4, 4))
M4[np.diag_indices(4)] += 3.0  # condition number 3.2, well separated singular values
D4 = np.diag([1.0, 2.0, 3.5, 5.0])  # distinct eigenvalues 1.5 apart


def _mat(x):
    """A general 4x4 matrix whose series has every coefficient nonzero."""
    return M4 + 0.3 * jnp.sin(x)


def _hermitian(x):
    """Hermitian positive definite, every coefficient nonzero."""
    b = _mat(x)
    return b @ jnp.conj(b.T) + 2.0 * jnp.eye(4)


def _distinct(x):
    """Hermitian with well separated eigenvalues."""
    s = 0.3 * jnp.sin(x)
    return D4 + (s + jnp.conj(s.T)) / 2


def _custom_solve(x):
    a = _mat(x)
    scale = jnp.exp(x[0, 0])

    def matvec(y):  # the operator depends on the input twice: a series matrix and a scalar
        return a @ y + scale * y

    def solve(_, b):
        return jnp.linalg.solve(lax.stop_gradient(a + scale * jnp.eye(4)), b)

    return lax.custom_linear_solve(matvec, jnp.sin(x[:, :2]), solve)


def _nonsymmetric(x):
    """Non-symmetric with well separated eigenvalues (near 1, 2, 3.5 and 5)."""
    return D4 + 0.3 * jnp.sin(x)


# `enable_eigvec_derivs` came with jax 0.10; before it JAX differentiates no eigenvectors.
needs_eigvec_derivs = pytest.mark.skipif(
    "enable_eigvec_derivs" not in inspect.signature(lax_linalg.eig).parameters,
    reason="This JAX cannot differentiate the eigenvectors of a general matrix (no "
    "enable_eigvec_derivs before jax 0.10), so nested jvp gives no reference for them.",
)


def _eig(x, left: bool = False):
    # JAX differentiates general eigenvectors only with enable_eigvec_derivs=True.
    return lax_linalg.eig(
        _nonsymmetric(x), compute_left_eigenvectors=left, enable_eigvec_derivs=True
    )


def _eigh_function(x):
    """`V diag(exp(w)) V^H`: a matrix function, independent of the eigenvectors' gauge."""
    w, v = jnp.linalg.eigh(_distinct(x))
    return (v * jnp.exp(w)) @ jnp.conj(v.T)


def _batched(x):
    return jnp.stack([_mat(x), _mat(x.T) * 0.5])


F64, C128 = ("float64",), ("complex128",)


class Case(NamedTuple):
    """One function, checked at orders 1 and 6 in the dtypes of `core` (the default run) and of
    `extended` (marked `slow`: run with `pytest -m slow tests/test_rules_linalg.py`).

    The nested-jvp oracle costs 1 to 8 s per case here, so the default run checks every rule
    once at order 6, in complex128 where conjugation or a gauge is involved; `extended` adds
    the other dtype and the shape variants (tall, wide, pivoted).
    """

    name: str
    fn: Callable
    core: tuple = F64
    extended: tuple = ()


def _tall(x):
    return _mat(x)[:, :3]


def _wide(x):
    return _mat(x)[:3]


CASES = [
    # ---- dot_general: batch dimensions not in front, a series on both sides -------------------
    Case(
        "dot_batch_middle_dims",
        lambda x: lax.dot_general(
            jnp.sin(x)[:, :, None] * x[:, None, :2],  # (4, 4, 2): batch 2, contract 0
            jnp.exp(x)[:, 1:3],  # (4, 2): batch 1, contract 0
            dimension_numbers=(((0,), (0,)), ((2,), (1,))),
        ),
        C128,
        F64,
    ),
    # ---- triangular solves -----------------------------------------------------------------
    Case(
        "triangular_batched_left_lower",
        lambda x: lax_linalg.triangular_solve(
            _batched(x), jnp.exp(_batched(x))[..., :2], left_side=True, lower=True
        ),
        F64,
    ),
    Case(
        "triangular_right_upper_adjoint_unit",
        lambda x: lax_linalg.triangular_solve(
            _mat(x),
            jnp.exp(x[:2]),
            left_side=False,
            lower=False,
            transpose_a=True,
            conjugate_a=True,
            unit_diagonal=True,
        ),
        C128,
    ),
    Case(
        "triangular_const_matrix",
        lambda x: lax_linalg.triangular_solve(
            M4.astype(x.dtype), jnp.sin(x), left_side=True, lower=False
        ),
        C128,
    ),
    Case(
        "tridiagonal",
        lambda x: lax_linalg.tridiagonal_solve(
            0.3 * jnp.sin(x[0]), 3.0 + jnp.exp(x[1]), jnp.cos(x[2]), jnp.sin(x[:, 1:3])
        ),
        F64,
        C128,
    ),
    # ---- solves built on custom_linear_solve -------------------------------------------------
    Case("solve", lambda x: jnp.linalg.solve(_mat(x), jnp.cos(x[:, 0])), C128, F64),
    Case("inv", lambda x: jnp.linalg.inv(_mat(x)), F64, C128),
    Case("det", lambda x: jnp.linalg.det(_mat(x)), F64, C128),
    Case("slogdet", lambda x: jnp.linalg.slogdet(_mat(x)), C128, F64),
    Case("custom_linear_solve", _custom_solve, F64, C128),
    # ---- factorizations --------------------------------------------------------------------
    Case("cholesky", lambda x: jnp.linalg.cholesky(_hermitian(x)), C128, F64),
    Case(
        "cholesky_batched",
        lambda x: jnp.linalg.cholesky(jnp.stack([_hermitian(x), _hermitian(x.T)])),
        F64,
    ),
    Case("lu", lambda x: lax_linalg.lu(_mat(x))[0], C128),  # float64: inside `det` above
    Case("lu_tall", lambda x: lax_linalg.lu(_tall(x))[0], (), F64),
    Case("lu_wide", lambda x: lax_linalg.lu(_wide(x))[0], (), C128),
    Case("qr", lambda x: jnp.linalg.qr(_mat(x)), C128, F64),
    Case("qr_tall", lambda x: jnp.linalg.qr(_tall(x)), (), F64),
    Case("qr_wide", lambda x: jnp.linalg.qr(_wide(x)), (), C128),
    Case("qr_pivoting", lambda x: lax_linalg.qr(_mat(x), pivoting=True)[:2], (), F64),
    Case("eigh", lambda x: jnp.linalg.eigh(_distinct(x)), C128, F64),
    Case("eigh_function", _eigh_function, C128, F64),
    Case("eig", _eig, C128, F64),
    Case("eig_left", lambda x: _eig(x, left=True), (), C128),
    Case("svd", lambda x: jnp.linalg.svd(_mat(x)), C128, F64),
    Case("svd_tall", lambda x: jnp.linalg.svd(_tall(x), full_matrices=False), (), F64),
    Case("svd_wide", lambda x: jnp.linalg.svd(_wide(x), full_matrices=False), (), C128),
    # ---- a matrix function built from control flow (needs the scan/while/cond rules) -------
    Case("expm", lambda x: jax.scipy.linalg.expm(0.5 * M4 + 0.3 * jnp.sin(x)), F64, C128),
]
_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "duplicate case names"


def _inputs(case: Case, dtype: str):
    rng = seeded_rng("x:" + case.name)
    x = 0.5 * rng.normal(size=(4, 4))
    if dtype == "complex128":
        x = x + 0.5j * rng.normal(size=(4, 4))
    return np.asarray(x, dtype), direction(case.name, (4, 4), dtype)


def _params():
    params = []
    for case in CASES:
        marks = [needs_eigvec_derivs] if case.fn is _eig or case.name == "eig_left" else []
        for dtype in case.core:
            params.append(pytest.param(case.name, dtype, id=f"{case.name}-{dtype}", marks=marks))
        for dtype in case.extended:
            params.append(
                pytest.param(
                    case.name, dtype, id=f"{case.name}-{dtype}", marks=[*marks, pytest.mark.slow]
                )
            )
    return params


@pytest.mark.parametrize("name,dtype", _params())
def test_linalg_rule(name, dtype):
    case = _BY_NAME[name]
    x, v = _inputs(case, dtype)
    check_against_oracle(case.fn, x, v, (1, 6), context=f"{name} [{dtype}]")


def test_lu_integer_outputs_follow_the_primal():
    x = np.asarray(_RNG.normal(size=(4, 4)))
    v = direction("lu_int", (4, 4), "float64")

    def f(x):
        return lax_linalg.lu(x.T @ x + jnp.sin(x))

    y0, coeffs = taylax.taylor(f, 3)(x, v)
    lu, pivots, perm = lax_linalg.lu(x.T @ x + jnp.sin(x))
    np.testing.assert_array_equal(y0[1], pivots)
    np.testing.assert_array_equal(y0[2], perm)
    np.testing.assert_allclose(y0[0], lu, rtol=1e-13)
    assert coeffs[0].shape == (3, 4, 4)


def test_svd_values_only():
    # With compute_uv=False, JAX's jvp (so nested jvp) still differentiates the full thin SVD:
    # the values' series is output 1 of the `svd` case's oracle (shared with that case).
    case = _BY_NAME["svd"]
    x, v = _inputs(case, "complex128")
    expected = oracle(case.fn, x, v, 6)[1]
    actual = taylax.derivatives(lambda x: jnp.linalg.svd(_mat(x), compute_uv=False), 6)(x, v)
    assert_series_close(actual, expected, context="svd(compute_uv=False) [complex128]")


@needs_eigvec_derivs
def test_eigvals_match_the_eigenvalues_of_eig():
    # Nested jvp of `eigvals` stops at order 1 (its jvp rule calls eig without eigenvector
    # derivatives); taylax's eigenvalue series does not depend on the eigenvectors' gauge, so
    # it is checked against output 0 of the `eig` case's oracle (shared with that case).
    case = _BY_NAME["eig"]
    x, v = _inputs(case, "complex128")
    expected = oracle(case.fn, x, v, 6)[0]
    actual = taylax.derivatives(lambda x: jnp.linalg.eigvals(_nonsymmetric(x)), 6)(x, v)
    assert_series_close(actual, expected, context="eigvals [complex128]")


def test_eigvals_of_a_2x2_matrix_match_the_closed_form():
    # lambda = tr/2 +- sqrt(tr^2/4 - det), real and distinct along the whole line here.
    def matrix(t):
        return jnp.array([[2.0 + jnp.sin(t), 1.0 + t * t], [0.5 * jnp.cos(t), -1.0 + t]])

    def closed_form(t):
        m = matrix(t)
        half_trace = (m[0, 0] + m[1, 1]) / 2
        root = jnp.sqrt(half_trace**2 - (m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]))
        return jnp.stack([half_trace + root, half_trace - root])

    eigenvalues = taylax.derivatives(lambda t: jnp.linalg.eigvals(matrix(t)), 8)(0.3)
    expected = taylax.derivatives(closed_form, 8)(0.3)
    # LAPACK's order of the two eigenvalues is its own: match them at the primal.
    order = np.argsort(np.real(np.asarray(eigenvalues[0])))
    expected_order = np.argsort(np.asarray(expected[0]))
    assert_series_close(
        np.real(np.asarray(eigenvalues))[:, order], np.asarray(expected)[:, expected_order]
    )
    np.testing.assert_array_equal(np.imag(np.asarray(eigenvalues)), 0.0)


def test_solve_program_size_grows_at_most_linearly_with_order():
    x = np.asarray(_RNG.normal(size=(4, 4)))
    v = direction("count", (4, 4), "float64")

    def f(x):
        return jnp.linalg.solve(_mat(x), jnp.cos(x[:, 0]))

    counts = [equation_counts(jax.make_jaxpr(taylax.derivatives(f, k))(x, v)) for k in (4, 16, 32)]
    assert counts[0]["custom_linear_solve"] >= 1  # the solve is re-bound, not expanded
    # One solve whatever the order; products are shifted sums, a few equations per order.
    assert all(c["custom_linear_solve"] == counts[0]["custom_linear_solve"] for c in counts)
    small, middle, large = (sum(c.values()) for c in counts)
    assert large - middle <= (middle - small) * 16 / 12 + 4, (small, middle, large)


@pytest.mark.parametrize(
    "fn,message",
    [
        (lambda x: jnp.linalg.qr(x[:, :3], mode="complete"), "full_matrices=True only for square"),
        (lambda x: jnp.linalg.svd(x[:, :3]), "full_matrices=True only for square"),
        (
            lambda x: lax_linalg.eigh(x + x.T, subset_by_index=(0, 2))[1],
            "full eigendecomposition",
        ),
        (lambda x: jnp.linalg.eig(x)[1], "enable_eigvec_derivs=True"),
    ],
)
def test_unsupported_forms_raise_clear_errors(fn, message):
    x = np.asarray(M4)
    with pytest.raises(NotImplementedError, match=message):
        taylax.derivatives(fn, 2)(x, np.ones_like(x))


# A series times a constant matrix with rows of at least `_ROW_DOTS_MIN_BYTES` (lowered
# here so the test stays small): one dot per coefficient row up to degree 8, a single dot
# over the stacked rows past it and for smaller rows.
_ROW_DOT_W = seeded_rng("row dots").normal(size=(64, 48))
_ROW_DOT_SIDES = {
    "series-left": lambda x: jnp.sin(x) @ _ROW_DOT_W,
    "series-right": lambda x: _ROW_DOT_W.T @ jnp.sin(x).T,
}


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("side", sorted(_ROW_DOT_SIDES))
def test_series_times_a_constant_matrix(side, dtype, emission):
    emission(row_dots_min_bytes=0)
    x = seeded_rng(side).normal(size=(8, 64)).astype(dtype)
    v = direction(side, x.shape, dtype)
    check_against_oracle(_ROW_DOT_SIDES[side], x, v, [2, 8, 9], context=side)


@pytest.mark.parametrize(
    "order, row_bytes, dots",
    [(1, 0, 2), (8, 0, 9), (9, 0, 1), (16, 0, 1), (8, 8 * 64 * 8, 9), (8, 8 * 64 * 8 + 1, 1)],
)
def test_series_times_a_constant_matrix_takes_one_dot_per_large_row_up_to_degree_8(
    order, row_bytes, dots, emission
):
    emission(row_dots_min_bytes=row_bytes)
    x = jnp.ones((8, 64))  # rows of 4 KiB
    for side, f in _ROW_DOT_SIDES.items():
        jaxpr = jax.make_jaxpr(taylax.derivatives(f, order))(x, x)
        found = sum(e.primitive is lax.dot_general_p for e in all_equations(jaxpr))
        assert found == dots, side


# A product of two series matrices: one dot per pair of rows up to degree 8 (a Toeplitz
# table past it and for small products). 32 x 48 times 48 x 32 is past `_PAIR_DOTS_MIN_WORK`.
_PAIR_X = seeded_rng("pair dots").normal(size=(32, 48)) / 4


def _pair_product(x):
    return jnp.sin(x) @ jnp.tanh(x).T


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_product_of_two_series_matrices(dtype):
    x = _PAIR_X.astype(dtype)
    v = direction("pair dots", x.shape, dtype)
    check_against_oracle(_pair_product, x, v, [1, 2, 8, 9], context=dtype)


@pytest.mark.parametrize("order, dots", [(1, 3), (2, 6), (4, 15), (8, 45), (9, 1)])
def test_product_of_two_series_matrices_takes_one_dot_per_pair_of_rows(order, dots):
    # Attention's scores and outputs: a dot over the Toeplitz table multiplied (K + 1)^2
    # pairs of rows, (K + 1)(K + 2) / 2 of them nonzero, after copying the table; one dot
    # per pair ran 0.57-0.91x its time (32 x 32 to 256 x 256, K = 2..8).
    jaxpr = jax.make_jaxpr(taylax.derivatives(_pair_product, order))(_PAIR_X, _PAIR_X)
    assert sum(e.primitive is lax.dot_general_p for e in all_equations(jaxpr)) == dots
    small = jax.make_jaxpr(taylax.derivatives(_pair_product, order))(_PAIR_X[:4], _PAIR_X[:4])
    assert sum(e.primitive is lax.dot_general_p for e in all_equations(small)) <= 1


# Each form of a product of two series matrices, forced by the policy: every pair's
# product and a skew sum (small products), one dot over a Toeplitz table (larger ones).
# Pair dots are `test_product_of_two_series_matrices` above.
_PRODUCT_FORMS = {
    "skew sum": dict(small_product=1 << 30, pair_dots_max_degree=0),
    "Toeplitz table": dict(small_product=0, pair_dots_max_degree=0),
}
_PRODUCT_LAYOUTS = {
    "matmul": lambda x: jnp.sin(x) @ jnp.exp(x / 2).T,
    "contracted first axis": lambda x: jnp.einsum("ji,jk->ik", jnp.cos(x), x * jnp.tanh(x)),
    "batched": lambda x: jnp.einsum("bi,bj->bij", jnp.sin(x), jnp.exp(x)),
    "vector": lambda x: jnp.dot(jnp.sin(x[0]), jnp.cos(x[1])),
}


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("layout", sorted(_PRODUCT_LAYOUTS))
@pytest.mark.parametrize("form", sorted(_PRODUCT_FORMS))
def test_product_of_two_series_matrices_in_each_form(form, layout, dtype):
    x = _PAIR_X[:3, :4].astype(dtype)
    v = direction("product forms", x.shape, dtype)
    policy = dataclasses.replace(taylax.CPU, name=form, **_PRODUCT_FORMS[form])
    with taylax.emission_policy(policy):
        check_against_oracle(_PRODUCT_LAYOUTS[layout], x, v, range(7), context=f"{form} {dtype}")


_SQRT_M = np.asarray([[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("as_dot", [False, True], ids=["skew sum", "dot"])
def test_an_infinite_derivative_leaves_a_matrix_product_s_primal(order, as_dot):
    # sqrt at 0: the first derivative of one factor is infinite. A Toeplitz table's zero
    # met it (`inf * 0`) and the product's primal came out NaN, where `jax.jvp` gives 0;
    # the scalar product was right. Small products are every pair's product and a skew
    # sum, larger ones a dot over the table (the policy's `small_product`; pair dots have
    # no table).
    def f(t):
        return (jnp.sqrt(t) * _SQRT_M) @ (jnp.exp(t) * _SQRT_M)

    policy = taylax.CPU
    if as_dot:
        policy = dataclasses.replace(policy, name="dots", small_product=0, pair_dots_max_degree=0)
    primal, tangent = jax.jvp(f, (0.0,), (1.0,))
    with taylax.emission_policy(policy):
        got = taylax.derivatives(f, order)(0.0)
    np.testing.assert_array_equal(got[0], primal)
    assert not np.isfinite(got[1:]).any()
    if order == 1 and not as_dot:
        # Every entry +inf. Past order 1 sqrt's own next coefficient is NaN, and a dot's
        # poison is NaN (`inf * 0`): both not finite, as the check above asks.
        np.testing.assert_array_equal(got[1], tangent)
