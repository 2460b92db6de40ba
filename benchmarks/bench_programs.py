"""Whole-program benchmark: taylax vs nested ``jax.jvp`` on a loop and on a linear solve.

Two programs that ``jax.experimental.jet`` cannot run at all:

* ``rk4``: a forced pendulum integrated by classic RK4 in ``lax.fori_loop`` (100 steps),
  differentiated along one direction in its initial state ``y0`` AND its start time ``t0``;
* ``solve``: ``t -> jnp.linalg.solve(A + t*B, b)`` with 32x32 matrices.

Each (case, contender, order) runs in a fresh Python process, as in
``benchmarks/bench_taylor.py``: the first call is what a user pays the first time (trace,
lower, compile and run of ``jax.jit``), the steady state is the median time of one call after
warm-up, and the equations are counted recursively into sub-jaxprs. A worker that measures
nested jvp imports taylax only after its timings, to count them. Results go to
``benchmarks/results/programs.{md,json}``; ``benchmarks/update_readme.py`` renders them into
the README. For example::

    python benchmarks/bench_programs.py --orders 4,8 --nested-max-order 4 --timeout 60
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import nested_jvp, run_process, run_worker

RESULTS_DIR = Path(__file__).resolve().parent / "results"
NAME = "programs"

CASES: dict[str, str] = {
    "rk4": "RK4 in `fori_loop` (forced pendulum, 100 steps), along a direction in (y0, t0)",
    "solve": "`jnp.linalg.solve(A + t*B, b)`, 32x32, along t",
}
CONTENDERS: tuple[str, ...] = ("taylax", "nested_jvp")
ORDERS: tuple[int, ...] = (4, 8, 16)
# Nested jvp grows exponentially with the order: its RK4 first call takes over a minute at 8.
NESTED_MAX_ORDER = 8
_RK4_STEPS, _RK4_H, _SOLVE_N = 100, 0.05, 32


# --------------------------------------------------------------------------------------
# Worker side: runs in a fresh process.
# --------------------------------------------------------------------------------------


def build_case(case: str) -> tuple[Callable, Any, Any]:
    """The program, the point and the direction of a case: `(f, x, v)`.

    Args:
      case: a key of `CASES`.

    Returns:
      `f`, a function of one pytree; `x`, the point; `v`, the direction (same structure).

    Example:
      >>> f, x, v = build_case("solve")  # doctest: +SKIP
      >>> f(x).shape  # doctest: +SKIP
      (32,)
    """
    import jax
    import jax.numpy as jnp
    from jax import lax

    if case == "rk4":

        def pendulum(t, y):
            return jnp.stack([y[1], -jnp.sin(y[0]) + 0.5 * jnp.cos(t)])

        def rk4(state):
            y0, t0 = state
            h = _RK4_H

            def step(i, carry):
                y, t = carry
                k1 = pendulum(t, y)
                k2 = pendulum(t + h / 2, y + h / 2 * k1)
                k3 = pendulum(t + h / 2, y + h / 2 * k2)
                k4 = pendulum(t + h, y + h * k3)
                return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h

            return lax.fori_loop(0, _RK4_STEPS, step, (y0, t0))[0]

        x = (jnp.array([0.4, -0.2]), jnp.asarray(0.3))
        v = (jnp.array([0.7, -0.3]), jnp.asarray(1.0))
        return rk4, x, v
    if case == "solve":
        keys = jax.random.split(jax.random.PRNGKey(0), 3)
        n = _SOLVE_N
        a = jax.random.normal(keys[0], (n, n), jnp.float64) / math.sqrt(n) + 2 * jnp.eye(n)
        b_mat = jax.random.normal(keys[1], (n, n), jnp.float64) / math.sqrt(n)
        rhs = jax.random.normal(keys[2], (n,), jnp.float64)

        def solve(t):
            return jnp.linalg.solve(a + t * b_mat, rhs)

        return solve, jnp.asarray(0.3), jnp.asarray(1.0)
    raise ValueError(f"Unknown benchmark case {case!r}; expected one of {sorted(CASES)}.")


def build_contender(contender: str, f: Callable, order: int) -> tuple[Callable, bool]:
    """`(fn, stacked)`: `fn(x, v)` differentiates `f` along `v`; `stacked` if it returns 0..order.

    Args:
      contender: one of `CONTENDERS`.
      f: the program.
      order: the derivative order.

    Returns:
      The function to time, and whether it returns all orders stacked (taylax) or only the
      highest one (nested jvp).

    Example:
      >>> fn, stacked = build_contender("nested_jvp", lambda t: t**3, 2)  # doctest: +SKIP
      >>> float(fn(1.0, 1.0)), stacked  # doctest: +SKIP
      (6.0, False)
    """

    if contender == "taylax":
        import taylax

        return taylax.derivatives(f, order), True
    if contender == "nested_jvp":
        return nested_jvp(f, order), False
    raise ValueError(f"Unknown contender {contender!r}; expected one of {list(CONTENDERS)}.")


def worker(spec: dict[str, Any]) -> None:
    """Measures one (case, contender, order); prints JSON lines (see the module docstring)."""
    run_worker(spec, build_case, build_contender)


# --------------------------------------------------------------------------------------
# Driver side.
# --------------------------------------------------------------------------------------


def run_one(
    case: str, contender: str, order: int, *, timeout_s: float = 120.0, min_time_s: float = 0.2
) -> dict[str, Any]:
    """Measures one contender on one case at one order, in a fresh process.

    Args:
      case: a key of `CASES`.
      contender: one of `CONTENDERS`.
      order: the derivative order (at least 1).
      timeout_s: the time limit of the run; a run that exceeds it is killed.
      min_time_s: the steady-state measurement lasts about this long.

    Returns:
      A result dict with the keys of `harness.run_one`'s results: `case`,
      `contender`, `order`, `status` (`ok`, `timeout`, `error`), `reason`, `equations`,
      `first_call_s`, `steady_s`, `value`, `device`, `limit_s`, `wall_s`.

    Example:
      >>> run_one("solve", "taylax", 4)["status"]  # doctest: +SKIP
      'ok'
    """
    spec = {"case": case, "contender": contender, "order": order, "min_time_s": min_time_s}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    start = time.perf_counter()
    fields, status, reason = run_process(command, timeout_s)
    return {
        "case": case,
        "contender": contender,
        "order": order,
        "status": status,
        "reason": reason,
        "equations": fields.get("equations"),
        "first_call_s": fields.get("first_call_s"),
        "steady_s": fields.get("steady_s"),
        "value": fields.get("value"),
        "device": fields.get("device"),
        "limit_s": timeout_s,
        "wall_s": time.perf_counter() - start,
    }


def markdown_report(results: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Markdown tables, one per case: equations, first call, steady state and a value check.

    Args:
      results: result dicts from `run_one` (or `harness.skipped`).
      meta: `key: value` pairs listed above the tables.

    Returns:
      The markdown text.

    Example:
      >>> from harness import skipped
      >>> "| 4 | skipped" in markdown_report([skipped("rk4", "taylax", 4, "demo")], {})
      True
    """
    from harness import format_ratio, format_time

    def shown(r, key, fmt):
        if r is None:
            return "—"
        value = r.get(key)
        return fmt(value) if value is not None and r["status"] == "ok" else r["status"]

    def ok(r, key):
        return r.get(key) if r is not None and r["status"] == "ok" else None

    lines = ["# Whole programs: taylax vs nested jax.jvp", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items()] + [""]
    for case, description in CASES.items():
        table = {(r["order"], r["contender"]): r for r in results if r["case"] == case}
        if not table:
            continue
        lines += [
            f"## Case `{case}`: {description}",
            "",
            "| order | equations taylax / nested jvp | first call taylax / nested jvp (ratio) "
            "| steady state taylax / nested jvp (ratio) | checksum taylax / nested jvp |",
            "|---:|---|---|---|---|",
        ]
        for order in sorted({o for o, _ in table}):
            t, n = table.get((order, "taylax")), table.get((order, "nested_jvp"))
            row = [str(order), f"{shown(t, 'equations', '{:,}'.format)} / "]
            row[-1] += shown(n, "equations", "{:,}".format)
            for key in ("first_call_s", "steady_s"):
                row.append(
                    f"{shown(t, key, format_time)} / {shown(n, key, format_time)} "
                    f"({format_ratio(ok(t, key), ok(n, key))})"
                )
            row.append(
                f"{shown(t, 'value', '{:.12g}'.format)} / {shown(n, 'value', '{:.12g}'.format)}"
            )
            lines.append("| " + " | ".join(row) + " |")
        notes = [
            f"{r['contender']} at order {r['order']}: {r['status']}, {r['reason']}"
            for r in table.values()
            if r["status"] != "ok"
        ]
        lines += [""] + (["Notes:", "", *(f"- {n}" for n in notes), ""] if notes else [])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark and writes `programs.md` and `programs.json`.

    Args:
      argv: command-line arguments (default: `sys.argv[1:]`); unknown options (the ones
        `make bench` passes to every script) are ignored.

    Returns:
      The exit status: 0, or 1 if a run failed with an error (timeouts and skips are expected).

    Example:
      >>> main(["--orders", "4", "--nested-max-order", "4"])  # doctest: +SKIP
      0
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--orders", default=",".join(map(str, ORDERS)), help="e.g. 4,8,16")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    parser.add_argument("--nested-max-order", type=int, default=NESTED_MAX_ORDER)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per run")
    parser.add_argument("--min-time", type=float, default=0.2, help="steady-state seconds")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    args, _ = parser.parse_known_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0

    from harness import environment, format_time, skipped

    orders = [int(o) for o in args.orders.split(",") if o.strip()]
    cases = [c for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown or any(o < 1 for o in orders):
        parser.error(f"cases must be among {sorted(CASES)} and orders >= 1; got {cases} {orders}.")
    results = []
    for case in cases:
        for order in orders:
            for contender in CONTENDERS:
                if contender == "nested_jvp" and order > args.nested_max_order:
                    reason = f"too slow (nested jvp runs up to order {args.nested_max_order})"
                    result = skipped(case, contender, order, reason)
                else:
                    result = run_one(
                        case, contender, order, timeout_s=args.timeout, min_time_s=args.min_time
                    )
                results.append(result)
                print(
                    f"{case:<6} {contender:<10} order {order:<3} {result['status']:<8} "
                    f"first={format_time(result['first_call_s'])} "
                    f"steady={format_time(result['steady_s'])} equations={result['equations']}",
                    file=sys.stderr,
                    flush=True,
                )
    meta = environment()
    meta["config"] = json.dumps(
        {"cases": cases, "orders": orders, "nested_max_order": args.nested_max_order,
         "timeout_s": args.timeout, "min_time_s": args.min_time}
    )  # fmt: skip
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.md").write_text(markdown_report(results, meta), encoding="utf-8")
    payload = {"meta": meta, "results": results}
    (out / f"{NAME}.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print((out / f"{NAME}.md").read_text(encoding="utf-8"))
    return 1 if any(r["status"] == "error" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
