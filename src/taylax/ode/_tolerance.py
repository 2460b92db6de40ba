"""The Taylor order for a tolerance, and the step from a step's coefficients, as Jorba and
Zou choose them (and heyoka does)."""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax


def default_order(tol: float) -> int:
    """The Taylor order `taylax.ode.integrate` takes for the tolerance `tol`.

    Jorba and Zou (2005) choose the order that minimizes the work per unit of time for a
    Taylor method whose step is sized from its last coefficients: with `s` the state's
    scale, a step of order `p` meets a truncation error near `s tol` at the least cost
    when `p = ceil(-ln(tol) / 2 + 1)` (at least 2). heyoka picks its order the same way.

    **Arguments:**

    - `tol`: the tolerance, a number between 0 and 1 (exclusive).

    **Returns:** the order, a Python integer `>= 2`: 9 for float32's epsilon, 13 for
    1e-10, 16 for 1e-13, 20 for float64's epsilon.

    **Example:** an order for `taylax.ode.Taylor`, diffrax's solver, that matches the
    integrator's at the same tolerance:

        ```python
        import taylax

        taylax.ode.default_order(1e-12)  # 15
        solver = taylax.ode.Taylor(taylax.ode.default_order(1e-12))
        ```

    Raises `ValueError` for a tolerance outside (0, 1).
    """
    check_tolerance(tol)
    return max(2, math.ceil(-math.log(tol) / 2 + 1))


def check_tolerance(tol) -> None:
    """Raise a `ValueError` that names `tol` unless it is a real number in (0, 1) (a
    Python or NumPy scalar)."""
    real = isinstance(tol, (int, float, np.integer, np.floating)) and not isinstance(tol, bool)
    if not real or not 0 < tol < 1:
        raise ValueError(
            f"`tol` must be a number between 0 and 1, got {tol!r}: pass a tolerance such as 1e-12."
        )


# States of up to this many components take their norms as chains of maximums.
_FOLDED_NORMS_MAX_STATE = 16


def step_size(c, order: int):
    """Jorba and Zou's step from the coefficients `c` of order `order`,
    `rho / e^2 exp(-0.7 / (order - 1))` with `rho` the smaller of the radii
    `(s / |y_k|)^(1/k)` at `k = order - 1, order` (max norms, `s = max(1, |y_0|)`):
    `c` is `(order + 1, n)`, or `(order + 1, n, B)` for B trajectories, each its own step,
    or their rows `c[k][i]` (`solution_rows`).

    The step carries no derivative: gradients are those of the computed solution with its
    steps held where they fell. The step's own derivative (of a maximum of absolute values,
    raised to a power) would add a term of the size of the truncation error, which is
    not the flow's derivative, and its vjp over every coefficient took most of a
    batched backward step (docs/ODE.md, "Steps held fixed").
    """
    c = lax.stop_gradient(c)
    rows = (0, order - 1, order)
    if isinstance(c, list):
        norms = {k: functools.reduce(jnp.maximum, [jnp.abs(x) for x in c[k]]) for k in rows}
        dtype = c[0][0].dtype
    elif c.shape[1] <= _FOLDED_NORMS_MAX_STATE:
        # The largest component as a chain of maximums, not a reduction: XLA:CPU made a
        # batch's reduction a library call (a YNNPACK fusion), which keeps the loop from
        # compiling into one function (docs/ODE.md, "Small sums in batches").
        norms = {k: functools.reduce(jnp.maximum, list(jnp.abs(c[k]))) for k in rows}
        dtype = c.dtype
    else:
        norms, dtype = {k: jnp.max(jnp.abs(c[k]), axis=0) for k in rows}, c.dtype
    scale = jnp.maximum(1.0, norms[0])
    tiny = jnp.finfo(dtype).tiny

    def log_radius(k):
        return jnp.log(scale / jnp.maximum(norms[k], tiny)) * (1.0 / k)

    # The smaller radius as one `exp` of the smaller logarithm: XLA:CPU computes `pow` by
    # a scalar call of libm, twice the time of a `log` and an `exp` (docs/ODE.md,
    # "Powers of three halves").
    log_rho = jnp.minimum(log_radius(order - 1), log_radius(order))
    return jnp.exp(log_rho - 2.0 - 0.7 / (order - 1))
