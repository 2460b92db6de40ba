"""Every use of JAX internals in taylax goes through this module.

taylax interprets jaxprs, so it needs JAX's jaxpr types and the primitives that
carry sub-programs. Public `jax.extend` and `jax.lax` names are preferred; the
few private imports below are each commented with why they are needed, so a
JAX upgrade touches only this file.
"""

from __future__ import annotations

import jax.extend.core as jex_core
import jax.extend.core.primitives as jex_prims
from jax import lax

ClosedJaxpr = jex_core.ClosedJaxpr
Jaxpr = jex_core.Jaxpr
JaxprEqn = jex_core.JaxprEqn
Literal = jex_core.Literal
Primitive = jex_core.Primitive
Var = jex_core.Var
DropVar = jex_core.DropVar
check_jaxpr = jex_core.check_jaxpr
jaxprs_in_params = jex_core.jaxprs_in_params

# Primitives that carry sub-programs.
jit_p = jex_prims.jit_p
closed_call_p = jex_prims.closed_call_p
remat_p = jex_prims.remat_p
custom_jvp_call_p = jex_prims.custom_jvp_call_p
custom_vjp_call_p = jex_prims.custom_vjp_call_p
add_any_p = jex_prims.add_jaxvals_p
device_put_p = jex_prims.device_put_p

# The windowed "select the max, gather the tangent" primitive JAX itself uses for
# the derivative of max pooling; reusing it matches nested jvp exactly.
select_and_gather_add_p = jex_prims.select_and_gather_add_p


def bind_equation(eqn: JaxprEqn, args):
    """Re-bind `eqn`'s primitive on new arguments, as `jax.core.eval_jaxpr` does."""
    # JAX >= 0.9.2: get_bind_params returns the params dict (subfuns folded in).
    bind_params = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(bind_params, tuple):  # older JAX: (subfuns, params)
        subfuns, bind_params = bind_params
        return eqn.primitive.bind(*subfuns, *args, **bind_params)
    with eqn.ctx.manager:
        return eqn.primitive.bind(*args, **bind_params)


def all_primitives() -> dict[str, Primitive]:
    """Every primitive exported by `jax.lax` and `jax.extend.core.primitives`."""
    found: dict[str, Primitive] = {}
    for module in (lax, jex_prims):
        for name in dir(module):
            obj = getattr(module, name)
            if name.endswith("_p") and isinstance(obj, Primitive):
                found.setdefault(obj.name, obj)
    return found


def select_and_gather_add(tangents, operand, select_prim, *window_params):
    """JAX's own derivative of max/min pooling: the tangent at each window's chosen element.

    `window_params`: window_dimensions, window_strides, padding, base_dilation,
    window_dilation, as `reduce_window_max` has them.
    """
    # Private: JAX exposes no public wrapper for select_and_gather_add.
    from jax._src.lax.windowed_reductions import _select_and_gather_add

    return _select_and_gather_add(tangents, operand, select_prim, *window_params)
