"""Scenario tests for taylax.watch(): each change gives one exact cause code, and the
detail names the argument (or config, or function object) with its old and new value."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import taylax


def _compiles(log):
    return [e for e in log.events if e.phase == "compile"]


def _only_recompile(log):
    """The single compile after the first one, with its trace (if any) agreeing."""
    compiles = _compiles(log)
    assert len(compiles) == 2, [(e.cause, e.detail) for e in log.events]
    assert compiles[0].cause == "first_call"
    second = compiles[1]
    traces = [e for e in log.events if e.phase == "trace"][1:]
    assert all(t.cause == second.cause for t in traces)
    return second


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Scaled:
    """A pytree whose `mode` is aux data (a static field), as in equinox/flax modules."""

    w: jax.Array
    mode: str = dataclasses.field(metadata=dict(static=True))


def test_pytree_aux_data_values_reuse_cache_but_aux_change_recompiles():
    @jax.jit
    def apply(p, x):
        return p.w * x if p.mode == "mul" else p.w + x

    x = jnp.ones(3)
    with taylax.watch() as log:
        apply(Scaled(jnp.ones(3), "mul"), x)
        apply(Scaled(2 * jnp.ones(3), "mul"), x)  # new values, same type: no compile
        assert len(_compiles(log)) == 1
        apply(Scaled(jnp.ones(3), "add"), x)
    event = _only_recompile(log)
    assert event.cause == "pytree_aux_data"
    assert "`p`" in event.detail and "'mul'" in event.detail and "'add'" in event.detail
    # The second call was served by JAX's C++ cache: it never reached Python.
    (summary,) = log.summary()
    assert (summary.calls_seen, summary.compiles, summary.cache_hits) == (2, 2, 0)


def test_pytree_structure_names_the_changed_key():
    f = jax.jit(lambda params: params["w"] * 2)
    with taylax.watch() as log:
        f({"w": jnp.ones(2)})
        f({"w": jnp.ones(2), "b": jnp.ones(2)})
    event = _only_recompile(log)
    assert event.cause == "pytree_structure"
    assert "`params`" in event.detail and "'b'" in event.detail


def test_lambda_recreated_in_a_loop_is_new_function():
    x = jnp.ones(2)
    with taylax.watch() as log:
        for _ in range(3):
            jax.jit(lambda v: v + 1)(x)
    causes = [e.cause for e in _compiles(log)]
    assert causes == ["first_call", "new_function", "new_function"]
    assert "lambda" in _compiles(log)[1].detail
    (summary,) = log.summary()
    assert summary.function.endswith("<lambda>")
    assert (summary.calls_seen, summary.traces, summary.compiles) == (3, 3, 3)


def _scale(x, factor):
    return x * factor


def test_partial_recreated_in_a_loop_is_new_function():
    x = jnp.ones(2)
    with taylax.watch() as log:
        for _ in range(2):
            jax.jit(functools.partial(_scale, factor=2.0))(x)
    event = _only_recompile(log)
    assert event.cause == "new_function"
    assert "functools.partial" in event.detail and "`_scale`" in event.detail
    assert "same arguments" in event.detail


def test_closure_recreated_names_the_captured_variable():
    def make(scale):
        def f(x):
            return x * scale

        return f

    with taylax.watch() as log:
        jax.jit(make(2.0))(jnp.ones(2))
        jax.jit(make(3.0))(jnp.ones(2))
    event = _only_recompile(log)
    assert event.cause == "new_function"
    assert "captured `scale` changed: 2.0 -> 3.0" in event.detail


def test_static_argument_value_change():
    f = jax.jit(lambda x, n: x * n, static_argnums=1)
    with taylax.watch() as log:
        f(jnp.ones(2), 2)
        f(jnp.ones(2), 3)
    event = _only_recompile(log)
    assert event.cause == "static_argument"
    assert event.detail == "static argument `n` changed: 2 -> 3"


@pytest.mark.parametrize(
    "first, second, cause, words",
    [
        (jnp.ones(3), jnp.ones(4), "shape", ["`x`", "(3,) -> (4,)"]),
        (jnp.ones(3), jnp.ones(3, jnp.float32), "dtype", ["`x`", "float64 -> float32"]),
        (1.0, jnp.asarray(np.float64(1.0)), "weak_type", ["`x`", "Python scalar", "jax.Array"]),
    ],
    ids=["shape", "dtype", "weak_type"],
)
def test_shape_dtype_weak_type(first, second, cause, words):
    f = jax.jit(lambda x: x * 2)
    with taylax.watch() as log:
        f(first)
        f(second)
    event = _only_recompile(log)
    assert event.cause == cause
    assert all(w in event.detail for w in words), event.detail


@pytest.fixture
def x64_disabled():
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


def test_python_float_vs_float32_array_is_weak_type(x64_disabled):
    f = jax.jit(lambda x: x + 1)
    with taylax.watch() as log:
        f(1.0)  # weak float32 without x64
        f(np.float32(1.0))
    event = _only_recompile(log)
    assert event.cause == "weak_type"
    assert "`x`" in event.detail
    assert "weak float32[], a Python scalar -> float32[], a NumPy array" in event.detail


def test_toggling_x64_is_config():
    f = jax.jit(lambda x: x * 2)
    x = np.ones(2, np.float32)
    try:
        with taylax.watch() as log:
            f(x)
            jax.config.update("jax_enable_x64", False)
            f(x)
    finally:
        jax.config.update("jax_enable_x64", True)
    assert jax.config.jax_enable_x64
    event = _only_recompile(log)
    assert event.cause == "config"
    assert event.detail == "config `jax_enable_x64` changed: True -> False"


def test_numpy_array_vs_committed_array_compiles_without_retrace():
    f = jax.jit(lambda x: x - 1)
    with taylax.watch() as log:
        f(np.ones(4))
        f(jax.device_put(np.ones(4), jax.devices()[0]))
    event = _only_recompile(log)
    assert event.cause == "committed"
    assert [e.phase for e in log.events].count("trace") == 1
    assert "`x`" in event.detail and "NumPy array" in event.detail
    assert "committed to" in event.detail


def test_two_named_shardings_on_8_devices():
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (tests/conftest.py sets 8 virtual CPU devices)")
    mesh = jax.make_mesh((8,), ("i",))
    f = jax.jit(lambda x: x * 3)
    split = jax.device_put(jnp.ones(8), NamedSharding(mesh, PartitionSpec("i")))
    replicated = jax.device_put(jnp.ones(8), NamedSharding(mesh, PartitionSpec()))
    with taylax.watch() as log:
        f(split)
        f(replicated)
    event = _only_recompile(log)
    assert event.cause == "sharding"
    assert "`x`" in event.detail and "'i'" in event.detail and "P()" in event.detail


def test_warmed_up_before_watching_compares_with_jax_cache():
    f = jax.jit(lambda x: x / 2)
    f(jnp.ones(3))
    with taylax.watch() as log:
        f(jnp.ones(5))
    (event,) = _compiles(log)
    assert event.cause == "shape" and "(3,) -> (5,)" in event.detail


def test_nested_jit_traces_are_marked_nested_and_never_compiled_alone():
    inner = jax.jit(lambda x: jnp.sin(x))

    @jax.jit
    def outer(x):
        return inner(x) * 2

    with taylax.watch() as log:
        outer(jnp.ones(2))
        outer(jnp.ones(3))
    by_function = {s.function.rsplit(".", 1)[-1]: s for s in log.summary()}
    assert by_function["outer"].compiles == 2
    assert by_function["<lambda>"].compiles == 0 and by_function["<lambda>"].traces == 2
    nested = [e for e in log.events if e.nested]
    assert [e.cause for e in nested] == ["first_call", "shape"]
    assert log.seconds == pytest.approx(sum(e.seconds for e in log.events if not e.nested))


def test_first_top_level_compile_after_nested_traces_is_first_call():
    inner = jax.jit(lambda x: x + 4)
    outer = jax.jit(lambda x: inner(x) * 2)
    with taylax.watch() as log:
        outer(jnp.ones(2))
        inner(jnp.ones(2))  # trace reused; compiled on its own for the first time
    (event,) = [e for e in log.compiles(inner)]
    assert event.cause == "first_call" and "first compile of" in event.detail


def _needs_devices(n):
    if len(jax.devices()) < n:
        pytest.skip(f"needs {n} devices (tests/conftest.py sets 8 virtual CPU devices)")


def test_placement_change_after_a_call_before_watching_is_committed():
    # The first call came before watch(): JAX's lowering cache still holds its placement.
    _needs_devices(2)
    f = jax.jit(lambda x: x * 5)
    f(jnp.ones(4))  # uncommitted, before recording
    with taylax.watch() as log:
        f(jax.device_put(jnp.ones(4), jax.devices()[1]))
    assert [e.phase for e in log.events] == ["lower", "compile"]
    (event,) = _compiles(log)
    assert event.cause == "committed", event.detail
    assert "`x`" in event.detail and "uncommitted" in event.detail
    assert "committed to device" in event.detail


def test_sharding_change_after_a_call_before_watching_names_both_specs():
    _needs_devices(8)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("d",))  # Auto axes: same trace
    f = jax.jit(lambda x: x + 5)
    f(jax.device_put(jnp.ones(8), NamedSharding(mesh, PartitionSpec())))
    with taylax.watch() as log:
        f(jax.device_put(jnp.ones(8), NamedSharding(mesh, PartitionSpec("d"))))
    (event,) = _compiles(log)
    assert event.cause == "sharding", event.detail
    assert "spec P()) -> " in event.detail and "spec P('d',)" in event.detail


def test_sharding_in_the_type_names_the_new_spec_compactly():
    _needs_devices(8)
    mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
    f = jax.jit(lambda x: x - 5)
    f(jax.device_put(jnp.ones((8, 2)), NamedSharding(mesh, PartitionSpec(None))))
    with taylax.watch() as log:
        f(jax.device_put(jnp.ones((8, 2)), NamedSharding(mesh, PartitionSpec("d"))))
    (event,) = _compiles(log)
    assert event.cause == "sharding", event.detail
    old, new = event.detail.split(" -> ", 1)
    assert "P('d'" in new and "P('d'" not in old
    assert "AbstractMesh(" not in event.detail  # the mesh as its shape, not its repr


class _Module:
    """Like an equinox Module: static fields in the aux data, as (names, values) tuples."""

    def __init__(self, w, activation):
        self.w, self.activation = w, activation


jax.tree_util.register_pytree_node(
    _Module,
    lambda m: ((m.w,), (("w",), ("activation",), (m.activation,))),
    lambda aux, children: _Module(children[0], aux[2][0]),
)


def test_static_field_change_in_aux_data_tuples_names_the_field():
    f = jax.jit(lambda m, x: m.activation(m.w * x))
    with taylax.watch() as log:
        f(_Module(jnp.ones(2), jnp.tanh), 1.0)
        f(_Module(jnp.ones(2), jnp.sin), 1.0)
    event = _only_recompile(log)
    assert event.cause == "pytree_aux_data"
    assert "changed at `.activation`: function `tanh`" in event.detail
    assert "-> function `sin`" in event.detail
    assert "a `tuple` object" not in event.detail


@dataclasses.dataclass(frozen=True)
class _StaticPart:
    """What equinox's filter_jit passes as one static argument: the non-array leaves."""

    w: object
    activation: object


