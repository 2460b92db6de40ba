"""`erfcx`, `wofz`, `dawsn` and `log_ndtr` of `jax.scipy.special` in one pass, as nested
jvp computes them.

JAX defines each with a custom jvp rule whose tangent reads the function's own output:

    erfcx:     y' = x' (2 x y - 2 / sqrt(pi))
    wofz:      y' = x' (-2 x y + 2i / sqrt(pi))      (complex `erfcx(x) = wofz(i x)`)
    dawsn:     y' = x' (1 - 2 x y)
    log_ndtr:  y' = x' e,  e = exp(log_pdf(x) - y),  log_pdf(x) = -x^2 / 2 - log sqrt(2 pi)

Followed as written (`_calls._custom_jvp_call`), the series of `y'` at order K - 1 calls
the function again at order K - 2, and so on down to order 0: K nested passes (`erfcx`
of a series took 4.3x nested jvp at K = 8 under `vmap`; docs/EMISSION.md, "Rules that
read their own output"). Each is a first-order equation whose right-hand side is
quadratic in `x` and `y`, solved here in one pass (`taylax._series.quadratic_ode`).

For `log_ndtr` the equation is the ratio's: `e' = e (log_pdf' x' - y') = x' (-x e - e^2)`,
and `y` is its integral. The primal `y_0` is the function's own (its custom_jvp's primal
program at `x_0`), so the approximations JAX chooses by dtype and range stay its own.

`erfcx` (real, and complex: `wofz`) is the exception to one pass of its equation: far
in its tail (real `x0` past about 1, where it decays) every forward recurrence for its
coefficients, JAX's jvp rule's included, multiplies rounding errors by about `2 x0^2 / k`
per order (`erfcx(30 + t)` lost every digit by order 6). Its coefficients at `x0` come
from Miller's backward sweep (`_series.erfcx_coeffs`; complex points choose between it
and the forward recurrence by a model of both errors), along a line directly and
otherwise composed with the input (`_series.compose`, O(K^3)). `log_ndtr` of a negative
`x` is `log(erfcx(-x / sqrt 2) / 2) - x^2 / 2` on that series, where its own equation
cancelled as badly (docs/EMISSION.md, "erfcx in its tail").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat, _series
from .._series import Quadratic, Series
from ._arithmetic import log_series
from ._common import over_element_chunks
from ._transcendental import integral

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)

# The right-hand sides `g(x, y)` of `y' = x' g(x, y)`.
_EQUATIONS = {
    "erfcx": Quadratic(c=-_TWO_OVER_SQRT_PI, xy=2.0),
    "wofz": Quadratic(c=1j * _TWO_OVER_SQRT_PI, xy=-2.0),
    "dawsn": Quadratic(c=1.0, xy=-2.0),
}
# `log_ndtr`'s ratio `e`: `e' = x' (-x e - e^2)`.
_RATIO = Quadratic(xy=-1.0, yy=-1.0)


def rule_for(jvp_jaxpr_fun) -> Callable | None:
    """This module's series rule `rule(order, x, primal)` for a one-argument
    `custom_jvp_call` whose jvp rule it knows, or None. `primal(x0)` is the function's
    value (its own primal program)."""
    name = _compat.own_output_jvp_rules().get(_compat.custom_jvp_rule_function(jvp_jaxpr_fun))
    if name is None:
        return None
    if name == "log_ndtr":
        return _log_ndtr
    return functools.partial(_linear, name=name)


def _linear(order: int, x: Series, primal: Callable, name: str) -> Series | None:
    g = _EQUATIONS[name]
    complex_equation = isinstance(g.c, complex)
    if jnp.issubdtype(x.dtype, np.complexfloating) != complex_equation:
        return None  # not the arguments JAX calls it with: the rule as written
    if name in ("erfcx", "wofz"):
        return _erfcx(order, x, primal=primal, g=g)
    return _solve(order, x, primal=primal, g=g)


@over_element_chunks
def _erfcx(order: int, x: Series, *, primal: Callable, g: Quadratic) -> Series:
    return Series(_erfcx_of(x.coeffs, primal(x.primal), order, g))


def _erfcx_of(c, y0, order: int, g: Quadratic = _EQUATIONS["erfcx"]):
    """The stacked series of `erfcx` (or `wofz`: `g`) of the stacked series `c` whose value
    is `y0`."""
    d = _series.erfcx_coeffs(c[0], y0, order, g)
    if _series.degree_of(c) <= 1:
        return _series.along_line(c, d, order)
    return _series.compose(c, d, order)


@over_element_chunks
def _solve(order: int, x: Series, *, primal: Callable, g: Quadratic) -> Series:
    y0 = primal(x.primal)
    return Series(_series.quadratic_ode(x.coeffs, y0, g, order))


def _log_ndtr(order: int, x: Series, primal: Callable) -> Series | None:
    if not jnp.issubdtype(x.dtype, np.floating):
        return None
    return _log_ndtr_series(order, x, primal=primal)


@over_element_chunks
def _log_ndtr_series(order: int, x: Series, *, primal: Callable) -> Series:
    x0 = x.primal
    # Computed once: `e_0` and every row of the integral read it, and XLA computed the
    # primal's logs and erf again in each of their kernels (four at K = 8).
    y0 = _series.computed_once(primal(x0), _series.opaque_one(x0))
    # JAX's own tangent factor, `exp(log_pdf(x) - log_ndtr(x))`: finite far in both tails.
    e0 = lax.exp(-0.5 * x0 * x0 - _LOG_SQRT_2PI - y0)
    e = _series.quadratic_ode(x.coeffs, e0, _RATIO, order - 1)
    riccati = _series.pad_degree(integral(x, e, y0, order).coeffs, order)
    # Left of 0, `log(erfcx(-x / sqrt 2) / 2) - x^2 / 2`; the right sees x = -1.
    left = x0 < 0
    c = _series.with_primal(x.coeffs, jnp.where(left, x0, -jnp.ones_like(x0)))
    u = c * -_SQRT_HALF
    # erfcx(u0) from the primal, not JAX's erfcx (a loop): its error scales the series
    # where the sweep runs (and leaves log's orders >= 1 alone); elsewhere x0^2 is small.
    e_u = _erfcx_of(u, 2 * lax.exp(y0 + 0.5 * c[0] * c[0]), order)
    half_square = _series.cauchy(c, c, order) * 0.5
    tail = log_series(e_u, lax.log(e_u[0]), order) - _series.pad_degree(half_square, order)
    rows = [y0] + [jnp.where(left, tail[k], riccati[k]) for k in range(1, order + 1)]
    return Series(_series.stack_rows(rows))
