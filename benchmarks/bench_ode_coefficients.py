"""Cost of an ODE solution's Taylor coefficients against the order: `taylax.ode.coefficients`.

The right-hand side is the three-body problem in 3-D (18 numbers of state, G = 1, unit
masses). Two ways to the coefficients `y_0..y_K`, both under `jax.jit(jax.vmap(...))` over
a batch of initial states, float64:

- `doubling`: `taylax.ode.coefficients` (Newton sweeps on the series, O(K^2));
- `order by order`: the plain recurrence `y_{k+1} = F_k / (k + 1)`, one `taylax.jet` pass
  of order k per new coefficient (O(K^3)), the way that needs no Jacobian.

Steady state: the minimum over 5 interleaved rounds in one process. First call: the
first call's time (trace and compile), in the same process. The figures go to
`benchmarks/results/ode_coefficients.md`.

    python benchmarks/bench_ode_coefficients.py                  # K = 10, 20, 40, 1,024 states
    python benchmarks/bench_ode_coefficients.py --orders 10,20 --batch 256
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "ode_coefficients.md"


def three_body(t, y, args):
    """y = (positions (3, 3), velocities (3, 3)); unit masses, G = 1."""
    del t, args
    r, v = y[:9].reshape(3, 3), y[9:].reshape(3, 3)
    d = r[None, :, :] - r[:, None, :]  # d[i, j] = r_j - r_i
    dist2 = jnp.sum(d * d, axis=-1) + jnp.eye(3)  # the diagonal's 1 keeps 0 / 0 away
    inv3 = (1 - jnp.eye(3)) * dist2**-1.5
    a = jnp.sum(d * inv3[:, :, None], axis=1)
    return jnp.concatenate([v.reshape(-1), a.reshape(-1)])


def order_by_order(vector_field, order):
    """The recurrence one order at a time: `order` passes of growing order."""

    def run(t0, y0):
        w = [y0]
        for k in range(order):
            if k == 0:
                w.append(vector_field(t0, y0, None))
                continue
            t_terms = [jnp.ones_like(t0)] + [jnp.zeros_like(t0)] * (k - 1)
            _, terms = taylax.jet(
                lambda t, y: vector_field(t, y, None),
                (t0, y0),
                (t_terms, w[1 : k + 1]),
                factorial_scaled=False,
            )
            w.append(terms[k - 1] / (k + 1))
        return jnp.stack(w)

    return run


def initial_states(batch: int):
    key = jax.random.PRNGKey(0)
    r = jnp.array([[1.0, 0.0, 0.0], [-0.5, 0.87, 0.0], [-0.5, -0.87, 0.0]])
    v = jnp.array([[0.0, 0.6, 0.05], [-0.52, -0.3, 0.0], [0.52, -0.3, -0.05]])
    y = jnp.concatenate([r.reshape(-1), v.reshape(-1)])
    return y + 0.01 * jax.random.normal(key, (batch, 18))


def measure(orders, batch: int, rounds: int = 5) -> list[dict]:
    y0 = initial_states(batch)
    t0 = jnp.zeros(())
    rows = []
    for order in orders:
        fns = {
            "doubling": jax.jit(
                jax.vmap(lambda y, o=order: taylax.ode.coefficients(three_body, o)(t0, y))
            ),
            "order by order": jax.jit(
                jax.vmap(lambda y, o=order: order_by_order(three_body, o)(t0, y))
            ),
        }
        first, steady = {}, {name: [] for name in fns}
        for name, fn in fns.items():
            start = time.perf_counter()
            out = jax.block_until_ready(fn(y0))
            first[name] = time.perf_counter() - start
            fns[name] = (fn, out)
        a, b = fns["doubling"][1], fns["order by order"][1]
        scale = jnp.max(jnp.abs(b), axis=0)
        agree = float(jnp.max(jnp.abs(a - b) / jnp.maximum(scale, 1e-300)))
        for _ in range(rounds):
            for name, (fn, _out) in fns.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(y0))
                steady[name].append(time.perf_counter() - start)
        rows.append(
            {
                "order": order,
                "steady_ms": {n: 1e3 * min(t) for n, t in steady.items()},
                "first_s": first,
                "agree": agree,
            }
        )
        print(rows[-1], flush=True)
    return rows


def table(rows, batch: int) -> str:
    base = rows[0]
    orders = ",".join(str(row["order"]) for row in rows)
    lines = [
        f"Three-body right-hand side, {batch} initial states, float64, "
        f"jax {jax.__version__}, {jax.devices()[0].device_kind}. Command: "
        f"`python benchmarks/bench_ode_coefficients.py --orders {orders} --batch {batch}`.",
        "",
        "| K | doubling (ms) | / (K / K0)^2 | order by order (ms) | first call doubling / "
        "order by order (s) | largest relative difference |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        growth = row["steady_ms"]["doubling"] / base["steady_ms"]["doubling"]
        quad = (row["order"] / base["order"]) ** 2
        lines.append(
            f"| {row['order']} | {row['steady_ms']['doubling']:.2f} | {growth / quad:.2f} | "
            f"{row['steady_ms']['order by order']:.2f} | {row['first_s']['doubling']:.1f} / "
            f"{row['first_s']['order by order']:.1f} | {row['agree']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="10,20,40")
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    rows = measure([int(k) for k in args.orders.split(",")], args.batch)
    text = table(rows, args.batch)
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
