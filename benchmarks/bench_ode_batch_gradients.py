"""Reverse-mode gradients of an ensemble: `batch=True` against `jax.vmap`.

`--trajectories` Kepler orbits (`bench_ode_ensemble.ensemble`: eccentricities over
`--e +- --spread`, each orbit rotated by its own angle) over `--orbits` periods at
tolerance `--tol`, float64. The loss is the sum over the ensemble of the squared final
positions; its gradient with respect to every initial state, by `jax.grad` of

- `taylax.ode.integrate(kepler, tol=tol, gradients="reverse", batch=True)` on states
  shaped `(4, trajectories)` (the trajectories the minor axis, walked back together);
- `jax.vmap` of `taylax.ode.integrate(kepler, tol=tol, gradients="reverse")`.

Both compiled with `jax.jit`, with `max_steps=--max-steps` (reverse mode keeps that many
states of the size of `y0`); the first call (trace and compile) and the best of
`--rounds` later calls, and the largest difference between the two gradients. The
table goes to `benchmarks/results/ode_batch_gradients.md`.

    python benchmarks/bench_ode_batch_gradients.py
    python benchmarks/bench_ode_batch_gradients.py --trajectories 4096 --orbits 1
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
from bench_ode import kepler  # noqa: E402
from bench_ode_ensemble import ensemble  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1024)
    parser.add_argument("--orbits", type=int, default=1)
    parser.add_argument("--e", type=float, default=0.5)
    parser.add_argument("--spread", type=float, default=0.05)
    parser.add_argument("--tol", type=float, default=1e-13)
    parser.add_argument("--rounds", type=int, default=3)
    # Reverse mode keeps `max_steps` states of the size of `y0` (all trajectories): the
    # default 100,000 would be 800 MB per 256 Kepler orbits.
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--contenders", default="batch=True,jax.vmap")
    args = parser.parse_args()
    y0 = jnp.asarray(ensemble(args.trajectories, args.e, args.spread))  # (B, 4)
    ts = jnp.asarray([0.0, 2 * np.pi * args.orbits])
    options = dict(tol=args.tol, gradients="reverse", max_steps=args.max_steps)

    def batched():
        solve = taylax.ode.integrate(kepler, batch=True, **options)
        return jax.jit(jax.grad(lambda y: jnp.sum(solve(ts, y.T).ys[-1, :2] ** 2)))

    def vmapped():
        solve = jax.vmap(taylax.ode.integrate(kepler, **options), in_axes=(None, 0))
        return jax.jit(jax.grad(lambda y: jnp.sum(solve(ts, y).ys[:, -1, :2] ** 2)))

    contenders = {"batch=True": batched, "jax.vmap": vmapped}
    chosen = args.contenders.split(",")
    contenders = {name: make() for name, make in contenders.items() if name in chosen}
    rows, grads = [], {}
    for name, grad in contenders.items():
        begin = time.perf_counter()
        grads[name] = np.asarray(jax.block_until_ready(grad(y0)))
        first = time.perf_counter() - begin
        best = float("inf")
        for _ in range(args.rounds):
            begin = time.perf_counter()
            jax.block_until_ready(grad(y0))
            best = min(best, time.perf_counter() - begin)
        rows.append((name, best, first))
        print(f"{name}: {best * 1e3:.1f} ms, first call {first:.1f} s", flush=True)
    agreement = ""
    if len(grads) == 2:
        scale = np.max(np.abs(grads["jax.vmap"]))
        difference = np.max(np.abs(grads["batch=True"] - grads["jax.vmap"])) / scale
        agreement = f"The two gradients differ by {difference:.1e} relative to the largest entry."
    command = (
        f"python benchmarks/bench_ode_batch_gradients.py --trajectories {args.trajectories} "
        f"--orbits {args.orbits} --e {args.e} --spread {args.spread} --tol {args.tol} "
        f"--rounds {args.rounds} --max-steps {args.max_steps} --contenders {args.contenders}"
    )
    lines = [
        f"`jax.grad` through {args.trajectories:,} Kepler orbits ({args.orbits} period(s), "
        f"e = {args.e} +- {args.spread}), tol {args.tol:g}, float64, jax {jax.__version__}, "
        f"{jax.devices()[0].device_kind}. Command: `{command}`.",
        "",
        "| reverse mode | ms per gradient | first call s |",
        "|---|---|---|",
        *(f"| {name} | {best * 1e3:.1f} | {first:.1f} |" for name, best, first in rows),
        "",
        agreement,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ode_batch_gradients.md").write_text(text)


if __name__ == "__main__":
    main()
