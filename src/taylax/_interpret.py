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
from jax import lax

from . import _compat, _cuts, _elementwise, _pass, _policy, _rolled
from ._series import Series


class TaylorRule(Protocol):
    """A Taylor rule: `rule(order, *series_in, **params) -> Series | list[Series]`.

    `order` is the truncation order `K` of the whole evaluation; every
    `series_in[i]` is a `Series` whose degree is at most `K` (constants have
    degree 0). The rule returns one `Series` (a list for primitives with
    multiple results) whose coefficient 0 is what the primitive itself returns.

    !!! Example

        ```python
        import taylax


        def negate_rule(order: int, x: taylax.Series) -> taylax.Series:
            return taylax.Series(-x.coeffs)  # a linear primitive acts on every coefficient


        rule: taylax.TaylorRule = negate_rule
        ```
    """

    def __call__(self, order: int, *series_in: Series, **params) -> Series | list[Series]: ...


taylor_rules: dict[_compat.Primitive, TaylorRule] = {}
"""The Taylor rule of each primitive: `taylax.register_rule` adds to it.

!!! Example

    ```python
    import jax
    import taylax

    jax.lax.sin_p in taylax.taylor_rules  # True
    len(taylax.taylor_rules)              # the number of primitives with a rule
    ```
"""


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
        # A user's rule has its results checked against the primitive's abstract
        # evaluation at trace time (taylax's own rules are tested instead).
        if (getattr(rule, "__module__", None) or "").split(".")[0] == "taylax":
            _checked_rules.discard(primitive)
        else:
            _checked_rules.add(primitive)
        return rule

    return decorator


_checked_rules: set[_compat.Primitive] = set()


def rule_result(eqn: _compat.JaxprEqn, result, order: int) -> list[Series]:
    """The rule's outputs as a list, checked when the rule is a user's (see `register_rule`).

    Only what is known at trace time is checked: the type, the number of outputs, each
    output's shape and dtype against the primitive's abstract evaluation, and the degree.
    """
    name = eqn.primitive.name
    multiple = eqn.primitive.multiple_results
    outs = result if multiple else [result]
    if multiple and not isinstance(result, (list, tuple)):
        raise TypeError(
            f"The Taylor rule for the primitive '{name}' returned a {type(result).__name__}, "
            f"but '{name}' has multiple results: return a list of `taylax.Series`, one per "
            "result."
        )
    for o in outs:
        if not isinstance(o, Series):
            what = "an array" if hasattr(o, "shape") else f"a {type(o).__name__}"
            raise TypeError(
                f"The Taylor rule for the primitive '{name}' returned {what}; a rule must "
                "return `taylax.Series` values (e.g. `taylax.Series(coeffs)` with the "
                "coefficients stacked `(degree+1, *shape)`, or `taylax.Series.constant(x)`), "
                "not bare arrays."
            )
    if eqn.primitive not in _checked_rules:
        return outs
    if len(outs) != len(eqn.outvars):
        raise ValueError(
            f"The Taylor rule for the primitive '{name}' returned {len(outs)} series, but the "
            f"primitive has {len(eqn.outvars)} results."
        )
    for i, (o, v) in enumerate(zip(outs, eqn.outvars)):
        aval = v.aval
        which = f" (result {i})" if multiple else ""
        if o.shape != tuple(aval.shape):
            raise ValueError(
                f"The Taylor rule for the primitive '{name}' returned a series of shape "
                f"{o.shape}{which}, but the primitive's result has shape {tuple(aval.shape)}. "
                "A rule's `Series` coefficients are stacked `(degree+1, *result_shape)`."
            )
        if o.dtype != aval.dtype:
            raise TypeError(
                f"The Taylor rule for the primitive '{name}' returned a series of dtype "
                f"{o.dtype}{which}, but the primitive's result has dtype {aval.dtype}. Cast "
                "the coefficients, e.g. `coeffs.astype(x.dtype)`."
            )
        if o.degree > order:
            raise ValueError(
                f"The Taylor rule for the primitive '{name}' returned a series of degree "
                f"{o.degree}{which}, above the truncation order {order} it was called with: "
                "truncate it, e.g. `taylax.Series(coeffs[: order + 1])`."
            )
    return outs


# Calls of a sub-program that several equations of one jaxpr may share: a `jit` call
# of `f` and `taylax.derivative`s of the same `f` on the same inputs. For an equation,
# the key function returns `(sub_jaxpr, per-output derivative orders)` or None.
SharedCallKey = Callable[[_compat.JaxprEqn], "tuple[_compat.ClosedJaxpr, tuple[int, ...]] | None"]
shared_call_keys: dict[_compat.Primitive, SharedCallKey] = {}


