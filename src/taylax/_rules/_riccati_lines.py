"""Closed forms along a line for tanh and tan: polynomials in the function's own value.

Along a line `x0 + s`, the derivatives of tanh and tan are polynomials in the value
`y = f(x0)`: `f^(k) = P_k(y)` with `P_0 = y` and `P_{k+1} = P_k' g(y)`, where
`g = 1 - y^2` for tanh and `1 + y^2` for tan (their Riccati equations `f' = g(f)`).
Every coefficient is then a few products of `y` with exact rational numbers, with no
recurrence from one coefficient to the next.

tan: `f^(k)/k! = g(y) sum_j C[k, j] y^j`, with `g = 1 + y^2`. The monomial basis is
accurate to order 16 (2e-15 against the recurrence).

tanh: `P_k` has the parity of `k + 1`, so `P_{k-1}'` is a polynomial in `y^2 = 1 - z`,
times `y` for even `k`, where `z = 1 - y^2 = sech(x0)^2`:

    tanh^(k)(x0) / k! = z A_k(z)        (k odd)
                      = z y A_k(z)      (k even),   A_k of degree (k - 1) // 2.

`z` is computed from `x0` (`_series.sech_squared`), accurately where tanh saturates,
and `A_k(z)` keeps that accuracy: its value at `z = 0` is its constant term, where a
polynomial in `y` cancels to a tiny value at `y = +-1`. Half the degree also halves the
products. The worst error of the coefficients of order k on the real line, in ulps of
the value per order (`k + 1`), is 1 up to order 10, 7 at 11, 11 at 13 and 83 at 15
(the Riccati recurrence: 1 at every order); in powers of `y` it was 59 at order 8 and
1,564 at 10 (benchmarks/tanh_line_bases.py). So real tanh takes the closed form up to
order 14, the recurrence past it; complex tanh up to order 10, as the
basis in `y` did.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax.numpy as jnp
import numpy as np

from .. import _policy, _series

_RICCATI = {"tanh": (1, 0, -1), "tan": (1, 0, 1)}

# The orders each closed form is accurate to (see the module docstring).
TAN_MAX_ORDER = 16


def tanh_max_order(dtype: np.dtype) -> int:
    """The order tanh's closed form is accurate to for `dtype`: 14 real, 10 complex."""
    return 10 if dtype.kind == "c" else 14


@functools.cache
def _exact_polynomials(kind: str, order: int) -> tuple[tuple[Fraction, ...], ...]:
    """Row `k`: the coefficients of `y^j` in `P_{k-1}'(y) / k!` (row 0 empty)."""
    g = _RICCATI[kind]
    poly = [0, 1]
    rows = [()]
    for k in range(1, order + 1):
        deriv = [i * poly[i] for i in range(1, len(poly))]
        rows.append(tuple(Fraction(c, math.factorial(k)) for c in deriv))
        nxt = [0] * (len(deriv) + len(g) - 1)
        for i, a in enumerate(deriv):
            for j, b in enumerate(g):
                nxt[i + j] += a * b
        poly = nxt
    return tuple(rows)


@functools.cache
def _in_powers_of_y(kind: str, order: int) -> np.ndarray:
    """`C[k, j]`: coefficient of `y^j` in `P_{k-1}'(y) / k!`."""
    table = np.zeros((order + 1, order + 2))
    for k, row in enumerate(_exact_polynomials(kind, order)):
        table[k, : len(row)] = [float(c) for c in row]
    return table


@functools.cache
def _in_powers_of_z(order: int) -> np.ndarray:
    """`A[k, i]`: coefficient of `z^i` in tanh's `A_k(z)`, exactly from the powers of `y`
    (`y^(2m) = (1 - z)^m`, and `y^(2m+1) = y (1 - z)^m` for even `k`)."""
    table = np.zeros((order + 1, order // 2 + 1))
    for k, row in enumerate(_exact_polynomials("tanh", order)):
        coeffs = [Fraction(0)] * table.shape[1]
        for j, c in enumerate(row):
            if c:
                m = j // 2
                for i in range(m + 1):
                    coeffs[i] += c * math.comb(m, i) * (-1) ** i
        table[k] = [float(c) for c in coeffs]
    return table


def _scaled(d, y0, scale: float):
    return _series.with_primal(d if scale == 1.0 else _series.times_powers(d, scale), y0)


def tanh_line(x0, order: int, scale: float = 1.0):
    """`tanh^(k)(x0) scale^k / k!` for k = 0..order, stacked (the module docstring)."""
    y0 = jnp.tanh(x0)
    z = _series.sech_squared(x0)
    table = _in_powers_of_z(order)
    if order <= _policy.current().polynomial_rows_max_order:
        # Row by row (`_series.known_rows`): readers take each row's few products fused;
        # as one stacked expression XLA built the stack and read tanh and `z` from
        # buffers of their own, kernels that nested jvp does not have (docs/EMISSION.md,
        # "Rows").
        rows = [y0]
        for k in range(1, order + 1):
            row = z * _horner(table[k] * scale**k, z)
            rows.append(row * y0 if k % 2 == 0 else row)
        return _series.stack_rows(rows)
    # Horner in z over whole columns, then the factor `z` and, on the even rows, `y`:
    # `z (e y + o)`, `e` and `o` the rows' parities as numbers.
    dtype = jnp.result_type(y0)
    d = _columns_horner(table, z, dtype)
    even = (np.arange(order + 1) % 2 == 0).astype(np.float64).reshape(_column_shape(y0, order))
    factor = z[None] * (jnp.asarray(even, dtype) * y0[None] + jnp.asarray(1 - even, dtype))
    return _scaled(d * factor, y0, scale)


def tan_line(x0, order: int, scale: float = 1.0):
    """`tan^(k)(x0) scale^k / k!` for k = 0..order, stacked: `g(y) C[k] . y^j`."""
    y0 = jnp.tan(x0)
    slope = 1 + y0 * y0
    table = _in_powers_of_y("tan", order)
    if order <= _policy.current().polynomial_rows_max_order:  # row by row, as tanh's
        rows = [y0] + [slope * _horner(table[k] * scale**k, y0) for k in range(1, order + 1)]
        return _series.stack_rows(rows)
    return _scaled(_columns_horner(table, y0, jnp.result_type(y0)) * slope[None], y0, scale)


def _column_shape(x, order: int) -> tuple[int, ...]:
    return (order + 1,) + (1,) * jnp.ndim(x)


def _columns_horner(table: np.ndarray, x, dtype):
    """`sum_j table[:, j] x^j`, every row at once (Horner in `x` over whole columns).

    Scaled adds, not a matmul over the table: one fused elementwise kernel; as a
    (K+1, K+2) dot it ran as a general matmul per element."""
    shape = _column_shape(x, table.shape[0] - 1)
    d = None
    for j in reversed(range(table.shape[1])):
        column = jnp.asarray(table[:, j].reshape(shape), dtype)
        d = column if d is None else d * x[None] + column
    return d


def _horner(coeffs: np.ndarray, x):
    """`sum_j coeffs[j] x^j` with number coefficients (Python floats, weakly typed: a
    NumPy scalar would promote float32 to float64); products only past zero ones."""
    coeffs = [float(c) for c in coeffs]
    nonzero = [j for j, c in enumerate(coeffs) if c]
    if not nonzero:  # a line of slope 0 (`scale == 0`): every derivative is 0
        return jnp.zeros_like(x)
    last = nonzero[-1]
    poly = jnp.full_like(x, coeffs[last])
    for j in reversed(range(last)):
        poly = poly * x + coeffs[j] if coeffs[j] else poly * x
    return poly
