"""Head-to-head benchmark of taylax, ``jax.experimental.jet`` and nested ``jax.jvp``.

Every measurement runs in a fresh Python process, so that no trace or compile
cache is shared between contenders: the first call of a contender is what a
user pays the first time (trace, lower, compile and run of ``jax.jit`` of the
whole computation). A worker imports the ``taylax`` package before its timings
only when it measures taylax itself, so that nothing taylax does at import time
can affect the other contenders; the others import it after their timings, to
count equations with ``taylax.equation_counts``.

For each (case, contender, order) the worker reports, as JSON lines on stdout:

* ``first_call_s``: the first call of ``jax.jit(fn)``, until ``block_until_ready``;
* ``steady_s``: the median time of one call after warm-up, over enough calls to
  last about ``min_time_s``;
* ``equations``: ``sum(taylax.equation_counts(jax.make_jaxpr(fn)(x, v)).values())``,
  counted recursively into sub-jaxprs;
* ``value``: a checksum of the highest derivative, to check that contenders agree.

A run that exceeds its time limit is killed and reported as ``"timeout"``
(its equations are then counted by a second, trace-only run, which is much
cheaper than compiling). All computations are in float64.

This module is the benchmark suite's shared harness (it is not part of the installed
package): ``python benchmarks/bench_taylor.py`` runs the full suite, and other scripts
import its cases, contenders and formatting.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CASES",
    "CONTENDERS",
    "BenchConfig",
    "build_case",
    "build_contender",
    "count_equations",
    "environment",
    "error_line",
    "format_ratio",
    "format_time",
    "main",
    "markdown_report",
    "run_one",
    "run_suite",
    "skipped",
    "write_results",
]

CONTENDERS: tuple[str, ...] = ("taylax", "jet", "nested_jvp")
"""The contenders, in the order in which tables list them."""

CASES: dict[str, str] = {
    "scalar": "f(t) = 0.3*sin(t)*t**10 at t = 1.1",
    "mlp": "3-layer tanh MLP (64 -> 64 -> 64 -> 64), batch 256, f(x + s*v)",
}
"""The benchmark cases and a one-line description of each."""

_MLP_BATCH, _MLP_WIDTH = 256, 64


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """What :func:`run_suite` measures, and its limits.

    Attributes:
      scalar_orders: the derivative orders for the ``scalar`` case.
      mlp_orders: the derivative orders for the ``mlp`` case.
      contenders: which of :data:`CONTENDERS` to run.
      timeout_s: the time limit of one run (one fresh process), in seconds.
      nested_jvp_max_order: nested ``jax.jvp`` is skipped above this order
        (its cost grows exponentially with the order).
      min_time_s: the steady-state measurement lasts about this long.
      steady: whether to measure the steady state at all.
      count_on_timeout: whether to count the equations of a run that timed out
        with a second, trace-only run (with the same time limit).
    """

    scalar_orders: tuple[int, ...] = (10, 20, 40, 100)
    mlp_orders: tuple[int, ...] = (4, 8, 16)
    contenders: tuple[str, ...] = CONTENDERS
    timeout_s: float = 120.0
    nested_jvp_max_order: int = 10
    min_time_s: float = 0.2
    steady: bool = True
    count_on_timeout: bool = True

    def runs(self) -> list[tuple[str, str, int]]:
        """Lists the (case, contender, order) triples that this configuration measures.

        Returns:
          A list of ``(case, contender, order)`` tuples, case by case, then order
          by order, then contender by contender.

        Example:
          >>> BenchConfig(scalar_orders=(2,), mlp_orders=(), contenders=("jet",)).runs()
          [('scalar', 'jet', 2)]
        """
        orders = {"scalar": self.scalar_orders, "mlp": self.mlp_orders}
        return [
            (case, contender, order)
            for case in CASES
            for order in orders[case]
            for contender in self.contenders
        ]


def add_one_function_loops(parser: argparse.ArgumentParser) -> None:
    """The `--one-function-loops` switch of the ODE scripts (`one_function_loops_first`)."""
    parser.add_argument(
        "--one-function-loops",
        action="store_true",
        help="taylax.ode.one_function_loops() first: XLA:CPU compiles small loops whole",
    )


def one_function_loops_first(args: argparse.Namespace) -> None:
    """`taylax.ode.one_function_loops()` where `args` ask for it (docs/ODE.md, "Small
    loops in one function"). Call it before any array: XLA reads the setting when JAX's
    CPU backend starts."""
    if args.one_function_loops:
        import taylax

        taylax.ode.one_function_loops()


# --------------------------------------------------------------------------------------
# Worker side: runs in a fresh process, imports jax (and taylax only if measured, or to
# count equations once the timings are done).
# --------------------------------------------------------------------------------------


def changed_policy(changes: Sequence[str]):
    """The default backend's emission policy with `FIELD=VALUE` changes (values as Python
    literals) and named "set", or None without any."""
    if not changes:
        return None
    import ast

    import jax

    import taylax

    fields = {}
    for change in changes:
        field, _, value = change.partition("=")
        fields[field] = ast.literal_eval(value)
    base = {"cpu": taylax.CPU, "gpu": taylax.GPU}.get(jax.default_backend(), taylax.DEFAULT)
    return dataclasses.replace(base, name="set", **fields)


def build_case(case: str) -> tuple[Callable[[Any], Any], Any, Any]:
    """Returns ``(f, x, v)``: the function, the point and the direction of the case.

    Args:
      case: a key of :data:`CASES`.

    Returns:
      The function ``f``, the point ``x`` and the direction ``v`` (float64).

    Raises:
      ValueError: if ``case`` is not a key of :data:`CASES`.

    Example:
      >>> f, x, v = build_case("scalar")  # doctest: +SKIP
    """
    import jax
    import jax.numpy as jnp

    if case == "scalar":

        def f(t):
            return 0.3 * jnp.sin(t) * t**10

        return f, jnp.float64(1.1), jnp.float64(1.0)
    if case == "mlp":
        keys = jax.random.split(jax.random.PRNGKey(0), 8)
        width = _MLP_WIDTH
        weights = [
            jax.random.normal(keys[i], (width, width), jnp.float64) / math.sqrt(width)
            for i in range(3)
        ]
        biases = [0.1 * jax.random.normal(keys[3 + i], (width,), jnp.float64) for i in range(3)]

        def f(x):
            h = jnp.tanh(x @ weights[0] + biases[0])
            h = jnp.tanh(h @ weights[1] + biases[1])
            return h @ weights[2] + biases[2]

        x = jax.random.normal(keys[6], (_MLP_BATCH, width), jnp.float64)
        v = jax.random.normal(keys[7], (_MLP_BATCH, width), jnp.float64)
        # One unit direction per example of the batch.
        return f, x, v / jnp.linalg.norm(v, axis=-1, keepdims=True)
    raise ValueError(f"Unknown benchmark case {case!r}; expected one of {sorted(CASES)}.")


def build_contender(contender: str, f: Callable, order: int) -> tuple[Callable, bool]:
    """Returns ``(fn, stacked)``: ``fn(x, v)`` computes the derivatives of ``f`` along ``v``.

    Args:
      contender: one of :data:`CONTENDERS`.
      f: the function to differentiate.
      order: the derivative order, at least 1.

    Returns:
      ``(fn, stacked)``; ``stacked`` is true when ``fn`` returns all derivatives
      ``0..order`` stacked on a leading axis, false when it returns only the
      ``order``-th one.

    Raises:
      ValueError: if ``contender`` is not one of :data:`CONTENDERS`.

    Example:
      >>> fn, stacked = build_contender("jet", lambda t: t**3, 2)  # doctest: +SKIP
    """
    import jax.numpy as jnp

    if contender == "taylax":
        import taylax

        derivatives = taylax.derivatives(f, order)
        return (lambda x, v: derivatives(x, v)), True
    if contender == "jet":
        from jax.experimental.jet import jet

        def jet_fn(x, v):
            series = (v,) + (jnp.zeros_like(v),) * (order - 1)
            primal_out, series_out = jet(f, (x,), (series,))
            return jnp.stack([primal_out, *series_out])

        return jet_fn, True
    if contender == "nested_jvp":
        return nested_jvp(f, order), False
    raise ValueError(f"Unknown contender {contender!r}; expected one of {list(CONTENDERS)}.")


def nested_jvp(f: Callable, order: int) -> Callable:
    """`fn(x, v)`: the `order`-th derivative of `f` along `v` by `order` nested `jax.jvp`s.

    Example:
      >>> float(nested_jvp(lambda t: t**3, 2)(1.0, 1.0))  # doctest: +SKIP
      6.0
    """
    import jax

    def nested_fn(x, v):
        g = f
        for _ in range(order):
            g = (lambda h: lambda y: jax.jvp(h, (y,), (v,))[1])(g)
        return g(x)

    return nested_fn


def checksum(derivative: Any) -> float:
    """A sign-aware scalar summary of an array: a fixed weighted sum of its entries."""
    import numpy as np

    d = np.asarray(derivative, dtype=np.float64).ravel()
    return float(np.dot(d, np.cos(np.arange(d.size))))


def emit(**fields: Any) -> None:
    """Print one JSON line of a worker's results (the parent reads them)."""
    print(json.dumps(fields), flush=True)


