"""The jitted recursion benchmark: `my_func(t, k)` with `jax.jacfwd` vs `taylax.jacfwd`.

The users' recursion (a Heisenberg-picture series, see the README)::

    @partial(jax.jit, static_argnames="k")
    def my_func(t, k):
        if k == 0:
            return sx
        X_km1 = lambda t: my_func(t, k - 1)
        return 1j * commutator_herm(H(t), X_km1(t)) + jacfwd(X_km1, holomorphic=True)(t)

With `jax.jacfwd` the program triples with every level; with `taylax.jacfwd`
each level adds one Taylor pass. Every measurement runs in a fresh process
(`python benchmarks/recursion.py CONTENDER K`), so that the first call pays the
whole trace + compile, as a user's first call does. The worker imports taylax from
wherever Python finds it (`PYTHONPATH=src`, or another tree's `src` for an A/B).
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

__all__ = ["fitted_exponent", "max_relative_difference", "measure", "measure_sequence"]

CONTENDERS = ("taylax", "jax")


def build(contender: str):
    import jax
    import jax.numpy as jnp

    if contender == "taylax":
        import taylax

        jacfwd = taylax.jacfwd
    else:
        jacfwd = jax.jacfwd
    sx = jnp.asarray([[0, 1.0], [1.0, 0]], dtype=complex)
    sy = jnp.asarray([[0, -1j], [1j, 0]], dtype=complex)

    def conj_op(a):
        return jnp.swapaxes(a, -1, -2).conj()

    def commutator_herm(a, b):
        c = a @ b
        return c - conj_op(c)

    def h(t):
        return jnp.cos(t) * sy

    @partial(jax.jit, static_argnames="k")
    def my_func(t, k):
        if k == 0:
            return sx
        x_km1 = lambda t: my_func(t, k - 1)  # noqa: E731
        return 1j * commutator_herm(h(t), x_km1(t)) + jacfwd(x_km1, holomorphic=True)(t)

    return my_func


def _equations(contender: str, my_func, t, k: int) -> int:
    import jax
    import jax.extend.core as jex_core

    from taylax import emitted_jaxpr

    f = partial(my_func, k=k)
    # For taylax, the program its derivatives lower to; jax.jacfwd's jaxpr is that already.
    closed = emitted_jaxpr(f, t) if contender == "taylax" else jax.make_jaxpr(f)(t)
    # Each distinct sub-jaxpr once: a `jit` sub-program is lowered once however many
    # call sites it has.
    seen: set[int] = set()
    # `jaxprs_in_params` is public in `jax.extend.core` from jax 0.10.
    subs = getattr(jex_core, "jaxprs_in_params", None) or (
        lambda params: (
            getattr(v, "jaxpr", v)
            for value in params.values()
            for v in (value if isinstance(value, tuple) else (value,))
            if isinstance(v, (jex_core.Jaxpr, jex_core.ClosedJaxpr))
        )
    )

    def count(jaxpr) -> int:
        if id(jaxpr) in seen:
            return 0
        seen.add(id(jaxpr))
        return sum(1 + sum(count(sub) for sub in subs(e.params)) for e in jaxpr.eqns)

    return count(closed.jaxpr)


def _timed(call, t) -> float:
    start = time.perf_counter()
    call(t).block_until_ready()
    return time.perf_counter() - start


def _worker(
    contender: str, ks: list[int], count: bool, collect_first: bool = False, phases: bool = False
) -> None:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    my_func = build(contender)
    t = jnp.asarray(1.0, dtype=complex)
    # Seconds spent in generation-2 (whole-heap) collections, reported beside each call.
    full: list[float] = []

    def timed(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            full.append(time.perf_counter() if phase == "start" else -time.perf_counter())

    gc.callbacks.append(timed)
    for k in ks:
        if collect_first:
            # A full collection first, so that no generation-2 collection falls inside the
            # timed call only because of what the process allocated before it (imports).
            gc.collect()
        full.clear()
        start = time.perf_counter()
        if phases:
            # The same first call in JAX's stages, each timed: tracing the user's
            # program, lowering it (taylax's passes run here) and XLA's compile.
            marks = [start]
            stage = my_func.trace(t, k)
            marks.append(time.perf_counter())
            stage = stage.lower()
            marks.append(time.perf_counter())
            stage = stage.compile()
            marks.append(time.perf_counter())
            out = stage(t).block_until_ready()
        else:
            out = my_func(t, k).block_until_ready()
        elapsed = time.perf_counter() - start
        result = {"contender": contender, "k": k, "first_call_s": elapsed}
        result["full_collections_s"] = -sum(full)
        if phases:
            names = ("trace_s", "lower_s", "compile_s")
            result.update({n: b - a for n, a, b in zip(names, marks, marks[1:])})
        # The steady state too: the least of 20 calls of the compiled program.
        call = stage if phases else (lambda t, k=k: my_func(t, k))
        result["steady_s"] = min(_timed(call, t) for _ in range(20))
        result["value"] = [[float(z.real), float(z.imag)] for z in out.ravel().tolist()]
        print(json.dumps(result), flush=True)
    if count:
        # After the timed calls, so that counting (which traces) cannot warm any cache.
        for k in ks:
            print(json.dumps({"k": k, "equations": _equations(contender, my_func, t, k)}))


def _run(contender: str, ks: list[int], timeout_s: float, count: bool) -> list[dict[str, Any]]:
    # By path, so that the worker starts from any directory.
    here = str(Path(__file__).resolve())
    cmd = [sys.executable, here, contender, ",".join(map(str, ks))]
    if count:
        cmd.append("--count")
    env = dict(os.environ)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        stdout, status = proc.stdout, "ok" if proc.returncode == 0 else "error"
    except subprocess.TimeoutExpired as err:
        out = err.stdout or b""
        stdout, status = out.decode() if isinstance(out, bytes) else out, "timeout"
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    results = {r["k"]: r for r in rows if "first_call_s" in r}
    for r in rows:
        if "equations" in r and r["k"] in results:
            results[r["k"]]["equations"] = r["equations"]
    if status != "ok" and len(results) < len(ks):
        missing = [k for k in ks if k not in results]
        for k in missing[:1]:
            results[k] = {"contender": contender, "k": k, "status": status, "limit_s": timeout_s}
    for r in results.values():
        r.setdefault("status", "ok")
    return [results[k] for k in ks if k in results]


def measure(
    ks: list[int], contender: str, timeout_s: float = 120.0, count: bool = True
) -> list[dict[str, Any]]:
    """First-call time (fresh process per k) and emitted equations for each depth `k`."""
    results = []
    for k in ks:
        results += _run(contender, [k], timeout_s, count)
    return results


def measure_sequence(k: int, contender: str = "taylax", timeout_s: float = 300.0) -> dict:
    """Total first-call time of `k = 0..k` called in sequence in one process vs `k` alone.

    Also the last call of the sequence on its own (`last_s`): after `0..k-1`, the call
    at `k` finds every lower level traced and cached, so it should cost at most what `k`
    alone costs; the rest of the total is each lower `k`'s own compile.
    """
    sequence = _run(contender, list(range(k + 1)), timeout_s, count=False)
    alone = _run(contender, [k], timeout_s, count=False)
    total = sum(r.get("first_call_s", math.nan) for r in sequence)
    single = alone[0].get("first_call_s", math.nan) if alone else math.nan
    last = sequence[-1].get("first_call_s", math.nan) if sequence else math.nan
    return {
        "k": k,
        "sequence_total_s": total,
        "alone_s": single,
        "last_s": last,
        "ratio": total / single,
    }


def max_relative_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Largest `|a - b| / max|b|` over the entries of two measured results' values."""
    za = [complex(re, im) for re, im in a["value"]]
    zb = [complex(re, im) for re, im in b["value"]]
    scale = max(max(abs(z) for z in zb), 1e-300)
    return max(abs(x - y) for x, y in zip(za, zb, strict=True)) / scale


def fitted_exponent(results: list[dict[str, Any]], k_min: int = 8) -> float:
    """Least-squares slope of log(equations) against log(k), over `k >= k_min`."""
    points = [
        (math.log(r["k"]), math.log(r["equations"]))
        for r in results
        if r.get("equations") and r["k"] >= k_min
    ]
    n = len(points)
    if n < 2:
        return math.nan
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


if __name__ == "__main__":
    _contender, _ks = sys.argv[1], [int(k) for k in sys.argv[2].split(",")]
    _flags = sys.argv[3:]
    _worker(_contender, _ks, "--count" in _flags, "--collect-first" in _flags, "--phases" in _flags)
