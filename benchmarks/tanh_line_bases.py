"""tanh's closed form along a line in three polynomial bases: how accurate each is, by order.

Along a line, `tanh^(k)(x) / k! = g(y) P_k(y)` with `y = tanh x`, `g = 1 - y^2 =
sech(x)^2` and `P_k` a polynomial with exact rational coefficients. `P_k` has the parity
of k + 1, so it is also `A_k(g)`, times `y` for even k. This script evaluates `P_k` in
float64 three ways, each converted exactly from the rationals:

- `y`: Horner's rule in powers of `y` (taylax's basis before 2026-12);
- `Chebyshev`: Clenshaw's rule in Chebyshev polynomials of `y`;
- `sech^2`: Horner's rule for `A_k` in powers of `g` (taylax's basis for tanh,
  `taylax._rules._riccati_lines`),

with `y` and `g` correctly rounded, and prints the worst error over `--points` from
-6 to 6 and a few saturated points, in ulps of the value per order (`k + 1`), where
the value is the exact coefficient, or where it passes near 0, the geometric mean of
its neighbours at orders k - 1 and k + 1 (tests/test_api_precision.py measures so).
The last column is taylax itself, the top coefficient of
`jax.vmap(taylax.derivatives(jnp.tanh, k))` (float64): the closed form up to its order,
the Riccati recurrence past it. The reference is the Riccati recurrence of tanh in
50-digit arithmetic.

    python benchmarks/tanh_line_bases.py
    python benchmarks/tanh_line_bases.py --max-order 24

It needs mpmath (the test extras: `make .venv/.stamp-test`).
"""

from __future__ import annotations

import argparse
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
from numpy.polynomial import chebyshev, polynomial

import taylax

jax.config.update("jax_enable_x64", True)
mpmath.mp.dps = 50
EPS = float(np.finfo(np.float64).eps)


def monomial_rows(order: int) -> list[list[Fraction]]:
    """Row k: coefficients of `y^j` in `P_{k-1}'(y) / k!` (`P_0 = y`, `P_{k+1} = P_k' g`)."""
    poly, rows = [0, 1], [[]]
    for k in range(1, order + 1):
        deriv = [i * poly[i] for i in range(1, len(poly))]
        rows.append([Fraction(c, math.factorial(k)) for c in deriv])
        nxt = [0] * (len(deriv) + 2)
        for i, c in enumerate(deriv):
            nxt[i] += c
            nxt[i + 2] -= c
        poly = nxt
    return rows


def to_chebyshev(row: list[Fraction]) -> list[Fraction]:
    """The same polynomial in the Chebyshev basis, exactly (`y T_i = (T_{i+1} + T_{|i-1|})/2`)."""
    out = [Fraction(0)] * (len(row) + 1)
    power = [Fraction(1)]
    for c in row:
        for i, d in enumerate(power):
            out[i] += c * d
        nxt = [Fraction(0)] * (len(power) + 1)
        for i, d in enumerate(power):
            nxt[i + 1] += d if i == 0 else d / 2
            if i:
                nxt[i - 1] += d / 2
        power = nxt
    return out


def to_sech_squared(row: list[Fraction]) -> list[Fraction]:
    """`A_k` with `P_k(y) = A_k(1 - y^2)` (times `y` for odd powers), exactly."""
    out = [Fraction(0)] * (len(row) // 2 + 1)
    for j, c in enumerate(row):
        if c:
            m = j // 2
            for i in range(m + 1):
                out[i] += c * math.comb(m, i) * (-1) ** i
    return out


def exact_coefficients(x: float, order: int) -> list[float]:
    """`tanh^(k)(x) / k!` for k = 0..order: `(k+1) t_{k+1} = [k = 0] - sum t_j t_{k-j}`."""
    t = [mpmath.tanh(mpmath.mpf(x))]
    for k in range(order):
        t.append(((1 if k == 0 else 0) - sum(t[j] * t[k - j] for j in range(k + 1))) / (k + 1))
    return [float(c) for c in t]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-order", type=int, default=20)
    parser.add_argument("--points", type=int, default=49)
    args = parser.parse_args()
    order = args.max_order
    rows = monomial_rows(order + 1)
    floats = lambda row: np.array([float(c) for c in row])  # noqa: E731
    mono = [floats(row) for row in rows]
    cheb = [floats(to_chebyshev(row)) for row in rows]
    sech = [floats(to_sech_squared(row)) for row in rows]
    xs = [*np.linspace(-6.0, 6.0, args.points), 7.0, -8.0, 9.0, 12.0, -14.0, 18.0]
    ours = [
        np.asarray(jax.jit(jax.vmap(taylax.derivatives(jnp.tanh, k)))(jnp.asarray(xs)))[:, k]
        for k in range(order + 1)
    ]
    worst = np.zeros((4, order + 1))
    for i, x in enumerate(xs):
        want = exact_coefficients(x, order + 1)
        y, g = math.tanh(x), 1.0 / math.cosh(x) ** 2
        for k in range(1, order + 1):
            scale = max(abs(want[k]), math.sqrt(abs(want[k - 1] * want[k + 1])))
            odd = y if k % 2 == 0 else 1.0
            values = (
                g * polynomial.polyval(y, mono[k]),
                g * chebyshev.chebval(y, cheb[k]),
                g * odd * polynomial.polyval(g, sech[k]),
                ours[k][i] / math.factorial(k),
            )
            for b, value in enumerate(values):
                error = abs(value - want[k]) / (scale * EPS * (k + 1))
                worst[b, k] = max(worst[b, k], error)
    print("| order | y | Chebyshev | sech^2 | taylax |")
    print("|---:|---:|---:|---:|---:|")
    for k in range(1, order + 1):
        print(f"| {k} | " + " | ".join(f"{w:,.0f}" for w in worst[:, k]) + " |")


if __name__ == "__main__":
    main()