def count_equations(jaxpr: Any) -> int:
    """The equations of a jaxpr and of all its sub-jaxprs (``taylax.equation_counts``).

    Workers call it after their timings: it imports taylax, which must not run before a
    timed call of another contender.

    Args:
      jaxpr: what ``jax.make_jaxpr`` returns.

    Returns:
      The number of equations.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> count_equations(jax.make_jaxpr(lambda x: jnp.sin(x) * x)(1.0))
      2
    """
    import taylax

    return sum(taylax.equation_counts(jaxpr).values())


def _worker(spec: dict[str, Any]) -> None:
    """Measures one (case, contender, order) and prints JSON lines on stdout."""
    run_worker(spec, build_case, build_contender)


def run_worker(spec: dict[str, Any], build_case: Callable, build_contender: Callable) -> None:
    """A worker's measurement of `spec` (case, contender, order; `mode`, `steady` and
    `min_time_s` optional), with the given builders of cases and contenders: JSON lines
    on stdout (`emit`). taylax is imported only to count equations, after the timings."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    # Initialise the backend and jit machinery outside of the measurement.
    jax.block_until_ready(jax.jit(lambda a: a + 1.0)(jnp.zeros(())))
    f, x, v = build_case(spec["case"])
    fn, stacked = build_contender(spec["contender"], f, spec["order"])
    x, v = jax.block_until_ready((x, v))
    emit(device=str(jax.devices()[0].platform), jax_version=jax.__version__)

    if spec.get("mode", "full") == "full":
        jitted = jax.jit(fn)
        start = time.perf_counter()
        out = jax.block_until_ready(jitted(x, v))
        emit(first_call_s=time.perf_counter() - start)
        emit(value=checksum(out[-1] if stacked else out))
        if spec.get("steady", True):
            for _ in range(2):
                jax.block_until_ready(jitted(x, v))
            start = time.perf_counter()
            jax.block_until_ready(jitted(x, v))
            estimate = max(time.perf_counter() - start, 1e-7)
            repeats = min(max(math.ceil(spec.get("min_time_s", 0.2) / estimate), 5), 100_000)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                jax.block_until_ready(jitted(x, v))
                times.append(time.perf_counter() - start)
            emit(steady_s=statistics.median(times), steady_repeats=repeats)
    emit(equations=count_equations(jax.make_jaxpr(fn)(x, v)))
    emit(done=True)


# The worker is started with ``python -c _BOOTSTRAP SPEC``. It loads this file by its
# path, so that it runs from any directory, whether or not ``benchmarks/`` is on sys.path.
_BOOTSTRAP = """\
import importlib.util, json, sys
_spec = json.loads(sys.argv[1])
_loader = importlib.util.spec_from_file_location("_taylax_bench_worker", _spec["harness_path"])
_harness = importlib.util.module_from_spec(_loader)
sys.modules[_loader.name] = _harness
_loader.loader.exec_module(_harness)
_harness._worker(_spec)
"""


# --------------------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------------------


def _spawn(spec: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], str, str | None]:
    """Runs one worker; returns its merged JSON fields, a status and the reason if not ok."""
    spec = {**spec, "harness_path": str(Path(__file__).resolve())}
    return run_process([sys.executable, "-c", _BOOTSTRAP, json.dumps(spec)], timeout_s)


def run_process(command: list[str], timeout_s: float) -> tuple[dict[str, Any], str, str | None]:
    """Runs one worker process (`command`) that prints JSON lines (`emit`), ending with
    `done`; returns its merged fields, a status (`ok`, `timeout`, `error`) and the reason
    if not ok (with `stderr_tail` among the fields on an error)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status, reason = "ok", None
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        status, reason = "timeout", f"exceeded the time limit of {timeout_s:.3g} s"
    finally:
        if proc.poll() is None:  # interrupted (e.g. Ctrl-C): do not leave the worker running
            proc.kill()
            proc.wait()
    fields: dict[str, Any] = {}
    for line in stdout.splitlines():
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            fields.update(parsed)
    if status == "ok" and (proc.returncode != 0 or not fields.get("done")):
        fallback = f"the worker exited with status {proc.returncode}"
        status, reason = "error", error_line(stderr) or fallback
        fields["stderr_tail"] = "\n".join(stderr.strip().splitlines()[-30:])
    return fields, status, reason


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)(: .*)?$")


