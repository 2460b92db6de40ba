"""Structural / linear Taylor rules against the nested-jvp oracle.

Every case feeds the primitive a full series (a nonlinear function of the input, so every
coefficient is nonzero) and usually applies a nonlinear function afterwards, so that a rule
that is right at order 1 but mixes up higher coefficients fails.  float64 for all cases,
complex128 where the primitive accepts complex numbers; `taylax.derivatives` at orders 1 and 6
(the order-6 result holds orders 0..6).
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
# Dyadic values: their squares and products are exact in float32, so float32 round trips of
# low-degree series are exact both for normalized and for unnormalized coefficients.
D23 = np.array([[0.5, -1.25, 0.75], [1.5, -0.25, 2.0]])
DV23 = np.array([[0.25, 0.5, -1.0], [0.75, 1.25, -0.5]])

X_TIES = np.array([[0.5, 0.5, -1.0, 0.5], [1.5, 1.5, 0.25, 1.5], [0.5, 2.0, 2.0, -0.5]])
X_POOL = np.round(np.sin(np.arange(10 * 11.0)).reshape(10, 11) * 2, 3)

W32 = np.array([[0.3, -1.1], [0.7, 0.2], [-0.5, 0.9]])
W24 = np.cos(np.arange(3 * 24.0).reshape(3, 24))  # (3, 24)
K_OIW = np.array([[[0.3, -0.6], [1.1, 0.4]], [[-0.2, 0.5], [0.8, -0.9]]])  # (O=2, I=2, W=2)
LHS_CONST = np.array([[[0.3, -0.6, 1.2, 0.1, -0.4], [1.1, 0.4, -0.8, 0.7, 0.2]]])  # (1, 2, 5)


class Case(NamedTuple):
    name: str
    fn: Callable
    x: np.ndarray = X23
    complex_ok: bool = True
    v: np.ndarray | None = None  # a fixed direction (default: pseudo-random from the name)


def _traced_index(x):
    # An integer index that depends on the input (no series may flow through it).
    return jnp.argmax(jnp.real(x[:, 0]))


def _split_combine(x):
    a, b, c = jnp.split(jnp.sin(x) * x, 3, axis=1)
    return jnp.exp(a) * b + c


def _conv(lhs, rhs, **kw):
    return lax.conv_general_dilated(lhs, rhs, window_strides=kw.pop("strides", (1,)), **kw)


CASES = [
    # ---- broadcasting and shapes --------------------------------------------------------------
    Case(
        "broadcast_in_dim",
        lambda x: jnp.cos(
            jnp.broadcast_to(jnp.sin(x), (4, 2, 3)) * jnp.arange(1.0, 5.0)[:, None, None]
        ),
    ),
    Case("broadcast_in_binary_op", lambda x: jnp.sin(x) * jnp.exp(x[0]) + jnp.cos(x[:, :1])),
    Case("broadcast_scalar_series", lambda x: jnp.sin(jnp.sum(x * x)) * x),
    Case(
        "reshape", lambda x: jnp.cos(jnp.reshape(jnp.sin(x) * x, (3, 2))) * jnp.exp(x).reshape(3, 2)
    ),
    Case("reshape_flatten", lambda x: jnp.sin(jnp.ravel(jnp.exp(x)))),
    Case("squeeze", lambda x: lax.squeeze(jnp.exp(x).reshape(2, 1, 3), (1,)) * jnp.sin(x)),
    Case("expand_dims", lambda x: jnp.expand_dims(jnp.sin(x), 1) * jnp.exp(x)[:, :, None]),
    Case("transpose", lambda x: jnp.sin(jnp.exp(x).T) * x.T),
    Case(
        "transpose_3d",
        lambda x: jnp.cos(jnp.transpose(jnp.sin(x)[:, :, None] * x[:, None, :], (2, 0, 1))),
    ),
    Case("rev", lambda x: jnp.flip(jnp.sin(x) * x, axis=1) * jnp.exp(x)),
    Case("rev_all", lambda x: jnp.cos(jnp.flip(jnp.exp(x)))),
    # ---- slicing and indexing -----------------------------------------------------------------
    Case("slice", lambda x: jnp.sin(x)[:, 1:3] * jnp.exp(x[:, :2])),
    Case("slice_strided", lambda x: jnp.cos(jnp.exp(x)[:, ::2]) * x[::-1, ::2]),
    Case(
        "dynamic_slice",
        lambda x: jnp.exp(lax.dynamic_slice(jnp.sin(x) * x, (_traced_index(x), 1), (1, 2))),
    ),
    Case(
        "dynamic_slice_clamped",
        lambda x: lax.dynamic_slice(jnp.exp(x), (_traced_index(x) + 5, 2), (1, 2)) * x[0, 0],
    ),
    Case(
        "dynamic_update_slice",
        lambda x: jnp.sin(
            lax.dynamic_update_slice(
                jnp.sin(x), jnp.exp(x[:1, :2]) * x[1:, 1:], (_traced_index(x), 1)
            )
        ),
    ),
    Case(
        "dynamic_update_slice_const_update",
        lambda x: lax.dynamic_update_slice(jnp.exp(x), jnp.ones((1, 2), x.dtype), (1, 0)) * x,
    ),
    Case(
        "dynamic_update_slice_const_operand",
        lambda x: (
            lax.dynamic_update_slice(jnp.ones((2, 3), x.dtype), jnp.exp(x[:, :2]), (0, 1)) * x
        ),
    ),
    Case(
        "gather_fancy_index",
        lambda x: jnp.sin(x)[jnp.array([2, 0, 1, 1])] * jnp.exp(x)[jnp.array([0, 0, 2, 1])],
        X3,
    ),
    Case("gather_take", lambda x: jnp.cos(jnp.take(jnp.exp(x), jnp.array([2, 0, 2]), axis=1))),
    Case("gather_column", lambda x: jnp.sin(x)[:, 1] * jnp.exp(x[1, :2]).sum()),
    Case("gather_traced_index", lambda x: jnp.exp(x)[jnp.argmin(jnp.real(x))] * jnp.sin(x), X3),
    Case(
        "gather_2d_fancy",
        lambda x: jnp.exp(x)[jnp.array([1, 0, 1]), jnp.array([2, 2, 0])] * jnp.sin(x[0]),
    ),
    Case(
        "gather_fill_out_of_bounds",
        lambda x: (
            jnp.take(jnp.sin(x), jnp.array([0, 5]), axis=0, mode="fill", fill_value=0.0)
            * jnp.exp(x[:2])
        ),
        X3,
    ),
    Case("scatter_set", lambda x: jnp.sin(jnp.sin(x).at[1].set(jnp.exp(x[0]) * x[2])), X3),
    Case("scatter_set_row", lambda x: jnp.exp(x).at[:, 1].set(jnp.sin(x[:, 0]) * x[:, 2]) * x),
    Case("scatter_set_const", lambda x: jnp.exp(x).at[0, 1].set(2.0) * x),
    Case("scatter_set_into_const", lambda x: jnp.zeros(4, x.dtype).at[1:].set(jnp.sin(x) * x), X3),
    Case(
        "scatter_add",
        lambda x: jnp.cos(jnp.sin(x).at[jnp.array([0, 2, 0])].add(jnp.exp(x) * x)),
        X3,
    ),
    Case("scatter_add_2d", lambda x: jnp.exp(x).at[:, jnp.array([0, 0])].add(jnp.sin(x[:, 1:]))),
    Case(
        "scatter_mul_const", lambda x: jnp.sin(jnp.exp(x).at[jnp.array([0, 2])].multiply(3.0)), X3
    ),
    Case("scatter_mul_const_2d", lambda x: jnp.sin(x).at[1].multiply(-0.5) * jnp.exp(x)),
    # ---- assembling -------------------------------------------------------------------------
    Case(
        "concatenate", lambda x: jnp.cos(jnp.concatenate([jnp.sin(x), jnp.exp(x), x * x], axis=1))
    ),
    Case("concatenate_with_const", lambda x: jnp.concatenate([jnp.exp(x), jnp.ones((2, 3))]) * 2.0),
    Case("pad_constant", lambda x: jnp.exp(jnp.pad(jnp.sin(x) * x, 2))),
    Case(
        "pad_nonzero_value",
        lambda x: jnp.sin(jnp.pad(jnp.exp(x), ((1, 0), (0, 2)), constant_values=0.7)),
    ),
    Case(
        "pad_negative_interior",
        lambda x: jnp.cos(lax.pad(jnp.exp(x), jnp.zeros((), x.dtype), [(1, -1, 0), (-1, 2, 1)])),
    ),
    Case(
        "pad_series_value",
        lambda x: lax.pad(jnp.sin(x), jnp.cos(x[0, 0]) * x[1, 1], [(1, 1, 1), (0, 0, 0)]),
    ),
    Case("split", lambda x: jnp.split(jnp.sin(x) * x, 3, axis=1)),
    Case("split_combine", _split_combine),
    Case("iota", lambda x: jnp.sin(x) * lax.iota(x.dtype, 3) + jnp.arange(6.0).reshape(2, 3) * x),
    Case(
        "convert_float32_roundtrip",
        lambda x: jnp.sin((x * x).astype(jnp.float32).astype(jnp.float64)),
        D23,
        complex_ok=False,
        v=DV23,
    ),
    Case(
        "convert_to_float32_output",
        lambda x: (x * x + x).astype(jnp.float32),
        D23,
        complex_ok=False,
        v=DV23,
    ),
    Case(
        "convert_real_to_complex",
        lambda x: jnp.exp(x.astype(jnp.complex128) * (1.0 + 2.0j)),
        complex_ok=False,
    ),
    Case("copy", lambda x: jnp.copy(jnp.sin(x)) * jnp.array(jnp.exp(x), copy=True)),
    # ---- contractions -----------------------------------------------------------------------
    Case("matmul_const", lambda x: jnp.sin(jnp.sin(x) @ W32)),
    Case("matmul_both", lambda x: jnp.exp(x) @ jnp.sin(x).T),
    Case("matmul_const_left", lambda x: jnp.cos(W32 @ jnp.sin(x))),
    # Large enough that the Cauchy product is one dot_general, not a multiply-and-sum.
    Case("matmul_both_large", lambda x: jnp.sin(x @ W24).T @ jnp.tanh(x @ W24 * x[0, 0]), X23),
    Case("matmul_vector", lambda x: jnp.dot(jnp.sin(x), jnp.exp(x)) * x, X3),
    Case("einsum_batch", lambda x: jnp.einsum("bi,bj->bij", jnp.sin(x), jnp.exp(x))),
    Case("einsum_batch_contract", lambda x: jnp.cos(jnp.einsum("bi,bi->b", jnp.sin(x), x * x))),
    Case(
        "dot_general_explicit",
        lambda x: lax.dot_general(
            jnp.sin(x)[:, :, None] * x[:, None, :],
            jnp.exp(x),
            dimension_numbers=(((2,), (1,)), ((0,), (0,))),
        ),
    ),
    Case(
        "conv_input_depends",
        lambda x: jnp.sin(_conv(jnp.exp(x)[None], K_OIW.astype(x.dtype), padding="SAME")),
    ),
    Case(
        "conv_kernel_depends",
        lambda x: _conv(
            LHS_CONST.astype(x.dtype), jnp.sin(x[:, :2])[None] * x[:, 1:][None], padding="VALID"
        ),
    ),
    Case(
        "conv_both_depend",
        lambda x: jnp.cos(
            _conv(jnp.exp(x)[None], x[:, :2][None] * jnp.sin(x[:, 1:])[None], padding=((1, 0),))
        ),
    ),
    Case(
        "conv_strided_dilated",
        lambda x: _conv(
            jnp.sin(x)[None],
            K_OIW.astype(x.dtype) * jnp.exp(x[0, 0]),
            strides=(2,),
            padding=((1, 1),),
            lhs_dilation=(2,),
            rhs_dilation=(1,),
        ),
    ),
    Case(
        "conv_feature_groups",
        lambda x: _conv(
            jnp.exp(x)[None],
            jnp.sin(x[:, :2]).reshape(2, 1, 2),
            padding="SAME",
            feature_group_count=2,
        ),
    ),
    Case(
        "reduce_window_sum_avgpool",
        lambda x: jnp.sin(
            lax.reduce_window(jnp.exp(x) * x, 0.0, lax.add, (1, 2), (1, 1), "VALID") / 2.0
        ),
    ),
    Case(
        "reduce_window_sum_padded_strided",
        lambda x: lax.reduce_window(jnp.sin(x), 0.0, lax.add, (2, 2), (1, 2), "SAME") * x[0, 0],
    ),
    Case(
        "reduce_window_max_pool",
        lambda x: jnp.exp(
            lax.reduce_window(jnp.sin(x) * x, -jnp.inf, lax.max, (1, 2), (1, 1), "VALID")
        ),
        complex_ok=False,
    ),
    Case(
        "reduce_window_max_pool_2d",
        lambda x: lax.reduce_window(jnp.exp(x) - x, -jnp.inf, lax.max, (2, 2), (1, 1), "SAME"),
        complex_ok=False,
    ),
    Case(
        "reduce_window_min_pool",
        lambda x: lax.reduce_window(jnp.exp(x) - x, jnp.inf, lax.min, (1, 2), (1, 1), "VALID"),
        complex_ok=False,
    ),
    # Ties (x^3 keeps them, the direction does not): the first maximal element in
    # row-major window order is chosen, as JAX's jvp on the CPU chooses for these windows.
    Case(
        "reduce_window_max_pool_ties",
        lambda x: jnp.sin(lax.reduce_window(x**3, -jnp.inf, lax.max, (2, 3), (1, 1), "SAME")),
        x=X_TIES,
        complex_ok=False,
    ),
    Case(
        "reduce_window_min_pool_ties",
        lambda x: jnp.sin(lax.reduce_window(x**3, jnp.inf, lax.min, (3, 2), (1, 1), "SAME")),
        x=X_TIES,
        complex_ok=False,
    ),
    Case(
        "reduce_window_max_pool_dilated_strided",
        lambda x: lax.reduce_window(
            jnp.sin(x) * x,
            -jnp.inf,
            lax.max,
            (2, 3),
            (2, 2),
            ((1, 2), (0, 3)),
            base_dilation=(2, 1),
            window_dilation=(1, 2),
        ),
        x=X_POOL,
        complex_ok=False,
    ),
    Case(
        "reduce_window_min_pool_large_window",
        lambda x: jnp.exp(
            lax.reduce_window(jnp.cos(x) * x, jnp.inf, lax.min, (9, 7), (1, 1), "SAME")
        ),
        x=X_POOL,
        complex_ok=False,
    ),
]
_BY_NAME = {c.name: c for c in CASES}
assert len(_BY_NAME) == len(CASES), "duplicate case names"


def _complex_input(case: Case) -> np.ndarray:
    rng = seeded_rng("imag:" + case.name)
    return case.x + 1j * np.round(rng.uniform(-0.8, 0.8, size=case.x.shape), 2)


def _inputs(case: Case, dtype: str):
    if dtype == "float64":
        x = np.asarray(case.x, dtype=dtype)
    else:
        x = np.asarray(_complex_input(case), dtype=dtype)
    v = direction(case.name, x.shape, dtype) if case.v is None else np.asarray(case.v, dtype)
    return x, v


@pytest.mark.parametrize("name,dtype", case_params(CASES, lambda c: c.complex_ok))
def test_structural_rule(name, dtype):
    case = _BY_NAME[name]
    x, v = _inputs(case, dtype)
    check_against_oracle(case.fn, x, v, ORDERS, context=f"{name} [{dtype}]")


@pytest.mark.parametrize("op, init", [(lax.max, -np.inf), (lax.min, np.inf)], ids=["max", "min"])
def test_pooling_chooses_without_select_and_gather_add(op, init):
    # JAX's select_and_gather_add keeps 32 bits of each float64 off the CPU (it packs value
    # and tangent into one word); taylax chooses by selects, doubling the block each time:
    # a window 8x as wide costs 3 more selects per array, not 8x as many.
    def selects(width, through_jvp=False):
        def pool(x):
            return lax.reduce_window(x, init, op, (1, width), (1, 1), "SAME")

        def f(x):  # JAX's jvp of the pooling binds select_and_gather_add itself
            return jax.jvp(pool, (x,), (jnp.sin(x),))[1] if through_jvp else pool(x)

        jaxpr = jax.make_jaxpr(taylax.derivatives(f, 3))(np.ones((2, 80)), np.ones((2, 80)))
        names = [e.primitive.name for e in all_equations(jaxpr)]
        assert "select_and_gather_add" not in names
        return names.count("select_n")

    assert selects(64) - selects(8) == 2 * 3
    selects(64, through_jvp=True)
