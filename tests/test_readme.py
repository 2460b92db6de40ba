"""The README stays true: its code runs and its primitive list is generated."""

import pathlib
import re

import jax
import pytest

from taylax._coverage import primitive_coverage_markdown

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _section(text: str, name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n(.*?)<!-- {name}:end -->", text, re.S)
    assert match, f"README has no {name} section"
    return match.group(1).strip()


def test_readme_python_blocks_run():
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)


@pytest.mark.skipif(
    jax.__version_info__[:2] != (0, 10),
    reason="The README's primitive list is generated on JAX 0.10; other versions export "
    "other primitives (0.9: xla_pmap, not stage, stack, unstack, mulhi, get, swap; 0.11: "
    "log2, one_minus_square).",
)
def test_readme_primitive_list_is_generated():
    assert _section(README.read_text(), "primitives") == primitive_coverage_markdown().strip(), (
        "README's supported-primitive list is stale: run `taylax primitives --write-readme`."
    )
