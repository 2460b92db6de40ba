"""Tests for the `taylax` command line and `taylax demo` (the benchmark suite's harness
is tested in test_harness.py)."""

import doctest
import subprocess
import sys
from pathlib import Path

import pytest

from taylax import _demo, cli

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "primitives" in out and "explain" in out
    # The benchmark suite is not part of the package: `make bench` runs benchmarks/.
    assert "bench" not in out


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 2


def test_explain_without_a_script_names_only_the_script(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["explain"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "required: SCRIPT (the Python script to run" in err and "ARGS" not in err


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

    if taylax.__version__ == "0+unknown":
        pytest.skip("taylax runs from a source tree that was never installed: no metadata")
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
    default, full = _demo.SIZES["default"], _demo.SIZES["full"]
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


@pytest.mark.parametrize("module", [_demo, cli])
def test_docstring_examples(module):
    failures, _ = doctest.testmod(module, verbose=False)
    assert failures == 0
