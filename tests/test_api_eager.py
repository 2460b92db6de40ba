"""Eager (un-jitted) calls of the public API: current results, compiled once, bounded memory.

Every eager call traces the function again and reuses a program compiled for a jaxpr of the
same structure. Compiles are counted with `jax.monitoring`'s backend-compile event, so the
checks are deterministic (no timing).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax import _derivative
from taylax._compat import BACKEND_COMPILE_EVENT

X = 0.3


@contextlib.contextmanager
def count_compiles():
    """Counts XLA backend compiles inside the block (`box[0]`)."""
    box = [0]

    def listener(event, duration, **kwargs):
        if event == BACKEND_COMPILE_EVENT:
            box[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield box
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


# Each entry: (name, call(f) -> the first derivative of f at X, as taylax computes it).
FIRST_DERIVATIVE = [
    ("derivative", lambda f: taylax.derivative(f)(X)),
    ("jacfwd", lambda f: taylax.jacfwd(f)(X)),
    ("derivatives", lambda f: taylax.derivatives(f, 2)(X)[1]),
    ("taylor", lambda f: taylax.taylor(f, 2)(X, 1.0)[1][0]),
    ("jet", lambda f: taylax.jet(f, (X,), ((1.0, 0.0),))[1][0]),
]
IDS = [name for name, _ in FIRST_DERIVATIVE]


@pytest.mark.parametrize("call", [c for _, c in FIRST_DERIVATIVE], ids=IDS)
def test_eager_calls_are_current_and_compile_once(call):
    state = {"scale": 1.5, "weights": jnp.asarray([1.0, 2.0])}

    def make():  # a new function object every time, as a lambda in a loop would be
        return lambda x: jnp.sin(state["scale"] * x) * jnp.sum(state["weights"] * x**2)

    call(make())
    # A mutated closed-over array is an argument of the compiled program, not baked in.
    state["weights"] = jnp.asarray([3.0, -1.0])
    f = make()
    with count_compiles() as compiles:
        got = call(f)
    assert compiles[0] == 0
    np.testing.assert_allclose(got, jax.jacfwd(f)(X), rtol=1e-13)
    # A changed Python number is a literal of the traced program: a new program, never a
    # stale one.
    state["scale"] = -0.5
    np.testing.assert_allclose(call(f), jax.jacfwd(f)(X), rtol=1e-13)


# Each entry: (name, call(f) for f from R^3 to R): every operator, eagerly.
XS = jnp.asarray([0.3, -0.2, 0.5])
OPERATORS = [
    ("laplacian", lambda f: taylax.laplacian(f)(XS)),
    ("laplacian_stochastic", lambda f: taylax.laplacian(f, key=jax.random.key(0), samples=4)(XS)),
    ("hessian_diagonal", lambda f: taylax.hessian_diagonal(f)(XS)),
    ("biharmonic", lambda f: taylax.biharmonic(f)(XS)),
    ("biharmonic_stochastic", lambda f: taylax.biharmonic(f, key=jax.random.key(0), samples=4)(XS)),
    ("derivative_tensor", lambda f: taylax.derivative_tensor(f, 2)(XS)),
    ("weighted_laplacian", lambda f: taylax.weighted_laplacian(f, jnp.eye(3))(XS)),
    ("differential_operator", lambda f: taylax.differential_operator(f, {(2, 0, 0): 1.0})(XS)),
]


@pytest.mark.parametrize(
    "call",
    [c for _, c in FIRST_DERIVATIVE] + [c for _, c in OPERATORS],
    ids=IDS + [name for name, _ in OPERATORS],
)
def test_a_changing_0d_closed_over_array_compiles_once(call):
    # A closed-over 0-d array is an argument of the compiled program, as a larger array
    # is: a new value (a step size, a time in a loop) reuses the program.
    def make(w):
        return lambda x: jnp.sum(jnp.sin(w * x) * jnp.exp(x))

    call(make(jnp.asarray(0.5)))
    with count_compiles() as compiles:
        got = [call(make(jnp.asarray(0.5 + 0.01 * i))) for i in range(1, 4)]
    assert compiles[0] == 0
    # Current values, not those of the first call's program.
    for i, value in enumerate(got, start=1):
        w = 0.5 + 0.01 * i
        np.testing.assert_allclose(value, call(make(w)), rtol=1e-12)


def test_a_closed_over_0d_exponent_stays_exact_at_a_negative_base():
    # The exponent of a power is read by its rule (an integer-valued one keeps the power
    # exact at a negative base), so it stays part of the program, keyed by value.
    def make(p):
        return lambda x: (x - 1.0) ** p

    for p in (3.0, 4.0):
        f = make(jnp.asarray(p))
        got = taylax.derivatives(f, 5)(X)
        want = [(X - 1.0) ** p] + [
            math.perm(int(p), n) * (X - 1.0) ** (p - n) if n <= p else 0.0 for n in range(1, 6)
        ]
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13, atol=1e-13)


def test_eager_program_caches_are_bounded_and_release_programs(monkeypatch):
    monkeypatch.setattr(_derivative._EAGER_DERIVATIVES, "size", 2)
    gc.collect()
    before = len(_derivative._UNIT_SEED_CALLS)
    for k in range(6):  # six structures (the literal differs): six programs compiled
        taylax.derivative(lambda t, k=k: jnp.sin(t) * (k + 1.5), 2)(X)
    assert len(_derivative._EAGER_DERIVATIVES.entries) == 2
    gc.collect()
    # The evicted programs' sub-program caches are freed with them (weak keys).
    assert len(_derivative._UNIT_SEED_CALLS) <= before + 2


def test_unhashable_callable_with_a_python_float():
    class Unhashable:
        __hash__ = None

        def __call__(self, x):
            return jnp.sin(x)

    got = taylax.derivatives(Unhashable(), 3)(0.3)
    np.testing.assert_allclose(got, [np.sin(0.3), np.cos(0.3), -np.sin(0.3), -np.cos(0.3)])


def test_nested_jit_derivative_does_not_walk_the_wrapper_chain(monkeypatch):
    f = taylax.derivative(jnp.sin)
    assert not hasattr(f, "__wrapped__")
    assert f.__name__ == "sin" and inspect.signature(f) == inspect.signature(jnp.sin)

    calls = [0]
    signature = inspect.signature

    def counting(*args, **kwargs):
        calls[0] += 1
        return signature(*args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counting)
    g = jnp.sin
    for _ in range(10):
        g = jax.jit(taylax.derivative(g))
    jax.make_jaxpr(g)(0.3)
    # Linear in the depth (about 5 per level); it was 4x per level (8,187 at depth 10).
    assert calls[0] <= 100, calls[0]


@pytest.mark.parametrize(
    "collective",
    [lambda s: jax.lax.psum(s, "b"), lambda s: jax.lax.axis_index("b")],
    ids=["psum", "axis_index"],
)
def test_jacfwd_under_vmap_with_a_collective(collective):
    def f(s):
        return jnp.sin(s) * collective(s)

    x = jnp.linspace(0.1, 0.8, 8)
    want = jax.vmap(jax.jacfwd(f), axis_name="b")(x)
    np.testing.assert_allclose(jax.vmap(taylax.jacfwd(f), axis_name="b")(x), want, rtol=1e-13)
    want2 = jax.vmap(jax.jacfwd(jax.jacfwd(f)), axis_name="b")(x)
    got2 = jax.vmap(taylax.derivative(f, 2), axis_name="b")(x)
    np.testing.assert_allclose(got2, want2, rtol=1e-13)


def test_jit_sub_program_cache_releases_its_jaxpr():
    # The jitted Taylor pass of a `jit` sub-program is cached weakly by its jaxpr; it must
    # not keep that jaxpr (its own key) alive.
    from taylax._rules import _calls

    gc.collect()
    before = len(_calls._TRANSFORMED)
    closed = jax.make_jaxpr(lambda t: jnp.sin(t) * 2.5)(X)
    fn = _calls.transformed_call(closed, 3, (1,), "probe")
    jax.block_until_ready(fn(jnp.stack([X, jnp.ones_like(X)])))
    assert len(_calls._TRANSFORMED) == before + 1
    del closed, fn
    gc.collect()
    assert len(_calls._TRANSFORMED) == before
