"""erfcx and log_ndtr in their tails: the relative error of each Taylor coefficient
against mpmath, taylax beside nested `jax.jvp` (JAX's own jvp rules), float64.

Every forward recurrence for erfcx's coefficients (JAX's jvp rule `y' = 2 x y - 2 /
sqrt(pi)` nested, or a series recurrence) multiplies rounding errors by about `2 x^2 / k`
per order k; taylax runs Miller's backward sweep there (`taylax._series.erfcx_coeffs`).
The first table gives the largest relative error over orders 1..K at a few points; the
second, the largest over a grid of `x0` in 0.05..1000, per order K, of taylax alone
(against erfcx's recurrence run forward in 400-digit arithmetic, which no rounding
reaches at these orders).

    python benchmarks/erfcx_tail.py
    python benchmarks/erfcx_tail.py --order 8 --grid-orders 1,2,4,8,12,16,24
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import mpmath
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

# jax 0.9 (the oldest JAX taylax supports) has no `erfcx`; the script then says so
# instead of failing at import.
ERFCX = getattr(jax.scipy.special, "erfcx", None)

FUNCTIONS = {
    "erfcx": (
        ERFCX,
        lambda t: mpmath.exp(t * t) * mpmath.erfc(t),
        (0.5, 3.0, 10.0, 30.0, 1e3),
    ),
    "erfcx, complex": (
        ERFCX,
        lambda t: mpmath.exp(t * t) * mpmath.erfc(t),
        (3 + 3j, 10 + 5j, -3 + 10j, -4 + 7j),
    ),
    "log_ndtr": (
        jax.scipy.special.log_ndtr,
        lambda t: mpmath.log(mpmath.ncdf(t)),
        (1.0, -3.0, -10.0, -30.0),
    ),
}


def nested_jvp(f, x0, order: int) -> np.ndarray:
    """Normalized Taylor coefficients 1..order of `f` at `x0` by nested `jax.jvp`."""
    g = f
    out = []
    for k in range(1, order + 1):
        g = (lambda h: lambda x: jax.jvp(h, (x,), (jnp.ones_like(x),))[1])(g)
        out.append(complex(g(jnp.asarray(x0))) / float(mpmath.factorial(k)))
    return np.array(out)


def point_errors(order: int) -> list[str]:
    lines = [
        "| function | x0 | taylax: largest relative error, orders 1..K | nested jvp |",
        "|---|---|---|---|",
    ]
    for name, (f, exact, points) in FUNCTIONS.items():
        for x0 in points:
            point = mpmath.mpc(x0) if isinstance(x0, complex) else mpmath.mpf(x0)
            with mpmath.workdps(60):
                want = np.array([complex(c) for c in mpmath.taylor(exact, point, order)[1:]])
            x, v = jnp.asarray(x0), jnp.asarray(1.0 + 0j if isinstance(x0, complex) else 1.0)
            ours = np.asarray(taylax.taylor(f, order)(x, v)[1])
            theirs = nested_jvp(f, x0, order)
            ours, theirs = (np.max(np.abs(got - want) / np.abs(want)) for got in (ours, theirs))
            point = f"{x0:g}".strip("()")  # a complex point without its parentheses
            lines.append(f"| {name} | {point} | {ours:.1e} | {theirs:.1e} |")
    return lines


def grid_errors(orders: list[int]) -> list[str]:
    xs = np.concatenate([np.linspace(0.05, 12.0, 240), [15.0, 20.0, 30.0, 100.0, 1e3]])
    lines = ["| K | largest relative error over the grid | at x0 |", "|---|---|---|"]
    for order in orders:
        with mpmath.workdps(400):
            want = []
            for x0 in xs:
                t = mpmath.mpf(float(x0))
                y = mpmath.exp(t * t) * mpmath.erfc(t)
                cs = [y, 2 * t * y - 2 / mpmath.sqrt(mpmath.pi)]
                for k in range(1, order):
                    cs.append(2 * (t * cs[k] + cs[k - 1]) / (k + 1))
                want.append([float(c) for c in cs[1 : order + 1]])
        want = np.array(want)
        series = taylax.taylor(ERFCX, order)
        got = np.asarray(jax.vmap(lambda x, series=series: series(x, 1.0)[1])(jnp.asarray(xs)))
        rel = np.max(np.abs(got - want) / np.abs(want), axis=1)
        worst = int(np.argmax(rel))
        lines.append(f"| {order} | {rel[worst]:.1e} | {xs[worst]:.3g} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", type=int, default=8)
    parser.add_argument("--grid-orders", default="1,2,4,8,12,16,24")
    args = parser.parse_args(argv)
    if ERFCX is None:
        print(f"jax {jax.__version__} has no jax.scipy.special.erfcx: nothing to measure.")
        return 1
    print("\n".join(point_errors(args.order)))
    print()
    print("\n".join(grid_errors([int(k) for k in args.grid_orders.split(",")])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
