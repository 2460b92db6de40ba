"""Which coefficients of a step are computed once per order, not again in every later
order's kernel.

Most recurrences read their own output's earlier coefficients (tanh's
`t_k = (1 / k) sum_j j x_j (1 - t^2)_{k-j}`, a quotient's, exp's, ...). XLA copies cheap
elementwise producers into each kernel that reads them, so such a coefficient, made of
products and sums (a quotient's too, once XLA has turned its division by a broadcast
`x_0` into a product), was computed again in every later order's kernel, each time from
its own earlier coefficients: O(K^3) work for recurrences that are O(K^2). Where a frame
marks values (`Style.marks`), the coefficient k of such a rule is computed once into a
buffer (`_once`): 4,096 neural-field trajectories in 0.61-0.64x the time (docs/ODE.md,
"Recurrences computed once per order").

sin and cos (sinh and cosh) keep both series of a pair in the rule's memo, which is what
their recurrences read: the rule marks those itself (`_order_by_order._pair`), and
their outputs are not marked again here. One pendulum trajectory then took 0.81x its
time, 0.71x with `one_function_loops`. The inverse trigonometric and hyperbolic
functions and erf are alike: their outputs integrate a series kept in the memo (`u^p`,
`exp(-x^2)`), which reads its own earlier coefficients and is the one the rule marks.

Products and selections by the primal read only their inputs and stay unmarked: marking
them too (and the inputs of recurrences made of them) took 4,096 Arenstorf orbits from 84
to 165-182 kernels and 1.4x their time, where 4,096 Kepler orbits gained 0.90-0.99x.
"""

from __future__ import annotations

from jax import lax

# The inverse trigonometric and hyperbolic functions and erf: their outputs integrate a
# series kept in the rule's memo, which the rule marks.
INTEGRATING_A_SERIES = (
    lax.atan_p,
    lax.asin_p,
    lax.acos_p,
    lax.asinh_p,
    lax.acosh_p,
    lax.atanh_p,
    lax.erf_p,
    lax.erfc_p,
)

# Rules whose coefficient k reads only their inputs' coefficients, and those whose rule
# marks the series it reads (its memo's): the pairs, and the rules above.
_READ_INPUTS_ONLY = (
    lax.mul_p,
    lax.square_p,
    lax.dot_general_p,
    lax.integer_pow_p,
    lax.abs_p,
    lax.max_p,
    lax.min_p,
    lax.clamp_p,
    lax.sin_p,
    lax.cos_p,
    lax.sinh_p,
    lax.cosh_p,
    *INTEGRATING_A_SERIES,
)


def reads_own_output(eqn) -> bool:
    """Whether the recurrence of `eqn` (a primitive with a rule) reads its output's
    earlier coefficients: a negative integer power does (a reciprocal's recurrence)."""
    if eqn.primitive is lax.integer_pow_p:
        return eqn.params["y"] < 0
    return eqn.primitive not in _READ_INPUTS_ONLY