@contextlib.contextmanager
def checked_out(rev: str):
    """The `src` folder of `rev` of this repository, checked out into a temporary git
    worktree for the duration (for A/B runs of this tree against an earlier commit)."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
        try:
            yield tree / "src"
        finally:
            subprocess.run(
                ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
                check=False,
                capture_output=True,
            )


def error_line(stderr: str) -> str | None:
    r"""The last line of a traceback that names the exception (JAX adds a note after it).

    Args:
      stderr: a process's standard error.

    Returns:
      The line, else the last non-empty line, else ``None``.

    Example:
      >>> error_line("Traceback ...\nValueError: bad\nnote: more")
      'ValueError: bad'
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line
    return lines[-1] if lines else None


def run_one(
    case: str,
    contender: str,
    order: int,
    *,
    timeout_s: float = 120.0,
    steady: bool = True,
    min_time_s: float = 0.2,
    count_on_timeout: bool = True,
) -> dict[str, Any]:
    """Measures one contender on one case at one order, in a fresh process.

    Args:
      case: a key of :data:`CASES` (``"scalar"`` or ``"mlp"``).
      contender: one of :data:`CONTENDERS` (``"taylax"``, ``"jet"``, ``"nested_jvp"``).
      order: the derivative order, at least 1.
      timeout_s: the time limit of the run; a run that exceeds it is killed.
      steady: whether to measure the steady-state time per call.
      min_time_s: the steady-state measurement lasts about this long.
      count_on_timeout: whether to count the equations of a run that timed out
        with a second, trace-only run.

    Returns:
      A dict with keys ``case``, ``contender``, ``order``, ``status`` (``"ok"``,
      ``"timeout"`` or ``"error"``), ``reason`` (``None`` when ok), ``equations``,
      ``first_call_s``, ``steady_s`` and ``value`` (each ``None`` when not
      measured), ``limit_s`` (the time limit) and ``wall_s``, the duration of the run
      including process starts.

    Raises:
      ValueError: if ``case``, ``contender`` or ``order`` is not valid.

    Example:
      >>> result = run_one("scalar", "jet", 2, steady=False)  # doctest: +SKIP
      >>> result["status"], result["equations"]  # doctest: +SKIP
      ('ok', 38)
    """
    if case not in CASES:
        raise ValueError(f"Unknown benchmark case {case!r}; expected one of {sorted(CASES)}.")
    if contender not in CONTENDERS:
        raise ValueError(f"Unknown contender {contender!r}; expected one of {list(CONTENDERS)}.")
    if not isinstance(order, int) or order < 1:
        raise ValueError(f"The derivative order must be an integer >= 1, but got {order!r}.")
    spec = {
        "case": case,
        "contender": contender,
        "order": order,
        "steady": steady,
        "min_time_s": min_time_s,
    }
    start = time.perf_counter()
    fields, status, reason = _spawn({**spec, "mode": "full"}, timeout_s)
    if status == "timeout" and count_on_timeout and "equations" not in fields:
        count_fields, _, _ = _spawn({**spec, "mode": "equations"}, timeout_s)
        if "equations" in count_fields:
            fields["equations"] = count_fields["equations"]
    return {
        "case": case,
        "contender": contender,
        "order": order,
        "status": status,
        "reason": reason,
        "equations": fields.get("equations"),
        "first_call_s": fields.get("first_call_s"),
        "steady_s": fields.get("steady_s") if steady else None,
        "value": fields.get("value"),
        "device": fields.get("device"),
        "limit_s": timeout_s,
        "wall_s": time.perf_counter() - start,
        **({"stderr_tail": fields["stderr_tail"]} if "stderr_tail" in fields else {}),
    }


