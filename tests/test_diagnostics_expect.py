"""taylax.expect_compiles and the pytest fixture/marker built on it."""

import jax
import jax.numpy as jnp
import pytest

import taylax

pytest_plugins = ["pytester"]


def test_passes_within_budget_and_returns_the_log():
    f = jax.jit(lambda x: x + 2)
    with taylax.expect_compiles(max=1) as log:
        f(jnp.ones(3))
        f(jnp.zeros(3))  # same shape and dtype: served from the cache
    assert [e.cause for e in log.compiles()] == ["first_call"]


def test_raises_with_every_cause_when_exceeded():
    f = jax.jit(lambda x, n: x * n, static_argnums=1)
    f(jnp.ones(2), 1)  # warm up outside the check
    with pytest.raises(taylax.CompileBudgetExceeded) as info:
        with taylax.expect_compiles(max=0):
            f(jnp.ones(2), 2)
            f(jnp.ones(3), 2)
    message = str(info.value)
    assert message.startswith("Expected at most 0 compile(s), but 2 happened:")
    assert "static_argument: static argument `n` changed: 1 -> 2" in message
    assert "shape: argument `x`: shape (2,) -> (3,)" in message
    assert isinstance(info.value, AssertionError)


@jax.jit
def _double(x):
    return x * 2


def test_counts_only_the_given_function():
    f = jax.jit(lambda x: x * 7)
    with taylax.expect_compiles(max=1, function=f):
        f(jnp.ones(2))
        _double(jnp.ones(2))
        _double(jnp.ones(3))
    with pytest.raises(taylax.CompileBudgetExceeded, match="of '_double'"):
        with taylax.expect_compiles(max=0, function="_double"):
            f(jnp.ones(4))  # not counted
            _double(jnp.ones(4))


def test_a_body_error_is_not_masked():
    with pytest.raises(KeyError):
        with taylax.expect_compiles(max=0):
            jax.jit(lambda x: x)(jnp.ones(2))
            raise KeyError("from the body")


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"max=\.\.\.\) must be a non-negative int, got -1"):
        taylax.expect_compiles(max=-1)
    with pytest.raises(TypeError, match="function= must be None, a function name"):
        taylax.expect_compiles(max=1, function=3)


_PLUGIN_TESTS = """
import jax, jax.numpy as jnp, pytest

f = jax.jit(lambda x: x * 2)

def test_fixture_passes(expect_compiles):
    f(jnp.ones(2))
    with expect_compiles(max=0):
        f(jnp.zeros(2))

def test_fixture_fails(expect_compiles):
    with expect_compiles(max=0):
        f(jnp.ones(5))

@pytest.mark.expect_compiles(max=1)
def test_marker_passes():
    f(jnp.ones(6))

@pytest.mark.expect_compiles(max=0)
def test_marker_fails():
    f(jnp.ones(7))
"""


def test_pytest_fixture_and_marker(pytester, monkeypatch):
    # Load the plugin explicitly, whether or not the package's entry point is installed.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_inner=_PLUGIN_TESTS)
    result = pytester.runpytest("-p", "taylax._diagnostics._pytest_plugin", "-q")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*CompileBudgetExceeded: Expected at most 0 compile(s)*"])
    result.stdout.fnmatch_lines(
        ["FAILED test_inner.py::test_fixture_fails*", "FAILED test_inner.py::test_marker_fails*"]
    )


def _cubic(x):
    return jnp.sin(x) * x**3


def test_eager_taylax_calls_are_blamed_on_the_users_function():
    # taylax's own jitted programs compile for the user's function: name that function.
    with pytest.raises(taylax.CompileBudgetExceeded) as info:
        with taylax.expect_compiles(max=0):
            taylax.derivatives(_cubic, 3)(0.3)
            taylax.derivative(_cubic, 2)(0.4)
    message = str(info.value)
    assert "`_cubic` (tests/test_diagnostics_expect.py:" in message
    assert "_api.py" not in message and "_derivative.py" not in message
    assert "_derivatives_impl" not in message and "_evaluate" not in message
    with taylax.expect_compiles(max=1, function=_cubic) as log:
        taylax.derivatives(_cubic, 3)(jnp.ones(2), jnp.ones(2))
    assert {e.function for e in log.events} == {"_cubic"}


def test_a_function_name_never_seen_is_a_clear_error():
    _double(jnp.ones(9))  # compiled before: known to JAX's cache, served by C++ below
    with taylax.expect_compiles(max=0, function="_double"):
        _double(jnp.ones(9))
    with pytest.raises(ValueError, match=r"function='_dubble'\): no jitted function named"):
        with taylax.expect_compiles(max=0, function="_dubble"):
            _double(jnp.ones(9))
