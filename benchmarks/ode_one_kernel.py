"""Single trajectories with the state's coefficients as rows apart, or stacked.

`taylax.EmissionPolicy.ode_rows_max_state` (docs/ODE.md, "One kernel per step"): with the
rows apart, a step's recurrence is scalar code that XLA:CPU can fuse into one kernel.
For each problem and tolerance this prints the steady-state time per step of
`jax.jit(taylax.ode.integrate(field, tol=tol))` under the CPU policy as it ships and with
`ode_rows_max_state` set (`--rows`, default 16), with the fused kernels of the stepping
loop's body (`loop_kernels`), and, with `--floor`, the same recurrence
written by hand as scalar code (the pendulum's, `pendulum_floor`): what one kernel per
step costs at this order on this machine. `--earlier-emitters` compiles each solve with
`compiler_options={"xla_cpu_use_fusion_emitters": False}` (XLA:CPU's earlier emitters), as
docs/ODE.md advises for the rows.

    python benchmarks/ode_one_kernel.py --heyoka --floor         # three problems, 1e-6..1e-14
    python benchmarks/ode_one_kernel.py --earlier-emitters --heyoka --floor
"""

from __future__ import annotations

import argparse
import dataclasses
import re

import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)

import bench_ode_problems as problems  # noqa: E402
import taylax  # noqa: E402


def per_step(solve, ts, y0) -> tuple[float, int]:
    """`(us per step, steps)`: the least time of `solve(ts, y0)` (`best_of`) over its
    steps (`TRIPS` for the floor, which returns no `Solution`)."""
    out = jax.block_until_ready(solve(ts, y0))
    steps = int(out.steps) if hasattr(out, "steps") else TRIPS
    seconds, _ = problems.best_of(lambda: jax.block_until_ready(solve(ts, y0)), 5)
    return seconds / steps * 1e6, steps


def loop_kernels(compiled) -> int:
    """The fused kernels of the stepping loop's body in a `compiled` solve (not those of
    the branches it calls, which run only in the steps that take them)."""
    text = compiled.as_text()
    computations = {}
    for block in text.split("\n\n"):
        name = re.match(r"\s*(?:ENTRY )?%(\S+) ", block)
        if name:
            computations[name.group(1)] = block
    bodies = re.findall(r"\bwhile\(.*?body=%([\w.\-]+)", text)
    return max(computations[body].count(" fusion(") for body in bodies)


TRIPS = 369  # the pendulum's steps at 1e-14


def pendulum_floor(order: int, trips: int = TRIPS):
    """The pendulum's Taylor recurrence of `order`, written by hand on scalars, taken
    `trips` times in a `fori_loop` with a fixed step: one fused kernel per trip."""

    def body(_, y):
        theta, omega = [y[0]], [y[1]]
        s, c = [jnp.sin(y[0])], [jnp.cos(y[0])]
        for k in range(order):
            if k:
                slopes = [(j + 1) * theta[j + 1] for j in range(k)]
                s.append(sum(slopes[j] * c[k - 1 - j] for j in range(k)) / k)
                c.append(-sum(slopes[j] * s[k - 1 - j] for j in range(k)) / k)
            theta.append(omega[k] / (k + 1))
            omega.append(-s[k] / (k + 1))
        h = 1e-3
        return jnp.stack([sum(x * h**k for k, x in enumerate(series)) for series in (theta, omega)])

    return lambda y: lax.fori_loop(0, trips, body, y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", default="pendulum,lorenz,arenstorf")
    parser.add_argument("--tols", default="1e-6,1e-10,1e-12,1e-14")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--earlier-emitters", action="store_true")
    parser.add_argument("--heyoka", action="store_true", help="heyoka's step alongside")
    args = parser.parse_args()
    policies = {
        "cpu": taylax.CPU,
        f"rows {args.rows}": dataclasses.replace(taylax.CPU, ode_rows_max_state=args.rows),
    }
    options = {"xla_cpu_use_fusion_emitters": False} if args.earlier_emitters else {}
    emitters = "earlier" if args.earlier_emitters else "default"
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {emitters} emitters; us per step")
    for name in args.problems.split(","):
        for tol in map(float, args.tols.split(",")):
            cells = []
            for label, policy in policies.items():
                problem = problems.PROBLEMS[name]
                ts, y0 = jnp.array([0.0, problem.t_end]), jnp.asarray(problem.y0)
                with taylax.emission_policy(policy):  # traced (and compiled) in here
                    solve = taylax.ode.integrate(problem.field, tol=tol)
                    compiled = jax.jit(solve, compiler_options=options).lower(ts, y0).compile()
                us, steps = per_step(compiled, ts, y0)
                kernels = loop_kernels(compiled)
                cells.append(f"{label} {us:.2f} ({kernels} kernels)")
            if args.heyoka:
                seconds, _, heyoka_steps, _ = problems.run_heyoka(problems.PROBLEMS[name], tol, 5)
                cells.append(f"heyoka {seconds / heyoka_steps * 1e6:.2f}")
            order = taylax.ode.default_order(tol)
            print(
                f"{name} tol {tol:g} (K = {order}, {steps} steps): " + ", ".join(cells), flush=True
            )
    if args.floor:
        for order in (8, 12, 16, 18, 20):
            fn = jax.jit(pendulum_floor(order), compiler_options=options)
            us, _ = per_step(lambda ts, y, fn=fn: fn(y), None, jnp.array([2.5, 0.0]))
            print(f"pendulum by hand, K = {order}: {us:.2f} us per trip")


if __name__ == "__main__":
    main()