class SharedCallEvaluator(Protocol):
    """Evaluates one sub-program once for a group of equations that call it.

    `evaluate(order, sub_jaxpr, series_in, member_orders)` returns, for each
    member, its output series, or None when sharing does not apply (each
    equation is then evaluated by its own rule).
    """

    def __call__(
        self,
        order: int,
        sub_jaxpr: _compat.ClosedJaxpr,
        series_in: Sequence[Series],
        member_orders: Sequence[tuple[int, ...]],
    ) -> list[list[Series]] | None: ...


shared_call_evaluator: list[SharedCallEvaluator] = []  # set by taylax._derivative


def _shared_call_groups(jaxpr: _compat.Jaxpr) -> dict[int, tuple]:
    """Groups of equations calling one sub-program on the same inputs, keyed by the first.

    Evaluating the group once at the highest order any member needs (a lower
    order is a prefix of a higher one) is what keeps nested derivatives
    through a user's recursion polynomial instead of exponential.
    """
    if not shared_call_keys or not shared_call_evaluator:
        return {}
    found: dict[tuple, list] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        key_fn = shared_call_keys.get(eqn.primitive)
        if key_fn is None or any(isinstance(v, _compat.Literal) for v in eqn.invars):
            continue
        keyed = key_fn(eqn)
        if keyed is None:
            continue
        sub, orders = keyed
        found.setdefault((id(sub), tuple(eqn.invars)), []).append((i, sub, orders))
    groups = {}
    for members in found.values():
        if len(members) > 1 and any(max(o, default=0) > 0 for _, _, o in members):
            groups[members[0][0]] = (members[0][1], [(i, o) for i, _, o in members])
    return groups


def missing_rule(primitive: _compat.Primitive) -> NotImplementedError:
    """The error raised for a primitive on a varying value that has no Taylor rule."""
    return NotImplementedError(
        f"taylax has no Taylor rule for the JAX primitive '{primitive.name}', which the "
        "differentiated function uses on a value that depends on the input. Register one "
        "with `@taylax.register_rule(primitive)` (see its docstring for the rule signature), "
        "or open an issue if it is a standard JAX primitive."
    )


def carries_derivative(aval) -> bool:
    """Whether a value of this abstract type has derivatives: inexact (float, complex)."""
    dtype = getattr(aval, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, np.inexact)


# Primitives that can read a series operand one coefficient row at a time, each row as
# its own buffer (a large matmul with a constant matrix: `_rules._linalg`; the numerator
# of a division: `_rules._arithmetic`), as a test of the equation, the operand's index,
# the order of the pass and whether the other operands are constant (its rule decides
# with the same test). Filled by the rule modules.
row_readers: dict[_compat.Primitive, Callable[[_compat.JaxprEqn, int, int, bool], bool]] = {}


def _row_read_equations(jaxpr: _compat.Jaxpr, varying: set, order: int) -> set[int]:
    """Indices of the equations all of whose outputs are read only row by row
    (`varying`: the variables that depend on the input)."""
    by_rows: dict = {}
    for eqn in jaxpr.eqns:
        reads = row_readers.get(eqn.primitive)
        for k, v in enumerate(eqn.invars):
            if isinstance(v, _compat.Literal):
                continue
            rows = reads is not None and reads(eqn, k, order, _others_constant(eqn, k, varying))
            by_rows[v] = by_rows.get(v, True) and rows
    for v in jaxpr.outvars:
        if not isinstance(v, _compat.Literal):
            by_rows[v] = False
    return {
        i
        for i, eqn in enumerate(jaxpr.eqns)
        if eqn.outvars and all(by_rows.get(v, False) for v in eqn.outvars)
    }


def _others_constant(eqn: _compat.JaxprEqn, operand: int, varying: set) -> bool:
    """Whether no operand of `eqn` other than `operand` depends on the input."""
    return not any(
        not isinstance(o, _compat.Literal) and o in varying
        for j, o in enumerate(eqn.invars)
        if j != operand
    )


def _primal_only_equations(jaxpr: _compat.Jaxpr) -> set[int]:
    """Indices of the equations whose outputs reach the outputs only through
    `stop_gradient` (or not at all): only their primals are needed.

    `logsumexp` and `softmax` subtract `stop_gradient(max(x))`: the series of the max
    (its ties counted, its rows chosen) was computed and then dropped, and XLA kept most
    of it, as kernels nested jvp does not have (docs/EMISSION.md, "Order 1, and
    equations only their primals reach").
    """
    needed = {v for v in jaxpr.outvars if not isinstance(v, _compat.Literal)}
    primal_only = set()
    for i in reversed(range(len(jaxpr.eqns))):
        eqn = jaxpr.eqns[i]
        if not any(v in needed for v in eqn.outvars if not isinstance(v, _compat.DropVar)):
            primal_only.add(i)
        elif eqn.primitive is not lax.stop_gradient_p:
            needed.update(v for v in eqn.invars if not isinstance(v, _compat.Literal))
    return primal_only


