"""What a batch of Taylor steps can cost on this machine: a floor under `batch=True`.

Issue 44 asks a batch of 4,096 Kepler orbits at tolerance 1e-13 to run in at most
heyoka's time. This script asks whether XLA:CPU can get there at all. It times, per
step of 4,096 trajectories at order `--order`:

- **by hand**: Kepler's Taylor recurrence written out as array code on `(B,)` lanes
  (`kepler_floor`: the Cauchy products of `x^2 + y^2`, the power recurrence of its
  `-3/2` power, the products with `x` and `y`), a fixed step, Horner's sum, taken
  `--trips` times in a `fori_loop`. It is the least work a Taylor step can do, with no
  step-size control, no per-trajectory bookkeeping and one program per order. XLA
  fuses it as it likes;
- **taylax**: `jax.jit(taylax.ode.integrate(kepler, tol=tol, batch=True))` over one
  period (its time over its steps);
- **heyoka**: `heyoka.taylor_adaptive_batch` over the same period, 4 lanes, one thread,
  chunk after chunk (as `bench_ode_ensemble.py` runs it), its time over its own steps
  (the same step rule as taylax's: the same steps); and the same chunks shared among one
  thread per core.

All three at the same order: the integrator's, `ceil(-ln(tol) / 2 + 1)`, 16 at 1e-13.
`--earlier-emitters` compiles the two JAX programs with XLA:CPU's earlier emitters.
Times are the least of at least `--repeats` calls (`bench_ode_problems.best_of`), after an
untimed first call.

    python benchmarks/ode_batch_floor.py
    python benchmarks/ode_batch_floor.py --earlier-emitters
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)

import bench_ode_ensemble as ensemble  # noqa: E402
import bench_ode_problems as problems  # noqa: E402
import taylax  # noqa: E402
from bench_ode import kepler  # noqa: E402


def kepler_floor(order: int, trips: int, h: float = 1e-2):
    """Kepler's Taylor step of `order` over lanes, written by hand, `trips` times.

    With `s = x^2 + y^2` and `p = s^(-3/2)`: `k s_0 p_k = sum_{j=1..k} (-3/2 j - (k - j))
    s_j p_{k-j}` (from `s p' = -3/2 s' p`), `a = -(x, y) p`, and every state coefficient
    is the field's coefficient one order down over `k + 1`.
    """
    alpha = -1.5

    def body(_, state):
        x, y, vx, vy = ([row] for row in state)
        s, p = [], []
        for k in range(order):
            s.append(sum(x[j] * x[k - j] + y[j] * y[k - j] for j in range(k + 1)))
            if k == 0:
                inverse = 1 / s[0]
                p.append(inverse * jnp.sqrt(inverse))
            else:
                terms = sum((alpha * j - (k - j)) * s[j] * p[k - j] for j in range(1, k + 1))
                p.append(terms * inverse / k)
            ax = -sum(x[j] * p[k - j] for j in range(k + 1))
            ay = -sum(y[j] * p[k - j] for j in range(k + 1))
            x.append(vx[k] / (k + 1))
            y.append(vy[k] / (k + 1))
            vx.append(ax / (k + 1))
            vy.append(ay / (k + 1))

        def horner(series):
            total = series[-1]
            for coefficient in reversed(series[:-1]):
                total = total * h + coefficient
            return total

        return jnp.stack([horner(series) for series in (x, y, vx, vy)])

    return lambda state: lax.fori_loop(0, trips, body, state)


def heyoka_threads(y0s, tol: float, t_end: float, lanes: int, workers: int) -> float:
    """Seconds of heyoka's batch integrators (`lanes` each, copied before the clock
    starts, as `bench_ode_ensemble.run_heyoka` does) shared among `workers` threads;
    `propagate_until` releases the GIL. (heyoka's own `ensemble_propagate_until_batch`
    copies the integrator per chunk inside its loop: 50x slower here.)"""
    _, chunks = ensemble.heyoka_batches(y0s, tol, lanes)
    shares = [chunks[i::workers] for i in range(workers)]

    def run(share):
        for ta in share:
            ta.propagate_until(t_end)

    begin = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(run, shares))
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=4096)
    parser.add_argument("--tol", type=float, default=1e-13)
    parser.add_argument("--trips", type=int, default=38)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--earlier-emitters", action="store_true")
    parser.add_argument("--contenders", default="taylax batch=True,by hand")
    args = parser.parse_args()
    options = {"xla_cpu_use_fusion_emitters": False} if args.earlier_emitters else {}
    order = taylax.ode.default_order(args.tol)
    y0s = ensemble.ensemble(args.trajectories, 0.5, 0.05)
    state = jnp.asarray(y0s.T)
    emitters = "earlier" if args.earlier_emitters else "default"
    print(
        f"jax {jax.__version__}, {emitters} emitters, {args.trajectories} Kepler orbits, "
        f"order {order}; ms per step of all trajectories"
    )

    ts = jnp.array([0.0, 2 * np.pi])
    contenders = {
        "taylax batch=True": (taylax.ode.integrate(kepler, tol=args.tol, batch=True), (ts, state)),
        "by hand": (kepler_floor(order, args.trips), (state,)),
    }
    for name in args.contenders.split(","):
        fn, fn_args = contenders[name]
        begin = time.perf_counter()
        compiled = jax.jit(fn, compiler_options=options).lower(*fn_args).compile()
        first = time.perf_counter() - begin
        out = compiled(*fn_args)  # also the untimed first call
        trips = int(np.max(np.asarray(out.steps))) if hasattr(out, "steps") else args.trips
        seconds, _ = problems.best_of(
            lambda compiled=compiled, fn_args=fn_args: jax.block_until_ready(compiled(*fn_args)),
            args.repeats,
        )
        print(
            f"{name}: {seconds / trips * 1e3:.3f} ({trips} steps; compiled in {first:.1f} s, "
            f"{compiled.as_text().count(' fusion(')} fusions)",
            flush=True,
        )

    runs = [ensemble.run_heyoka(y0s, args.tol, 2 * np.pi, 4) for _ in range(3)]
    heyoka, steps = min(run[0] for run in runs), int(np.max(runs[0][2]))
    print(f"heyoka, 4 lanes, one thread: {heyoka / steps * 1e3:.3f} ({steps} steps)", flush=True)
    workers = os.cpu_count()
    heyoka = min(heyoka_threads(y0s, args.tol, 2 * np.pi, 4, workers) for _ in range(3))
    print(f"heyoka, 4 lanes, {workers} threads: {heyoka / steps * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
