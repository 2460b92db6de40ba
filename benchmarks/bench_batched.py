"""Batched steady state and first calls: taylax vs ``jax.experimental.jet`` vs nested ``jax.jvp``.

Where users spend their compute: all derivatives 0..K of an elementwise chain at N
points, and a tanh MLP along a direction. Every contender computes the same output
(all K+1 derivatives), float64, jitted:

* taylax: ``jax.jit(jax.vmap(taylax.derivatives(f, K)))``;
* jet: ``jax.experimental.jet.jet`` on the whole array (it is elementwise already);
* nested jvp: ``jax.jvp`` nested K times, every level's output stacked (K <= 8: the
  program doubles per level), written two ways: on the whole array, and per point under
  ``jax.vmap`` as taylax is (at K = 2 XLA compiles the second 2-3x faster, at K = 8
  they tie); ``best`` takes the faster;
* roofline: a hand-fused C kernel of the same arithmetic (``roofline.c``, built here
  with the system's C compiler and OpenMP; skipped where there is none).

Steady state is the minimum over interleaved rounds (every contender in turn, each
timed sample right after an untimed call of its own; below `STEADY_POINTS` a sample is
the mean of back-to-back calls, `calls_at`), so a machine that gets slower mid-run slows
all contenders alike. First calls run in a fresh process each (trace + compile + run).
Writes ``benchmarks/results/batched.{md,json}``.

    python benchmarks/bench_batched.py                 # the full suite (make bench)
    python benchmarks/bench_batched.py --quick         # a smaller grid
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jax.experimental import jet as jax_jet  # noqa: E402

import taylax  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"


def seed_function(t):
    return 0.3 * jnp.sin(t) * t**10


def damped_wave(t):
    return jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)


def growth(t):
    return jnp.sqrt(1 + t**2) * jnp.exp(jnp.sin(t))


CHAINS: dict[str, tuple[Callable, str]] = {
    "seed_function": (seed_function, "0.3 sin(t) t^10"),
    "damped_wave": (damped_wave, "exp(-t^2/2) cos(3t) / (1 + t^2)"),
    "growth": (growth, "sqrt(1 + t^2) exp(sin(t))"),
}
NESTED_MAX_ORDER = 8
# Contenders whose compile does not finish in reasonable time at some (case, order):
# jet's program for exp(sin(t)) at K = 32 did not compile in 8 minutes here.
SKIPPED = {("growth", "jet", 32): "jet's compile did not finish in 8 minutes"}


# --------------------------------------------------------------------------
# Contenders for an elementwise chain: each maps t (N,) to derivatives (K+1, N) or (N, K+1)
# --------------------------------------------------------------------------


def taylax_chain(f, K):
    return jax.jit(jax.vmap(taylax.derivatives(f, K)))


def jet_chain(f, K):
    def run(t):
        terms = [jnp.ones_like(t)] + [jnp.zeros_like(t)] * (K - 1)
        y0, ys = jax_jet.jet(f, (t,), (terms,))
        return jnp.stack([y0, *ys])

    return jax.jit(run)


def nested_levels(f, K, v=None, stacked=True):
    """`t -> stack(f, f', ..., f^(K))` by `jax.jvp` nested K times along `v` (default:
    ones like `t`); with `stacked=False`, the list of them."""

    def along(t):
        return jnp.ones_like(t) if v is None else v

    levels = [f]
    for _ in range(K):
        levels.append((lambda g: lambda t: jax.jvp(g, (t,), (along(t),))[1])(levels[-1]))
    if not stacked:
        return lambda t: [g(t) for g in levels]
    return lambda t: jnp.stack([g(t) for g in levels])


def nested_chain(f, K):
    return jax.jit(nested_levels(f, K))


def nested_vmap_chain(f, K):
    """Nested jvp per point, vmapped over the points like taylax's contender."""
    return jax.jit(jax.vmap(nested_levels(f, K)))


NESTED = ("nested jvp", "nested jvp (vmap)")


def _best(ms: dict) -> float:
    """The fastest of jet and both nested jvps (inf where none ran)."""
    return min(ms.get(name, np.inf) for name in ("jet", *NESTED))


