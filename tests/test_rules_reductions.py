"""Reductions, cumulative ops, sorting and selection against the nested-jvp oracle.

float64 for every case, complex128 where the primitive accepts complex numbers (sums,
products, cumulative sums/products, means); `taylax.derivatives` at orders 1 and 6 (the
order-6 result holds orders 0..6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import taylax
from reference import all_equations, case_params, check_against_oracle, direction, seeded_rng

ORDERS = (1, 6)  # the order-6 result holds orders 0..6; order 1 checks low truncation

X3 = np.array([-1.3, 0.2, 0.9])
X23 = np.array([[-1.3, 0.2, 0.9], [0.4, -0.6, 1.7]])
X24 = np.array([[-1.3, 0.2, 0.9, 0.05], [0.4, -0.6, 1.7, -0.25]])
TIE3 = np.array([1.0, 1.0, 0.2])  # equal primals, different directions: a tie in max/min/sort
WITH_ZERO = np.array([0.0, 1.3, -0.7])
D23 = np.array([[0.5, -1.25, 0.75], [1.5, -0.25, 2.0]])
DV23 = np.array([[0.25, 0.5, -1.0], [0.75, 1.25, -0.5]])


class Case(NamedTuple):
    name: str
    fn: Callable
    x: np.ndarray = X23
    complex_ok: bool = False
    v: np.ndarray | None = None


def _multi_sort(x):
    keys = jnp.cos(x)
    vals = jnp.exp(x) * x
    k, s = lax.sort((keys, vals), dimension=1, num_keys=1)
    return k, jnp.sin(s)


def _multi_sort_two_keys(x):
    # The first key has ties (rounded), the second one breaks them.
    k1 = jnp.round(x * 0.0 + jnp.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]))
    k2 = jnp.sin(x)
    vals = jnp.exp(x)
    _, s2, sv = lax.sort((k1, k2, vals), dimension=1, num_keys=2)
    return s2 * sv


def _top_k(x):
    values, indices = lax.top_k(jnp.sin(x) * x, 2)
    return jnp.exp(values) + indices.astype(x.dtype) * x[..., :2]


CASES = [
    # ---- plain reductions ----------------------------------------------------------------------
    Case("reduce_sum", lambda x: jnp.sin(jnp.sum(jnp.sin(x) * x, axis=1)), complex_ok=True),
    Case("reduce_sum_all", lambda x: jnp.exp(jnp.sum(jnp.exp(x))) * x, complex_ok=True),
    Case("reduce_sum_axis0", lambda x: jnp.sum(jnp.exp(x) * x, axis=0), complex_ok=True),
    Case("reduce_max", lambda x: jnp.exp(jnp.max(jnp.sin(x) * x, axis=1))),
    Case("reduce_max_all", lambda x: jnp.max(jnp.exp(x) - x) * x),
    Case("reduce_max_tie", lambda x: jnp.max(jnp.sin(x)) * jnp.exp(x), TIE3),
    Case("reduce_min", lambda x: jnp.exp(jnp.min(jnp.sin(x) * x, axis=0))),
    Case("reduce_min_tie", lambda x: jnp.min(jnp.exp(x) + x * x), TIE3),
    Case("reduce_prod", lambda x: jnp.prod(jnp.exp(x) + x, axis=1), complex_ok=True),
    Case("reduce_prod_all", lambda x: jnp.sin(jnp.prod(x + 1.5)), complex_ok=True),
    Case("reduce_prod_with_zero", lambda x: jnp.prod(x) * jnp.exp(x), WITH_ZERO),
    Case("reduce_prod_with_zero_series", lambda x: jnp.prod(jnp.sin(x)), WITH_ZERO),
    Case("argmax", lambda x: jnp.argmax(jnp.sin(x), axis=1).astype(x.dtype)[:, None] * jnp.exp(x)),
    Case("argmin", lambda x: jnp.sin(x) * jnp.argmin(x).astype(x.dtype), X3),
    Case("argmax_index", lambda x: jnp.exp(x)[jnp.argmax(x)] * x, X3),
    # ---- cumulative -------------------------------------------------------------------------
    Case("cumsum", lambda x: jnp.sin(jnp.cumsum(jnp.exp(x) * x, axis=1)), complex_ok=True),
    Case(
        "cumsum_reverse",
        lambda x: lax.cumsum(jnp.sin(x), axis=0, reverse=True) * x,
        complex_ok=True,
    ),
    Case("cumprod", lambda x: jnp.cumprod(jnp.exp(x) + x, axis=1), complex_ok=True),
    Case("cumprod_reverse", lambda x: lax.cumprod(jnp.sin(x) + 1.5, axis=1, reverse=True)),
    Case("cummax", lambda x: jnp.exp(lax.cummax(jnp.sin(x) * x, axis=1))),
    Case("cummax_reverse", lambda x: lax.cummax(jnp.exp(x) - x, axis=1, reverse=True) * x),
    Case("cummin", lambda x: lax.cummin(jnp.sin(3.0 * x), axis=1) * jnp.exp(x)),
    Case("cumlogsumexp", lambda x: lax.cumlogsumexp(jnp.sin(x) * x, axis=1)),
    Case("cumlogsumexp_reverse", lambda x: jnp.sin(lax.cumlogsumexp(x, axis=0, reverse=True))),
    # ---- precision --------------------------------------------------------------------------
    Case(
        "reduce_precision_identity",
        lambda x: jnp.exp(lax.reduce_precision(jnp.sin(x), exponent_bits=11, mantissa_bits=52)),
        complex_ok=False,
    ),
    Case(
        "reduce_precision_float32",
        lambda x: jnp.sin(lax.reduce_precision(x * x, exponent_bits=8, mantissa_bits=23)),
        D23,
        v=DV23,
    ),
    # Values that are not dyadic: nested jvp rounds each derivative (reduce_precision's jvp
    # rounds the tangent), so rounding the normalized coefficients x^(k)/k! would differ.
    Case(
        "reduce_precision_half_output",
        lambda x: lax.reduce_precision(jnp.exp(x) * jnp.sin(x), exponent_bits=5, mantissa_bits=10),
    ),
    Case(
        "reduce_precision_half_inner",
        lambda x: jnp.sin(lax.reduce_precision(jnp.exp(x), exponent_bits=5, mantissa_bits=10)),
    ),
    # ---- sorting and selection --------------------------------------------------------------
    Case("sort", lambda x: jnp.exp(jnp.sort(jnp.sin(x) * x, axis=1))),
    Case("sort_axis0", lambda x: jnp.sort(jnp.exp(x) - 2.0 * x, axis=0) * x),
    Case("sort_descending", lambda x: jnp.sort(jnp.sin(x), descending=True) * x, X3),
    Case("sort_multi_operand", _multi_sort),
    Case("sort_two_keys", _multi_sort_two_keys),
    Case("argsort", lambda x: jnp.exp(x)[jnp.argsort(jnp.sin(x))], X3),
    Case("top_k", _top_k, X24),
    Case("top_k_vector", lambda x: jnp.sin(lax.top_k(jnp.exp(x) * x, 2)[0]), X3),
    # ---- composites -------------------------------------------------------------------------
    Case("norm", lambda x: jnp.linalg.norm(jnp.sin(x) + x), X3),
    Case("norm_axis", lambda x: jnp.linalg.norm(jnp.exp(x), axis=1)),
    Case("norm_fro", lambda x: jnp.linalg.norm(jnp.sin(x) * x + 0.5)),
    Case("norm_complex", lambda x: jnp.linalg.norm(jnp.exp(x)), complex_ok=True),
    Case("mean", lambda x: jnp.mean(jnp.sin(x) * x, axis=0), complex_ok=True),
    Case("mean_all", lambda x: jnp.exp(jnp.mean(jnp.exp(x))), complex_ok=True),
    Case("var", lambda x: jnp.var(jnp.exp(x) + x, axis=1)),
    Case("std", lambda x: jnp.std(jnp.sin(x) * x)),
]
_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "duplicate case names"


def _inputs(case: Case, dtype: str):
    if dtype == "float64":
        x = np.asarray(case.x, dtype=dtype)
    else:
        rng = seeded_rng("imag:" + case.name)
        x = np.asarray(case.x + 1j * np.round(rng.uniform(-0.8, 0.8, case.x.shape), 2), dtype)
    v = direction(case.name, x.shape, dtype) if case.v is None else np.asarray(case.v, dtype)
    return x, v


@pytest.mark.parametrize("name,dtype", case_params(CASES, lambda c: c.complex_ok))
def test_reduction_rule(name, dtype):
    case = _BY_NAME[name]
    x, v = _inputs(case, dtype)
    check_against_oracle(case.fn, x, v, ORDERS, context=f"{name} [{dtype}]")


_ROW_SUMS = {
    "logsumexp": lambda x: jax.nn.logsumexp(x, axis=-1),
    "sum_exp": lambda x: jnp.sum(jnp.exp(x), axis=0),
    # lax's: jnp.cumsum is a jit of its own, whose operand reaches it stacked.
    "cumsum_exp": lambda x: lax.cumsum(jnp.exp(x), axis=1),
}


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("name", sorted(_ROW_SUMS))
def test_sums_of_known_rows_take_each_row(name, dtype):
    # exp along a line whose direction is an argument is a closed form known row by row; a
    # sum of its stack made XLA build the stack, computing exp again for every row
    # (logsumexp ran 2-3x nested jvp's time at orders 2 and 4). Every sum now reads a row.
    f = _ROW_SUMS[name]
    if name == "logsumexp" and dtype == "complex128":
        pytest.skip("logsumexp of complex numbers takes the real part's max; tested real only")
    x = np.asarray(X24, dtype=dtype)
    v = direction(name, x.shape, dtype)
    for order in (2, 6):
        jaxpr = jax.make_jaxpr(taylax.derivatives(f, order))(x, v)
        sums = [
            e
            for e in all_equations(jaxpr)
            if e.primitive in (lax.reduce_sum_p, lax.cumsum_p) and e.invars[0].aval.ndim > 1
        ]
        assert sums and all(e.invars[0].aval.shape == x.shape for e in sums), name
    check_against_oracle(f, x, v, [1, 2, 6], context=f"{name} [{dtype}]")


def test_sums_of_the_inputs_stay_stacked():
    # The input series' rows x and v are buffers already: summing them one by one
    # recomputes nothing and adds a kernel per row (layer normalization's mean).
    x = np.asarray(X24)
    jaxpr = jax.make_jaxpr(taylax.derivatives(lambda x: jnp.sum(x, axis=-1), 2))(x, x)
    sums = [e for e in all_equations(jaxpr) if e.primitive is lax.reduce_sum_p]
    assert [e.invars[0].aval.shape for e in sums] == [(2, *x.shape)]
