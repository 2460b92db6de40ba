"""Every optimizer pass on hypothesis-generated programs (control flow, sub-programs, effects).

For each generated program and each pass: the output jaxpr type-checks
(`check_jaxpr`), evaluates to the same values on random inputs, is a fixed point
(optimizing it again changes nothing), and keeps every effect, random, barrier
and `prevent_cse` equation.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st
from jax import lax

from taylax import _compat as jex  # JAX's jaxpr types on every supported JAX
from taylax._optimize import _passes

N = 3


@jax.jit
def _shared(a, b):
    return jnp.sin(a) * b + 1.0 * a


@jax.custom_jvp
def _soft(a):
    return jnp.log1p(jnp.exp(-jnp.abs(a))) + jnp.maximum(a, 0.0)


_soft.defjvp(lambda p, t: (_soft(p[0]), jax.nn.sigmoid(p[0]) * t[0]))


def _noop_callback(*_):
    return None


# Each operation takes the values (a, b) and returns one new value of shape (N,).
OPS = {
    "sin": lambda a, b: jnp.sin(a),
    "tanh_mul": lambda a, b: jnp.tanh(a) * b,
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "div": lambda a, b: a / (1.0 + b * b),
    "neg_neg": lambda a, b: lax.neg(lax.neg(a)) + b,
    "mul_one": lambda a, b: a * 1.0 + 0.0 * 1.0,
    "add_zeros": lambda a, b: a + jnp.zeros(N) - jnp.zeros(N),
    "reshape": lambda a, b: jnp.reshape(jnp.reshape(a, (N, 1)), (N,)) + b,
    "duplicate": lambda a, b: (
        jnp.exp(jnp.tanh(a / (1.0 + b * b))) * jnp.exp(jnp.tanh(a / (1.0 + b * b)))
    ),
    "fold": lambda a, b: (jnp.arange(float(N)) * 2.0 + 1.0) * a + (3.0 * 4.0 - 2.0),
    "jit_twice": lambda a, b: _shared(a, b) - _shared(a, b),
    "cond": lambda a, b: lax.cond(
        jnp.sum(a) > 0.0, lambda u, v: u * v * 1.0, lambda u, v: u + v + 0.0, a, b
    ),
    # Scans over the N entries of b; each step emits a scalar, so the result has shape (N,).
    "scan": lambda a, b: lax.scan(
        lambda c, s: (0.5 * c + jnp.sin(s) * 1.0, c[0] * s + jnp.sin(s)), a, b
    )[1],
    "while": lambda a, b: lax.fori_loop(0, 3, lambda i, c: 0.9 * c + jnp.sin(c) * 1.0, a),
    "remat": lambda a, b: jax.checkpoint(lambda u: jnp.sin(u) * 1.0 + jnp.sin(u))(a),
    "custom_jvp": lambda a, b: _soft(a) + _soft(a),
    "random": lambda a, b: a + jax.random.normal(jax.random.PRNGKey(0), (N,)),
    "barrier": lambda a, b: lax.optimization_barrier(a * 1.0) + lax.optimization_barrier(a),
    "callback": lambda a, b: jax.debug.callback(_noop_callback, a) or a * b,
    "dead": lambda a, b: (jnp.cos(a) * b, a)[1],
}

PASSES = {
    "optimize": _passes.optimize,
    "optimize_unsafe": lambda c: _passes.optimize(c, unsafe_math=True),
    "dce": _passes.dce,
    "cse": _passes.cse,
    "simplify": _passes.simplify,
    "simplify_unsafe": lambda c: _passes.simplify(c, unsafe_math=True),
    "fold": _passes.fold,
}


@st.composite
def programs(draw):
    """A list of (op, i, j) steps: value k+2 = OPS[op](values[i], values[j])."""
    steps = []
    for k in range(draw(st.integers(2, 7))):
        op = draw(st.sampled_from(sorted(OPS)))
        i, j = draw(st.integers(0, k + 1)), draw(st.integers(0, k + 1))
        steps.append((op, i, j))
    outputs = draw(st.lists(st.integers(0, len(steps) + 1), min_size=1, max_size=3))
    return steps, outputs


def build(program):
    steps, outputs = program

    def f(x, y):
        values = [x, y]
        for op, i, j in steps:
            values.append(OPS[op](values[i], values[j]))
        return [values[k] for k in outputs]

    return f


def _walk(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jex.jaxprs_in_params(eqn.params):
            yield from _walk(sub)


def protected(closed) -> collections.Counter:
    """The equations that must survive: effects, random and barriers.

    (A dead ``remat`` with ``prevent_cse`` may go; that it never merges is tested in
    test_optimize_cse.py.)
    """
    counts: collections.Counter = collections.Counter()
    for eqn in _walk(closed.jaxpr):
        name = eqn.primitive.name
        if (
            eqn.effects
            or name.startswith(("random_", "rng_"))
            or name in ("optimization_barrier", "threefry2x32")
        ):
            counts[name] += 1
    return counts


def check_passes(closed, args) -> None:
    """The checks that every pass must pass on every program.

    All distinct outputs are evaluated, with the original, in ONE compiled function:
    compiling dominates the cost of these tests.
    """
    programs = {}
    for name, optimize in PASSES.items():
        out = optimize(closed)
        jex.check_jaxpr(out.jaxpr)
        assert [v.aval for v in out.jaxpr.invars] == [v.aval for v in closed.jaxpr.invars]
        assert out.out_avals == closed.out_avals
        again = optimize(out)
        assert str(again) == str(out), f"{name}: optimizing twice changed the program"
        assert protected(out) == protected(closed), name
        programs.setdefault(str(out), (name, out))
    names = [name for name, _ in programs.values()]
    funs = [jex.jaxpr_as_fun(closed)] + [jex.jaxpr_as_fun(out) for _, out in programs.values()]
    expected, *results = jax.jit(lambda *a: [fn(*a) for fn in funs])(*args)
    for name, actual in zip(names, results):
        for a, e in zip(actual, expected):
            if "unsafe" in name:  # reassociation may change the last bits
                np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-14, err_msg=name)
            else:
                np.testing.assert_array_equal(a, e, err_msg=name)


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2.0, 2.0, N), rng.uniform(-2.0, 2.0, N)]


def test_every_operation_returns_shape_n():
    # The generator's contract: any step may feed any other, so every result has shape (N,).
    x = jax.ShapeDtypeStruct((N,), np.float64)
    shapes = {name: jax.eval_shape(op, x, x).shape for name, op in OPS.items()}
    assert shapes == dict.fromkeys(OPS, (N,))


@settings(max_examples=8)
@given(program=programs(), seed=st.integers(0, 2**31 - 1))
def test_every_pass_on_random_programs(program, seed):
    args = _inputs(seed)
    check_passes(jax.make_jaxpr(build(program))(*args), args)


def test_every_operation_through_every_pass():
    """Every operation, twice on the same operands, in one program (all covered every run)."""
    ops = sorted(OPS)
    steps = [(op, k, k + 1) for k, op in enumerate(ops)] + [(op, 0, 1) for op in ops] * 2
    args = _inputs(0)
    closed = jax.make_jaxpr(build((steps, list(range(2, len(steps) + 2)))))(*args)
    check_passes(closed, args)
