"""The Taylor order for a tolerance, as Jorba and Zou choose it (and heyoka does)."""

from __future__ import annotations

import math

import numpy as np


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
