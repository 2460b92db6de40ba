"""Passes that XLA:CPU compiles into one kernel, vectorized across points.

`taylax.derivatives` of a scalar function under `jax.vmap` writes a `(points, K + 1)`
stack, and XLA:CPU computes it in one loop over points that evaluates all `K + 1` rows
of a point together. Where that loop holds only products, sums and `sin`/`cos` of the
primal, LLVM vectorizes it across points and evaluates each `sin` and `cos` once per
point, as it does for nested `jax.jvp`. Such a pass needs no value marked
`computed_once`: a mark would cost a buffer, a second kernel, and one complex
`cos x + i sin x` in place of the vectorized pair. With an exponential, a division or
`cosh` in it the same one kernel was not vectorized, and was slower than the marked pass:
those passes keep their marks (docs/EMISSION.md, "Values computed once"; measured
before the output kernel lost its constant vectors, "Output kernels under vmap").
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _compat, _policy
from ._count import iter_equations

# Primitives whose Taylor rules emit only products and sums of rows, and `sin`/`cos`.
_POLYNOMIAL_AND_TRIG = frozenset(
    {
        "add",
        "add_any",
        "sub",
        "mul",
        "neg",
        "integer_pow",
        "square",
        "sin",
        "cos",
        "convert_element_type",
        "copy",
        # Calls: their equations are checked like the caller's.
        "jit",
        "pjit",
        "closed_call",
    }
)


def fits_one_kernel(jaxpr: _compat.Jaxpr, order: int) -> bool:
    """Whether a `derivatives` pass of `order` over `jaxpr` compiles into one kernel.

    True for a function from scalars to one real scalar built from sums, products,
    integer powers, `sin` and `cos` (through nested `jax.jit` too), at orders 1 to
    the policy's `one_kernel_max_order` (on XLA:CPU a stack of at most
    `fused_concat_max_operands` rows is one fused concatenate, and past
    `unmarked_max_order` passes mark every value they keep).
    """
    max_order = _policy.for_pass(jaxpr, order).one_kernel_max_order
    if not 1 <= order <= max_order or len(jaxpr.outvars) != 1:
        return False
    out = jaxpr.outvars[0].aval
    if not jnp.issubdtype(out.dtype, jnp.floating):
        return False
    return _scalar_polynomial_and_trig(jaxpr)


def _scalar_polynomial_and_trig(jaxpr: _compat.Jaxpr) -> bool:
    variables = [*jaxpr.invars, *jaxpr.constvars, *jaxpr.outvars]
    if any(getattr(v.aval, "shape", None) != () for v in variables):
        return False
    for eqn in iter_equations(jaxpr):  # into the bodies of calls too
        if eqn.primitive.name not in _POLYNOMIAL_AND_TRIG:
            return False
        if any(getattr(v.aval, "shape", None) != () for v in eqn.outvars):
            return False
    return True
