"""Jaxpr optimizer benchmark: equations and XLA compile time with and without optimization.

Each (case, mode) runs in a fresh Python process, so no trace or compile cache is
shared. The function ``fn(x, v)`` of a case is staged as ``jax.jit(fn)`` (mode
``raw``) or ``jax.jit(taylax.optimized(fn))`` (mode ``optimized``), and each stage
of its first call is timed: trace (including the optimizer), lower, XLA compile,
run. Then the jaxpr is traced again and ``taylax.optimize_jaxpr`` alone is timed.

Cases: nested ``jax.jvp`` of ``0.3*sin(t)*t**10`` at orders 4, 6, 8, and what
``taylax.derivatives`` emits for it at orders 10 and 40 and for the 3-layer tanh MLP of
``bench_taylor.py`` at order 16. Writes ``benchmarks/results/optimize.md`` and
``optimize.json``::

    python benchmarks/bench_optimize.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# (case name, benchmark case of harness.py, contender, order)
CASES = [
    ("nested jvp, scalar", "scalar", "nested_jvp", 4),
    ("nested jvp, scalar", "scalar", "nested_jvp", 6),
    ("nested jvp, scalar", "scalar", "nested_jvp", 8),
    ("taylax.derivatives, scalar", "scalar", "taylax", 10),
    ("taylax.derivatives, scalar", "scalar", "taylax", 40),
    ("taylax.derivatives, tanh MLP", "mlp", "taylax", 16),
]
MODES = ("raw", "optimized")


def _worker(spec: dict) -> None:
    """Measures one (case, mode) and prints one JSON line."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    import taylax
    from harness import build_case, build_contender

    jax.block_until_ready(jax.jit(lambda a: a + 1.0)(jnp.zeros(())))  # warm up the backend
    f, x, v = build_case(spec["case"])
    fn, _ = build_contender(spec["contender"], f, spec["order"])
    staged = taylax.optimized(fn) if spec["mode"] == "optimized" else fn
    x, v = jax.block_until_ready((x, v))

    t0 = time.perf_counter()
    traced = jax.jit(staged).trace(x, v)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    out = jax.block_until_ready(compiled(x, v))
    t4 = time.perf_counter()

    raw = jax.make_jaxpr(fn)(x, v)
    t5 = time.perf_counter()
    opt = taylax.optimize_jaxpr(raw)
    t6 = time.perf_counter()
    last = np.asarray(out[-1] if spec["contender"] == "taylax" else out, np.float64).ravel()
    record = {
        **spec,
        "trace_s": t1 - t0,
        "lower_s": t2 - t1,
        "compile_s": t3 - t2,
        "run_s": t4 - t3,
        "first_call_s": t4 - t0,
        "optimizer_s": t6 - t5,
        "equations_raw": taylax.equation_counts(raw).total(),
        "equations_optimized": taylax.equation_counts(opt).total(),
        "checksum": float(np.dot(last, np.cos(np.arange(last.size)))),
    }
    print(json.dumps(record), flush=True)


def _spawn(spec: dict, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"exceeded the time limit of {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
    return {**spec, "error": tail[0]}


def _ms(seconds) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.0f} ms"


def markdown(results: list[dict], meta: dict) -> str:
    """The results as a markdown report (one row per case, raw vs optimized side by side)."""
    lines = [
        "# Jaxpr optimizer: equations and first-call time, raw vs `taylax.optimized`",
        "",
        f"jax {meta['jax']}, {meta['cpus']} CPUs, float64, {meta['date']}. Each cell is one "
        "fresh process; `jax.jit(fn)` (raw) against `jax.jit(taylax.optimized(fn))` "
        "(optimized). Trace includes the optimizer; the optimizer column times "
        "`taylax.optimize_jaxpr` alone on the traced jaxpr.",
        "",
        "| case | order | equations raw → optimized | optimizer | trace raw / opt "
        "| XLA compile raw / opt | first call raw / opt | rel. diff |",
        "|---|---:|---|---:|---|---|---|---:|",
    ]
    by_key = {(r["name"], r["order"], r["mode"]): r for r in results}
    for name, _, _, order in CASES:
        raw, opt = by_key.get((name, order, "raw"), {}), by_key.get((name, order, "optimized"), {})
        if "error" in raw or "error" in opt:
            lines.append(f"| {name} | {order} | error: {raw.get('error') or opt.get('error')} |")
            continue
        diff = abs(raw["checksum"] - opt["checksum"]) / max(abs(raw["checksum"]), 1e-300)
        lines.append(
            f"| {name} | {order} | {raw['equations_raw']:,} → {opt['equations_optimized']:,} "
            f"| {_ms(opt['optimizer_s'])} | {_ms(raw['trace_s'])} / {_ms(opt['trace_s'])} "
            f"| {_ms(raw['compile_s'])} / {_ms(opt['compile_s'])} "
            f"| {_ms(raw['first_call_s'])} / {_ms(opt['first_call_s'])} | {diff:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every (case, mode) in a fresh process and writes the report.

    Args:
      argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
      The exit status: 0, or 1 if a run failed.

    Example:
      >>> main(["--timeout", "120"])  # doctest: +SKIP
      0
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per process")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR), help="where to write results")
    args = parser.parse_args(argv)
    if args.worker:
        _worker(json.loads(args.worker))
        return 0
    import datetime
    import os
    from importlib.metadata import version

    results = []
    for name, case, contender, order in CASES:
        for mode in MODES:
            spec = {"name": name, "case": case, "contender": contender, "order": order}
            result = _spawn({**spec, "mode": mode}, args.timeout)
            results.append(result)
            print(f"{name} order {order} {mode}: {result}", file=sys.stderr, flush=True)
    meta = {
        "jax": version("jax"),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "optimize.md").write_text(markdown(results, meta), encoding="utf-8")
    payload = {"meta": meta, "results": results}
    (out / "optimize.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print((out / "optimize.md").read_text(encoding="utf-8"))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
