"""Kepler ensembles: taylax's Taylor integrator against heyoka's batch mode.

One trajectory's final-state error is a random walk of rounding errors, so a comparison
of two integrators needs many. The ensemble here is `--trajectories` Kepler orbits (GM = 1,
semi-major axis 1, period 2 pi) started at pericentre, with eccentricities spread evenly
over `--e +- --spread` and the orbit rotated by angles spread over a turn: every orbit
returns to its initial state after each period, so the final-state error (max norm) and
the relative energy error are exact measures. Integrated over `--orbits` periods at
tolerance `--tol`, float64.

- taylax: `jax.jit(taylax.ode.integrate(kepler, tol=tol, batch=True))` on states shaped
  `(4, trajectories)` (the trajectories the minor axis of every array), and
  `jax.jit(jax.vmap(taylax.ode.integrate(kepler, tol=tol), in_axes=(None, 0)))`; both step
  every trajectory at once, the loop running until the last one is done;
- heyoka: `heyoka.taylor_adaptive_batch` (its SIMD batch mode, `--heyoka-batch` lanes,
  one thread), chunk by chunk, its default order for the tolerance;
- with `--dopri8-tols`, diffrax's `Dopri8` (PID controller at `rtol = atol = tol`)
  under `jax.vmap`, at each of those tolerances: a comparison at equal achieved error.

Time: the second call for taylax (the first, which traces and compiles, is reported
apart); `propagate_until` of fresh copies for heyoka. Errors: median, 90th percentile and
maximum over the ensemble. The table goes to
`benchmarks/results/ode_ensemble_<orbits>_orbits.md`.

    python benchmarks/bench_ode_ensemble.py                      # 64 orbits of e ~ 0.9, 100 periods
    python benchmarks/bench_ode_ensemble.py --orbits 1000 --trajectories 32
    python benchmarks/bench_ode_ensemble.py --orbits 1 --trajectories 4096 --e 0.5 \
        --spread 0.05 --tol 1e-13 --dopri8-tols 1e-13,1e-14,1e-15
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_ode import diffrax_kepler, kepler  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def ensemble(n: int, e: float, spread: float) -> np.ndarray:
    """`(n, 4)` initial states at pericentre: eccentricities over `e +- spread`, each
    orbit rotated by its own angle."""
    es = np.linspace(e - spread, e + spread, n)
    angles = 2 * np.pi * np.arange(n) / n + 0.1
    r = 1 - es
    v = np.sqrt((1 + es) / (1 - es))
    c, s = np.cos(angles), np.sin(angles)
    return np.stack([r * c, r * s, -v * s, v * c], axis=1)


def energy(y):
    y = np.asarray(y, float)
    return 0.5 * np.sum(y[..., 2:] ** 2, -1) - 1 / np.linalg.norm(y[..., :2], axis=-1)


def errors(y_end, y0):
    """Per trajectory: the final-state error (max norm) and the relative energy error."""
    state = np.max(np.abs(np.asarray(y_end) - y0), axis=-1)
    return state, np.abs(energy(y_end) / energy(y0) - 1)


def run_taylax(y0s, tol, t_end, batch: bool = False):
    """taylax under `jax.vmap` of a solve, or one solve with `batch=True` (the trajectories
    the minor axis of every array)."""
    integrate = taylax.ode.integrate(kepler, tol=tol, max_steps=10_000_000, batch=batch)
    solve = jax.jit(integrate if batch else jax.vmap(integrate, in_axes=(None, 0)))
    ts = jnp.array([0.0, t_end])
    y0 = jnp.asarray(y0s.T if batch else y0s)
    begin = time.perf_counter()
    jax.block_until_ready(solve(ts, y0))
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    sol = jax.block_until_ready(solve(ts, y0))
    elapsed = time.perf_counter() - begin
    y_end = sol.ys[-1].T if batch else sol.ys[:, -1]
    return elapsed, first, np.asarray(sol.steps), *errors(y_end, y0s)


def heyoka_chunks(template, padded, lanes: int) -> list:
    """Fresh copies of heyoka's batch integrator `template` at time 0, one per `lanes`
    rows of `padded` (initial states, a multiple of `lanes` rows)."""
    chunks = []
    for i in range(0, len(padded), lanes):
        ta = copy.deepcopy(template)
        ta.set_time(np.zeros(lanes))
        ta.state[:] = padded[i : i + lanes].T
        chunks.append(ta)
    return chunks


def heyoka_batches(y0s, tol, lanes: int) -> tuple[float, list]:
    """`(seconds, chunks)`: heyoka's batch integrator of Kepler's field built for `lanes`
    trajectories (`seconds`, its compilation), and a fresh copy of it per `lanes` rows of
    the initial states `y0s` (the last rows repeated to fill the last chunk)."""
    import heyoka as hy

    x, y, vx, vy = hy.make_vars("x", "y", "vx", "vy")
    r3 = (x**2 + y**2) ** -1.5
    system = [(x, vx), (y, vy), (vx, -x * r3), (vy, -y * r3)]
    padded = np.concatenate([y0s, np.repeat(y0s[-1:], -len(y0s) % lanes, axis=0)])
    begin = time.perf_counter()
    template = hy.taylor_adaptive_batch(system, np.ascontiguousarray(padded[:lanes].T), tol=tol)
    first = time.perf_counter() - begin
    return first, heyoka_chunks(template, padded, lanes)


def run_heyoka(y0s, tol, t_end, lanes):
    n = len(y0s)
    first, chunks = heyoka_batches(y0s, tol, lanes)
    ends, steps = [], []
    begin = time.perf_counter()
    for ta in chunks:
        ta.propagate_until(t_end)
    elapsed = time.perf_counter() - begin
    for ta in chunks:
        ends.append(ta.state.T.copy())
        steps.extend(int(s[3]) for s in ta.propagate_res)
    y_end = np.concatenate(ends)[:n]
    return elapsed, first, np.asarray(steps[:n]), *errors(y_end, y0s)


def run_dopri8(y0s, tol, t_end):
    """diffrax's `Dopri8` with a PID controller at `rtol = atol = tol`, under `jax.vmap`
    over the trajectories (each keeps its own steps)."""
    solve = jax.jit(jax.vmap(diffrax_kepler(tol, t_end)))
    y0 = jnp.asarray(y0s)
    begin = time.perf_counter()
    jax.block_until_ready(solve(y0))
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    y_end, steps = jax.block_until_ready(solve(y0))
    elapsed = time.perf_counter() - begin
    return elapsed, first, np.asarray(steps), *errors(y_end, y0s)


def _summary(values) -> str:
    q = np.quantile(values, [0.5, 0.9])
    return f"{q[0]:.1e} / {q[1]:.1e} / {np.max(values):.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orbits", type=int, default=100)
    parser.add_argument("--trajectories", type=int, default=64)
    parser.add_argument("--e", type=float, default=0.9)
    parser.add_argument("--spread", type=float, default=0.01)
    parser.add_argument("--tol", type=float, default=1e-14)
    parser.add_argument("--heyoka-batch", type=int, default=4)
    parser.add_argument(
        "--dopri8-tols",
        default="",
        help="comma-separated tolerances at which to run diffrax's Dopri8 under jax.vmap too",
    )
    args = parser.parse_args()
    dopri8_tols = [float(t) for t in args.dopri8_tols.split(",") if t]
    y0s = ensemble(args.trajectories, args.e, args.spread)
    t_end = args.orbits * 2 * np.pi
    lines = [
        f"Kepler ensemble: {args.trajectories} orbits, e = {args.e} +- {args.spread}, "
        f"{args.orbits} periods, tol {args.tol:.0e}, float64, jax {jax.__version__}, "
        f"{jax.devices()[0].device_kind}. Command: `python benchmarks/bench_ode_ensemble.py "
        f"--orbits {args.orbits} --trajectories {args.trajectories} --e {args.e} "
        f"--spread {args.spread} --tol {args.tol:.0e}"
        + (f" --dopri8-tols {args.dopri8_tols}" if dopri8_tols else "")
        + "`.",
        "",
        "| contender | time (s) | first call (s) | steps (median) | final-state error "
        "(median / 90% / max) | energy error (median / 90% / max) |",
        "|---|---|---|---|---|---|",
    ]
    runs = {
        "taylax (batch=True)": lambda: run_taylax(y0s, args.tol, t_end, batch=True),
        "taylax (vmap)": lambda: run_taylax(y0s, args.tol, t_end),
        f"heyoka (batch of {args.heyoka_batch})": lambda: run_heyoka(
            y0s, args.tol, t_end, args.heyoka_batch
        ),
    }
    for tol in dopri8_tols:
        runs[f"diffrax Dopri8 (vmap, tol {tol:.0e})"] = lambda tol=tol: run_dopri8(y0s, tol, t_end)
    medians = {}
    for name, run in runs.items():
        elapsed, first, steps, state, energy_error = run()
        medians[name] = np.median(state)
        lines.append(
            f"| {name} | {elapsed:.3f} | {first:.2f} | {int(np.median(steps))} | "
            f"{_summary(state)} | {_summary(energy_error)} |"
        )
        print(lines[-1], flush=True)
    ours, theirs = medians["taylax (batch=True)"], medians[f"heyoka (batch of {args.heyoka_batch})"]
    lines += ["", f"Median final-state error, taylax (batch) / heyoka: {ours / theirs:.2f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"ode_ensemble_{args.orbits}_orbits.md").write_text(text)


if __name__ == "__main__":
    main()
