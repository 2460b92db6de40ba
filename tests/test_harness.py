"""The benchmark suite's fresh-process harness (`benchmarks/harness.py`): runs, reports,
and the command line of `benchmarks/bench_taylor.py`."""

import doctest
import importlib.util
import json
import sys
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[1]
# The benchmark scripts import their shared modules by plain name, as `python
# benchmarks/bench_x.py` puts benchmarks/ on sys.path.
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402


def test_bench_rejects_unknown_contender(capsys):
    with pytest.raises(SystemExit) as exit_info:
        harness.main(["--contenders", "taylax,finite_differences"])
    assert exit_info.value.code == 2
    assert "Unknown contender(s) finite_differences" in capsys.readouterr().err


def test_bench_end_to_end_writes_markdown_and_json(tmp_path, monkeypatch):
    # From another directory: the workers load the harness by its path.
    monkeypatch.chdir(tmp_path)
    status = harness.main(
        [
            "--scalar-orders",
            "3",
            "--mlp-orders",
            "",
            "--min-time",
            "0.01",
            "--out-dir",
            str(tmp_path),
        ]
    )
    assert status == 0
    payload = json.loads((tmp_path / "taylor.json").read_text())
    results = {r["contender"]: r for r in payload["results"]}
    assert set(results) == {"taylax", "jet", "nested_jvp"}
    for result in results.values():
        assert result["status"] == "ok", result
        assert result["equations"] > 0
        assert result["first_call_s"] > 0 and result["steady_s"] > 0
        # d^3/dt^3 of 0.3*sin(t)*t**10 at 1.1: every contender computes the same number.
        assert result["value"] == pytest.approx(results["nested_jvp"]["value"], rel=1e-10)
    markdown = (tmp_path / "taylor.md").read_text()
    assert "| order | taylax | jet | nested_jvp | taylax/jet | taylax/nested_jvp |" in markdown


def test_timeout_is_reported_not_raised():
    result = harness.run_one(
        "scalar", "jet", 40, timeout_s=0.5, steady=False, count_on_timeout=False
    )
    assert result["status"] == "timeout"
    assert result["reason"] == "exceeded the time limit of 0.5 s"
    assert result["first_call_s"] is None


def test_nested_jvp_is_skipped_above_its_max_order():
    config = harness.BenchConfig(
        scalar_orders=(12,), mlp_orders=(), contenders=("nested_jvp",), nested_jvp_max_order=10
    )
    (result,) = harness.run_suite(config)
    assert result["status"] == "skipped"
    assert result["reason"].startswith("too slow")


def test_run_one_rejects_bad_arguments():
    with pytest.raises(ValueError, match="Unknown benchmark case 'vector'"):
        harness.run_one("vector", "jet", 2)
    with pytest.raises(ValueError, match="order must be an integer >= 1"):
        harness.run_one("scalar", "jet", 0)


def _result(contender, order, status="ok", **fields):
    base = harness.skipped("scalar", contender, order, "test")
    return {**base, "status": status, "reason": None, **fields}


def test_markdown_report_ratios_and_statuses():
    results = [
        _result("taylax", 10, equations=100, first_call_s=0.5, steady_s=1e-5, value=2.0),
        _result("jet", 10, equations=1000, first_call_s=2.0, steady_s=2e-5, value=2.0),
        _result("nested_jvp", 10, equations=100_000, first_call_s=50.0, steady_s=1e-4, value=2.0),
        _result("taylax", 100, equations=120, first_call_s=1.0, steady_s=1e-4, value=3.0),
        _result("jet", 100, status="timeout", equations=113_819),
        harness.skipped("scalar", "nested_jvp", 100, "too slow"),
    ]
    markdown = harness.markdown_report(results, {"jax": "0.10.2"})
    assert "- jax: 0.10.2" in markdown
    assert "| 10 | 100 | 1,000 | 100,000 | 0.1× | 0.001× |" in markdown
    assert "| 10 | 500 ms | 2 s | 50 s | 0.25× | 0.01× |" in markdown
    assert "| 100 | 120 | 113,819 (timeout) | skipped | 0.00105× | — |" in markdown
    assert "| 100 | 1 s | timeout | skipped | — | — |" in markdown
    assert "| 10 | 2 | 2 | 2 | 0.0e+00 |" in markdown
    assert "timeout" in markdown


def test_bench_script_is_importable():
    spec = importlib.util.spec_from_file_location(
        "bench_taylor", ROOT / "benchmarks" / "bench_taylor.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.main)
    assert module.RESULTS_DIR == ROOT / "benchmarks" / "results"


def test_docstring_examples():
    failures, _ = doctest.testmod(harness, verbose=False)
    assert failures == 0


def _sibling_imports(path: Path) -> list[tuple[str, str]]:
    """`(module, name)` for every `from <benchmark script> import <name>` in `path`, at any
    depth (some scripts import a sibling inside a function)."""
    import ast

    siblings = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    pairs = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in siblings:
            pairs += [(node.module, alias.name) for alias in node.names]
    return pairs


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")), ids=str
)
def test_benchmark_scripts_import_and_find_their_siblings_names(script):
    # `make bench` is not part of CI: a script whose sibling lost a name (gpu_check's
    # `steady_ms`, once) failed only when someone ran it.
    # Scripts set JAX's configuration when imported (bench_float32 turns x64 off): it is
    # restored, or the tests that run after this one in the same worker would see it.
    path = ROOT / "benchmarks" / script
    x64 = jax.config.jax_enable_x64
    try:
        module = importlib.import_module(path.stem)
        assert module.__doc__, f"{script} has no docstring saying what it measures"
        for sibling, name in _sibling_imports(path):
            assert hasattr(importlib.import_module(sibling), name), (
                f"{script} imports `{name}` from {sibling}.py, which does not define it."
            )
    finally:
        jax.config.update("jax_enable_x64", x64)


def test_unrolled_bench_skips_a_contender_predicted_past_its_limit():
    # jet's `vmap` at K = 2 grew 6x from 10 to 20 RK4 steps (0.55 to 3.5 ms); its first
    # call at 40 ran for over an hour. Predicted at its last growth, 40 steps is 23 ms.
    import bench_unrolled

    assert bench_unrolled.predicted_ms([(10, 0.55), (20, 3.5)], 40) > bench_unrolled.SKIP_MS
    assert bench_unrolled.predicted_ms([(10, 0.55), (20, 0.7)], 40) < 1.0
    assert bench_unrolled.predicted_ms([(5, 0.1)], 10) is None
    # Steps that do not double: the growth scales with the factor of steps.
    assert abs(bench_unrolled.predicted_ms([(10, 1.0), (20, 4.0)], 30) - 4.0 * 1.5**2) < 1e-12
    # jet's cells alone: 3.5x over a doubling stops it, whatever the extrapolation says.
    assert (
        bench_unrolled.growth_per_doubling([(10, 0.26), (20, 0.92)])
        > bench_unrolled.JET_GROWTH_SKIP
    )
    assert abs(bench_unrolled.growth_per_doubling([(5, 1.0), (20, 4.0)]) - 2.0) < 1e-12
    assert bench_unrolled.growth_per_doubling([(5, 1.0)]) == 1.0
    # Slow at K = 4 over 10 steps: not run at K = 8 over 5 (as much work), nor over 20.
    assert bench_unrolled.dominated([(4, 10)], 8, 5)
    assert bench_unrolled.dominated([(4, 10)], 4, 20)
    assert not bench_unrolled.dominated([(4, 10)], 8, 4)
    assert not bench_unrolled.dominated([(4, 10)], 2, 40)
