"""erfcx and log_ndtr in their tails: the relative error of each Taylor coefficient
against mpmath, taylax beside nested `jax.jvp` (JAX's own jvp rules), float64.

Every forward recurrence for erfcx's coefficients (JAX's jvp rule `y' = 2 x y - 2 /
sqrt(pi)` nested, or a series recurrence) multiplies rounding errors by about `2 x^2 / k`
per order k; taylax runs Miller's backward sweep there (`taylax._series.erfcx_coeffs`).
The first table gives the largest relative error over orders 1..K at a few points; the
second, the largest over a grid of `x0` in 0.05..1000, per order K, of taylax alone
(against erfcx's recurrence run forward in 400-digit arithmetic, which no rounding
reaches at these orders); the third, the same over a grid of complex points, off and
inside a wedge around the imaginary axis, with nested jvp inside it.

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


def recurrence(x0, order: int) -> list:
    """erfcx's coefficients 0..order at `x0` by its recurrence run forward in 400 digits
    (mpmath numbers), which no rounding reaches at these orders."""
    with mpmath.workdps(400):
        t = mpmath.mpc(x0) if isinstance(x0, complex) else mpmath.mpf(float(x0))
        y = mpmath.exp(t * t) * mpmath.erfc(t)
        cs = [y, 2 * t * y - 2 / mpmath.sqrt(mpmath.pi)]
        for k in range(1, order):
            cs.append(2 * (t * cs[k] + cs[k - 1]) / (k + 1))
        return cs


def grid_errors(orders: list[int]) -> list[str]:
    xs = np.concatenate([np.linspace(0.05, 12.0, 240), [15.0, 20.0, 30.0, 100.0, 1e3]])
    lines = ["| K | largest relative error over the grid | at x0 |", "|---|---|---|"]
    for order in orders:
        want = np.array([[float(c) for c in recurrence(x0, order)[1:]] for x0 in xs])
        series = taylax.taylor(ERFCX, order)
        got = np.asarray(jax.vmap(lambda x, series=series: series(x, 1.0)[1])(jnp.asarray(xs)))
        rel = np.max(np.abs(got - want) / np.abs(want), axis=1)
        worst = int(np.argmax(rel))
        lines.append(f"| {order} | {rel[worst]:.1e} | {xs[worst]:.3g} |")
    return lines


# The complex grid: |z| from 1.2 to 20, off and inside a wedge around the imaginary axis,
# where neither the sweep nor the forward recurrence keeps every digit.
RADII = (1.2, 1.6, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 20.0)
OFF_WEDGE = (0, 30, 45, 60, 75, 105, 120, 135, 150, 170)
WEDGE = (80, 85, 88, 90, 92, 95, 100)


def complex_grid_errors(orders: list[int], jvp_orders: list[int]) -> list[str]:
    """Per K, the largest relative error of coefficients 1..K (each over the value, so
    that JAX's own primal error stays out) over the complex grid: taylax off the wedge,
    taylax and nested jvp inside it."""
    lines = [
        "| K | taylax, 15 degrees or more off the imaginary axis | taylax, inside | "
        "nested jvp, inside | taylax over nested jvp, largest at one point |",
        "|---|---|---|---|---|",
    ]
    for order in orders:
        cells = []
        for angles in (OFF_WEDGE, WEDGE):
            zs = [complex(r * np.exp(1j * np.deg2rad(a))) for r in RADII for a in angles]
            want = []
            for z0 in zs:
                cs = recurrence(z0, order)
                want.append([complex(c / cs[0]) for c in cs[1:]])
            want = np.array(want)
            series = taylax.taylor(ERFCX, order)
            primal, coeffs = jax.vmap(lambda x, series=series: series(x, 1.0 + 0j))(jnp.asarray(zs))
            got = np.asarray(coeffs) / np.asarray(primal)[:, None]
            cells.append(_worst(got, want, zs))
            if angles is WEDGE:
                if order in jvp_orders:
                    theirs = np.array([nested_jvp(ERFCX, z0, order) for z0 in zs])
                    theirs = theirs / np.asarray(primal)[:, None]
                    cells.append(_worst(theirs, want, zs))
                    ratio = _relative(got, want) / np.maximum(_relative(theirs, want), 1e-16)
                    cells.append(f"{np.max(ratio):.2g}")
                else:
                    cells += ["not run", ""]
        lines.append(f"| {order} | " + " | ".join(cells) + " |")
    return lines


def _relative(got, want) -> np.ndarray:
    return np.max(np.abs(got - want) / np.abs(want), axis=1)


def _worst(got, want, zs) -> str:
    rel = _relative(got, want)
    worst = int(np.argmax(rel))
    z = zs[worst]
    return f"{rel[worst]:.1e} at {abs(z):.3g} exp({np.rad2deg(np.angle(z)):.0f}i)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", type=int, default=8)
    parser.add_argument("--grid-orders", default="1,2,4,8,12,16,24")
    parser.add_argument("--jvp-orders", default="2,4,8", help="nested jvp in the wedge")
    args = parser.parse_args(argv)
    if ERFCX is None:
        print(f"jax {jax.__version__} has no jax.scipy.special.erfcx: nothing to measure.")
        return 1
    print("\n".join(point_errors(args.order)))
    print()
    orders = [int(k) for k in args.grid_orders.split(",")]
    print("\n".join(grid_errors(orders)))
    print()
    jvp_orders = [int(k) for k in args.jvp_orders.split(",")]
    print("\n".join(complex_grid_errors(orders, jvp_orders)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