class Roofline:
    """The C kernels of ``roofline.c``, compiled once into a temporary shared library."""

    def __init__(self):
        self.lib = None
        self.reason = ""
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            self.reason = "no C compiler on this machine"
            return
        self._dir = tempfile.mkdtemp(prefix="taylax-roofline-")
        so = Path(self._dir) / "roofline.so"
        cmd = [compiler, "-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared"]
        cmd += [str(HERE / "roofline.c"), "-o", str(so), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            self.reason = f"the C compiler failed: {done.stderr.strip()[:200]}"
            return
        self.lib = ctypes.CDLL(str(so))

    def kernel(self, name, K):
        if self.lib is None:
            return None
        fn = getattr(self.lib, name)
        pointer = ctypes.POINTER(ctypes.c_double)
        fn.argtypes = [pointer, pointer, ctypes.c_long, ctypes.c_int]

        def run(t):
            out = np.empty((t.shape[0], K + 1))
            fn(t.ctypes.data_as(pointer), out.ctypes.data_as(pointer), t.shape[0], K)
            return out

        return run


# --------------------------------------------------------------------------
# MLP along a direction
# --------------------------------------------------------------------------


def mlp_params(width, depth=3, d_in=16, seed=0):
    key = jax.random.PRNGKey(seed)
    sizes = [d_in] + [width] * depth + [1]
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        key, k1, k2 = jax.random.split(key, 3)
        params.append(
            (jax.random.normal(k1, (m, n)) / np.sqrt(m), 0.1 * jax.random.normal(k2, (n,)))
        )
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def mlp_contenders(params, K):
    f = lambda x: mlp(params, x)  # noqa: E731

    def taylax_run(x, v):
        return taylax.derivatives(f, K)(x, v)

    def jet_run(x, v):
        terms = [v] + [jnp.zeros_like(v)] * (K - 1)
        y0, ys = jax_jet.jet(f, (x,), (terms,))
        return jnp.stack([y0, *ys])

    def nested_run(x, v):
        return nested_levels(f, K, v)(x)

    return {
        "taylax": jax.jit(taylax_run),
        "jet": jax.jit(jet_run),
        "nested jvp": jax.jit(nested_run),
    }


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def interleaved_minimum(
    fns: dict,
    args: dict,
    rounds: int,
    budget_s: float,
    skip_failures: bool = False,
    calls: int = 1,
) -> dict:
    """Minimum wall time per call and contender (ms) over rounds that run every
    contender in turn.

    Each timed sample follows an untimed call of the same contender, as in a loop that
    calls one function: the allocator is then in the state that function's own last
    call left. Timed right after another contender, a call's temporaries land where
    that contender's were freed, and at a million points that alone moved a cell by
    up to 1.7x (taylax against nested jvp under `vmap` at K = 2, one kernel of the
    same arithmetic each, 1.00-1.04x when run alone).

    A sample is `calls` calls back to back, waiting on the last, divided by `calls`
    (see `calls_at`).

    With `skip_failures`, a contender whose first call raises is reported as
    `"failed: <exception type>"` instead of a time, and the others are timed.
    """
    best, live = {}, {}
    for name, fn in fns.items():
        try:
            jax.block_until_ready(fn(*args[name]))
        except Exception as err:  # a contender that cannot run this case
            if not skip_failures:
                raise
            best[name] = f"failed: {type(err).__name__}"
            continue
        live[name] = fn
        best[name] = float("inf")
    start = time.perf_counter()
    for r in range(rounds):
        for name, fn in live.items():
            jax.block_until_ready(fn(*args[name]))
            t0 = time.perf_counter()
            for _ in range(calls - 1):
                fn(*args[name])
            jax.block_until_ready(fn(*args[name]))
            best[name] = min(best[name], (time.perf_counter() - t0) * 1e3 / calls)
        if r >= 2 and time.perf_counter() - start > budget_s:
            break
    return best


def minimum_times(fns: dict, args: tuple, rounds: int, budget_s: float = 20.0, **options) -> dict:
    """`interleaved_minimum` with the same arguments `args` for every contender (`options`:
    its `skip_failures` and `calls`)."""
    return interleaved_minimum(fns, {n: args for n in fns}, rounds, budget_s=budget_s, **options)


def check_agreement(reference, other, K) -> float:
    """Worst relative error of `other` against `reference`, per derivative order."""
    a = np.asarray(reference).reshape(K + 1, -1) if np.shape(reference)[0] == K + 1 else None
    a = np.asarray(reference).T if a is None else a
    b = np.asarray(other)
    b = b if b.shape[0] == K + 1 else b.T
    b = b.reshape(K + 1, -1)
    scale = np.max(np.abs(a), axis=1, keepdims=True) + 1e-300
    return float(np.max(np.abs(a - b) / scale))


# Below this many points a call takes at most a few milliseconds, and waiting on each
# call times the wait as much as the kernel. At 4,096 points the minimum over single
# calls moved 2x between runs (the damped wave at K = 2: 0.048, 0.094 and 0.085 ms in
# three runs of 20 rounds) and put two kernels of the same arithmetic 1.40x apart over
# 960 rounds; the minimum over 40 means of 64 back-to-back calls read 0.0481-0.0492 ms
# for nested jvp under `vmap` in seven runs and 0.0506-0.0524 ms for taylax in four (the
# growth chain at K = 2, one process per run, 2026-11-26).
STEADY_POINTS = 1 << 18


def calls_at(n: int) -> int:
    """Back-to-back calls per timed sample at `n` points: `STEADY_POINTS // n`, at
    least 1 (a sample then covers about as many points at every size)."""
    return max(1, STEADY_POINTS // n)


def steady_chains(sizes, orders, rounds, roofline: Roofline, cases=None) -> list[dict]:
    rows = []
    for case, (f, _) in CHAINS.items():
        if cases and case not in cases:
            continue
        for n in sizes:
            t = jnp.linspace(0.5, 1.5, n)
            t_host = np.asarray(t)
            for K in orders:
                fns = {"taylax": taylax_chain(f, K)}
                if (case, "jet", K) not in SKIPPED:
                    fns["jet"] = jet_chain(f, K)
                if K <= NESTED_MAX_ORDER:
                    fns["nested jvp"] = nested_chain(f, K)
                    fns["nested jvp (vmap)"] = nested_vmap_chain(f, K)
                args = {name: (t,) for name in fns}
                kernel = roofline.kernel(case, K)
                if kernel is not None:
                    fns["roofline"] = kernel
                    args["roofline"] = (t_host,)
                times = interleaved_minimum(fns, args, rounds, budget_s=20.0, calls=calls_at(n))
                reference_name = "jet" if "jet" in fns else "roofline"
                reference = np.asarray(fns[reference_name](*args[reference_name]))
                errors = {
                    name: check_agreement(reference, fn(*args[name]), K)
                    for name, fn in fns.items()
                    if name != reference_name
                }
                row = {"case": case, "n": n, "order": K, "ms": times, "rel_err": errors}
                row["rel_err_reference"] = reference_name
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def steady_mlp(orders, rounds, width=128, batch=2048) -> list[dict]:
    params = mlp_params(width)
    key = jax.random.PRNGKey(1)
    x = jax.random.normal(key, (batch, 16))
    v = jax.random.normal(jax.random.PRNGKey(2), (batch, 16))
    rows = []
    for K in orders:
        fns = mlp_contenders(params, K)
        args = {name: (x, v) for name in fns}
        times = interleaved_minimum(fns, args, rounds, budget_s=20.0)
        row = {"case": "mlp", "width": width, "batch": batch, "order": K, "ms": times}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


# --------------------------------------------------------------------------
# First calls, each in a fresh process
# --------------------------------------------------------------------------


def first_call_child(kind: str, K: int, n: int) -> dict:
    """Run in a fresh process: the first call of one pipeline (trace + compile + run)."""
    t = jnp.linspace(0.5, 1.5, n)
    jax.block_until_ready(t)
    f = seed_function
    if kind == "taylax":
        fn, args = taylax_chain(f, K), (t,)
    elif kind == "taylax v-arg":
        fn, args = jax.jit(lambda t, v: taylax.derivatives(f, K)(t, v)), (t, jnp.ones_like(t))
    elif kind == "taylax constant v":
        fn, args = jax.jit(lambda t: taylax.derivatives(f, K)(t, jnp.ones_like(t))), (t,)
    elif kind == "jet":
        fn, args = jet_chain(f, K), (t,)
    else:
        raise ValueError(f"unknown first-call kind {kind!r}")
    jax.block_until_ready(args)
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    seconds = time.perf_counter() - t0
    equations = None
    if kind == "taylax":
        jaxpr = jax.make_jaxpr(taylax.derivatives(f, K))(jnp.asarray(1.0))
        equations = sum(taylax.equation_counts(jaxpr).values())
    return {"kind": kind, "order": K, "n": n, "seconds": seconds, "equations": equations}


def first_call(kind: str, K: int, n: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--first-call", kind, str(K), str(n)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "order": K, "n": n, "seconds": None, "error": f"> {timeout} s"}
    if done.returncode != 0:
        return {"kind": kind, "order": K, "n": n, "seconds": None, "error": done.stderr[-300:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_calls(orders, n, constant_n, constant_order, timeout) -> list[dict]:
    rows = []
    for K in orders:
        for kind in ("taylax", "jet"):
            rows.append(first_call(kind, K, n, timeout))
            print(json.dumps(rows[-1]), flush=True)
    for kind in ("taylax v-arg", "taylax constant v"):
        rows.append(first_call(kind, constant_order, constant_n, timeout))
        print(json.dumps(rows[-1]), flush=True)
    return rows


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _ratio(ours, theirs, suffix: str = "") -> str:
    return "—" if not np.isfinite(theirs) else f"{ours / theirs:.2f}{suffix}"


def _fmt(ms):
    if ms is None or ms == float("inf"):
        return "—"
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}"


def markdown(payload: dict) -> str:
    lines = [
        f"# Batched steady state ({payload['meta']['date'][:10]}, {payload['meta']['machine']})",
        "",
        "All derivatives 0..K, float64, minimum over interleaved rounds (each timed sample "
        "right after an untimed call of the same contender; below "
        f"{STEADY_POINTS:,} points a sample is the mean of {STEADY_POINTS:,} / N calls "
        "back to back), milliseconds per call. "
        "`best` is the fastest of jet and nested jvp (on whole arrays, or per point under "
        "`vmap`); ratios below 1 mean taylax is faster; "
        "`roofline` is a hand-fused C kernel of the same arithmetic (OpenMP, all cores).",
        "",
    ]
    for case, (_, formula) in CHAINS.items():
        rows = [r for r in payload["chains"] if r["case"] == case]
        if not rows:
            continue
        lines += [f"## {formula}", ""]
        lines += [
            "| N | K | taylax | jet | nested jvp | nested jvp (vmap) | roofline | taylax / best "
            "| taylax / roofline |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            ms = r["ms"]
            best = _best(ms)
            roof = ms.get("roofline")
            lines.append(
                f"| {r['n']:,} | {r['order']} | {_fmt(ms['taylax'])} | {_fmt(ms.get('jet'))} | "
                f"{_fmt(ms.get('nested jvp'))} | {_fmt(ms.get('nested jvp (vmap)'))} | "
                f"{_fmt(roof)} | {_ratio(ms['taylax'], best)} | "
                + (f"{ms['taylax'] / roof:.1f}" if roof else "—")
                + " |"
            )
        lines.append("")
    if payload["mlp"]:
        r0 = payload["mlp"][0]
        lines += [
            f"## tanh MLP, width {r0['width']}, batch {r0['batch']}, along a random direction",
            "",
            "| K | taylax | jet | nested jvp | taylax / best |",
            "|---|---|---|---|---|",
        ]
        for r in payload["mlp"]:
            ms = r["ms"]
            best = min(ms["jet"], ms["nested jvp"])
            lines.append(
                f"| {r['order']} | {_fmt(ms['taylax'])} | {_fmt(ms['jet'])} | "
                f"{_fmt(ms['nested jvp'])} | {ms['taylax'] / best:.2f} |"
            )
        lines.append("")
    if payload["first_calls"]:
        lines += [
            "## First call (fresh process: trace + compile + run), 0.3 sin(t) t^10",
            "",
            "| pipeline | K | N | seconds | taylax equations |",
            "|---|---|---|---|---|",
        ]
        for r in payload["first_calls"]:
            sec = "—" if r.get("seconds") is None else f"{r['seconds']:.2f}"
            eqs = r.get("equations") or ""
            lines.append(f"| {r['kind']} | {r['order']} | {r['n']:,} | {sec} | {eqs} |")
        lines.append("")
    if payload["meta"].get("roofline_note"):
        lines += [f"Roofline: {payload['meta']['roofline_note']}", ""]
    return "\n".join(lines)


def readme_summary(payload: dict) -> str:
    """The README's compact view: ratios per chain, N and K; the MLP; first calls."""
    meta = payload["meta"]
    lines = [
        "(f) Batched steady state: all derivatives 0..K at N points, "
        "`jax.jit(jax.vmap(taylax.derivatives(f, K)))` against `jax.experimental.jet` and "
        "nested `jax.jvp` computing the same output, and a hand-fused C kernel of the same "
        f"arithmetic as the roofline (R); float64, {meta['machine']}, minimum of interleaved "
        "rounds (each timed sample right after an untimed call of the same contender; below "
        f"{STEADY_POINTS:,} points a sample is the mean of {STEADY_POINTS:,} / N calls back "
        "to back), "
        f"measured {meta['date'][:10]} (`benchmarks/results/batched.md`). "
        "Each cell: taylax time (taylax / best of jet and nested jvp, the latter on whole "
        "arrays or per point under `vmap`, the faster; taylax / R).",
        "",
    ]
    for case, (_, formula) in CHAINS.items():
        rows = [r for r in payload["chains"] if r["case"] == case]
        if not rows:
            continue
        orders = sorted({r["order"] for r in rows})
        sizes = sorted({r["n"] for r in rows})
        lines += [f"`{formula}`", ""]
        lines.append("| N | " + " | ".join(f"K = {k}" for k in orders) + " |")
        lines.append("|---:|" + "---|" * len(orders))
        by = {(r["n"], r["order"]): r["ms"] for r in rows}
        for n in sizes:
            cells = []
            for k in orders:
                ms = by.get((n, k))
                if ms is None:
                    cells.append("—")
                    continue
                best = _best(ms)
                roof = ms.get("roofline")
                roof_text = f"; {ms['taylax'] / roof:.1f}× R" if roof else ""
                ratio = _ratio(ms["taylax"], best, "×")
                cells.append(f"{_fmt(ms['taylax'])} ms ({ratio}{roof_text})")
            lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
        lines.append("")
    if payload.get("mlp"):
        r0 = payload["mlp"][0]
        lines += [
            f"tanh MLP (width {r0['width']}, batch {r0['batch']}) along a random direction:",
            "",
            "| K | taylax | jet | nested jvp | taylax / best |",
            "|---:|---|---|---|---|",
        ]
        for r in payload["mlp"]:
            ms = r["ms"]
            best = min(ms["jet"], ms["nested jvp"])
            lines.append(
                f"| {r['order']} | {_fmt(ms['taylax'])} ms | {_fmt(ms['jet'])} ms | "
                f"{_fmt(ms['nested jvp'])} ms | {ms['taylax'] / best:.2f}× |"
            )
        lines.append("")
    firsts = payload.get("first_calls") or []
    if firsts:
        lines += [
            "First calls, each in a fresh process (trace + compile + run) of "
            "`0.3 sin(t) t^10` over 65,536 points; the last two rows compare a direction "
            "passed as an argument with a constant one built inside `jit` (262,144 points):",
            "",
            "| pipeline | K | seconds | taylax equations |",
            "|---|---:|---:|---:|",
        ]
        for r in firsts:
            sec = "—" if r.get("seconds") is None else f"{r['seconds']:.2f}"
            lines.append(f"| {r['kind']} | {r['order']} | {sec} | {r.get('equations') or ''} |")
    return "\n".join(lines).rstrip()


def main(argv=None) -> int:
    """Run the batched suite and write ``results/batched.{md,json}``.

    Args:
      argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
      The exit status (0).

    Example:
      >>> main(["--quick", "--no-first-calls"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    parser.add_argument("--sizes", default=None, help="comma-separated N (points)")
    parser.add_argument("--orders", default=None, help="comma-separated K")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-first-calls", action="store_true")
    parser.add_argument("--no-mlp", action="store_true")
    parser.add_argument("--cases", default=None, help="comma-separated chains (default: all)")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    parser.add_argument("--first-call", nargs=3, metavar=("KIND", "K", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.first_call:
        kind, K, n = args.first_call
        print(json.dumps(first_call_child(kind, int(K), int(n))))
        return 0
    sizes = [4096, 65536] if args.quick else [4096, 65536, 1048576]
    orders = [2, 4, 8, 16] if args.quick else [2, 4, 8, 16, 32]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    if args.orders:
        orders = [int(k) for k in args.orders.split(",")]
    roofline = Roofline()
    payload = {
        "meta": {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"jax {jax.__version__}, {os.cpu_count()} CPUs ({platform.machine()})",
            "roofline_note": roofline.reason,
        },
        "chains": steady_chains(
            sizes, orders, args.rounds, roofline, args.cases.split(",") if args.cases else None
        ),
        "mlp": [] if args.no_mlp else steady_mlp([2, 4, 8], args.rounds),
        "first_calls": []
        if args.no_first_calls
        else first_calls([8, 16, 32, 64], 65536, 262144, 16, timeout=300),
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "batched.json").write_text(json.dumps(payload, indent=1))
    (out / "batched.md").write_text(markdown(payload))
    print(markdown(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
