"""Which fields' one-kernel steps XLA:CPU runs in time that grows with the order.

`taylax.EmissionPolicy.ode_rows_max_state` holds a single trajectory's state as rows
apart, so that a step's whole recurrence is scalar code that XLA:CPU fuses into a few
kernels (docs/ODE.md, "One kernel per step"). Under XLA:CPU's default (fusion) emitters
some fields' steps then take time that grows steeply with the order. This script times
small fields of known shape, each under the CPU policy as shipped (`cpu`) and with rows
(`rows`), at the orders of `--tols`: microseconds per step (the least of 5 calls) and, in
brackets, the fused kernels of the stepping loop's body. Each field isolates one
ingredient: an inverse-cube force through `** -1.5` (`kepler`), through `sqrt` and a
reciprocal (`kepler_sqrt`), through `sqrt` and divisions (`kepler_div`); a shifted
centre (`one_centre`) and two of them (`two_centres`, the restricted three-body field's
shape with round numbers); `exp` (`exp_force`); and a rational force (`rational`).

    python benchmarks/ode_rows_fields.py
    python benchmarks/ode_rows_fields.py --fields kepler,two_centres --tols 1e-10,1e-12,1e-14
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import ode_one_kernel  # noqa: E402
import taylax  # noqa: E402


def kepler(t, s, args):
    x, y, vx, vy = s
    r3 = (x * x + y * y) ** -1.5
    return jnp.stack([vx, vy, -x * r3, -y * r3])


def kepler_sqrt(t, s, args):
    x, y, vx, vy = s
    r2 = x * x + y * y
    r3 = 1 / (r2 * jnp.sqrt(r2))
    return jnp.stack([vx, vy, -x * r3, -y * r3])


def kepler_div(t, s, args):
    x, y, vx, vy = s
    r = jnp.sqrt(x * x + y * y)
    return jnp.stack([vx, vy, -x / (r * r * r), -y / (r * r * r)])


def one_centre(t, s, args):
    x, y, vx, vy = s
    d = ((x + 0.1) ** 2 + y**2) ** -1.5
    return jnp.stack([vx, vy, -(x + 0.1) * d, -y * d])


def two_centres(t, s, args):
    x, y, vx, vy = s
    d1 = ((x + 0.1) ** 2 + y**2) ** -1.5
    d2 = ((x - 0.9) ** 2 + y**2) ** -1.5
    return jnp.stack([vx, vy, -(x + 0.1) * d1 - (x - 0.9) * d2, -y * d1 - y * d2])


def exp_force(t, s, args):
    x, y = s
    return jnp.stack([y, 1 - jnp.exp(0.1 * x)])


def rational(t, s, args):
    x, y = s
    return jnp.stack([y, -x / (1 + x * x)])


ORBIT = [1.0, 0.0, 0.0, 1.1]
FIELDS = {
    "kepler": (kepler, ORBIT),
    "kepler_sqrt": (kepler_sqrt, ORBIT),
    "kepler_div": (kepler_div, ORBIT),
    "one_centre": (one_centre, ORBIT),
    "two_centres": (two_centres, [1.2, 0.0, 0.0, 1.0]),
    "exp_force": (exp_force, [1.0, 0.0]),
    "rational": (rational, [1.0, 0.0]),
}
T_END = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fields", default=",".join(FIELDS))
    parser.add_argument("--tols", default="1e-10,1e-12")
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args()
    policies = {
        "cpu": taylax.CPU,
        "rows": dataclasses.replace(taylax.CPU, name="rows", ode_rows_max_state=args.rows),
    }
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; us per step (loop kernels)")
    for name in args.fields.split(","):
        field, start = FIELDS[name]
        ts, y0 = jnp.array([0.0, T_END]), jnp.asarray(start)
        for tol in map(float, args.tols.split(",")):
            cells = []
            for label, policy in policies.items():
                with taylax.emission_policy(policy):  # traced (and compiled) in here
                    solve = taylax.ode.integrate(field, tol=tol)
                    compiled = jax.jit(solve).lower(ts, y0).compile()
                us, _ = ode_one_kernel.per_step(compiled, ts, y0)
                cells.append(f"{label} {us:.2f} ({ode_one_kernel.loop_kernels(compiled)})")
            order = taylax.ode.default_order(tol)
            print(f"{name} tol {tol:g} (K = {order}): " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
