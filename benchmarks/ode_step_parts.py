"""Where a batch-mode step of `taylax.ode.integrate` spends its time.

For `--trajectories` Kepler orbits (`bench_ode.kepler`, e = 0.5 +- 0.05 as in
`bench_ode_ensemble.py`) in the batch layout (`integrate(..., batch=True)`: every array
`(n, B)`), the steady-state minimum of `--rounds` calls, float64:

- the whole solve over one period at `--tol`, per step;
- one step (`_stepper`'s step, the coefficients and the polynomial's values);
- the step's coefficients (`solution_series`, the doubling sweeps);
- the passes the last sweep is made of: the field's pass of order K - 1 and the
  Jacobian's of order about K / 2 (`_coefficients._pass`);
- one evaluation of the field.

    python benchmarks/ode_step_parts.py                      # 4,096 orbits, tol 1e-13
    python benchmarks/ode_step_parts.py --trajectories 1024 --tol 1e-15
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_ode import kepler  # noqa: E402
from bench_ode_ensemble import ensemble  # noqa: E402
from taylax.ode._coefficients import (  # noqa: E402
    _pass,
    _schedule,
    batched_jacobian,
    batched_problem,
    solution_series,
)
from taylax.ode._integrate import _stepper, taylor_order  # noqa: E402


def best_ms(fn, *args, rounds: int) -> float:
    """The minimum over `rounds` calls of the compiled `fn`, in milliseconds."""
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=4096)
    parser.add_argument("--tol", type=float, default=1e-13)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    y0 = jnp.asarray(ensemble(args.trajectories, 0.5, 0.05)).T  # (4, B)
    w0, g, _ = batched_problem(kepler, y0, None)
    t0 = jnp.zeros(args.trajectories)
    order = taylor_order(args.tol)
    ts = jnp.array([0.0, 2 * np.pi])
    # A fixed polynomial to run the passes along (their cost does not depend on it).
    series = [w0] + [w0 * 0.1 / (k + 1) for k in range(order)]
    known = _schedule(order)
    half = known[-2] if len(known) > 1 else 0
    step, _ = _stepper(g, ts, order, batched=True)
    zero = jnp.zeros(args.trajectories)

    solve = jax.jit(taylax.ode.integrate(kepler, tol=args.tol, batch=True))
    sol = jax.block_until_ready(solve(ts, y0))
    steps = int(jnp.max(sol.steps))
    whole = best_ms(lambda y: solve(ts, y).ys, y0, rounds=max(3, args.rounds // 4))
    parts = {
        f"the solve, per step ({steps} steps)": whole / steps,
        "one step": best_ms(lambda t, w: step(t, zero, w)[:3], t0, w0, rounds=args.rounds),
        f"its coefficients (order {order}, sweeps to {known})": best_ms(
            lambda t, w: solution_series(g, t, w, order, True), t0, w0, rounds=args.rounds
        ),
        f"the field's pass of order {order - 1}": best_ms(
            lambda t, w: _pass(g, t, [w, *series[1:order]], order - 1), t0, w0, rounds=args.rounds
        ),
        f"the Jacobian's pass of order {half}": best_ms(
            lambda t, w: _pass(batched_jacobian(g), t, [w, *series[1 : half + 1]], half),
            t0,
            w0,
            rounds=args.rounds,
        ),
        "one evaluation of the field": best_ms(g, t0, w0, rounds=args.rounds),
    }
    print(
        f"Kepler, {args.trajectories} orbits in the batch layout, tol {args.tol:.0e}, "
        f"float64, jax {jax.__version__}, {jax.devices()[0].device_kind}. Command: "
        f"`python benchmarks/ode_step_parts.py --trajectories {args.trajectories} "
        f"--tol {args.tol:.0e}`.\n"
    )
    print("| part | ms |\n|---|---|")
    for name, ms in parts.items():
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
