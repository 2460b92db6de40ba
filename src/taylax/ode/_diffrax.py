"""A diffrax solver whose steps are the solution's own Taylor polynomials.

Importing this module imports diffrax: `taylax.ode.Taylor` loads it on first access (see
`taylax/ode/__init__.py`), so that taylax itself never needs diffrax.

Each step takes the coefficients `y_0..y_K` of the solution through the step's start
from `taylax.ode.coefficients`' way (`solution_series`: order by order where every
primitive of the field has a recurrence, else the doubling sweeps), and returns:

- the next state `sum_k y_k h^k` (Horner), an order-K method: local error O(h^(K+1));
- the error estimate `y_K h^K`, per component: the difference between the order-K and
  the order-(K-1) truncations, the local error of the order-(K-1) method, O(h^K). The
  step goes on with the order-K value (local extrapolation, as Dopri5 goes on with its
  fifth-order value), so the estimate bounds the error from above by a factor of about
  `rho / h` (`rho` the series' radius of convergence);
- the coefficients as dense information: between steps, the solution is that polynomial.

diffrax's PID controller scales the step by `error^(-1 / error_order)`, and takes
`error_order` to be the order of the estimate's leading term in `h` (for an embedded
Runge--Kutta pair of orders p and p - 1 that is p, `AbstractSolver.error_order`'s
default `order(terms)`). Here the estimate is O(h^K), so `order(terms)` and
`error_order(terms)` are both K.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._programs import check_order
from .._series import real_dtype
from ._coefficients import check_time, horner, real_problem, solution_series


def _offset(s, c):
    """The time offset `s` in the real type of the coefficients `c`."""
    return jnp.asarray(s).astype(real_dtype(c.dtype))


def _polynomial(c, s):
    """`sum_k c[k] s^k` for a leaf of coefficients stacked `(K + 1, *shape)`."""
    return horner(c, _offset(s, c))


def _rise(c, s):
    """`sum_{k >= 1} c[k] s^k`: the polynomial less its constant term, without adding and
    subtracting `c[0]` (an increment between two close times keeps its digits)."""
    if c.shape[0] == 1:
        return jnp.zeros_like(c[0])
    s = _offset(s, c)
    return horner(c[1:], s) * s


class TaylorInterpolation(diffrax.AbstractLocalInterpolation):
    """The solution between two steps of `taylax.ode.Taylor`: the step's own Taylor
    polynomial `sum_k y_k (t - t0)^k`, in diffrax's (normalized) time.

    `coeffs` has the state's pytree structure with leaves stacked `(K + 1, *leaf.shape)`,
    as `taylax.ode.coefficients` returns them.
    """

    t0: jax.Array
    t1: jax.Array
    coeffs: object

    def evaluate(self, t0, t1=None, left: bool = True):
        del left
        if t1 is None:
            return jax.tree.map(lambda c: _polynomial(c, t0 - self.t0), self.coeffs)
        # The increment from `t0` to `t1`, as diffrax's interpolations define it.
        return jax.tree.map(lambda c: _rise(c, t1 - self.t0) - _rise(c, t0 - self.t0), self.coeffs)


class Taylor(diffrax.AbstractAdaptiveSolver):
    """A Taylor method for diffrax: each step is the solution's own Taylor polynomial.

    A solver for `diffrax.diffeqsolve` with a `diffrax.ODETerm`: every step computes the
    Taylor coefficients `y_0..y_K` of the solution through the step's start with
    `taylax.ode.coefficients`' doubling sweeps, and steps with their polynomial. It works
    with diffrax's step-size controllers (`ConstantStepSize`, `PIDController`), saving
    (`SaveAt(ts=...)`, `SaveAt(dense=True)`, evaluated on the step's polynomial), events,
    the adjoints that differentiate through the steps (the default
    `RecursiveCheckpointAdjoint` for `jax.grad` with respect to `y0` and `args`;
    `ForwardMode` for `jax.jacfwd`), `jax.jit` and `jax.vmap`. The state is any pytree of
    floating-point or complex arrays (float32 or float64). `BacksolveAdjoint` does not
    take it: its adjoint term is not an `ODETerm`.

    **Arguments:**

    - `order`: the Taylor order `K >= 1` of every step (a Python integer). Higher orders
      take longer steps for the same tolerance, at O(K^2) work per step; Jorba and Zou's
      `ceil(-ln(tol) / 2 + 1)` (`taylax.ode.default_order(tol)`, what
      `taylax.ode.integrate` picks) is a good choice for a tolerance `tol`: 13 for
      1e-10, 20 for 1e-16.

    **Returns:** a diffrax solver (an `AbstractAdaptiveSolver`) to pass to
    `diffrax.diffeqsolve`, whose `order(terms)` is `K`.

    The math: from `(t0, y0)` a step of `h` returns `y1 = sum_{k <= K} y_k h^k` (local
    error O(h^(K+1))). Its error estimate, for adaptive step-size controllers, is the
    last term `y_K h^K` per component: the difference between the order-K and
    order-(K-1) truncations, cheap (no other coefficient is computed) and O(h^K), so the
    solver's `error_order(terms)` is `K`, the exponent diffrax's PID controller scales the
    step by. The step goes on with the order-K value, so the estimate is pessimistic by
    about `rho / h` (`rho` the series' radius of convergence). Where `y_K` vanishes (a
    component whose series is even or odd) the estimate is the other components'; if every
    one vanishes at some step, the controller lengthens the next one by its `factormax`.
    Values between steps (`SaveAt(ts=...)`, `SaveAt(dense=True)`) are the step's
    polynomial there, as accurate as the step's end.

    !!! Example

        ```python
        import diffrax
        import jax.numpy as jnp
        import taylax

        # y'' = -y: y = cos(t) through y(0) = 1, y'(0) = 0.
        ts = jnp.linspace(0.0, 10.0, 5)
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: jnp.stack([y[1], -y[0]])),
            taylax.ode.Taylor(order=12),
            t0=0.0,
            t1=10.0,
            dt0=None,
            y0=jnp.array([1.0, 0.0]),
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-10),
        )
        # sol.ys[:, 0] == cos(ts) to about 1e-10 (in float64: jax_enable_x64)
        ```
    """

    taylor_order: int = eqx.field(static=True)

    term_structure: ClassVar = diffrax.ODETerm
    interpolation_cls: ClassVar[Callable[..., TaylorInterpolation]] = TaylorInterpolation

    def __init__(self, order: int):
        order = check_order(order)
        if order < 1:
            raise ValueError(
                f"`order` must be at least 1 (a Taylor method of order K steps with the "
                f"coefficients y_0..y_K), got {order}."
            )
        self.taylor_order = order

    def order(self, terms) -> int:
        return self.taylor_order

    def error_order(self, terms) -> int:
        # The estimate `y_K h^K` is O(h^K): see the module's docstring.
        return self.taylor_order

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        coeffs = self.coefficients(terms, t0, y0, args)
        h = t1 - t0
        y1 = jax.tree.map(lambda c: _polynomial(c, h), coeffs)
        k = self.taylor_order
        y_error = jax.tree.map(lambda c: c[-1] * _offset(h, c) ** k, coeffs)
        return y1, y_error, dict(coeffs=coeffs), None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def coefficients(self, terms, t0, y0, args):
        """The coefficients `y_0..y_K` of the solution of the terms' ODE through
        `y(t0) = y0`, in the time diffrax passes to the solver: a pytree like `y0` with
        leaves stacked `(K + 1, *leaf.shape)`."""
        # The field in the solver's time: diffrax runs a backward solve forwards, with a
        # `WrapTerm` whose control over a unit of time is -1.
        dtype = jnp.result_type(t0)
        control = terms.contr(jnp.zeros((), dtype), jnp.ones((), dtype))

        def field(t, y, args):
            return terms.vf_prod(t, y, args, control)

        w0, g, to_state = real_problem(field, y0, args)
        w = solution_series(g, check_time(t0, w0.dtype, "t0"), w0, self.taylor_order)
        return jax.vmap(to_state)(w)
