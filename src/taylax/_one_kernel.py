"""Passes that XLA:CPU compiles into one kernel, vectorized across points.

`taylax.derivatives` of a scalar function under `jax.vmap` writes a `(points, K + 1)`
stack, and XLA:CPU computes it in one loop over points that evaluates all `K + 1` rows
of a point together. Where that loop holds only products, sums and `sin`/`cos` of the
primal, LLVM vectorizes it across points and evaluates each `sin` and `cos` once per
point, as it does for nested `jax.jvp`. Such a pass needs no value marked
`computed_once`: a mark would cost a buffer, a second kernel, and one complex
`cos x + i sin x` in place of the vectorized pair.

Under the policy's `one_kernel_of_polynomials` the loop may also hold `exp`, `log`,
`log1p` and `sqrt` of polynomials in the inputs, and divisions by polynomials: their
rows are short recurrences over the polynomial's few rows, and the unmarked pass (one
kernel, two or three with a division) took 0.70-0.97 of the marked pass's time at
orders 3 and 4. Of anything else (`exp(sin t)`, `sqrt(2 + exp(-t^2))`, a division by
`2 + sin t`) the one kernel ran up to 1.6x slower, and so did `cosh`, `sinh` and `tanh`
of any argument (4-5x, 2x): those passes keep their marks (docs/EMISSION.md, "One
kernel with exponentials, logarithms and divisions").
"""

from __future__ import annotations

import jax.numpy as jnp

from . import _compat, _policy

# Primitives whose Taylor rules emit only products and sums of rows: a polynomial of
# polynomials is one.
_POLYNOMIAL = frozenset(
    {"add", "add_any", "sub", "mul", "neg", "integer_pow", "square", "convert_element_type", "copy"}
)
_TRIG = frozenset({"sin", "cos"})
# Their rows are short recurrences over the rows of a polynomial argument.
_OF_POLYNOMIALS = frozenset({"exp", "log", "log1p", "sqrt"})
# Calls: their equations are checked like the caller's.
_CALLS = frozenset({"jit", "pjit", "closed_call"})


def fits_one_kernel(jaxpr: _compat.Jaxpr, order: int, of_polynomials: bool = True) -> bool:
    """Whether a `derivatives` (or `taylor`) pass of `order` over `jaxpr` compiles into one
    kernel.

    True for a function from scalars to one real scalar built from sums, products,
    integer powers, `sin` and `cos` (through nested `jax.jit` too), at orders 1 to
    the policy's `one_kernel_max_order` (on XLA:CPU a stack of at most
    `fused_concat_max_operands` rows is one fused concatenate, and past
    `unmarked_max_order` passes mark every value they keep). Under the policy's
    `one_kernel_of_polynomials`, and unless `of_polynomials` is False, also with `exp`,
    `log`, `log1p` and `sqrt` of polynomials in the inputs and divisions by such
    polynomials.
    """
    policy = _policy.for_pass(jaxpr, order)
    if not 1 <= order <= policy.one_kernel_max_order or len(jaxpr.outvars) != 1:
        return False
    out = jaxpr.outvars[0].aval
    if not jnp.issubdtype(out.dtype, jnp.floating):
        return False
    variables = [*jaxpr.invars, *jaxpr.constvars, *jaxpr.outvars]
    if any(_shape(v) != () for v in variables):
        return False
    polynomial = {v: True for v in [*jaxpr.invars, *jaxpr.constvars]}
    return _fits(jaxpr, polynomial, of_polynomials and policy.one_kernel_of_polynomials)


def _shape(v):
    return getattr(v.aval, "shape", None)


def _is_polynomial(v, polynomial: dict) -> bool:
    """Whether `v` is a number or a variable `polynomial` records as a polynomial."""
    return isinstance(v, _compat.Literal) or polynomial.get(v, False)


def _fits(jaxpr: _compat.Jaxpr, polynomial: dict, of_polynomials: bool) -> bool:
    """Whether every equation of `jaxpr` (and of the calls in it) may join the one kernel,
    recording in `polynomial` which scalar variables are polynomials in the inputs."""

    def is_polynomial(v) -> bool:
        return _is_polynomial(v, polynomial)

    for eqn in jaxpr.eqns:
        if any(_shape(v) != () for v in eqn.outvars):
            return False
        name = eqn.primitive.name
        body = _compat.call_body(eqn) if name in _CALLS else None
        if body is not None:
            inner, consts = body
            constvars, invars = _compat.input_vars(inner, len(consts))
            inner_polynomial = {v: True for v in constvars}
            inner_polynomial.update({v: is_polynomial(x) for v, x in zip(invars, eqn.invars)})
            if not _fits(inner, inner_polynomial, of_polynomials):
                return False
            for v, inner_v in zip(eqn.outvars, inner.outvars):
                polynomial[v] = _is_polynomial(inner_v, inner_polynomial)
            continue
        if name in _POLYNOMIAL:
            # `t ** -2` joins the kernel as before, but is a quotient, not a polynomial.
            reciprocal = name == "integer_pow" and eqn.params["y"] < 0
            polynomial[eqn.outvars[0]] = not reciprocal and all(map(is_polynomial, eqn.invars))
        elif name in _TRIG:
            polynomial[eqn.outvars[0]] = False
        elif of_polynomials and name in _OF_POLYNOMIALS and is_polynomial(eqn.invars[0]):
            polynomial[eqn.outvars[0]] = False
        elif of_polynomials and name == "div" and is_polynomial(eqn.invars[1]):
            # A quotient by a number (`-t**2 / 2`) is still a polynomial.
            constant = isinstance(eqn.invars[1], _compat.Literal)
            polynomial[eqn.outvars[0]] = constant and is_polynomial(eqn.invars[0])
        else:
            return False
    return True
