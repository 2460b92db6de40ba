"""The docs site's coverage, checked without the docs tools (mkdocs is not needed here).

* `taylax.__all__` lists exactly the public names the package exports (its submodules,
  such as `taylax.cli`, are not names it exports), and so does each public subpackage's
  (`taylax.ode`), whose names count as `ode.NAME`;
* every public name has a docstring with an example (an `Example` admonition or section,
  or a doctest `>>>`). Functions and classes carry their own `__doc__`; a constant (a
  policy, the rule table) has the attribute docstring that mkdocstrings reads, the string
  right after its assignment in the module that defines it;
* every public name has a reference entry, a `::: taylax.NAME` line in a `docs/api/` page,
  and every such entry names a public name;
* every page under `docs/` is in `mkdocs.yml`'s nav, and every page the nav names exists;
* the command-line page covers each `taylax` subcommand;
* `docs/benchmarks.md` holds, once each, the marked sections that
  `benchmarks/update_readme.py` (run by `make bench`) rewrites, and the README none.

`make docs` builds the site itself (`mkdocs build --strict`, examples run).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import taylax
from taylax import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
INIT = ROOT / "src" / "taylax" / "__init__.py"
ENTRY = re.compile(r"^:::\s+taylax\.([\w.]+)\s*$", re.MULTILINE)
# Public subpackages: their names are public as `SUBPACKAGE.NAME`.
SUBPACKAGES = ("ode",)
NAV_PAGE = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?(\S+\.md)\s*$")


def _public_names() -> list[str]:
    names = list(taylax.__all__)
    for sub in SUBPACKAGES:
        names += [f"{sub}.{name}" for name in getattr(taylax, sub).__all__]
    return sorted(names)


def _resolve(name: str):
    return functools.reduce(getattr, name.split("."), taylax)


def _defining_modules() -> dict[str, str]:
    """Each name `__init__` imports, mapped to the module it is imported from."""
    modules = {}
    for node in ast.parse(INIT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                modules[alias.asname or alias.name] = f"taylax.{node.module}"
    return modules


def _attribute_docstring(module: str, name: str) -> str | None:
    """The string right after `name = ...` (or `name: T = ...`) at the module's top level."""
    origin = importlib.util.find_spec(module).origin
    body = ast.parse(Path(origin).read_text(encoding="utf-8")).body
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        else:
            continue
        if (
            name in targets
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            return inspect.cleandoc(following.value.value)
    return None


def _docstring(name: str) -> str | None:
    obj = _resolve(name)
    if inspect.isfunction(obj) or inspect.isclass(obj):
        return obj.__doc__ and inspect.cleandoc(obj.__doc__)
    return _attribute_docstring(_defining_modules()[name], name)


def _api_entries() -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        for name in ENTRY.findall(page.read_text(encoding="utf-8")):
            entries.setdefault(name, []).append(page.name)
    return entries


def _nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    return [match.group(1) for line in nav.splitlines() if (match := NAV_PAGE.match(line))]


@pytest.mark.parametrize("namespace", ["taylax", *(f"taylax.{sub}" for sub in SUBPACKAGES)])
def test_all_lists_the_public_names(namespace):
    module = importlib.import_module(namespace)
    public = sorted(
        name
        for name in dir(module)
        if not name.startswith("_") and not inspect.ismodule(getattr(module, name))
    )
    assert sorted(module.__all__) == public
    assert len(set(module.__all__)) == len(module.__all__)


def test_every_public_name_has_a_docstring_with_an_example():
    missing = [name for name in _public_names() if not (_docstring(name) or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"
    no_example = [
        name
        for name in _public_names()
        if "Example" not in _docstring(name) and ">>>" not in _docstring(name)
    ]
    assert not no_example, f"docstrings without an example: {no_example}"


def test_every_public_name_has_one_reference_entry():
    entries = _api_entries()
    missing = [name for name in _public_names() if name not in entries]
    assert not missing, f"public names with no `::: taylax.NAME` entry in docs/api/: {missing}"
    twice = {name: pages for name, pages in entries.items() if len(pages) > 1}
    assert not twice, f"names with more than one reference entry: {twice}"
    stale = sorted(set(entries) - set(_public_names()))
    assert not stale, f"reference entries for names taylax does not export: {stale}"


def test_every_page_is_in_the_nav():
    nav = _nav_pages()
    pages = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert sorted(set(pages) - set(nav)) == [], "pages under docs/ missing from the nav"
    assert sorted(set(nav) - set(pages)) == [], "nav entries with no page under docs/"


def test_the_cli_page_covers_every_subcommand(capsys):
    text = (DOCS / "api" / "cli.md").read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    commands = re.findall(r"^    (\w+)\b", capsys.readouterr().out, re.MULTILINE)
    assert sorted(commands) == ["demo", "explain", "primitives"]
    for command in commands:
        assert f"`taylax {command}" in text, command


def test_the_benchmarks_page_holds_the_generated_sections():
    script = (ROOT / "benchmarks" / "update_readme.py").read_text(encoding="utf-8")
    assert 'ROOT / "docs" / "benchmarks.md"' in script
    names = sorted(set(re.findall(r"<!-- ([\w-]+):start -->", script)))
    assert len(names) == 6, names
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in names:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        assert page.count(start) == 1 and page.count(end) == 1, name
        assert page.index(start) < page.index(end), name
        assert start not in readme and end not in readme, name
