"""Where a batch-mode step of `taylax.ode.integrate` spends its time.

For `--trajectories` Kepler orbits (`bench_ode.kepler`, e = 0.5 +- 0.05 as in
`bench_ode_ensemble.py`) in the batch layout (`batch=True`: every array `(n, B)`), the
steady-state minimum of `--rounds` calls, float64, public API only:

- the whole solve over one period at `--tol`, per step;
- a step's coefficients (`taylax.ode.coefficients(..., batch=True)`), at the order the
  tolerance sets, order by order (what `integrate` takes for this field) and by the
  doubling sweeps;
- the passes the doubling's last sweep is made of (`taylax.jet` with normalized terms): the field's
  of order K - 1 and its Jacobian's of order about K / 2 (one `jax.jvp` per state
  component, broadcast over the batch, as the sweeps take it);
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


def jacobian_field(t, y):
    """`J[i, j, b] = d kepler_i / d y_j` for each trajectory b of `y` `(4, B)`: one
    `jax.jvp` per basis vector, broadcast over the batch."""
    n = y.shape[0]
    basis = jnp.broadcast_to(jnp.eye(n, dtype=y.dtype)[:, :, None], (n, *y.shape))
    columns = jax.vmap(lambda e: jax.jvp(lambda u: kepler(t, u, None), (y,), (e,))[1])(basis)
    return jnp.swapaxes(columns, 0, 1)


def one_pass(field, order: int):
    """One Taylor pass of `field(t, y)` of `order` along a fixed polynomial in `y` (its
    cost does not depend on the polynomial)."""

    def run(t, y):
        t_terms = [jnp.ones_like(t)] + [jnp.zeros_like(t)] * (order - 1)
        y_terms = [y * (0.1 / (k + 1)) for k in range(order)]
        f0, terms = taylax.jet(field, (t, y), (t_terms, y_terms), factorial_scaled=False)
        return f0, terms

    return run


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
    t0 = jnp.zeros(args.trajectories)
    # Jorba and Zou's order, as `integrate` takes it; the last sweep's passes are of
    # orders K - 1 and (K - 2) / 2 rounded up.
    order = taylax.ode.default_order(args.tol)
    half = -(-(order - 2) // 2)
    ts = jnp.array([0.0, 2 * np.pi])

    solve = jax.jit(taylax.ode.integrate(kepler, tol=args.tol, batch=True))
    sol = jax.block_until_ready(solve(ts, y0))
    steps = int(jnp.max(sol.steps))
    whole = best_ms(lambda y: solve(ts, y).ys, y0, rounds=max(3, args.rounds // 4))
    parts = {f"the solve, per step ({steps} steps)": whole / steps}
    for method in ("order_by_order", "doubling"):
        coefficients = taylax.ode.coefficients(kepler, order, batch=True, method=method)
        parts[f"a step's coefficients (order {order}, {method.replace('_', ' ')})"] = best_ms(
            coefficients, t0, y0, rounds=args.rounds
        )
    parts |= {
        f"the field's pass of order {order - 1}": best_ms(
            one_pass(lambda t, y: kepler(t, y, None), order - 1), t0, y0, rounds=args.rounds
        ),
        f"the Jacobian's pass of order {half}": best_ms(
            one_pass(jacobian_field, half), t0, y0, rounds=args.rounds
        ),
        "one evaluation of the field": best_ms(
            lambda t, y: kepler(t, y, None), t0, y0, rounds=args.rounds
        ),
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
