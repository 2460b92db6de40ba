"""The float64 oracle for every Taylor-rule test: nested `jax.jvp` along a direction.

`nested_jvp_derivatives(f, x, v, order)` returns, for every output leaf of `f`, an array of
shape `(order + 1, *out.shape)` whose k-th entry is `d^k/ds^k f(x + s*v)` at `s = 0`, computed
by nesting `jax.jvp` k times with respect to the REAL scalar `s` (so it works unchanged for
complex `x` and `v`).  This is exactly the semantics taylax promises (see DESIGN.md), and it is
deliberately naive: no Taylor arithmetic, only JAX's own first-order rules.

`assert_series_close(actual, expected, rtol)` compares two such stacks order by order.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

__all__ = [
    "assert_series_close",
    "check_against_oracle",
    "direction",
    "entry_kernels",
    "nested_jvp_derivatives",
    "oracle",
    "seeded_rng",
    "users_codegen",
    "xla_cpu_only",
]


# --------------------------------------------------------------------------------------------
# The oracle.
# --------------------------------------------------------------------------------------------

_ORACLE_MODE = os.environ.get("TAYLAX_ORACLE", "eager")
if _ORACLE_MODE not in ("eager", "jit"):
    raise ValueError(f"TAYLAX_ORACLE must be 'eager' or 'jit', got {_ORACLE_MODE!r}")

# (f, order) -> (x, v) -> stacked derivatives.  The value keeps `f` alive so that its
# id is never reused while the entry exists.
_COMPILED: dict[tuple[int, int], tuple[Callable, Callable]] = {}
# Results, keyed by the function, the order and the bytes of (x, v).
_RESULTS: dict[tuple, Any] = {}


def _real_dtype(dtype) -> np.dtype:
    return np.finfo(np.dtype(dtype)).dtype


def _build(f: Callable, order: int) -> Callable:
    """All derivatives 0..order of s -> f(x + s v), as one function of (x, v).

    Built once per (f, order).  By default it runs op by op (`jax.disable_jit`): nested jvp
    programs have thousands of equations and are used once or twice, so XLA compiling them
    costs more than it saves (measured on this suite: 22 s eager vs 38 s jitted for the
    elementwise table at order 6, 10 s vs 19 s at order 10).  `TAYLAX_ORACLE=jit` jits it.
    """

    def all_derivatives(x, v):
        real = _real_dtype(x.dtype)

        def g(s):
            return f(x + s * v)

        # h_k(s) returns the tuple (g(s), g'(s), ..., g^(k)(s)).  Its jvp along ds = 1 has the
        # tuple itself as primal and (g', ..., g^(k+1)) as tangent, so each level adds one order.
        def level0(s):
            return (g(s),)

        def next_level(h):
            def h_next(s):
                primals, tangents = jax.jvp(h, (s,), (jnp.ones((), real),))
                return (*primals, tangents[-1])

            return h_next

        h = level0
        for _ in range(order):
            h = next_level(h)
        outs = h(jnp.zeros((), real))
        return jax.tree.map(lambda *ds: jnp.stack(ds), *outs)

    if _ORACLE_MODE == "jit":
        return jax.jit(all_derivatives)

    def eager(x, v):
        with jax.disable_jit():
            return all_derivatives(x, v)

    return eager


def _as_array(x) -> np.ndarray:
    x = np.asarray(x)
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.complexfloating)):
        raise TypeError(f"the oracle needs a float or complex x, got dtype {x.dtype}")
    return x


def nested_jvp_derivatives(f: Callable, x, v=None, order: int = 6):
    """d^k/ds^k f(x + s*v) at s = 0 for k = 0..order, by nesting `jax.jvp` (float64 oracle).

    Computed on the CPU, unless `f.platform_dependent` is true (then on the default
    device, whose platform picks `f`'s branch).

    Returns a pytree like `f(x)` whose leaves have shape `(order + 1, *leaf.shape)`.
    `v` defaults to 1 for a scalar `x`.  `s` is real, also for complex `x`.
    """
    x = _as_array(x)
    if v is None:
        if x.shape != ():
            raise ValueError("the oracle needs a direction v for a non-scalar x")
        v = np.ones((), x.dtype)
    v = np.asarray(v, dtype=x.dtype)
    if v.shape != x.shape:
        raise ValueError(f"direction shape {v.shape} does not match x shape {x.shape}")
    key = (id(f), int(order))
    entry = _COMPILED.get(key)
    if entry is None:
        entry = (f, _build(f, int(order)))
        _COMPILED[key] = entry
    rkey = (id(f), int(order), x.dtype.str, x.shape, x.tobytes(), v.tobytes())
    result = _RESULTS.get(rkey)
    if result is None:
        # On the CPU whatever the default backend: there JAX's float64 rules are exact.
        # Its GPU lowering of `select_and_gather_add` (the derivative of a max or min
        # pool, from order 2) packs two float64 values into one word and keeps 32 bits of
        # each, so a GPU oracle is wrong in the 8th digit. A function whose value depends
        # on the platform (`platform_dependent`) is the exception: its oracle runs where
        # taylax does.
        if getattr(f, "platform_dependent", False):
            result = jax.tree.map(np.asarray, entry[1](x, v))
        else:
            with jax.default_device(jax.devices("cpu")[0]):
                result = jax.tree.map(np.asarray, entry[1](x, v))
        _RESULTS[rkey] = result
    return result


def oracle(f: Callable, x, v, order: int, max_order: int | None = None):
    """The reference truncated to `order`, computed once at `max_order` and cached.

    Parametrized tests that check several orders of the same case share one nested-jvp
    compilation at the largest order they need.
    """
    max_order = order if max_order is None else max(order, max_order)
    full = nested_jvp_derivatives(f, x, v, max_order)
    return jax.tree.map(lambda a: a[: order + 1], full)


# --------------------------------------------------------------------------------------------
# Comparison.
# --------------------------------------------------------------------------------------------


def _fmt(z) -> str:
    return np.array2string(np.asarray(z), precision=17, floatmode="maxprec")


def _compare_leaf(actual, expected, rtol: float, where: str) -> list[str]:
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    problems: list[str] = []
    if actual.shape != expected.shape:
        return [f"{where}: shape {actual.shape} != expected {expected.shape}"]
    if actual.dtype != expected.dtype:
        problems.append(f"{where}: dtype {actual.dtype} != expected {expected.dtype}")
        if actual.dtype.kind != expected.dtype.kind:
            return problems
    for k in range(expected.shape[0]):
        e = expected[k]
        a = actual[k]
        fin_e = np.isfinite(e)
        fin_a = np.isfinite(a)
        finite_scale = np.max(np.abs(e[fin_e]), initial=0.0) if np.any(fin_e) else 0.0
        tol = rtol * max(1.0, float(finite_scale))
        both = fin_e & fin_a
        err = np.where(both, np.abs(np.where(both, a, 0) - np.where(both, e, 0)), 0.0)
        bad = (fin_e != fin_a) | (both & (err > tol))
        if np.any(bad):
            if bad.ndim == 0:
                idx = [()]
            else:
                idx = [tuple(int(i) for i in ix) for ix in zip(*np.nonzero(bad))]
            shown = idx[:4]
            details = "; ".join(
                f"[{', '.join(map(str, ix))}] expected {_fmt(e[ix])} actual {_fmt(a[ix])}"
                for ix in shown
            )
            more = f" (+{len(idx) - len(shown)} more)" if len(idx) > len(shown) else ""
            kind = (
                "finite/non-finite mismatch"
                if np.any(fin_e != fin_a)
                else f"max error {float(np.max(err)):.3e} > tol {tol:.3e}"
            )
            problems.append(f"{where} order {k}: {kind}: {details}{more}")
    return problems


def assert_series_close(actual, expected, rtol: float = 1e-10, context: str = "") -> None:
    """Compare stacked derivatives order by order.

    For each order k the tolerance is `rtol * max(1, max|expected_k|)` over the finite entries
    of that order, so values near 0 pass when both sides are ~0 but any real discrepancy fails.
    Where the reference is non-finite (nan/inf) the actual value must be non-finite too, and a
    finite reference with a non-finite actual value fails.  Shapes and dtypes must match.
    """
    prefix = f"{context}: " if context else ""
    a_leaves, a_tree = jax.tree.flatten(actual)
    e_leaves, e_tree = jax.tree.flatten(expected)
    if a_tree != e_tree:
        raise AssertionError(f"{prefix}output structure {a_tree} != expected {e_tree}")
    problems: list[str] = []
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        where = f"output {i}" if len(e_leaves) > 1 else "output"
        problems += _compare_leaf(a, e, rtol, where)
    if problems:
        raise AssertionError(prefix + "\n  ".join(["series mismatch:", *problems]))


# --------------------------------------------------------------------------------------------
# Deterministic directions.
# --------------------------------------------------------------------------------------------


def seeded_rng(name: str) -> np.random.Generator:
    """A generator seeded from a test-case name (stable across runs and processes)."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def direction(name: str, shape, dtype) -> np.ndarray:
    """A fixed pseudo-random direction of the given shape and dtype for test case `name`."""
    rng = seeded_rng(name)
    dtype = np.dtype(dtype)
    v = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    if dtype.kind == "c":
        v = v + 1j * rng.uniform(-1.0, 1.0, size=shape)
    return np.asarray(v, dtype=dtype)


# --------------------------------------------------------------------------------------------
# The one-line check used by the table-driven tests.
# --------------------------------------------------------------------------------------------


def check_against_oracle(
    f: Callable,
    x,
    v,
    orders: int | Sequence[int],
    *,
    per_point: bool = False,
    rtol: float = 1e-10,
    context: str = "",
    reference: Callable | None = None,
) -> None:
    """`taylax.derivatives(f, K)(x, v)` must equal the nested-jvp oracle to `rtol`, for every
    truncation order `K` in `orders` (each result holds all orders 0..K).

    The oracle differentiates `reference` where given: a function equal to `f` whose JAX
    derivative rules are right where `f`'s are not.

    The oracle is computed once, at the largest order.  Mismatches at all orders are collected
    into one AssertionError; any other exception (a missing rule, a crash) propagates at once.
    With `per_point=True`, `f` must be elementwise along axis 0 of a 1-d `x` (a batch of test
    points); each point is then compared on its own, with its own tolerance scale, and the
    failure message names the point.
    """
    import taylax

    x = _as_array(x)
    orders = [orders] if isinstance(orders, int) else list(orders)
    if per_point and x.ndim != 1:
        raise ValueError("per_point=True needs a 1-d batch of points")
    full = nested_jvp_derivatives(f if reference is None else reference, x, v, max(orders))
    failures = []
    for order in orders:
        expected = jax.tree.map(lambda a, order=order: a[: order + 1], full)
        actual = taylax.derivatives(f, order)(x, v)
        where = f"{context} [taylax.derivatives(f, {order})]"
        if not per_point:
            pairs = [(actual, expected, where)]
        else:
            pairs = [
                (
                    jax.tree.map(lambda a, i=i: np.asarray(a)[:, i], actual),
                    jax.tree.map(lambda a, i=i: a[:, i], expected),
                    f"{where} at x={x[i]!r} v={np.asarray(v)[i]!r}",
                )
                for i in range(x.shape[0])
            ]
        for a, e, w in pairs:
            try:
                assert_series_close(a, e, rtol, w)
            except AssertionError as exc:
                failures.append(str(exc))
    if failures:
        raise AssertionError("\n".join(failures))


def case_params(cases, accepts_complex: Callable[[Any], bool]) -> list:
    """`pytest.param(name, dtype)` for every case: float64, and complex128 where it applies."""
    import pytest

    params = []
    for case in cases:
        for dtype in ["float64"] + (["complex128"] if accepts_complex(case) else []):
            params.append(pytest.param(case.name, dtype, id=f"{case.name}-{dtype}"))
    return params


def rk4_unrolled(y, steps=20, h=0.05):
    """A large scalar program: RK4 steps of y' = -y^3 + sin(t), unrolled (660 equations at
    20 steps). `t` is a Python float, so each step's `sin` reads literals of its own."""
    t = 0.0
    for _ in range(steps):
        k1 = -(y**3) + jnp.sin(t)
        k2 = -((y + h / 2 * k1) ** 3) + jnp.sin(t + h / 2)
        k3 = -((y + h / 2 * k2) ** 3) + jnp.sin(t + h / 2)
        k4 = -((y + h * k3) ** 3) + jnp.sin(t + h)
        y, t = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h
    return y


def all_equations(jaxpr):
    """Every equation of `jaxpr` (a Jaxpr or ClosedJaxpr), sub-jaxprs included, in order."""
    from taylax import _compat

    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _compat.jaxprs_in_params(eqn.params):
            yield from all_equations(sub)


def computed_once_marks(jaxpr, kind: str | None = None, where=lambda eqn: True) -> int:
    """How many `taylax_computed_once` marks `jaxpr` holds, sub-jaxprs included: of `kind`
    (`"once"`, `"row"`, ...) when given, and only those for which `where(eqn)` holds."""
    return sum(
        eqn.primitive.name == "taylax_computed_once"
        and (kind is None or eqn.params["kind"] == kind)
        and where(eqn)
        for eqn in all_equations(jaxpr)
    )


# --------------------------------------------------------------------------------------------
# Compiled structure.
# --------------------------------------------------------------------------------------------

# Kernel counts pin XLA:CPU's fusion decisions, the ones `make test` and the benchmarks see.
# XLA:GPU fuses by rules of its own (on an H100 the order-2 chains at 1,048,576 points were
# more than one kernel), so these tests run on the CPU backend only.
xla_cpu_only = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="pins XLA:CPU's kernel count"
)


def users_codegen() -> dict:
    """`compiler_options` for `jax.jit` that give back XLA:CPU's default fusion emitters,
    where tests/conftest.py compiles with its older LLVM ones (they compile faster).

    For the tests that compare two programs of one computation to the last bits (points
    in chunks against one `vmap`): the two agree that closely only as far as the codegen
    vectorizes their loops alike, and the claim is about the programs users compile. An
    outer `jax.jit`'s options reach taylax's inner ones, which XLA inlines into it.
    """
    if "--xla_cpu_use_fusion_emitters=false" in os.environ.get("XLA_FLAGS", ""):
        return {"xla_cpu_use_fusion_emitters": True}
    return {}


def entry_kernels(fn, *args) -> int:
    """Fusions in the entry computation of `fn`'s compiled program (lowered, compiled,
    never run)."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    return text[text.index("ENTRY") :].count(" fusion(")
