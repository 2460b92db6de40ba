"""Tests for the `taylax` command line and the benchmark harness behind `taylax bench`."""

import doctest
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from taylax import _benchmark, cli

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "bench" in out


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 2


def test_version(capsys):
    import taylax

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"taylax {taylax.__version__}"


def test_version_is_pyprojects():
    """`__version__` is read from the installed metadata, so it is the one pyproject.toml
    declares (a mismatch means an install older than this checkout's pyproject.toml)."""
    import re

    import taylax

    declared = re.search(
        r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE
    )
    assert taylax.__version__ == declared.group(1)


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--timeout", "-1"),
        ("--timeout", "0"),
        ("--timeout", "nan"),
        ("--jet-budget", "-5"),
        ("--nested-max-order", "-1"),
        ("--points", "0"),
        ("--repeats", "0"),
        ("--recursion-ks", "0,1"),
    ],
)
def test_demo_rejects_bad_numbers_naming_the_flag(capsys, flag, value):
    # Parse only: were a value accepted, the test must not run the demo.
    with pytest.raises(SystemExit) as exit_info:
        cli._build_parser().parse_args(["demo", flag, value])
    assert exit_info.value.code == 2
    assert f"argument {flag}:" in capsys.readouterr().err


def test_demo_quick_and_full_are_exclusive(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--quick", "--full"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_default_demo_is_small_and_full_keeps_the_sweeps():
    # The default must finish in about a minute on 2 cores: every fresh process costs
    # about a second before it measures anything, so keep their number small.
    default, full = cli._SIZES["default"], cli._SIZES["full"]
    first_calls = sum(1 + (k <= default["nested_max_order"]) + 1 for k in default["orders"])
    processes = first_calls + 3 + len(default["recursion_ks"]) + len(default["jacfwd_ks"])
    assert processes <= 20
    assert default["points"] == 65_536 and default["batch_orders"] == (4, 8)
    assert max(full["orders"]) == 100 and max(full["recursion_ks"]) == 30


def test_primitives_write_readme_without_a_readme_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "README.md"
    assert cli.main(["primitives", "--write-readme", str(missing)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"cannot read --write-readme {str(missing)!r}" in err
    assert "Run it from the repository root" in err


def test_primitives_write_readme_without_markers_says_where(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    assert cli.main(["primitives", "--write-readme", str(readme)]) == 1
    assert "markers to write the list between" in capsys.readouterr().err
    assert readme.read_text() == "# no markers\n"


def test_bench_rejects_unknown_contender(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--contenders", "taylax,finite_differences"])
    assert exit_info.value.code == 2
    assert "Unknown contender(s) finite_differences" in capsys.readouterr().err


def test_demo_without_optional_packages_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["demo", "--quick"]) == 1
    assert "pip install 'taylax[demo]'" in capsys.readouterr().err


def test_demo_quick_writes_png(tmp_path):
    pytest.importorskip("rich")
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots" / "demo.png"
    proc = subprocess.run(
        [sys.executable, "-m", "taylax.cli", "demo", "--quick", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "taylax/jet" in proc.stdout
    # The steady state on a batch: jax.jit(jax.vmap(...)) of every contender.
    assert "steady state: jax.jit(jax.vmap(...)) over N = 1,024 points" in proc.stdout
    # The jitted-recursion part: its own table and plot.
    recursion_png = out.with_name("demo_recursion.png")
    assert recursion_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "taylax.jacfwd" in proc.stdout and "jax.jacfwd" in proc.stdout


def test_bench_end_to_end_writes_markdown_and_json(tmp_path):
    status = cli.main(
        [
            "bench",
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
    result = _benchmark.run_one(
        "scalar", "jet", 40, timeout_s=0.5, steady=False, count_on_timeout=False
    )
    assert result["status"] == "timeout"
    assert result["reason"] == "exceeded the time limit of 0.5 s"
    assert result["first_call_s"] is None


def test_nested_jvp_is_skipped_above_its_max_order():
    config = _benchmark.BenchConfig(
        scalar_orders=(12,), mlp_orders=(), contenders=("nested_jvp",), nested_jvp_max_order=10
    )
    (result,) = _benchmark.run_suite(config)
    assert result["status"] == "skipped"
    assert result["reason"].startswith("too slow")


def test_run_one_rejects_bad_arguments():
    with pytest.raises(ValueError, match="Unknown benchmark case 'vector'"):
        _benchmark.run_one("vector", "jet", 2)
    with pytest.raises(ValueError, match="order must be an integer >= 1"):
        _benchmark.run_one("scalar", "jet", 0)


def _result(contender, order, status="ok", **fields):
    base = _benchmark.skipped("scalar", contender, order, "test")
    return {**base, "status": status, "reason": None, **fields}


def test_markdown_report_ratios_and_statuses():
    results = [
        _result("taylax", 10, equations=100, first_call_s=0.5, steady_s=1e-5, value=2.0),
        _result("jet", 10, equations=1000, first_call_s=2.0, steady_s=2e-5, value=2.0),
        _result("nested_jvp", 10, equations=100_000, first_call_s=50.0, steady_s=1e-4, value=2.0),
        _result("taylax", 100, equations=120, first_call_s=1.0, steady_s=1e-4, value=3.0),
        _result("jet", 100, status="timeout", equations=113_819),
        _benchmark.skipped("scalar", "nested_jvp", 100, "too slow"),
    ]
    markdown = _benchmark.markdown_report(results, {"jax": "0.10.2"})
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


@pytest.mark.parametrize("module", [_benchmark, cli])
def test_docstring_examples(module):
    failures, _ = doctest.testmod(module, verbose=False)
    assert failures == 0
