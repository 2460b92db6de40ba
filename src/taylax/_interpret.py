"""The jaxpr -> series interpreter and its typed rule table.

`eval_jaxpr_series` walks a jaxpr once, mapping every variable to a `Series`.
An equation whose inputs are all constants, or whose outputs carry no
derivative (integers, booleans), is evaluated as-is on the primals: it needs no
rule and emits nothing extra. Every other equation is handed to the rule
registered for its primitive in `taylor_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import jax.numpy as jnp
import numpy as np

from . import _compat
from ._series import Series


class TaylorRule(Protocol):
    """A Taylor rule: `rule(order, *series_in, **params) -> Series | list[Series]`.

    `order` is the truncation order `K` of the whole evaluation; every
    `series_in[i]` is a `Series` whose degree is at most `K` (constants have
    degree 0). The rule returns one `Series` (a list for primitives with
    multiple results) whose coefficient 0 is what the primitive itself returns.
    """

    def __call__(self, order: int, *series_in: Series, **params) -> Series | list[Series]: ...


taylor_rules: dict[_compat.Primitive, TaylorRule] = {}


def register_rule(primitive: _compat.Primitive) -> Callable[[TaylorRule], TaylorRule]:
    """Register a Taylor rule for `primitive` (a decorator).

    **Arguments:**

    - `primitive`: a `jax.extend.core.Primitive`.

    **Returns:** a decorator that stores the rule and returns it unchanged.

    The rule is called as `rule(order, *series_in, **params)` where each input
    is a `taylax.Series` (`.coeffs` stacked `(d+1, *shape)`, normalized
    coefficients `x_k = x^(k)/k!`, `.primal`, `.degree`), and must return a
    `taylax.Series` (a list of them for a primitive with multiple results).
    Inputs that carry no series never reach the rule.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax
        from jax.extend.core import Primitive

        double_p = Primitive("double")
        double_p.def_impl(lambda x: 2 * x)
        double_p.def_abstract_eval(lambda x: x)

        @taylax.register_rule(double_p)
        def _double(order, x):
            return taylax.Series(2 * x.coeffs)
        ```
    """
    if not isinstance(primitive, _compat.Primitive):
        raise TypeError(
            f"`register_rule` expects a jax.extend.core.Primitive, got {type(primitive).__name__}."
        )

    def decorator(rule: TaylorRule) -> TaylorRule:
        taylor_rules[primitive] = rule
        return rule

    return decorator


def _missing_rule(primitive: _compat.Primitive) -> NotImplementedError:
    return NotImplementedError(
        f"taylax has no Taylor rule for the JAX primitive '{primitive.name}', which the "
        "differentiated function uses on a value that depends on the input. Register one "
        "with `@taylax.register_rule(primitive)` (see its docstring for the rule signature), "
        "or open an issue if it is a standard JAX primitive."
    )


def _carries_derivative(aval) -> bool:
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, np.inexact)


def eval_jaxpr_series(
    jaxpr: _compat.Jaxpr, consts: Sequence, args: Sequence[Series], order: int
) -> list[Series]:
    """Evaluate `jaxpr` on series inputs, truncating every series at `order`."""
    env: dict = {}

    def read(v) -> Series:
        if isinstance(v, _compat.Literal):
            return Series.constant(v.val)
        return env[v]

    def write(v, value: Series) -> None:
        if not isinstance(v, _compat.DropVar):
            env[v] = value

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        write(v, Series.constant(c))
    for v, a in zip(jaxpr.invars, args, strict=True):
        write(v, a)

    for eqn in jaxpr.eqns:
        series_in = [read(v) for v in eqn.invars]
        primitive = eqn.primitive
        if all(s.is_constant for s in series_in) or not any(
            _carries_derivative(v.aval) for v in eqn.outvars
        ):
            out = _compat.bind_equation(eqn, [s.primal for s in series_in])
            outs = out if primitive.multiple_results else [out]
            for v, o in zip(eqn.outvars, outs, strict=True):
                write(v, Series.constant(o))
            continue
        rule = taylor_rules.get(primitive)
        if rule is None:
            raise _missing_rule(primitive)
        result = rule(order, *series_in, **eqn.params)
        outs = result if primitive.multiple_results else [result]
        for v, o in zip(eqn.outvars, outs, strict=True):
            write(v, o)

    return [read(v) for v in jaxpr.outvars]
