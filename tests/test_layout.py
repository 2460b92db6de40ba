"""The package's layout, read statically from its import graph: one concept per module.

Every `src/taylax/**/*.py` is parsed with `ast` (nothing is imported, so this runs in a
fraction of a second). Each import, also one inside a function, becomes an edge between
module names: relative imports are resolved against the importing module's package,
`from . import _x` imports the module `taylax._x` when there is one (and the package
otherwise), and a package's `__init__.py` is the package itself. Importing `a.b.c` does
not count as importing `a` or `a.b`: Python runs those `__init__`s first, but every
submodule would then sit in a circle with its package.

The rules, one test each:

* no import cycles: a circle means two modules are one concept, or one of them holds
  something that belongs below both;
* no module over `MAX_LINES` lines;
* no module takes a private name from another taylax module: a name with a leading
  underscore (not a dunder) imported from, or read as an attribute of, another taylax
  module. Modules themselves are named `_topic`, so only names inside modules count. Two
  exemptions: `taylax._compat`, whose underscored names wrap JAX internals and are meant
  to be used by the whole package; and a package's own `__init__`, which may re-export
  anything from the modules inside that package;
* `src/` never imports from `benchmarks/`, and `benchmarks/*.py` import only public
  taylax names (no `taylax._something`, module or name).

What fails today is listed in the KNOWN_* tables below, each entry exact and with the
reason: a cycle is the whole set of modules that reach each other (so it fails when the
circle grows or shrinks, and is listed again as it is then), a long module its length
(which it may not grow past), a private name its importer, exporter and name, a
benchmark's import the first private module (or name) of its path. A test fails on
anything outside its table, and also on a table entry that no longer fails, so the
tables shrink as the work of issue 41 lands and cannot go stale.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = "taylax"
BENCHMARKS = ROOT / "benchmarks"
MAX_LINES = 700

# Import cycles that exist today, each the exact set of modules of one strongly connected
# component of the import graph (every module in it reaches every other).
KNOWN_CYCLES: set[frozenset[str]] = set()

# Modules over MAX_LINES today, with their length when listed: each may shrink but not
# grow past it (an exact count would fail on every unrelated fix in the file).
KNOWN_LONG_MODULES: dict[str, int] = {}

# (importer, exporter, private name) taken across modules today.
KNOWN_PRIVATE_NAMES: set[tuple[str, str, str]] = set()

# (benchmark file, the private taylax module or name it imports) today.
KNOWN_BENCHMARK_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


@dataclasses.dataclass(frozen=True)
class Use:
    """One edge of the import graph: `importer` imports module `target` at `line`, and
    takes `name` from it (None when the whole module is imported)."""

    importer: str
    target: str
    name: str | None
    line: int


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _package_sources() -> dict[str, tuple[Path, str]]:
    """Every module of the package: name -> (path, source text)."""
    return {
        _module_name(path, SRC): (path, path.read_text(encoding="utf-8"))
        for path in sorted((SRC / PACKAGE).rglob("*.py"))
    }


@functools.cache
def _package_trees() -> dict[str, ast.Module]:
    """Every module of the package, parsed once for all the tests."""
    return {module: ast.parse(text) for module, (_path, text) in _package_sources().items()}


def _uses(importer: str, is_package: bool, tree: ast.Module, modules: Iterable[str]) -> list[Use]:
    """The taylax modules and names `importer` uses: its imports (anywhere in the file) and
    attribute reads `alias.name` on an imported taylax module."""
    modules = set(modules)
    here = importer if is_package else importer.rpartition(".")[0]
    uses: list[Use] = []
    # Local name -> module it is bound to, file-wide (a module alias shadowed by a local
    # variable of the same name would be misread; the package has none).
    bound: dict[str, str] = {}

    def ours(module: str) -> bool:
        return module == PACKAGE or module.startswith(PACKAGE + ".")

    # One walk of the tree (the slow part): imports bind names file-wide, so the attribute
    # reads are resolved after all of them.
    imports, attributes = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, ast.Attribute):
            attributes.append(node)

    for node in imports:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not ours(alias.name):
                    continue
                uses.append(Use(importer, alias.name, None, node.lineno))
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.partition(".")[0]] = alias.name.partition(".")[0]
        else:
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not ours(target):
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in modules:
                    uses.append(Use(importer, submodule, None, node.lineno))
                    bound[alias.asname or alias.name] = submodule
                else:
                    name = None if alias.name == "*" else alias.name
                    uses.append(Use(importer, target, name, node.lineno))

    def resolve(node: ast.expr) -> str | None:
        """The module an expression names (`_api`, `taylax._api`), if any."""
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            base = resolve(node.value)
            if base is not None and f"{base}.{node.attr}" in modules:
                return f"{base}.{node.attr}"
        return None

    for node in attributes:
        if resolve(node) is None:
            base = resolve(node.value)
            if base is not None:
                uses.append(Use(importer, base, node.attr, node.lineno))
    return uses


@functools.cache
def _package_uses() -> tuple[Use, ...]:
    sources = _package_sources()
    return tuple(
        use
        for module, tree in _package_trees().items()
        for use in _uses(module, sources[module][0].name == "__init__.py", tree, sources)
    )


def _graph() -> dict[str, dict[str, int]]:
    """importer -> {imported module: first line}, between modules of the package."""
    sources = _package_sources()
    graph: dict[str, dict[str, int]] = {module: {} for module in sources}
    for use in _package_uses():
        if use.target in sources and use.target != use.importer:
            edges = graph[use.importer]
            edges[use.target] = min(edges.get(use.target, use.line), use.line)
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(frozenset(component))
    return components


def _describe_cycle(graph: dict[str, dict[str, int]], component: frozenset[str]) -> str:
    """One shortest circle through the component's first module, with the import lines."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in parents:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child in component and child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    path = [start]
    while path[-1] != start or len(path) == 1:
        path.append(parents[path[-1]])
    path.reverse()
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(path, path[1:])]
    edges = [
        f"{a} (line {line}) -> {b}"
        for a in sorted(component)
        for b, line in sorted(graph[a].items())
        if b in component
    ]
    return (
        f"{sorted(component)}, for example "
        + " -> ".join(steps + [start])
        + "\n    its imports:\n      "
        + "\n      ".join(edges)
    )


