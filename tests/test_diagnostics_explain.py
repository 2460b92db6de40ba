"""`taylax explain SCRIPT [ARGS...]`: runs a script under watch() and prints the report."""

import json
import textwrap

import pytest

from taylax import cli
from taylax._diagnostics import _hooks

_LOOP = textwrap.dedent(
    """
    import sys
    import jax
    import jax.numpy as jnp

    def scale(x, factor):
        return x * factor

    x = jnp.ones(4)
    for _ in range(int(sys.argv[1])):
        jax.jit(lambda v: scale(v, 2.0))(x)  # a new lambda each time: compiles each time
    print("script done")
    """
)


def _script(tmp_path, text, name="loop.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_explain_prints_function_cause_and_time_and_writes_json(tmp_path, capsys):
    pytest.importorskip("rich")
    script = _script(tmp_path, _LOOP)
    out_json = tmp_path / "log.json"
    status = cli.main(["explain", "--json", str(out_json), "--width", "200", str(script), "3"])
    out = capsys.readouterr().out
    assert status == 0
    assert out.index("script done") < out.index("jit compile log: 3 compile(s)")
    assert "<lambda>" in out and "loop.py:11" in out and "time lost" in out
    assert "first_call ×1" in out and "new_function ×2" in out
    assert "a new lambda object from" in out
    data = json.loads(out_json.read_text())
    (row,) = data["summary"]
    assert (row["compiles"], row["causes"]) == (3, {"first_call": 1, "new_function": 2})
    assert row["seconds"] > 0
    assert not _hooks.installed()


def test_explain_reports_even_when_the_script_fails(tmp_path, capsys):
    script = _script(tmp_path, _LOOP + "\nraise RuntimeError('boom')\n")
    assert cli.main(["explain", str(script), "1"]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: boom" in captured.err
    assert "jit compile log: 1 compile(s)" in captured.out


def test_explain_passes_on_the_exit_status(tmp_path, capsys):
    script = _script(tmp_path, "import sys\nsys.exit(3)\n")
    assert cli.main(["explain", str(script)]) == 3
    assert "jit compile log: 0 compile(s)" in capsys.readouterr().out


def test_explain_missing_script_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["explain", str(tmp_path / "nope.py")]) == 2
    assert "is not a file; pass the path of a Python script" in capsys.readouterr().err


def test_explain_prints_a_sys_exit_message_as_python_does(tmp_path, capsys):
    # `sys.exit("message")`: Python prints the message to stderr and exits with status 1.
    script = _script(tmp_path, "import sys\nsys.exit('the config file is missing')\n")
    assert cli.main(["explain", str(script)]) == 1
    captured = capsys.readouterr()
    assert "the config file is missing" in captured.err
    assert "jit compile log: 0 compile(s)" in captured.out


@pytest.mark.parametrize("exit_code, status", [(3, 3), (0, 1)])
def test_explain_unwritable_json_is_one_line_and_keeps_the_status(
    tmp_path, capsys, exit_code, status
):
    script = _script(tmp_path, f"import sys\nsys.exit({exit_code})\n")
    target = tmp_path / "no" / "dir" / "x.json"
    assert cli.main(["explain", "--json", str(target), str(script)]) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("taylax explain: could not write the JSON log to --json")
    assert "pass a path in an existing, writable folder" in line


@pytest.mark.parametrize("flag, value", [("--budget", "-3"), ("--width", "0"), ("--width", "wide")])
def test_explain_rejects_bad_budget_and_width(tmp_path, capsys, flag, value):
    script = _script(tmp_path, "print('never runs')\n")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["explain", flag, value, str(script)])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert f"argument {flag}:" in captured.err and "never runs" not in captured.out
