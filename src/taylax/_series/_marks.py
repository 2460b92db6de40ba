"""Marks that tell XLA what to keep in a buffer (`computed_once`) and what not to
rewrite through (`shielded`): a Taylor kernel reads each coefficient once per later
coefficient, and copies of cheap producers in every reader would make it O(K^3)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _once, _policy
from .._pass import one_kernel_pass, pass_order
from ._coeffs import Array, real_dtype
from ._identity import ArrayMarks


def opaque_one(source: Array) -> Array:
    """An array of ones shaped like `source` that XLA cannot fold to the constant 1.

    `1 + 0 [source == source]`: the comparison is false for nan, so XLA cannot assume
    it, and `0 y` is not folded for floats. Exactly 1 for every value of `source`.
    """
    dtype = jnp.result_type(source)
    real = real_dtype(dtype) if jnp.issubdtype(dtype, np.inexact) else jnp.float32
    same = lax.convert_element_type(source == source, real)
    return 1 + jnp.zeros((), real) * same


def computed_once(
    value: Array, one: Array, *, while_small: bool = False, per_point: bool = False
) -> Array:
    """`value` unchanged, marked so that XLA computes it once instead of in every reader.

    XLA copies cheap elementwise producers (sin, cos, products and sums) into each kernel
    that reads them, and a Taylor kernel reads a coefficient once per later coefficient:
    the copies make it O(K^3). XLA does not copy an expensive producer such as a
    division, so `value / one` (with `one = opaque_one(...)`, exactly 1) is computed
    once into a buffer that the readers share. A reader that divides by it or into it
    must take it through `shielded`. Large values in passes of low order stay unmarked
    (`taylax._once`: decided when the program is lowered, from the batched shape), and
    so does every value of a pass that compiles into one kernel (`one_kernel_pass`).

    `while_small=True` marks a value that XLA may as well recompute in its readers (a
    recurrence's row): it is lowered marked only while smaller than the policy's
    `rows_unmarked_min_bytes`, where a buffer stays in cache (`taylax._once`); with
    `per_point=True` too, only where `jax.vmap` batched it after tracing (a pass at one
    point), and always at the shape traced (a whole array's pass).
    """
    if one_kernel_pass():
        return value
    one = one.astype(jnp.result_type(value))
    kind = ("point row" if per_point else "row") if while_small else "once"
    out = _once.mark(value, one, kind=kind, pass_order=pass_order())
    return _ONCE.mark(out, kind)


def once(value: Array) -> Array:
    """`value` marked `computed_once`, with an `opaque_one` of its own.

    For a rule's transcendental values: the primal `exp x0`, `log x0`, `asinh x0`...
    XLA counts them expensive and copies them into no second kernel. But every row of the
    rule's output reads the primal, and so does every row of every later product. Fused
    into the one kernel that writes a short pass's output stack, the value was computed
    once per row: that kernel evaluates each element from its own row's expression, and
    under `jax.vmap` it does so in scalar code. `exp(t) log1p(t^2)` at K = 8 ran 4x jet's
    time (docs/EMISSION.md, "Transcendental values computed once").

    Marked only past the policy's `unmarked_any_size_max_order` and up to its
    `primal_once_max_order` (None: never). At the lowest orders a pass under `vmap`
    lowers its marks as the values themselves but counted them as buffers when choosing
    chunks of points, and a whole-array logsumexp at K = 2 ran up to 1.2x slower marked.
    Past 8 on the CPU XLA:CPU fuses no stack of the output's rows: each row is a kernel of
    its own that computes the value vectorized, and a buffer for it measured 0-15%
    slower at K = 16. Complex values stay unmarked, as complex sin and cos do
    (`_rules._transcendental.sin_cos`): the mark divides, and a complex division by 1
    need not keep an infinite value's parts.
    """
    order, policy = pass_order(), _policy.current()
    most = policy.primal_once_max_order
    if most is None or jnp.iscomplexobj(value) or _once.unmarked_at_any_size(order, policy):
        return value
    if order is not None and order > most:
        return value
    return computed_once(value, opaque_one(value))


# Outputs of `computed_once`.
_ONCE = ArrayMarks()


def shielded(x: Array) -> Array:
    """`x` unchanged, as an operand of a division that keeps `computed_once` intact.

    XLA rewrites `(a / b) / c` into `a / (b c)` and `c / (a / b)` into `(c b) / a`,
    which moves a `computed_once` value's own computation (`a`) into the dividing
    kernel, so it is computed twice (`cos t / (2 + sin t)`: docs/EMISSION.md, "Values
    computed once").
    A product with `opaque_one` (exactly 1) is not a division; it alone is copied into
    the reader (for complex values part by part: `inf * (1 + 0j)` has a nan part). Other
    values are returned as they are; where the value is lowered unmarked, so is this.
    """
    if x not in _ONCE:
        return x
    marked = _ONCE.get(x)
    kind = f"{marked} shield" if marked in ("row", "point row") else "shield"
    return _once.mark(x, opaque_one(x), kind=kind, pass_order=pass_order())
