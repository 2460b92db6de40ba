"""Values that only one mode of differentiation may pass; the other is refused in a sentence.

`taylax.ode.integrate` offers one differentiation mode per solve. With
`gradients="forward"` it steps in a `lax.while_loop` of dynamic length, which JAX
differentiates forward but cannot transpose; with `gradients="reverse"` the solve is a
`jax.custom_vjp`, which JAX differentiates only in reverse. Left alone, the other mode
stops in JAX's own error, which names `lax.while_loop` (advising `lax.scan`) or
`custom_vjp`, and for `jax.jit(jax.jvp(...))` only when the program is lowered.

- `forward_only(x, message)` is the identity for values, tangents, batches and Taylor
  passes; its transpose raises `ValueError(message)`. On a solve's outputs it is
  transposed before the loop, since reverse mode walks a program from its outputs back.
- `reverse_only(x, message)` is the identity too, but its tangent is
  `refused_tangent`, which reverse mode transposes (its cotangent passes through) and
  forward mode evaluates or lowers, raising `TypeError(message)`. On a solve's inputs it
  runs before the `custom_vjp` meets the tangents.
"""

from __future__ import annotations

from . import _compat

forward_only_p = _compat.Primitive("taylax_forward_only")
reverse_only_p = _compat.Primitive("taylax_reverse_only")
refused_tangent_p = _compat.Primitive("taylax_refused_tangent")


def forward_only(x, message: str):
    """`x` itself, for every transformation but reverse-mode differentiation, which raises
    `ValueError(message)` when a cotangent reaches it."""
    return forward_only_p.bind(x, message=message)


def reverse_only(x, message: str):
    """`x` itself, for every transformation but forward-mode differentiation, which raises
    `TypeError(message)` where its tangent is computed (or lowered, under `jax.jit`)."""
    return reverse_only_p.bind(x, message=message)


def _identity(x, *, message):
    del message
    return x


def _lower_identity(ctx, x, *, message):
    del ctx, message
    return [x]


def _refuse(*_, message, **__):
    raise TypeError(message)


def _batch(primitive):
    def rule(args, dims, *, message):
        return primitive.bind(args[0], message=message), dims[0]

    return rule


def _forward_only_jvp(primals, tangents, *, message):
    tangent = _compat.ad.instantiate_zeros(tangents[0])
    return forward_only(primals[0], message), forward_only(tangent, message)


def _forward_only_transpose(cotangent, x, *, message):
    del cotangent, x
    raise ValueError(message)


def _reverse_only_jvp(primals, tangents, *, message):
    tangent = _compat.ad.instantiate_zeros(tangents[0])
    return reverse_only(primals[0], message), refused_tangent_p.bind(tangent, message=message)


def _refused_tangent_transpose(cotangent, x, *, message):
    del x, message
    return [cotangent]


for _p in (forward_only_p, reverse_only_p, refused_tangent_p):
    _p.def_abstract_eval(_identity)
    _compat.batching.primitive_batchers[_p] = _batch(_p)
for _p in (forward_only_p, reverse_only_p):
    _p.def_impl(_identity)
    _compat.mlir.register_lowering(_p, _lower_identity)
refused_tangent_p.def_impl(_refuse)
_compat.mlir.register_lowering(refused_tangent_p, _refuse)
_compat.ad.primitive_jvps[forward_only_p] = _forward_only_jvp
_compat.ad.primitive_transposes[forward_only_p] = _forward_only_transpose
_compat.ad.primitive_jvps[reverse_only_p] = _reverse_only_jvp
_compat.ad.primitive_transposes[refused_tangent_p] = _refused_tangent_transpose
