"""One trajectory with and without `taylax.ode.one_function_loops`, in fresh processes.

XLA reads the setting once per process, so each measurement runs in a process of its
own (`python benchmarks/ode_one_function.py --worker CASE --setting on|off`), the two
settings alternating, `--processes` times each; the medians are printed with every
process's figure. Float64, the problems of `bench_ode_problems.py` (`arenstorf`,
`lorenz`, `pendulum`, `neural`) at `--tol`; a case is `PROBLEM:KIND`, KIND one of

- `solve`: `jax.jit(taylax.ode.integrate(field, tol=tol))` from 0 to the problem's end;
- `reverse`: `jax.grad` of the squared final state with respect to the initial state,
  through a solve made with `gradients="reverse"` (`max_steps=4096`);
- `forward`: the same by `jax.jacfwd` through the default solve.

Two more cases measure the derivative engine, not the integrator: `rk4:K` is
`taylax.derivatives(rk4_fori, K)` at one value (`gpu_check.py`'s RK4 of
y' = -y^3 + sin t, 100 steps in a `lax.fori_loop`), and `rk4-nested:K` the same by
nested `jax.jvp` (`jax.experimental.jet` has no rule for the loop).

Steady state is the least of `--calls` calls after the first (ms); first call = trace,
compile and run (s); "one function" says whether XLA:CPU compiled a loop into one
function (the mark `xla_cpu_small_call` in the compiled program).

    python benchmarks/ode_one_function.py
    python benchmarks/ode_one_function.py --cases pendulum:solve,arenstorf:reverse --tol 1e-14
    python benchmarks/ode_one_function.py --cases rk4:4,rk4-nested:4,rk4:8,rk4-nested:8
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = ("solve", "reverse", "forward")
DEFAULT_CASES = ",".join(
    f"{p}:{k}" for p in ("pendulum", "lorenz", "arenstorf", "neural") for k in KINDS
)


def worker(case: str, setting: str, tol: float, calls: int) -> dict:
    """Compile and time one case in this process."""
    import taylax

    if setting == "on":
        # Before any array: XLA reads the setting when JAX's CPU backend starts.
        taylax.ode.one_function_loops()
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(HERE))
    import bench_ode_problems

    name, kind = case.split(":")
    if name in ("rk4", "rk4-nested"):
        import gpu_check

        y = jnp.asarray(0.8)
        order = int(kind)
        if name == "rk4":
            fun = jax.jit(lambda y: taylax.derivatives(gpu_check.rk4_fori, order)(y, 1.0))
        else:
            fun = jax.jit(gpu_check.nested_levels(gpu_check.rk4_fori, order))
        return _timed(fun, (y,), calls)
    problem = bench_ode_problems.PROBLEMS[name]
    ts, y0 = jnp.array([0.0, problem.t_end]), jnp.asarray(problem.y0)
    if kind == "solve":
        fun, args = jax.jit(taylax.ode.integrate(problem.field, tol=tol)), (ts, y0)
    else:
        gradients = "reverse" if kind == "reverse" else "forward"
        solve = taylax.ode.integrate(problem.field, tol=tol, gradients=gradients, max_steps=4096)

        def loss(y0):
            return jnp.sum(solve(ts, y0).ys[-1] ** 2)

        fun = jax.jit(jax.grad(loss) if kind == "reverse" else jax.jacfwd(loss))
        args = (y0,)
    return _timed(fun, args, calls)


def _timed(fun, args, calls: int) -> dict:
    """First call (s), the least of `calls` calls after it (ms), and whether XLA:CPU
    compiled a loop of `fun` into one function."""
    import jax

    begin = time.perf_counter()
    jax.block_until_ready(fun(*args))
    first = time.perf_counter() - begin
    text = fun.lower(*args).compile().as_text()
    best = float("inf")
    for _ in range(calls):
        begin = time.perf_counter()
        jax.block_until_ready(fun(*args))
        best = min(best, time.perf_counter() - begin)
    return {"ms": best * 1e3, "first": first, "one_function": "xla_cpu_small_call" in text}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--tol", type=float, default=1e-14)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--setting", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.setting, args.tol, args.calls)))
        return 0
    print(f"tol {args.tol:g}, {args.processes} processes per setting, least of {args.calls}")
    print("| case | off: ms | on: ms | off / on | first call off / on (s) | one function |")
    print("|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        seen = {"off": [], "on": []}
        for _ in range(args.processes):
            for setting in seen:
                command = [sys.executable, __file__, "--worker", case, "--setting", setting]
                command += ["--tol", str(args.tol), "--calls", str(args.calls)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                seen[setting].append(json.loads(done.stdout.strip().splitlines()[-1]))
        ms = {s: statistics.median(r["ms"] for r in v) for s, v in seen.items()}
        first = {s: statistics.median(r["first"] for r in v) for s, v in seen.items()}
        cells = {s: " ".join(f"{r['ms']:.3g}" for r in v) for s, v in seen.items()}
        print(
            f"| {case} | {ms['off']:.3g} ({cells['off']}) | {ms['on']:.3g} ({cells['on']}) | "
            f"{ms['off'] / ms['on']:.1f} | {first['off']:.2f} / {first['on']:.2f} | "
            f"{seen['off'][0]['one_function']} / {seen['on'][0]['one_function']} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
