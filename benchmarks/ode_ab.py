"""ODE solves' steady state: this tree against an earlier commit, in alternating processes.

For each case, `--processes` fresh processes run with this checkout's `src` and as many
with the `src` of `--base` (a temporary git worktree), alternating; each process compiles
one solve, calls it once, then prints the minimum of `--calls` calls (ms) and the compiled
program's fused kernels. The medians over the processes are compared. With
`--one-function-loops` every process calls `taylax.ode.one_function_loops()` first (both
trees have it since 36a1ff6). Cases (float64):

- `<problem>`: one trajectory of a `bench_ode_problems.py` problem (`arenstorf`, `lorenz`,
  `pendulum`, `neural`), `jax.jit(taylax.ode.integrate(field, tol=tol))`;
- `<problem>-batch`: `--trajectories` of them at once (`batch=True`), from
  `bench_ode_problems.ensemble_starts`;
- `kepler-batch`: the Kepler ensemble of `bench_ode_ensemble.py` (e = 0.5 +- 0.05, one
  period) with `batch=True`;
- `saturating`, `saturating-batch`: an oscillator whose restoring force is an `erf`
  and whose friction an `atan` (`saturating`, below; t = 20), from `(1, 0)`, or from
  angles spread over 0.1..3.0 at rest: the rules that integrate a series of their own.

    python benchmarks/ode_ab.py --base HEAD~1 --cases pendulum,pendulum-batch,kepler-batch

`--worker CASE --calls N` runs one case in this process alone (N timed calls), for a
profiler: `perf record -g python benchmarks/ode_ab.py --worker pendulum --calls 3000`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from harness import add_one_function_loops, checked_out, one_function_loops_first  # noqa: E402

DEFAULT_CASES = (
    "pendulum,arenstorf,lorenz,neural,pendulum-batch,arenstorf-batch,lorenz-batch,"
    "neural-batch,kepler-batch"
)


def saturating(t, y, args):
    """`x' = v`, `v' = -erf(2 x) - 0.3 atan(4 v)`."""
    import jax.numpy as jnp
    from jax.scipy.special import erf

    x, v = y
    return jnp.stack([v, -erf(2 * x) - 0.3 * jnp.arctan(4 * v)])


def worker(case: str, tol: float, trajectories: int, calls: int) -> dict:
    """Compile and time one case in this process (the `src` on `PYTHONPATH`)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import bench_ode_ensemble
    import bench_ode_problems
    import taylax

    name, _, mode = case.partition("-")
    batch = mode == "batch"
    if name == "kepler":
        field = bench_ode_ensemble.kepler
        starts = bench_ode_ensemble.ensemble(trajectories, 0.5, 0.05)
        t_end = 2 * np.pi
    elif name == "saturating":
        field, t_end = saturating, 20.0
        starts = np.array([1.0, 0.0])
        if batch:
            angles = np.linspace(0.1, 3.0, trajectories)
            starts = np.stack([angles, np.zeros_like(angles)], axis=1)
    else:
        problem = bench_ode_problems.PROBLEMS[name]
        field, t_end = problem.field, problem.t_end
        if batch:
            starts = bench_ode_problems.ensemble_starts(problem, trajectories)[0]
        else:
            starts = problem.y0
    y0 = jnp.asarray(starts.T if batch else starts)
    ts = jnp.array([0.0, t_end])
    solve = jax.jit(taylax.ode.integrate(field, tol=tol, max_steps=10_000_000, batch=batch))
    kernels = solve.lower(ts, y0).compile().as_text().count(" fusion(")
    jax.block_until_ready(solve(ts, y0))
    best = float("inf")
    for _ in range(calls):
        begin = time.perf_counter()
        jax.block_until_ready(solve(ts, y0))
        best = min(best, time.perf_counter() - begin)
    return {"ms": best * 1e3, "kernels": kernels}


def run(src: Path, case: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT / 'benchmarks'}")
    command = [sys.executable, __file__, "--worker", case, "--tol", str(args.tol)]
    command += ["--trajectories", str(args.trajectories), "--calls", str(args.calls)]
    command += ["--one-function-loops"] * args.one_function_loops
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1")
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--tol", type=float, default=1e-13)
    parser.add_argument("--trajectories", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=9)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    add_one_function_loops(parser)
    args = parser.parse_args(argv)
    if args.worker:
        one_function_loops_first(args)
        print(json.dumps(worker(args.worker, args.tol, args.trajectories, args.calls)))
        return 0
    with checked_out(args.base) as base_src:
        trees = {"head": ROOT / "src", args.base: base_src}
        for case in args.cases.split(","):
            seen = {label: [] for label in trees}
            kernels = {}
            for _ in range(args.processes):
                for label, src in trees.items():
                    result = run(src, case, args)
                    seen[label].append(result["ms"])
                    kernels[label] = result["kernels"]
            medians = {label: statistics.median(v) for label, v in seen.items()}
            cells = ", ".join(
                f"{label} {medians[label]:.3g} ms ({' '.join(f'{x:.3g}' for x in v)}; "
                f"{kernels[label]} kernels)"
                for label, v in seen.items()
            )
            ratio = medians["head"] / medians[args.base]
            print(f"{case}: {cells}; head / base {ratio:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