def test_filter_jit_style_static_argument_change_names_the_field():
    f = jax.jit(lambda x, static: static[0].activation(x), static_argnums=1)
    with taylax.watch() as log:
        f(1.0, (_StaticPart(None, jnp.tanh), None))
        f(1.0, (_StaticPart(None, jnp.cos), None))
    event = _only_recompile(log)
    assert event.cause == "static_argument"
    assert "static argument `static` changed at `[0].activation`: function `tanh`" in (event.detail)
    assert "a `tuple` object" not in event.detail


# --------------------------------------------------------------------------------------
# Function objects that live side by side, and eager taylax calls
# --------------------------------------------------------------------------------------


def test_two_live_closures_from_one_line_are_separate_functions():
    # Two models made by one comprehension: each needs its own compile, and "create it
    # once" would be wrong advice; a re-created (dead) one is still `new_function`.
    fs = [jax.jit(lambda x, a=a: x * a) for a in (1.0, 2.0)]
    with taylax.watch() as log:
        for _ in range(2):
            for f in fs:
                f(jnp.ones(2))
    compiles = _compiles(log)
    assert [e.cause for e in compiles] == ["first_call", "first_call"]
    assert "1 other object(s) made by the same code are alive" in compiles[1].detail
    assert "create it once" not in compiles[1].detail