def _varying_vars(jaxpr: _compat.Jaxpr, args: Sequence[Series]) -> set:
    """The variables of `jaxpr` that depend on the inputs that carry a series."""
    varying = {v for v, a in zip(jaxpr.invars, args, strict=True) if not a.is_constant}
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, _compat.Literal) and v in varying for v in eqn.invars):
            varying.update(eqn.outvars)
    return varying


def eval_jaxpr_series(
    jaxpr: _compat.Jaxpr,
    consts: Sequence,
    args: Sequence[Series],
    order: int,
    one_kernel: bool | None = None,
) -> list[Series]:
    """Evaluate `jaxpr` on series inputs, truncating every series at `order`.

    `one_kernel`: whether the pass compiles into one kernel (`ks.one_kernel_pass`);
    None keeps the enclosing pass's answer (a sub-jaxpr's pass is part of it). An outermost
    pass takes the emission policy in force within its budget (`taylax._policy.for_pass`).
    """
    if one_kernel is None:
        one_kernel = _pass.one_kernel_pass()
    if _pass.pass_order() is None:
        jaxpr, consts, args = _rolled_loops(jaxpr, consts, args, order)
    with _policy.pass_scope(_policy.for_pass(jaxpr, order)), _pass.taylor_pass(order, one_kernel):
        return _eval_jaxpr_series(jaxpr, consts, args, order)


# Loops rolled per pass at most: each rolls the longest run left.
_MAX_ROLLED_LOOPS = 8


def _rolled_loops(jaxpr, consts, args, order):
    """An outermost pass's program with its unrolled loops rolled into scans
    (`taylax._rolled`) while the policy asks for it (`EmissionPolicy.rolls`) and one is
    found."""
    for _ in range(_MAX_ROLLED_LOOPS):
        if not _policy.rolls_loops(jaxpr, order):
            break
        found = _rolled.rolled(jaxpr, len(consts), _policy.current().roll_min_saved)
        if found is None:
            break
        # The rolled program takes the constants as arguments, after its own.
        args = [Series.constant(c) for c in consts] + list(args)
        jaxpr, consts = _compat.closed_parts(found)
    return jaxpr, consts, args


def _eval_jaxpr_series(
    jaxpr: _compat.Jaxpr, consts: Sequence, args: Sequence[Series], order: int
) -> list[Series]:
    env: dict = {}

    def read(v) -> Series:
        if isinstance(v, _compat.Literal):
            return Series.constant(v.val)
        return env[v]

    def write(v, value: Series) -> None:
        if not isinstance(v, _compat.DropVar):
            env[v] = value

    constvars, invars = _compat.input_vars(jaxpr, len(consts))
    for v, c in zip(constvars, consts, strict=True):
        write(v, Series.constant(c))
    for v, a in zip(invars, args, strict=True):
        write(v, a)

    groups = _shared_call_groups(jaxpr)
    shared_results: dict[int, list[Series]] = {}
    varying = _varying_vars(jaxpr, args)
    read_by_rows = _row_read_equations(jaxpr, varying, order)
    primal_only = _primal_only_equations(jaxpr)
    cuts = _cuts.cut_points(jaxpr, varying, order)

    for i, eqn in enumerate(jaxpr.eqns):
        live = cuts.get(i - 1)
        if live:  # bound the fused kernels: see `taylax._cuts`
            for v, s in zip(live, _cuts.materialized([env[v] for v in live]), strict=True):
                env[v] = s
        if i in shared_results:
            for v, o in zip(eqn.outvars, shared_results.pop(i), strict=True):
                write(v, o)
            continue
        series_in = [read(v) for v in eqn.invars]
        if i in primal_only:
            series_in = [Series.constant(s.primal) for s in series_in]
        primitive = eqn.primitive
        if all(s.is_constant for s in series_in) or not any(
            carries_derivative(v.aval) for v in eqn.outvars
        ):
            outs = _compat.bind_outputs(eqn, [s.primal for s in series_in])
            for v, o in zip(eqn.outvars, outs, strict=True):
                write(v, Series.constant(o))
            continue
        if i in groups:
            sub, members = groups[i]
            per_member = shared_call_evaluator[0](order, sub, series_in, [o for _, o in members])
            if per_member is not None:
                for (j, _), outs in zip(members, per_member, strict=True):
                    shared_results[j] = outs
                for v, o in zip(eqn.outvars, shared_results.pop(i), strict=True):
                    write(v, o)
                continue
        if order == 1:
            first = _elementwise.first_order_by_jvp(eqn, series_in)
            if first is not None:
                write(eqn.outvars[0], first)
                continue
        rule = taylor_rules.get(primitive)
        if rule is None:
            raise missing_rule(primitive)
        with _pass.reading_by_rows(i in read_by_rows):
            result = rule(order, *series_in, **eqn.params)
        outs = rule_result(eqn, result, order)
        for v, o in zip(eqn.outvars, outs, strict=True):
            write(v, o)

    return [read(v) for v in jaxpr.outvars]
