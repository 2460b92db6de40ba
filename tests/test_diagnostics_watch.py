"""The compile log of taylax.watch(): events, summary, report, JSON, budget warnings, and
that watching is invisible: same results, no JAX-internal noise, no hooks left behind."""

import json
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax import _compat
from taylax._diagnostics import CAUSES, _hooks


def _recompiling_log():
    """A log with one function compiled for two shapes, and a cache hit in between."""
    f = jax.jit(lambda x: x * 2)
    with taylax.watch() as log:
        f(jnp.ones(3))
        f(np.ones(3))  # a NumPy array: misses the C++ cache, reuses trace and executable
        f(jnp.ones(4))
    return log


@pytest.fixture(scope="module")
def log():
    return _recompiling_log()


def test_events_have_phases_causes_and_seconds(log):
    assert [(e.phase, e.cause) for e in log.events] == [
        ("trace", "first_call"),
        ("lower", "first_call"),
        ("compile", "first_call"),
        ("trace", "shape"),
        ("lower", "shape"),
        ("compile", "shape"),
    ]
    assert [e.index for e in log.events] == list(range(6))
    assert all(e.seconds > 0 and e.cause in CAUSES for e in log.events)
    (location,) = {e.location for e in log.events}
    assert location.startswith("tests/test_diagnostics_watch.py:")


def test_summary_counts_calls_hits_and_time(log):
    (s,) = log.summary()
    assert s.function.endswith("<lambda>")
    assert (s.calls_seen, s.traces, s.lowerings, s.compiles, s.cache_hits) == (3, 2, 2, 2, 1)
    assert s.causes == {"first_call": 1, "shape": 1}
    assert s.seconds == pytest.approx(sum(e.seconds for e in log.events))
    assert log.seconds == pytest.approx(s.seconds)


def test_to_json_round_trips(log, tmp_path):
    path = tmp_path / "log.json"
    data = json.loads(log.to_json(str(path)))
    assert json.loads(path.read_text()) == data
    assert [e["cause"] for e in data["events"]] == [e.cause for e in log.events]
    assert data["summary"][0]["compiles"] == 2
    assert set(data["causes"]) == set(CAUSES)


def test_report_names_function_cause_and_time(log):
    pytest.importorskip("rich")
    text = log.report()
    assert "<lambda>" in text and "shape" in text and "time lost" in text
    assert "(3,) -> (4,)" in text


def test_report_without_rich_is_plain_text(log, monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    text = log.report(width=200)
    assert "time lost" in text and "shape ×1" in text and "┃" not in text


def test_results_are_unchanged_and_hooks_removed_after_exit():
    originals = {
        name: _compat.jit_dispatch_function(name) for name in _compat.JIT_DISPATCH_FUNCTIONS
    }
    f = jax.jit(lambda x: jnp.sin(x) * 3)
    x = jnp.linspace(0.0, 1.0, 5)
    with taylax.watch():
        assert _hooks.installed()
        inside = f(x)
    assert not _hooks.installed()
    assert {n: _compat.jit_dispatch_function(n) for n in originals} == originals
    np.testing.assert_array_equal(inside, f(x))
    np.testing.assert_array_equal(inside, jnp.sin(x) * 3)


def test_hooks_removed_when_the_body_raises():
    with pytest.raises(ZeroDivisionError):
        with taylax.watch():
            raise ZeroDivisionError("inside the watch")
    assert not _hooks.installed()


def test_jax_internal_eager_operations_are_not_recorded():
    with taylax.watch() as log:
        y = jnp.arange(11.0) * 2.5 + 1  # eager ops compile JAX's own kernels
        jnp.sum(jnp.cumsum(y)).block_until_ready()
    assert log.events == [] and log.summary() == []


def test_decorator_records_into_one_log():
    f = jax.jit(lambda x: x + 3)
    watcher = taylax.watch()

    @watcher
    def run(n):
        return f(jnp.ones(n))

    run(2)
    run(5)
    assert run.compile_log is watcher
    assert [e.cause for e in watcher.compiles()] == ["first_call", "shape"]
    assert not _hooks.installed()


def test_recompile_budget_warns_once_with_causes():
    f = jax.jit(lambda x: x - 1)
    with pytest.warns(taylax.RecompileWarning, match=r"compiled 2 times.*shape x1"):
        with taylax.watch(recompile_budget=1):
            for n in (1, 2, 3):
                f(jnp.ones(n))


def test_other_threads_are_recorded_only_with_all_threads():
    def compile_in_thread(n):
        thread = threading.Thread(target=lambda: jax.jit(lambda x: x * 5)(jnp.ones(n)))
        thread.start()
        thread.join()

    with taylax.watch() as mine:
        compile_in_thread(6)
    with taylax.watch(all_threads=True) as everyone:
        compile_in_thread(7)
    assert mine.events == []
    assert [e.cause for e in everyone.compiles()] == ["first_call"]


def test_concurrent_watches_see_only_their_own_thread():
    functions = {
        10: jax.jit(lambda x: x**2),
        20: jax.jit(lambda x: x**3),
    }
    logs, errors = {}, []

    def work(n):
        try:
            with taylax.watch() as log:
                functions[n](jnp.ones(n))
                functions[n](jnp.ones(n + 1))
            logs[n] = log
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in functions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n, log in logs.items():
        assert [e.cause for e in log.compiles()] == ["first_call", "shape"]
        assert f"({n},) -> ({n + 1},)" in log.compiles()[1].detail
    assert not _hooks.installed()


def test_bad_budget_is_a_clear_error():
    with pytest.raises(ValueError, match=r"recompile_budget=\.\.\.\) must be a non-negative"):
        taylax.watch(recompile_budget=-1)
    with pytest.raises(TypeError, match="watch\\(\\) decorates a function"):
        taylax.watch()(3)


def test_taylax_internal_helpers_inside_a_users_function_are_not_reported():
    # taylax.jacfwd in a jitted recursion jits one Taylor pass per (sub-program, order)
    # while the user's function is lowered; those are part of its cost, and reporting them
    # as re-created functions would send the user looking for a loop that is not there.
    @jax.jit
    def level2(t):
        def level1(s):
            return jnp.sin(s) * taylax.jacfwd(jnp.cos)(s)

        return level1(t) + taylax.jacfwd(level1)(t)

    with taylax.watch() as log:
        level2(0.3)
    names = {e.function for e in log.events}
    assert any("level2" in name for name in names), names
    assert not any("taylor" in name or "flat" in name or "_evaluate" in name for name in names), (
        names
    )
    assert "new_function" not in {e.cause for e in log.events}