def _stale(table: str, entries: Iterable) -> str:
    listed = ", ".join(map(repr, sorted(entries)))
    return f"{table} lists what no longer fails; remove it from the table: {listed}"


def test_the_reader_sees_every_form_of_import():
    """The reader itself: relative imports at any depth and inside functions, a submodule
    taken with `from . import`, and attribute reads on imported modules."""
    modules = {
        "taylax",
        "taylax._api",
        "taylax._interpret",
        "taylax._diagnostics",
        "taylax._diagnostics._hooks",
        "taylax._diagnostics._watch",
    }
    source = """
from . import _hooks
from .. import __version__, _interpret
from .._api import _cached_program, taylor
import taylax._api as api

def f():
    from ._watch import RecompileWarning
    return _interpret._rule_result, api._trace, _hooks.flush
"""
    uses = _uses("taylax._diagnostics._x", False, ast.parse(source), modules)
    assert {(use.target, use.name) for use in uses} == {
        ("taylax._diagnostics._hooks", None),
        ("taylax", "__version__"),
        ("taylax._interpret", None),
        ("taylax._api", "_cached_program"),
        ("taylax._api", "taylor"),
        ("taylax._api", None),
        ("taylax._diagnostics._watch", "RecompileWarning"),
        ("taylax._interpret", "_rule_result"),
        ("taylax._api", "_trace"),
        ("taylax._diagnostics._hooks", "flush"),
    }
    package = _uses("taylax._diagnostics", True, ast.parse("from ._watch import watch"), modules)
    assert [(use.target, use.name) for use in package] == [("taylax._diagnostics._watch", "watch")]


def test_no_import_cycles():
    graph = _graph()
    components = set(_strongly_connected(graph))
    new = [_describe_cycle(graph, c) for c in sorted(components - KNOWN_CYCLES, key=sorted)]
    assert not new, "import cycles:\n  " + "\n  ".join(new)
    stale = [sorted(c) for c in KNOWN_CYCLES - components]
    assert not stale, _stale("KNOWN_CYCLES", stale)


# The layers of docs/ARCHITECTURE.md, bottom first: a module imports only from its own
# layer or those below (packages by prefix; every module of the package is in one layer).
LAYERS: tuple[tuple[str, ...], ...] = (
    # JAX internals, counting, the pass's state and the emission policy.
    (
        "taylax._compat",
        "taylax._count",
        "taylax._version",
        "taylax._argtypes",
        "taylax._pass",
        "taylax._policy",
        "taylax._once",
        "taylax._one_kernel",
        "taylax._one_way",
    ),
    # Building blocks: series arithmetic; program tracing and caches; the primitives that
    # wrap a pass (chunks of points, the float32 fallback) or a rule's rare side.
    (
        "taylax._series",
        "taylax._cuts",
        "taylax._rolled",
        "taylax._programs",
        "taylax._point_chunks",
        "taylax._fallback",
        "taylax._rare",
    ),
    # Jaxpr tools that know nothing of series: the optimizer, the compile diagnostics.
    ("taylax._optimize", "taylax._diagnostics"),
    # The interpreter: a jaxpr evaluated on series, the rule table.
    ("taylax._elementwise", "taylax._pointwise", "taylax._interpret"),
    # The Taylor rules, one module per primitive family.
    ("taylax._rules",),
    # What users call: taylor/derivatives/jet, derivative/jacfwd, operators, coverage.
    (
        "taylax._outputs",
        "taylax._api",
        "taylax._derivative",
        "taylax._emitted",
        "taylax._collapsed",
        "taylax._biharmonic",
        "taylax._operators",
        "taylax._coverage",
        "taylax.ode",
    ),
    # The package's face and the command line.
    ("taylax", "taylax.cli", "taylax._demo"),
)