def test_function_objects_in_two_threads_are_not_re_created_functions():
    import threading

    def make():
        return jax.jit(lambda x: jnp.sin(x) * 2)

    fs = [make(), make()]
    barrier = threading.Barrier(2)

    def run(f):
        barrier.wait()
        for _ in range(3):
            f(jnp.ones(3))

    with taylax.watch(all_threads=True) as log:
        threads = [threading.Thread(target=run, args=(f,)) for f in fs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [e.cause for e in _compiles(log)] == ["first_call", "first_call"]
    assert "new_function" not in {e.cause for e in log.events}


def test_eager_taylax_calls_are_named_eager_traces():
    # Every eager call traces the user's function to find its program; the program is
    # compiled once. Neither `unknown` nor "create it once" describes that.
    f = lambda s: jnp.sin(s) * jnp.exp(s)  # noqa: E731
    with taylax.watch() as log:
        for i in range(3):
            taylax.derivatives(f, 3)(0.3 + i)
        for i in range(2):  # a new lambda each call: the same program still serves it
            taylax.derivatives(lambda s: jnp.sin(s) * jnp.exp(s), 3)(0.3 + i)
    traces = [e for e in log.events if e.phase == "trace"]
    causes = [e.cause for e in traces]
    assert causes.count("eager_trace") == 3, causes
    assert set(causes) == {"first_call", "eager_trace"}, causes
    assert len(_compiles(log)) == 1
    eager = next(e for e in traces if e.cause == "eager_trace")
    assert "`taylax.derivatives`" in eager.detail and "jax.jit" in eager.detail
    assert all("create it once" not in e.detail for e in log.events)


def test_a_new_taylax_program_names_the_changed_order():
    f = lambda s: jnp.sin(s) * jnp.exp(s) + 0.8125  # noqa: E731 (no other test's program)
    with taylax.watch() as log:
        taylax.derivatives(f, 2)(0.3)
        taylax.derivatives(f, 3)(0.3)
    event = _compiles(log)[1]
    assert event.cause == "static_argument", event.detail
    assert "`taylax.derivatives`" in event.detail and "(2, True) -> (3, True)" in event.detail


def test_a_changed_python_number_in_the_function_is_a_new_program_structure():
    # A captured Python float is a literal of the traced jaxpr: a new value is a new
    # program (unlike a captured array, which is an argument of the same program).
    def make(a):
        return lambda x: jnp.sum(jnp.sin(a * x) ** 2) + 0.8125  # no other test's program

    with taylax.watch() as log:
        taylax.laplacian(make(2.0))(jnp.ones(3))
        taylax.laplacian(make(3.0))(jnp.ones(3))
        taylax.laplacian(make(jnp.asarray(4.0)))(jnp.ones(3))
        taylax.laplacian(make(jnp.asarray(5.0)))(jnp.ones(3))
    compiles = _compiles(log)
    assert [e.cause for e in compiles[:2]] == ["first_call", "program_structure"], [
        (e.cause, e.detail) for e in compiles
    ]
    assert "another structure" in compiles[1].detail
    assert len(compiles) == 3  # the array-valued `a` compiles once, then reuses it
