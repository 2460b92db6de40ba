"""Issue 44's device line: many pendulum trajectories at once, on the default device.

`jax.jit(taylax.ode.integrate(pendulum, tol=tol, batch=True))` over `--trajectories`
pendulums from rest at angles spread evenly over 0.1..3.0 (`bench_ode_problems`'s
ensemble; 3.0 is 0.14 from the separatrix), the trajectories the minor axis of the
state, to `t = --t-end`, float64. It prints and writes to
`benchmarks/results/ode_device_<platform>.md`:

* the first call (trace, compile and one run) and the steady state (the least of
  `--repeats` calls), and trajectories per second of the steady state;
* the steps per trajectory (median and largest: the loop runs until the last is done);
* the relative energy error `|E(t_end) - E(0)| / |E(0)|`, `E = omega^2 / 2 - cos(theta)`,
  over every trajectory (median and largest);
* with `--closed-form M` (needs mpmath), the final-state error of `M` trajectories
  spread over the ensemble against Jacobi's closed form.

On a machine without a GPU it runs on the CPU (use fewer trajectories there).

    python benchmarks/ode_device.py                                  # 1,048,576 at 1e-12
    python benchmarks/ode_device.py --trajectories 4096 --closed-form 16
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import bench_ode_problems as problems  # noqa: E402
import taylax  # noqa: E402
from harness import command_line  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def energy(states) -> np.ndarray:
    """The pendulum's energy `omega^2 / 2 - cos(theta)` of states `(2, n)`."""
    theta, omega = np.asarray(states)
    return omega**2 / 2 - np.cos(theta)


def closed_form_error(y0s: np.ndarray, y_end: np.ndarray, t_end: float, count: int) -> float:
    """The largest final-state error (max norm) of `count` trajectories spread over the
    ensemble, against Jacobi's closed form (`bench_ode_problems.pendulum_closed_form`)."""
    picks = np.unique(np.linspace(0, len(y0s) - 1, count).astype(int))
    exact = problems.pendulum_closed_form(y0s[picks], t_end)
    return max(
        max(abs(float(want) - float(got)) for want, got in zip(row, y_end[i], strict=True))
        for i, row in zip(picks, exact, strict=True)
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1 << 20)
    parser.add_argument("--tol", type=float, default=1e-12)
    parser.add_argument("--t-end", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--closed-form", type=int, default=0, metavar="M")
    args = parser.parse_args(argv)

    problem = problems.PROBLEMS["pendulum"]
    y0s, described = problems.ensemble_starts(problem, args.trajectories)
    ts = jnp.array([0.0, args.t_end])
    y0 = jnp.asarray(y0s.T)  # (2, trajectories)
    solve = jax.jit(
        taylax.ode.integrate(problem.field, tol=args.tol, max_steps=10_000_000, batch=True)
    )
    begin = time.perf_counter()
    sol = jax.block_until_ready(solve(ts, y0))
    first = time.perf_counter() - begin
    steady, sol = problems.best_of(
        lambda: jax.block_until_ready(solve(ts, y0)), args.repeats, min_s=0.0
    )
    y_end = np.asarray(sol.ys[-1])  # (2, trajectories)
    steps = np.asarray(sol.steps)
    e0 = energy(y0s.T)
    drift = np.abs(energy(y_end) - e0) / np.abs(e0)

    device = jax.devices()[0]
    lines = [
        f"# {command_line(__file__, sys.argv[1:] if argv is None else argv)}, "
        f"{datetime.date.today()}",
        "",
        f"{device.device_kind} ({device.platform}), jax {jax.__version__}, float64; "
        f"{described}, to t = {args.t_end:g} at tol {args.tol:g} "
        f"(order {taylax.ode.default_order(args.tol)}).",
        "",
        "| trajectories | first call | steady state | trajectories per second | steps "
        "(median / largest) | energy error (median / largest) |",
        "|---|---|---|---|---|---|",
        f"| {args.trajectories:,} | {first:.2f} s | {steady:.4g} s | "
        f"{args.trajectories / steady:.3g} | {np.median(steps):.0f} / {steps.max()} | "
        f"{np.median(drift):.1e} / {drift.max():.1e} |",
    ]
    if args.closed_form:
        error = closed_form_error(y0s, y_end.T, args.t_end, args.closed_form)
        lines += ["", f"Final-state error against the closed form: {error:.1e} (max norm)."]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"ode_device_{device.platform}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
