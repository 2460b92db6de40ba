"""Passes that XLA:CPU compiles into one kernel, vectorized across points.

`taylax.derivatives` of a scalar function under `jax.vmap` writes a `(points, K + 1)`
stack, and XLA:CPU computes it in one loop over points that evaluates all `K + 1` rows
of a point together. Where that loop holds only products, sums and `sin`/`cos` of the
primal, LLVM vectorizes it across points and evaluates each `sin` and `cos` once per
point, as it does for nested `jax.jvp`. Such a pass needs no value marked
`computed_once`: a mark would cost a buffer, a second kernel, and one `exp(i x)` in
place of the vectorized pair.

Measured (2 CPUs, float64, `jax.jit(jax.vmap(taylax.derivatives(f, K)))`, one process
with nested jvp under `vmap`, 30 interleaved rounds; /tmp/w/pf.py, 2026-11-26): at
K = 4 over 65,536 points `0.3 sin(t) t^10` took 0.35 ms in one kernel against 0.39 ms
marked (nested jvp 0.35 ms), `sin(cos(t) t)` 0.65 against 0.81 ms (0.63 ms), and
`sin(t)^2 + cos(2t) t` 0.68 against 0.74 ms (0.68 ms). The same one kernel with an
exponential, a division or `cosh` in it was not vectorized, and ran 1.2-2.7x the
marked passes' time (the damped wave and growth chains of
`benchmarks/bench_batched.py`, `exp(sin t) t^3`, `cosh(0.3 t) cos(2t) + t^2`,
`cos t / (2 + sin t)`): those passes keep their marks.
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
    the policy's `one_kernel_max_order` (on XLA:CPU a stack of at most 8 rows is one fused
    concatenate, and past order 4 passes mark every value they keep).
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