def _layer(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or (prefix != "taylax" and module.startswith(prefix + ".")):
                return i
    raise AssertionError(f"{module} is in no layer of LAYERS: add it to one.")


def test_imports_never_run_up_the_layers():
    upward = sorted(
        f"{importer} (layer {_layer(importer)}) imports {target} (layer {_layer(target)}) "
        f"at line {line}"
        for importer, targets in _graph().items()
        for target, line in targets.items()
        if _layer(target) > _layer(importer)
    )
    assert not upward, "imports up the layers:\n  " + "\n  ".join(upward)


def test_no_module_over_max_lines():
    lengths = {
        module: len(text.splitlines()) for module, (_path, text) in _package_sources().items()
    }
    long = {module: n for module, n in lengths.items() if n > MAX_LINES}
    grown = [
        f"{module}: {n} lines (limit {KNOWN_LONG_MODULES.get(module, MAX_LINES)})"
        for module, n in sorted(long.items())
        if n > KNOWN_LONG_MODULES.get(module, MAX_LINES)
    ]
    assert not grown, "modules too long:\n  " + "\n  ".join(grown)
    assert set(KNOWN_LONG_MODULES) <= set(long), _stale(
        "KNOWN_LONG_MODULES", set(KNOWN_LONG_MODULES) - set(long)
    )


def _private_uses() -> dict[tuple[str, str, str], int]:
    """(importer, exporter, private name) -> first line, outside the exemptions."""
    found: dict[tuple[str, str, str], int] = {}
    for use in _package_uses():
        if use.name is None or not _is_private(use.name) or use.target == use.importer:
            continue
        if use.target == f"{PACKAGE}._compat":
            continue  # JAX internals, wrapped to be used across the package
        if _package_sources()[use.importer][0].name == "__init__.py" and use.target.startswith(
            use.importer + "."
        ):
            continue  # a package's __init__ re-exporting its own modules
        key = (use.importer, use.target, use.name)
        found[key] = min(found.get(key, use.line), use.line)
    return found


def test_no_private_names_across_modules():
    found = _private_uses()
    new = [
        f"{importer} (line {line}) takes {exporter}.{name}"
        for (importer, exporter, name), line in sorted(found.items())
        if (importer, exporter, name) not in KNOWN_PRIVATE_NAMES
    ]
    assert not new, "private names taken from another module:\n  " + "\n  ".join(new)
    assert KNOWN_PRIVATE_NAMES <= set(found), _stale(
        "KNOWN_PRIVATE_NAMES", KNOWN_PRIVATE_NAMES - set(found)
    )


def test_src_never_imports_benchmarks():
    names = {"benchmarks"} | {path.stem for path in BENCHMARKS.glob("*.py")}
    found = [
        f"{module} (line {node.lineno}) imports {imported}"
        for module, tree in sorted(_package_trees().items())
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for imported in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""] * (node.level == 0)
        )
        if imported.partition(".")[0] in names
    ]
    assert not found, "src/ imports from benchmarks/:\n  " + "\n  ".join(found)


def test_benchmarks_use_only_public_names():
    modules = _package_sources()
    found: dict[tuple[str, str], int] = {}
    for path in sorted(BENCHMARKS.glob("*.py")):
        file = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for use in _uses(file, False, tree, modules):
            dotted = use.target + (f".{use.name}" if use.name else "")
            parts = dotted.split(".")
            private = next((i for i, part in enumerate(parts) if _is_private(part)), None)
            if private is not None:
                key = (file, ".".join(parts[: private + 1]))
                found[key] = min(found.get(key, use.line), use.line)
    new = [
        f"{file} (line {line}) imports {name}"
        for (file, name), line in sorted(found.items())
        if (file, name) not in KNOWN_BENCHMARK_PRIVATE_IMPORTS
    ]
    assert not new, "benchmarks import private taylax names:\n  " + "\n  ".join(new)
    assert KNOWN_BENCHMARK_PRIVATE_IMPORTS <= set(found), _stale(
        "KNOWN_BENCHMARK_PRIVATE_IMPORTS", KNOWN_BENCHMARK_PRIVATE_IMPORTS - set(found)
    )
