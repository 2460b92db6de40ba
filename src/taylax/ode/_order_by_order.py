"""An ODE solution's Taylor coefficients one order at a time, from the field's program.

For `w' = g(t, w)` the coefficients obey `w_{k+1} = F_k / (k + 1)`, where `F_k`, the
coefficient k of `g(t0 + s, w(s))`, depends on `w_0..w_k` only. Here every equation of
`g`'s jaxpr keeps the list of its output's coefficients, and order k computes coefficient
k of every equation in program order from the coefficients already known: a product
`c = a b` adds `c_k = sum_j a_j b_{k-j}`, `e = exp(x)` adds
`e_k = sum_{j >= 1} (j / k) x_j e_{k-j}` (from `e' = x' e`), and so on (the recurrences of
automatic differentiation: Griewank and Walther's book, chapter 13, and heyoka's and
TaylorIntegration.jl's generated code). Each order costs O(k) per nonlinear equation, so
the coefficients cost O(K^2) with no Jacobian and no repeated pass: 3-24x faster than the
doubling sweeps of `_coefficients.py` (docs/ODE.md, "Order by order").

It needs a recurrence for every primitive of the field: elementwise arithmetic, powers,
exp, log, trigonometric and hyperbolic functions and their inverses, erf and erfc,
`dot_general`, selections by the primal (abs, max, min, clamp, select) and every
primitive linear in its floating-point inputs
(sums, reshapes, slices, gathers, concatenations, ...), through `jit`, `custom_jvp`
(whose primal function is followed: the coefficients are those of the function itself),
`custom_vjp` and `checkpoint`. A field with anything else (control flow, linear algebra,
special functions) has its coefficients from the doubling sweeps instead
(`unsupported_primitive` says which primitive stands in the way).
A zero coefficient is `None`, so constants and the time's series `t0 + s` cost nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _compat
from .._rules._common import linear_inputs
from .._series import computed_once, opaque_one
from ._half_powers import three_halves
from ._recomputed import INTEGRATING_A_SERIES, reads_own_output

# Coefficients of one value: entry k is coefficient k, None where it is zero. A list of
# length 1 is a constant (it holds only the value).
Coefficients = list


class _Unsupported(Exception):
    """A primitive (named by the message) without a recurrence here."""


def _inexact(aval) -> bool:
    return jnp.issubdtype(aval.dtype, np.inexact)


def _complex(aval) -> bool:
    return jnp.issubdtype(aval.dtype, np.complexfloating)


# Primitives jointly linear in their floating-point inputs that the engine writes its own
# rules for (and so are not in `linear_inputs`, whose entries the collapsed passes read).
_MORE_LINEAR = (
    lax.broadcast_in_dim_p,
    lax.reshape_p,
    lax.concatenate_p,
    lax.transpose_p,
    lax.reduce_sum_p,
    lax.convert_element_type_p,
    lax.select_n_p,
    lax.cumsum_p,
    _compat.device_put_p,
)


def _linear_in(primitive) -> Callable | None:
    """`(i, aval) -> bool`, which inputs `primitive` is jointly linear in, or None."""
    if primitive in _MORE_LINEAR:
        return lambda i, aval: _inexact(aval)
    return linear_inputs.get(primitive)


@dataclasses.dataclass(frozen=True)
class Style:
    """How a frame writes its coefficients for XLA (docs/ODE.md, "One kernel per step").

    - `marks`: costly values of order 0 (`sin(x_0)`, ...) and each order's state are
      computed once into a buffer (`_once`). For a state held as one array, whose
      orders XLA:CPU writes as one kernel each.
    - `reciprocals`: a division by a value of order 0 (a quotient's, a power's, a
      logarithm's recurrence) is a product with its reciprocal, computed once. XLA does
      not copy a division into its readers, so each one ends a kernel; a product lets
      the coefficients of a state held as separate rows fuse into one kernel.
    """

    marks: bool = True
    reciprocals: bool = False


def _once(value, style: Style):
    """`value`, computed once into a buffer rather than in every kernel that reads it
    (where `style.marks`).

    Every order's kernel reads the values of order 0, and XLA copies elementwise producers
    into each reader: a `sin(x_0)` read by all K orders was K calls of libm's `sin` per
    step (K times per trajectory in a batch). The mark (`taylax._series.computed_once`)
    costs one small kernel; the policy drops it where values are not marked (GPUs)."""
    return value if value is None or not style.marks else computed_once(value, opaque_one(value))


def _over(numerator, x0, style: Style):
    """`numerator / x0` for a value `x0` of order 0: a product with `1 / x0` under
    `style.reciprocals` (XLA computes the one reciprocal once), else a division."""
    return numerator * (1 / x0) if style.reciprocals else numerator / x0


def _coefficient(c: Coefficients, k: int):
    return c[k] if k < len(c) else None


def _add(x, y):
    if x is None:
        return y
    return x if y is None else x + y


def _sub(x, y):
    if y is None:
        return x
    return -y if x is None else x - y


def _sum(terms: list):
    """The sum of `terms` (None if there are none), added pairwise: the same work as a
    running sum, but a dependency chain of log2(n) additions instead of n, which keeps
    the scalar code XLA:CPU writes for one trajectory from waiting on each add."""
    while len(terms) > 1:
        pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        terms = pairs + terms[len(pairs) * 2 :]
    return terms[0] if terms else None


# Sums of at most this many terms (a field's `jnp.sum` over a few components) over
# arrays of at least this many elements (a batch's) are written as additions of slices.
_SLICED_SUM_MAX_TERMS = 8
_SLICED_SUM_MIN_ELEMENTS = 4096


def _convolution(a: Coefficients, b: Coefficients, k: int, low: int = 0, high=None):
    """`sum_{j = low..high} a_j b_{k-j}` (`high` defaults to k), None if every term is
    zero."""
    high = k if high is None else high
    terms = []
    for j in range(low, high + 1):
        x, y = _coefficient(a, j), _coefficient(b, k - j)
        if x is not None and y is not None:
            terms.append(x * y)
    return _sum(terms)


def _slopes(x: Coefficients, memo: dict, k: int, key: str = "slopes") -> Coefficients:
    """`j x_j` for j = 0..k (the series of `s x'(s)`), kept in `memo` from order to order
    so that each is one multiplication in all, not one per later order."""
    slopes = memo.setdefault(key, [None])
    for j in range(len(slopes), k + 1):
        x_j = _coefficient(x, j)
        slopes.append(None if x_j is None else j * x_j)
    return slopes


def _integral(x: Coefficients, y: Coefficients, k: int, memo: dict, scale=1.0, key="slopes"):
    """Coefficient k of the series `u` with `u' = scale x' y`: `(scale / k) sum_{j >= 1}
    j x_j y_{k-j}` (exp's, sin's, tanh's, ... recurrence)."""
    total = _convolution(_slopes(x, memo, k, key), y, k, low=1)
    return None if total is None else total * (scale / k)


def _power(x: Coefficients, y: Coefficients, k: int, p, style: Style):
    """Coefficient k of `y = x^p` from `x y' = p x' y`:
    `y_k = sum_{j=1..k} (p j - (k - j)) x_j y_{k-j} / (k x_0)`."""
    terms = []
    for j in range(1, k + 1):
        xj, yj = _coefficient(x, j), _coefficient(y, k - j)
        if xj is not None and yj is not None:
            terms.append((p * j - (k - j)) * (xj * yj))
    out = _sum(terms)
    if out is None:
        return None
    return out * (1 / k) * (1 / x[0]) if style.reciprocals else out / (k * x[0])


def _quotient(a, b: Coefficients, q: Coefficients, k: int, style: Style):
    """Coefficient k of `q = a / b`: `(a_k - sum_{j >= 1} b_j q_{k-j}) / b_0`."""
    numerator = _sub(a, _convolution(b, q, k, low=1))
    return None if numerator is None else _over(numerator, b[0], style)


def _grow(series: Coefficients, k: int, value) -> None:
    """Set coefficient k of `series` (which holds 0..k-1, or fewer where they are zero)."""
    series.extend([None] * (k - len(series)))
    series.append(value)


# ---- Rules: `rule(k, ins, out, eqn, memo) -> coefficient k of the output` ------------
# `ins` are the inputs' coefficients (0..k known), `out` the output's (0..k-1), `memo` a
# dict the rule keeps series of its own in from order to order, and its entry "style" the
# frame's `Style`.


def _mul(k, ins, out, eqn, memo):
    return _convolution(ins[0], ins[1], k)


def _square(k, ins, out, eqn, memo):
    return _convolution(ins[0], ins[0], k)


def _dot_general(k, ins, out, eqn, memo):
    a, b = ins
    terms = []
    for j in range(k + 1):
        x, y = _coefficient(a, j), _coefficient(b, k - j)
        if x is not None and y is not None:
            terms.append(_compat.bind_equation(eqn, [x, y]))
    return _sum(terms)


def _div(k, ins, out, eqn, memo):
    return _quotient(_coefficient(ins[0], k), ins[1], out, k, memo["style"])


def _integer_pow(k, ins, out, eqn, memo):
    """`x^n` by products (repeated squaring), keeping each intermediate power's series; a
    negative `n` by the reciprocal's recurrence. Miller's power recurrence would divide
    by `x_0`, which may be 0 (`y^2` at `y = 0`)."""
    (x,) = ins
    n = eqn.params["y"]
    if n == 0:
        return None
    if "powers" not in memo:
        steps: list[tuple[int, int]] = []  # power i = power a * power b (power 0 is x)
        for bit in bin(abs(n))[3:]:
            steps.append((len(steps), len(steps)))
            if bit == "1":
                steps.append((len(steps), 0))
        memo["steps"] = steps
        memo["powers"] = [x] + [None] * len(steps)
    steps, powers = memo["steps"], memo["powers"]
    for i, (a, b) in enumerate(steps, start=1):
        if powers[i] is None:
            powers[i] = [powers[a][0] * powers[b][0]]
        _grow(powers[i], k, _convolution(powers[a], powers[b], k))
    if n > 0:
        return powers[-1][k]
    # x^n = 1 / x^|n|.
    return _quotient(None, powers[-1], out, k, memo["style"])


def _root(p):
    def rule(k, ins, out, eqn, memo):
        return _power(ins[0], out, k, p, memo["style"])

    return rule


def _pow(k, ins, out, eqn, memo):
    x, p = ins
    style = memo["style"]
    if len(p) == 1:
        return _power(x, out, k, p[0], style)
    # A varying exponent: x^p = exp(p log x).
    if "log" not in memo:
        memo["log"] = [_once(jnp.log(x[0]), style)]
        memo["exponent"] = [p[0] * memo["log"][0]]
    log, exponent = memo["log"], memo["exponent"]
    _grow(log, k, _once(_logarithm(x, log, k, x[0], memo, style, "log slopes"), style))
    _grow(exponent, k, _convolution(p, log, k))
    return _integral(exponent, out, k, memo)


def _exp(k, ins, out, eqn, memo):
    return _integral(ins[0], out, k, memo)


def _exp2(k, ins, out, eqn, memo):
    return _integral(ins[0], out, k, memo, scale=float(np.log(2.0)))


def _expm1(k, ins, out, eqn, memo):
    # expm1' = x' (expm1 + 1)
    return _integral(ins[0], [out[0] + 1, *out[1:]], k, memo)


def _logarithm(
    x: Coefficients, log: Coefficients, k: int, x0, memo: dict, style: Style, key="slopes"
):
    """Coefficient k of `log(x)` (with `x_0` given as `x0`), from `x log' = x'`:
    `(x_k - sum_{j=1..k-1} (j / k) log_j x_{k-j}) / x_0`."""
    rest = _convolution(_slopes(log, memo, k - 1, key), x, k, 1, k - 1)
    numerator = _sub(_coefficient(x, k), None if rest is None else rest * (1 / k))
    return None if numerator is None else _over(numerator, x0, style)


def _log(k, ins, out, eqn, memo):
    return _logarithm(ins[0], out, k, ins[0][0], memo, memo["style"])


def _log1p(k, ins, out, eqn, memo):
    return _logarithm(ins[0], out, k, ins[0][0] + 1, memo, memo["style"])


def _pair(kind: str):
    """sin and cos (`s' = x' c`, `c' = -x' s`), or sinh and cosh (`c' = x' s`): both series
    are kept, shared by the two equations of one input."""
    sign = -1.0 if kind == "trig" else 1.0
    first, second = (jnp.sin, jnp.cos) if kind == "trig" else (jnp.sinh, jnp.cosh)

    def rule(index: int):
        def pair_rule(k, ins, out, eqn, memo):
            (x,) = ins
            if "pair" not in memo:
                style = memo["style"]
                memo["pair"] = ([_once(first(x[0]), style)], [_once(second(x[0]), style)])
            s, c = memo["pair"]
            if len(s) <= k:
                s_k = _once(_integral(x, c, k, memo), memo["style"])
                _grow(c, k, _once(_integral(x, s, k, memo, scale=sign), memo["style"]))
                _grow(s, k, s_k)
            return (s, c)[index][k]

        return pair_rule

    return rule


def _riccati(kind: str):
    """tanh (`y' = x' (1 - y^2)`), tan (`y' = x' (1 + y^2)`) and logistic
    (`y' = x' (y - y^2)`): the factor's series is kept."""

    def rule(k, ins, out, eqn, memo):
        factor = memo.setdefault("factor", [])
        m = k - 1
        square = _convolution(out, out, m)
        if kind == "logistic":
            value = _sub(_coefficient(out, m), square)
        else:
            one = jnp.ones_like(out[0]) if m == 0 else None
            value = _sub(one, square) if kind == "tanh" else _add(one, square)
        factor.append(value)
        return _integral(ins[0], factor, k, memo)

    return rule


def _inverse(constant: float, square: float, p: float, scale: float = 1.0):
    """The inverse trigonometric and hyperbolic functions, `y' = scale x' u^p`, `u =
    constant + square x^2` (atan: `1 / (1 + x^2)`, asin: `1 / sqrt(1 - x^2)`, ...): the
    series of `u` and of `u^p` (Miller's recurrence, a reciprocal's for p = -1) are kept,
    and `u^p`'s marked, which its recurrence reads (`_recomputed`)."""

    def rule(k, ins, out, eqn, memo):
        (x,) = ins
        style = memo["style"]
        if "power" not in memo:
            memo["base"] = [constant + square * (x[0] * x[0])]
            memo["power"] = [_once(memo["base"][0] ** p, style)]
        base, power = memo["base"], memo["power"]
        m = k - 1
        if m > 0:
            square_m = _convolution(x, x, m)
            _grow(base, m, None if square_m is None else square * square_m)
            if p == -1:
                _grow(power, m, _once(_quotient(None, base, power, m, style), style))
            else:
                _grow(power, m, _once(_power(base, power, m, p, style), style))
        return _integral(x, power, k, memo, scale=scale)

    return rule


def _erf(scale: float):
    """erf (`scale = 1`) and erfc (`-1`): `y' = scale (2 / sqrt(pi)) x' exp(-x^2)`; the
    series of `-x^2` and of its exponential (marked: its recurrence reads it) are kept."""

    def rule(k, ins, out, eqn, memo):
        (x,), style = ins, memo["style"]
        if "exp" not in memo:
            memo["exponent"] = [-(x[0] * x[0])]
            memo["exp"] = [_once(jnp.exp(memo["exponent"][0]), style)]
        exponent, exp = memo["exponent"], memo["exp"]
        m = k - 1
        if m > 0:
            square_m = _convolution(x, x, m)
            _grow(exponent, m, None if square_m is None else -square_m)
            _grow(exp, m, _once(_integral(exponent, exp, m, memo, key="exponent slopes"), style))
        return _integral(x, exp, k, memo, scale=scale * 2 / float(np.sqrt(np.pi)))

    return rule


def _abs(k, ins, out, eqn, memo):
    c = _coefficient(ins[0], k)
    return None if c is None else jnp.sign(ins[0][0]) * c


def _chosen(pick, a, b, like):
    """`where(pick, a, b)` of two coefficients, either of which may be zero (None)."""
    if a is None and b is None:
        return None
    zero = jnp.zeros_like(like)
    return jnp.where(pick, zero if a is None else a, zero if b is None else b)


def _max(k, ins, out, eqn, memo):
    a, b = ins
    return _chosen(a[0] >= b[0], _coefficient(a, k), _coefficient(b, k), out[0])


def _min(k, ins, out, eqn, memo):
    a, b = ins
    return _chosen(a[0] <= b[0], _coefficient(a, k), _coefficient(b, k), out[0])


def _clamp(k, ins, out, eqn, memo):
    low, x, high = ins
    x_k = _chosen(x[0] < low[0], _coefficient(low, k), _coefficient(x, k), out[0])
    return _chosen(x[0] > high[0], _coefficient(high, k), x_k, out[0])


_RULES: dict = {
    lax.mul_p: _mul,
    lax.square_p: _square,
    lax.dot_general_p: _dot_general,
    lax.div_p: _div,
    lax.integer_pow_p: _integer_pow,
    lax.pow_p: _pow,
    lax.sqrt_p: _root(0.5),
    lax.rsqrt_p: _root(-0.5),
    lax.cbrt_p: _root(1.0 / 3.0),
    lax.exp_p: _exp,
    lax.exp2_p: _exp2,
    lax.expm1_p: _expm1,
    lax.log_p: _log,
    lax.log1p_p: _log1p,
    lax.sin_p: _pair("trig")(0),
    lax.cos_p: _pair("trig")(1),
    lax.sinh_p: _pair("hyperbolic")(0),
    lax.cosh_p: _pair("hyperbolic")(1),
    lax.tanh_p: _riccati("tanh"),
    lax.tan_p: _riccati("tan"),
    lax.logistic_p: _riccati("logistic"),
    lax.atan_p: _inverse(1.0, 1.0, -1.0),
    lax.asin_p: _inverse(1.0, -1.0, -0.5),
    lax.acos_p: _inverse(1.0, -1.0, -0.5, scale=-1.0),
    lax.asinh_p: _inverse(1.0, 1.0, -0.5),
    lax.acosh_p: _inverse(-1.0, 1.0, -0.5),
    lax.atanh_p: _inverse(1.0, -1.0, -1.0),
    lax.erf_p: _erf(1.0),
    lax.erfc_p: _erf(-1.0),
    lax.abs_p: _abs,
    lax.max_p: _max,
    lax.min_p: _min,
    lax.clamp_p: _clamp,
}

# Primitives whose value costs a call of libm (or a square root): their values of order
# 0 are computed once (`_once`), not in every order's kernel.
_COSTLY = (
    lax.sin_p,
    lax.cos_p,
    lax.sinh_p,
    lax.cosh_p,
    lax.tanh_p,
    lax.tan_p,
    lax.logistic_p,
    lax.exp_p,
    lax.exp2_p,
    lax.expm1_p,
    lax.log_p,
    lax.log1p_p,
    lax.pow_p,
    lax.sqrt_p,
    lax.rsqrt_p,
    lax.cbrt_p,
    *INTEGRATING_A_SERIES,
)

# sin and cos of one input share their series, as do sinh and cosh.
_PAIRED = {lax.sin_p: "trig", lax.cos_p: "trig", lax.sinh_p: "hyperbolic", lax.cosh_p: "hyperbolic"}

# Real-only rules: `abs` of a complex number is not `sign(x_0) x`, nor is max of two.
_REAL_ONLY = (lax.abs_p, lax.max_p, lax.min_p, lax.clamp_p, lax.sign_p)

# Piecewise constant functions of real values: every coefficient past the value is 0.
_PIECEWISE_CONSTANT = (lax.sign_p, lax.floor_p, lax.ceil_p, lax.round_p)


def _check(jaxpr) -> None:
    """Raise `_Unsupported` naming the first primitive of `jaxpr` (or of the programs it
    calls) that has no recurrence here."""
    for eqn in jaxpr.eqns:
        body = _compat.call_body(eqn)
        if body is not None:
            _check(body[0])
            continue
        if not any(_inexact(v.aval) for v in eqn.outvars):
            continue  # integer or boolean results: their derivatives are zero
        primitive = eqn.primitive
        if primitive in _REAL_ONLY and any(_complex(v.aval) for v in eqn.invars):
            raise _Unsupported(f"{primitive.name} of a complex value")
        if primitive in _PIECEWISE_CONSTANT:
            continue
        if primitive not in _RULES and _linear_in(primitive) is None:
            raise _Unsupported(primitive.name)


def field_program(g, t0, w0) -> tuple:
    """`(jaxpr, consts)`: the program of `g(t, w)` at arguments like `t0` and `w0` (the
    arrays `g` closes over, tracers among them, become its constants)."""
    return _compat.closed_parts(jax.make_jaxpr(g)(t0, w0))


def unsupported_primitive(program: tuple) -> str | None:
    """The first primitive of the field's `program` (`field_program`) without a
    recurrence here; None where every one has one, and the coefficients can be computed
    order by order."""
    try:
        _check(program[0])
    except _Unsupported as error:
        return str(error)
    return None


def _read(env: dict, atom) -> Coefficients:
    if isinstance(atom, _compat.Literal):
        return [atom.val]
    return env[atom]


def _fit(value, aval):
    """A coefficient as the output's dtype and shape (rules may broadcast or promote)."""
    if value is None:
        return None
    value = jnp.asarray(value)
    if value.dtype != aval.dtype:
        value = value.astype(aval.dtype)
    if value.shape != aval.shape:
        value = jnp.broadcast_to(value, aval.shape)
    return value


class _Frame:
    """One jaxpr's values as coefficient lists, kept from order to order (with a frame of
    its own for every call it makes), written in `style`."""

    def __init__(self, jaxpr, consts, style: Style):
        self.jaxpr = jaxpr
        self.style = style
        const_vars, self.invars = _compat.input_vars(jaxpr, len(consts))
        self.env: dict = {v: [c] for v, c in zip(const_vars, consts)}
        self.memos: dict = {}
        self.calls: dict = {}

    def run(self, k: int, inputs: list[Coefficients]) -> list[Coefficients]:
        """Coefficient k of every equation, the inputs' coefficients 0..k being known;
        returns the outputs' coefficient lists."""
        env = self.env
        env.update(zip(self.invars, inputs))
        for index, eqn in enumerate(self.jaxpr.eqns):
            ins = [_read(env, v) for v in eqn.invars]
            body = _compat.call_body(eqn)
            if body is not None:
                frame = self.calls.get(index)
                if frame is None:
                    frame = self.calls[index] = _Frame(*body, self.style)
                env.update(zip(eqn.outvars, frame.run(k, ins)))
                continue
            if k == 0:
                values = [c[0] for c in ins]
                outs = _sliced(eqn, values) or three_halves(eqn, values)
                outs = outs or _compat.bind_outputs(eqn, values)
                if eqn.primitive in _COSTLY:
                    outs = [_once(o, self.style) for o in outs]
                for var, value in zip(eqn.outvars, outs):
                    env[var] = [value]
                continue
            if all(len(c) == 1 for c in ins):
                continue  # constant: every input is
            values = self._order_k(index, eqn, ins, k)
            if self.style.marks and eqn.primitive in _RULES and reads_own_output(eqn):
                values = [_once(v, self.style) for v in values]
            for var, value in zip(eqn.outvars, values):
                _grow(env[var], k, _fit(value, var.aval))
        return [_read(env, v) for v in self.jaxpr.outvars]

    def _order_k(self, index: int, eqn, ins, k: int) -> list:
        """Coefficient k of each output of equation `index`, whose inputs' coefficients
        0..k are `ins` (None for a zero)."""
        primitive = eqn.primitive
        no_inexact = not any(_inexact(v.aval) for v in eqn.outvars)
        if no_inexact or primitive in _PIECEWISE_CONSTANT:
            return [None] * len(eqn.outvars)
        rule = _RULES.get(primitive)
        if rule is not None:
            kind = _PAIRED.get(primitive)
            key = (kind, eqn.invars[0]) if kind else index
            memo = self.memos.setdefault(key, {"style": self.style})
            return [rule(k, ins, self.env[eqn.outvars[0]], eqn, memo)]
        x = _coefficient(ins[0], k) if primitive is lax.reduce_sum_p else None
        sliced = None if x is None else _sliced(eqn, [x])
        if sliced is not None:
            return sliced
        linear = _linear_in(primitive)
        args, varying = [], False
        for i, (var, c) in enumerate(zip(eqn.invars, ins)):
            if linear(i, var.aval):
                value = _coefficient(c, k)
                varying = varying or value is not None
                args.append(jnp.zeros(var.aval.shape, var.aval.dtype) if value is None else value)
            else:
                args.append(c[0])
        if not varying:
            return [None] * len(eqn.outvars)
        return _compat.bind_outputs(eqn, args)


def _sliced(eqn, args: list) -> list | None:
    """`eqn` on `args` as pairwise additions of slices (`_sum`) where it is a `reduce_sum`
    of at most `_SLICED_SUM_MAX_TERMS` terms over `_SLICED_SUM_MIN_ELEMENTS` or more, else
    None. XLA:CPU made each order's such reduction a library call (a YNNPACK fusion, from
    4,096 elements), which took 4,096 Kepler orbits to twice their time; smaller arrays
    (a trajectory's, under a `vmap`) keep the reduction, whose slices compiled 2-4x
    slower (docs/ODE.md, "Small sums in batches")."""
    if eqn.primitive is not lax.reduce_sum_p:
        return None
    x, axes = args[0], tuple(eqn.params["axes"])
    n = math.prod(x.shape[a] for a in axes)
    if n > _SLICED_SUM_MAX_TERMS or x.size < _SLICED_SUM_MIN_ELEMENTS:
        return None
    rest = [d for i, d in enumerate(x.shape) if i not in axes]
    y = jnp.moveaxis(x, axes, tuple(range(len(axes)))).reshape((n, *rest))
    return [_sum([y[i] for i in range(n)]).astype(eqn.outvars[0].aval.dtype)]


def field_rows_program(g, t0, w0) -> tuple:
    """`(jaxpr, consts)` as `field_program`, of `g` with each row `w0[i]` of the state an
    input of its own and the value returned as rows (XLA removes the stack and slices)."""
    n = w0.shape[0]

    def rows_field(t, *rows):
        value = g(t, jnp.stack(rows))
        return [value[i] for i in range(n)]

    return _compat.closed_parts(jax.make_jaxpr(rows_field)(t0, *(w0[i] for i in range(n))))


def solution_series(program: tuple, t0, w0, order: int):
    """Coefficients `w_0..w_order` of the solution of `w' = g(t, w)`, `w(t0) = w0`,
    stacked `(order + 1, *w0.shape)`, from `g`'s `program` (`field_program`; every
    primitive of it must have a recurrence here: `unsupported_primitive`)."""
    (w,) = _solution(program, t0, [w0], order, Style())
    return jnp.stack(w)


def solution_rows(program: tuple, t0, w0, order: int) -> list[list]:
    """The coefficients of `solution_series` as separate arrays, `c[k][i]` the
    coefficient k of row i of the state, from `g`'s `field_rows_program`.

    Written for one kernel: no value marked and divisions as products (`Style`). With
    each row's orders apart, every value is a scalar (or a lane of a batch) and XLA:CPU
    fuses the recurrence into one kernel (docs/ODE.md, "One kernel per step")."""
    rows = _solution(program, t0, [w0[i] for i in range(w0.shape[0])], order, _ONE_KERNEL)
    return [list(orders) for orders in zip(*rows)]


_ONE_KERNEL = Style(marks=False, reciprocals=True)


def _solution(program: tuple, t0, states: list, order: int, style: Style) -> list[list]:
    """Each input state's coefficients `0..order` (a list per state) from the field's
    `program`, whose inputs are the time and `states` and whose outputs their
    derivatives."""
    frame = _Frame(*program, style)
    w = [[s] for s in states]
    time = [t0, jnp.ones_like(t0)]
    zeros = [jnp.zeros_like(s) for s in states]
    for k in range(order):
        fs = frame.run(k, [time, *w])
        for w_i, f, zero in zip(w, fs, zeros):
            f_k = _coefficient(f, k)
            # Computed once (a marked style): each order's kernel then writes w_{k+1}
            # itself, where XLA:CPU wrote F_k and a second kernel per order scaled it.
            w_i.append(zero if f_k is None else _once((f_k / (k + 1)).astype(zero.dtype), style))
    return w