def skipped(case: str, contender: str, order: int, reason: str) -> dict[str, Any]:
    """Returns the result record of a run that was not made.

    Args:
      case: the benchmark case.
      contender: the contender.
      order: the derivative order.
      reason: why the run was skipped, e.g. ``"too slow"``.

    Returns:
      A result dict like :func:`run_one`'s, with ``status`` ``"skipped"``.

    Example:
      >>> skipped("scalar", "nested_jvp", 20, "too slow")["status"]
      'skipped'
    """
    return {
        "case": case,
        "contender": contender,
        "order": order,
        "status": "skipped",
        "reason": reason,
        "equations": None,
        "first_call_s": None,
        "steady_s": None,
        "value": None,
        "device": None,
        "limit_s": None,
        "wall_s": 0.0,
    }


def run_suite(
    config: BenchConfig = BenchConfig(),
    *,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Runs every (case, contender, order) of ``config``, one fresh process each.

    Args:
      config: what to measure and the limits (see :class:`BenchConfig`).
      on_result: called with each result as soon as it is available (progress).

    Returns:
      The list of result dicts (see :func:`run_one`), in the order of ``config.runs()``.

    Example:
      >>> config = BenchConfig(scalar_orders=(2,), mlp_orders=(), contenders=("jet",))
      >>> [r["status"] for r in run_suite(config)]  # doctest: +SKIP
      ['ok']
    """
    results = []
    for case, contender, order in config.runs():
        if contender == "nested_jvp" and order > config.nested_jvp_max_order:
            result = skipped(
                case,
                contender,
                order,
                f"too slow (nested jvp is only run up to order {config.nested_jvp_max_order})",
            )
        else:
            result = run_one(
                case,
                contender,
                order,
                timeout_s=config.timeout_s,
                steady=config.steady,
                min_time_s=config.min_time_s,
                count_on_timeout=config.count_on_timeout,
            )
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


# --------------------------------------------------------------------------------------
# Reporting.
# --------------------------------------------------------------------------------------


def command_line(script: str, argv: Sequence[str]) -> str:
    """The command that ran a benchmark script, as a results file quotes it.

    Args:
      script: the script's path (its ``__file__``).
      argv: its command-line arguments.

    Returns:
      The command in backquotes, run from the repository root.

    Example:
      >>> command_line("/x/benchmarks/bench_unrolled.py", ["--orders", "2"])
      '`python benchmarks/bench_unrolled.py --orders 2`'
    """
    return "`" + " ".join(["python", f"benchmarks/{Path(script).name}", *argv]) + "`"


def format_time(seconds: float | None) -> str:
    """Formats a duration with three significant digits and a unit.

    Args:
      seconds: a duration in seconds, or ``None``.

    Returns:
      A string such as ``"1.23 s"``, ``"45.6 ms"`` or ``"7.89 µs"``; ``"—"`` for ``None``.

    Example:
      >>> format_time(0.0123)
      '12.3 ms'
    """
    if seconds is None:
        return "—"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_ratio(numerator: float | None, denominator: float | None) -> str:
    """Formats ``numerator / denominator`` as ``"0.0123×"``, or ``"—"`` if either is missing.

    Args:
      numerator: the taylax measurement.
      denominator: the other contender's measurement.

    Returns:
      The ratio with three significant digits; below 1 means taylax is smaller/faster.

    Example:
      >>> format_ratio(1.0, 8.0)
      '0.125×'
    """
    if numerator is None or denominator is None or denominator == 0:
        return "—"
    return f"{numerator / denominator:.3g}×"


def _cell(result: dict[str, Any] | None, key: str, fmt: Callable[[Any], str]) -> str:
    if result is None:
        return "—"
    value = result.get(key)
    if value is not None:
        text = fmt(value)
        return text if result["status"] == "ok" else f"{text} ({result['status']})"
    return result["status"] if result["status"] != "ok" else "—"


def _relative_spread(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    if len(present) < 2:
        return None
    scale = max(abs(v) for v in present) or 1.0
    return (max(present) - min(present)) / scale


def markdown_report(results: Sequence[dict[str, Any]], meta: dict[str, Any] | None = None) -> str:
    """Renders results as markdown: per case, tables of equations, first call, steady state.

    Each table has one row per order and one column per contender, followed by
    the ratios taylax/jet and taylax/nested_jvp (below 1: taylax is better).
    A last table per case compares a checksum of the highest derivative.

    Args:
      results: result dicts, as returned by :func:`run_suite`.
      meta: optional ``key: value`` pairs printed as a list above the tables.

    Returns:
      The markdown text.

    Example:
      >>> r = skipped("scalar", "jet", 2, "demo")
      >>> "| 2 | skipped |" in markdown_report([r])
      True
    """
    lines = ["# Taylor-mode benchmark: taylax vs jax.experimental.jet vs nested jax.jvp", ""]
    for key, value in (meta or {}).items():
        lines.append(f"- {key}: {value}")
    if meta:
        lines.append("")
    present = [c for c in CONTENDERS if any(r["contender"] == c for r in results)]
    others = [c for c in ("jet", "nested_jvp") if c in present and "taylax" in present]
    metrics = (
        ("Jaxpr equations (recursive count)", "equations", lambda n: f"{n:,}"),
        ("First call: trace + compile + run (jax.jit)", "first_call_s", format_time),
        ("Steady state: median time per call", "steady_s", format_time),
    )
    for case, description in CASES.items():
        case_results = [r for r in results if r["case"] == case]
        if not case_results:
            continue
        table = {(r["order"], r["contender"]): r for r in case_results}
        orders = sorted({r["order"] for r in case_results})
        lines += [f"## Case `{case}`: {description}", ""]
        for title, key, fmt in metrics:
            measured = any(r["status"] == "ok" for r in case_results)
            if measured and all(r.get(key) is None for r in case_results):
                continue  # not measured at all (e.g. the steady state with --no-steady)
            header = ["order", *present, *(f"taylax/{o}" for o in others)]
            lines += [f"### {title}", "", "| " + " | ".join(header) + " |"]
            lines.append("|" + "---:|" * len(header))
            for order in orders:
                row = [str(order)]
                row += [_cell(table.get((order, c)), key, fmt) for c in present]
                for other in others:
                    mine = table.get((order, "taylax")) or {}
                    theirs = table.get((order, other)) or {}
                    row.append(format_ratio(mine.get(key), theirs.get(key)))
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
        lines += [
            "### Check: checksum of the highest derivative",
            "",
            "| order | " + " | ".join(present) + " | relative spread |",
            "|" + "---:|" * (len(present) + 2),
        ]
        for order in orders:
            values = [(table.get((order, c)) or {}).get("value") for c in present]
            spread = _relative_spread(values)
            row = [str(order), *("—" if v is None else f"{v:.12g}" for v in values)]
            row.append("—" if spread is None else f"{spread:.1e}")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        notes = [
            f"{r['contender']} at order {r['order']}: {r['status']}, {r['reason']}"
            for r in sorted(
                case_results, key=lambda r: (CONTENDERS.index(r["contender"]), r["order"])
            )
            if r["status"] != "ok"
        ]
        if notes:
            lines += ["Notes:", "", *(f"- {note}" for note in notes), ""]
    return "\n".join(lines)


def environment(config: BenchConfig | None = None) -> dict[str, Any]:
    """Describes the machine and software of a benchmark run, for the report header.

    Args:
      config: the configuration of the run, included if given.

    Returns:
      A dict of short strings: date, Python, platform, CPU count, and the config.

    Example:
      >>> "python" in environment()
      True
    """
    meta: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "dtype": "float64",
    }
    try:
        from importlib.metadata import version

        meta["jax"] = version("jax")
        meta["jaxlib"] = version("jaxlib")
    except Exception:  # metadata is best effort
        pass
    if config is not None:
        meta["config"] = json.dumps(dataclasses.asdict(config))
    return meta


def write_results(
    results: Sequence[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    name: str = "taylor",
    meta: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Writes ``<name>.md`` (markdown tables) and ``<name>.json`` into ``out_dir``.

    Args:
      results: result dicts, as returned by :func:`run_suite`.
      out_dir: the output folder; created if missing.
      name: the base name of both files.
      meta: ``key: value`` pairs describing the run (see :func:`environment`).

    Returns:
      The paths of the markdown file and of the JSON file.

    Example:
      >>> md, js = write_results([], "/tmp/taylax-bench-doctest")  # doctest: +SKIP
      >>> md.name, js.name  # doctest: +SKIP
      ('taylor.md', 'taylor.json')
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out / f"{name}.md", out / f"{name}.json"
    md_path.write_text(markdown_report(results, meta), encoding="utf-8")
    payload = {"meta": meta or {}, "results": list(results)}
    json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return md_path, json_path


# --------------------------------------------------------------------------------------
# Command line (benchmarks/bench_taylor.py).
# --------------------------------------------------------------------------------------


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Expected comma-separated integers such as 4,8,16, but got {text!r}."
        ) from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"Orders must be at least 1, but got {text!r}.")
    return values


def _contender_list(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [v for v in values if v not in CONTENDERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"Unknown contender(s) {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}."
        )
    return values


def add_arguments(parser: argparse.ArgumentParser, default_out_dir: str) -> None:
    """Adds the benchmark options to ``parser`` (those of ``bench_taylor.py``).

    Args:
      parser: the parser or sub-parser to extend.
      default_out_dir: the default of ``--out-dir``.

    Returns:
      None.

    Example:
      >>> p = argparse.ArgumentParser()
      >>> add_arguments(p, "results")
      >>> p.parse_args(["--mlp-orders", "2,4"]).mlp_orders
      (2, 4)
    """
    d = BenchConfig()
    parser.add_argument("--out-dir", default=default_out_dir, help="where to write the results")
    parser.add_argument("--name", default="taylor", help="base name of the result files")
    parser.add_argument(
        "--scalar-orders", type=_int_list, default=d.scalar_orders, help="e.g. 10,20,40,100"
    )
    parser.add_argument("--mlp-orders", type=_int_list, default=d.mlp_orders, help="e.g. 4,8,16")
    parser.add_argument(
        "--contenders",
        type=_contender_list,
        default=d.contenders,
        help=f"comma-separated subset of {','.join(CONTENDERS)}",
    )
    parser.add_argument(
        "--timeout", type=float, default=d.timeout_s, help="time limit of one run, in seconds"
    )
    parser.add_argument(
        "--nested-max-order",
        type=int,
        default=d.nested_jvp_max_order,
        help="skip nested jvp above this order",
    )
    parser.add_argument(
        "--min-time",
        type=float,
        default=d.min_time_s,
        help="duration of the steady-state measurement, in seconds",
    )
    parser.add_argument("--no-steady", action="store_true", help="skip the steady-state timing")
    parser.add_argument(
        "--no-count-on-timeout",
        action="store_true",
        help="do not count the equations of runs that timed out",
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Runs the suite described by parsed :func:`add_arguments` options and writes results.

    Args:
      args: the parsed options.

    Returns:
      The process exit status: 0, or 1 if a run failed with an error (timeouts
      and skips are expected and do not count as failures).

    Example:
      >>> p = argparse.ArgumentParser()
      >>> add_arguments(p, "/tmp/out")
      >>> args = p.parse_args(["--mlp-orders", "", "--scalar-orders", "2"])
      >>> run_from_args(args)  # doctest: +SKIP
      0
    """
    config = BenchConfig(
        scalar_orders=args.scalar_orders,
        mlp_orders=args.mlp_orders,
        contenders=args.contenders,
        timeout_s=args.timeout,
        nested_jvp_max_order=args.nested_max_order,
        min_time_s=args.min_time,
        steady=not args.no_steady,
        count_on_timeout=not args.no_count_on_timeout,
    )
    total, done = len(config.runs()), 0

    def report(result: dict[str, Any]) -> None:
        nonlocal done
        done += 1
        summary = (
            f"equations={result['equations']} first_call={format_time(result['first_call_s'])} "
            f"steady={format_time(result['steady_s'])}"
        )
        if result["status"] != "ok":
            summary = f"{result['status']}: {result['reason']}"
        print(
            f"[{done}/{total}] {result['case']:<6} {result['contender']:<10} "
            f"order {result['order']:<4} {summary}",
            file=sys.stderr,
            flush=True,
        )

    results = run_suite(config, on_result=report)
    md_path, json_path = write_results(results, args.out_dir, args.name, environment(config))
    print(md_path.read_text(encoding="utf-8"))
    print(f"Wrote {md_path} and {json_path}.", file=sys.stderr)
    return 1 if any(r["status"] == "error" for r in results) else 0


def main(argv: Sequence[str] | None = None, default_out_dir: str = "benchmarks/results") -> int:
    """Runs the benchmark suite from the command line.

    Args:
      argv: the command-line arguments (default: ``sys.argv[1:]``).
      default_out_dir: the default of ``--out-dir``.

    Returns:
      The process exit status (see :func:`run_from_args`).

    Example:
      >>> main(["--scalar-orders", "10", "--mlp-orders", ""])  # doctest: +SKIP
      0
    """
    parser = argparse.ArgumentParser(
        prog="bench_taylor.py", description="Benchmark taylax against jet and nested jvp."
    )
    add_arguments(parser, default_out_dir)
    return run_from_args(parser.parse_args(argv))
