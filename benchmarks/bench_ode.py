"""Kepler orbits: taylax's Taylor integrator against heyoka and diffrax, one trajectory.

Kepler's problem at pericentre (semi-major axis 1, GM = 1, period 2 pi), eccentricity
0.5 and 0.9, integrated over `--orbits` periods at each tolerance. The orbit is periodic,
so the final-state error is the distance (max norm) to the initial state; the energy
error is relative. Time: the second call (steady state; the first, which traces and
compiles, is reported apart), float64. The table goes to
`benchmarks/results/ode_<orbits>_orbits.md`.

- taylax: `jax.jit(taylax.ode.integrate(kepler, tol=tol))`;
- heyoka (`heyoka.taylor_adaptive`, its default order for the tolerance), timed
  `propagate_until` from a fresh copy of the integrator;
- diffrax `Dopri8` with a PID controller at `rtol = atol = tol`, and diffrax with
  `taylax.ode.Taylor` (Jorba and Zou's order for the tolerance, as `taylax.ode.integrate`
  takes) under the same controller (both skipped with `--no-diffrax`).

    python benchmarks/bench_ode.py                        # 100 orbits, tol 1e-14 and 1e-10
    python benchmarks/bench_ode.py --orbits 1000 --tols 1e-14 --no-diffrax

`--one-function-loops` calls `taylax.ode.one_function_loops()` first (docs/ODE.md,
"Small loops in one function"); it applies to the diffrax contenders' loops too, and the
table goes to `benchmarks/results/ode_<orbits>_orbits_one_function.md` (`make bench`
runs it so at 100 orbits without diffrax, after the default run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from harness import add_one_function_loops, one_function_loops_first  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def kepler(t, y, args):
    # Sums over axis 0 only: a batch of states `(4, B)` (`integrate(..., batch=True)`)
    # holds B trajectories along its last axis.
    r, v = y[:2], y[2:]
    return jnp.concatenate([v, -r / jnp.sum(r * r, axis=0) ** 1.5])


def start(e):
    return np.array([1 - e, 0.0, 0.0, np.sqrt((1 + e) / (1 - e))])


def energy(y):
    y = np.asarray(y, float)
    return 0.5 * np.sum(y[2:] ** 2) - 1 / np.linalg.norm(y[:2])


def errors(y_end, y0):
    return float(np.max(np.abs(np.asarray(y_end) - y0))), abs(energy(y_end) / energy(y0) - 1)


def run_taylax(e, tol, t_end):
    y0 = start(e)
    solve = jax.jit(taylax.ode.integrate(kepler, tol=tol, max_steps=10_000_000))
    ts = jnp.array([0.0, t_end])
    begin = time.perf_counter()
    jax.block_until_ready(solve(ts, jnp.asarray(y0)))
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    sol = jax.block_until_ready(solve(ts, jnp.asarray(y0)))
    return time.perf_counter() - begin, first, int(sol.steps), *errors(sol.ys[-1], y0)


def run_heyoka(e, tol, t_end):
    import copy

    import heyoka as hy

    x, y, vx, vy = hy.make_vars("x", "y", "vx", "vy")
    r3 = (x**2 + y**2) ** -1.5
    system = [(x, vx), (y, vy), (vx, -x * r3), (vy, -y * r3)]
    y0 = start(e)
    begin = time.perf_counter()
    ta = hy.taylor_adaptive(system, list(y0), tol=tol)
    first = time.perf_counter() - begin
    fresh = copy.deepcopy(ta)
    begin = time.perf_counter()
    fresh.propagate_until(t_end)
    elapsed = time.perf_counter() - begin
    # A second fresh copy for the step count (`propagate_until`'s fourth result).
    steps = int(copy.deepcopy(ta).propagate_until(t_end)[3])
    return elapsed, first, steps, *errors(fresh.state, y0)


def diffrax_kepler(tol, t_end, solver=None):
    """`y0 -> (y(t_end), accepted steps)` for Kepler's problem by diffrax's `solver`
    (default `Dopri8`) with a PID controller at `rtol = atol = tol`."""
    import diffrax

    solver = diffrax.Dopri8() if solver is None else solver

    def solve(y0):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(kepler),
            solver,
            0.0,
            t_end,
            None,
            y0,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            max_steps=10_000_000,
        )
        return sol.ys[-1], sol.stats["num_accepted_steps"]

    return solve


def run_diffrax(e, tol, t_end, solver=None):
    y0 = start(e)
    solve = jax.jit(diffrax_kepler(tol, t_end, solver))
    begin = time.perf_counter()
    jax.block_until_ready(solve(jnp.asarray(y0)))
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    y_end, steps = jax.block_until_ready(solve(jnp.asarray(y0)))
    return time.perf_counter() - begin, first, int(steps), *errors(y_end, y0)


def run_diffrax_taylor(e, tol, t_end):
    order = taylax.ode.default_order(tol)
    return run_diffrax(e, tol, t_end, taylax.ode.Taylor(order))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orbits", type=int, default=100)
    parser.add_argument("--tols", default="1e-14,1e-10")
    parser.add_argument("--eccentricities", default="0.5,0.9")
    parser.add_argument("--no-diffrax", action="store_true")
    add_one_function_loops(parser)
    args = parser.parse_args()
    one_function_loops_first(args)
    contenders = {"taylax": run_taylax, "heyoka": run_heyoka}
    if not args.no_diffrax:
        contenders["diffrax Dopri8"] = run_diffrax
        contenders["diffrax + taylax.ode.Taylor"] = run_diffrax_taylor
    t_end = args.orbits * 2 * np.pi
    lines = [
        f"Kepler, {args.orbits} orbits, float64, jax {jax.__version__}, "
        f"{jax.devices()[0].device_kind}. Command: `python benchmarks/bench_ode.py "
        f"--orbits {args.orbits} --tols {args.tols}{' --no-diffrax' * args.no_diffrax}"
        f"{' --one-function-loops' * args.one_function_loops}`.",
        "",
        "| e | tol | contender | time (s) | first call (s) | steps | final-state error | "
        "energy error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in [float(v) for v in args.eccentricities.split(",")]:
        for tol in [float(v) for v in args.tols.split(",")]:
            for name, run in contenders.items():
                elapsed, first, steps, state_error, energy_error = run(e, tol, t_end)
                lines.append(
                    f"| {e} | {tol:.0e} | {name} | {elapsed:.4f} | {first:.2f} | {steps} | "
                    f"{state_error:.1e} | {energy_error:.1e} |"
                )
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    suffix = "_one_function" if args.one_function_loops else ""
    (RESULTS / f"ode_{args.orbits}_orbits{suffix}.md").write_text(text)


if __name__ == "__main__":
    main()
