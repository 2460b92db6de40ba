"""The integrator's cost against the number of saved times.

100 orbits of Kepler's problem (e = 0.5, from pericentre, `bench_ode.kepler`) at
tolerance 1e-14, float64, `jax.jit(taylax.ode.integrate(kepler, tol=1e-14))`, with `ts`
holding `--counts` evenly spaced times: the best of `--rounds` calls after the first, and
the time per step. A step writes only the saved times it covers, so the cost should
not grow with their number (docs/ODE.md, "Saved times"). With `--gradient`, the same for
`jax.grad` of the sum of every saved state's first component with respect to `y0`,
through a reverse-mode solve (`gradients="reverse"`, `--orbits` orbits, default 10).

    python benchmarks/bench_ode_saved_times.py
    python benchmarks/bench_ode_saved_times.py --counts 2,100001 --rounds 3
    python benchmarks/bench_ode_saved_times.py --gradient
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
from bench_ode import kepler, start  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="2,11,101,1001,10001")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gradient", action="store_true")
    parser.add_argument("--orbits", type=int, default=None)
    args = parser.parse_args()
    y0 = jnp.asarray(start(0.5))
    orbits = args.orbits or (10 if args.gradient else 100)
    if args.gradient:
        solver = taylax.ode.integrate(kepler, tol=1e-14, gradients="reverse")
        loss = jax.jit(jax.value_and_grad(lambda y, ts: jnp.sum(solver(ts, y).ys[:, 0])))
        steps_of = jax.jit(lambda ts, y: solver(ts, y).steps)
        what, name = "`jax.grad` through", "ode_saved_times_gradient.md"

        def run(ts):
            return loss(y0, ts)
    else:
        solve = jax.jit(taylax.ode.integrate(kepler, tol=1e-14))
        steps_of = jax.jit(lambda ts, y: solve(ts, y).steps)
        what, name = "", "ode_saved_times.md"

        def run(ts):
            return solve(ts, y0)

    command = f"--counts {args.counts} --rounds {args.rounds}"
    if args.gradient:
        command += f" --gradient --orbits {orbits}"
    lines = [
        f"{what} {orbits} Kepler orbits (e = 0.5), tol 1e-14, float64, jax {jax.__version__}, "
        f"{jax.devices()[0].device_kind}. Command: `python benchmarks/bench_ode_saved_times.py "
        f"{command}`.".strip(),
        "",
        "| saved times | ms per solve | µs per step | steps |",
        "|---|---|---|---|",
    ]
    for count in (int(c) for c in args.counts.split(",")):
        ts = jnp.linspace(0.0, orbits * 2 * np.pi, count)
        steps = int(steps_of(ts, y0))
        jax.block_until_ready(run(ts))
        best = float("inf")
        for _ in range(args.rounds):
            begin = time.perf_counter()
            jax.block_until_ready(run(ts))
            best = min(best, time.perf_counter() - begin)
        lines.append(f"| {count:,} | {best * 1e3:.2f} | {best / steps * 1e6:.2f} | {steps:,} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / name).write_text(text)


if __name__ == "__main__":
    main()
