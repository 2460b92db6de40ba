"""Cost of an ODE solution's Taylor coefficients against the order: `taylax.ode.coefficients`.

The right-hand side (`--field`) is the three-body problem in 3-D (`three_body`: 18 numbers
of state, G = 1, unit masses) or the planar restricted three-body problem of the Arenstorf
orbit (`restricted`: 4 numbers, `bench_ode_problems.arenstorf`, started near the
Arenstorf orbit's initial state). Three ways to the coefficients `y_0..y_K`, all under
`jax.jit(jax.vmap(...))` over a batch of initial states, float64:

- `order by order`: `taylax.ode.coefficients(..., method="order_by_order")`, the field's
  program evaluated one coefficient at a time (O(K^2));
- `doubling`: `taylax.ode.coefficients(..., method="doubling")` (Newton sweeps on the
  series, O(K^2));
- `pass per order`: the plain recurrence `y_{k+1} = F_k / (k + 1)`, one `taylax.jet` pass
  of order k per new coefficient (O(K^3)), the way that needs neither; `--no-baseline`
  leaves it out (its compilation takes minutes at K = 40).

Steady state: the minimum over `--rounds` interleaved rounds in one process. First call:
the first call's time (trace and compile), in the same process. The growth exponent
between two orders is `log(time ratio) / log(order ratio)` (2 for time growing as K^2).
The figures go to `benchmarks/results/ode_coefficients.md` (`three_body`) or
`benchmarks/results/ode_coefficients_<field>_<batch>.md` (`..._no_baseline.md` with
`--no-baseline`). `--pass` adds one `taylax.jet` pass of the field of order K - 1, the
bulk of the doubling's last sweep: its growth is the pass's own. `--set FIELD=VALUE`
measures under the CPU emission policy with those fields changed (`policy_ab.parse_set`'s
syntax; the results file's name then ends in `_set`).

    python benchmarks/bench_ode_coefficients.py                  # K = 10, 20, 40, 1,024 states
    python benchmarks/bench_ode_coefficients.py --orders 10,20 --batch 256
    python benchmarks/bench_ode_coefficients.py --field restricted --batch 1 --rounds 50
    python benchmarks/bench_ode_coefficients.py --field restricted --batch 256 --no-baseline --pass
    python benchmarks/bench_ode_coefficients.py --field restricted --batch 256 --no-baseline \
        --set scalar_products_as_dots=True guarded_products=True
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_ode_problems import ARENSTORF_Y0, arenstorf  # noqa: E402
from policy_ab import parse_set  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def three_body(t, y, args):
    """y = (positions (3, 3), velocities (3, 3)); unit masses, G = 1."""
    del t, args
    r, v = y[:9].reshape(3, 3), y[9:].reshape(3, 3)
    d = r[None, :, :] - r[:, None, :]  # d[i, j] = r_j - r_i
    dist2 = jnp.sum(d * d, axis=-1) + jnp.eye(3)  # the diagonal's 1 keeps 0 / 0 away
    inv3 = (1 - jnp.eye(3)) * dist2**-1.5
    a = jnp.sum(d * inv3[:, :, None], axis=1)
    return jnp.concatenate([v.reshape(-1), a.reshape(-1)])


def pass_per_order(vector_field, order):
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


# The ways `taylax.ode.coefficients` offers, by their `method`.
WAYS = {"order by order": "order_by_order", "doubling": "doubling"}


def initial_states(batch: int):
    key = jax.random.PRNGKey(0)
    r = jnp.array([[1.0, 0.0, 0.0], [-0.5, 0.87, 0.0], [-0.5, -0.87, 0.0]])
    v = jnp.array([[0.0, 0.6, 0.05], [-0.52, -0.3, 0.0], [0.52, -0.3, -0.05]])
    y = jnp.concatenate([r.reshape(-1), v.reshape(-1)])
    return y + 0.01 * jax.random.normal(key, (batch, 18))


def restricted_states(batch: int):
    """The Arenstorf orbit's initial state, and after the first moved by about 1e-3."""
    key = jax.random.PRNGKey(0)
    moves = 1e-3 * jax.random.normal(key, (batch, 4)).at[0].set(0.0)
    return jnp.asarray(ARENSTORF_Y0) + moves


FIELDS = {
    "three_body": (three_body, "Three-body right-hand side (18 states)", initial_states),
    "restricted": (
        arenstorf,
        "Restricted three-body right-hand side (Arenstorf, 4 states)",
        restricted_states,
    ),
}


def growth_exponent(orders, times) -> float:
    """The least-squares slope of log(time) against log(K)."""
    return float(np.polyfit(np.log(orders), np.log(times), 1)[0])


def one_pass(vector_field, order):
    """One `taylax.jet` pass of the field to `order` along a fixed polynomial: the unit of
    which the doubling's last sweep, of order K - 1, is mostly made."""

    def run(t0, y0):
        t_terms = [jnp.ones_like(t0)] + [jnp.zeros_like(t0)] * (order - 1)
        y_terms = [jnp.full_like(y0, 0.1 / (k + 1)) for k in range(order)]
        f0, terms = taylax.jet(
            lambda t, y: vector_field(t, y, None),
            (t0, y0),
            (t_terms, y_terms),
            factorial_scaled=False,
        )
        return jnp.stack([f0, *terms])

    return run


def measure(
    orders,
    batch: int,
    rounds: int = 5,
    field: str = "three_body",
    baseline: bool = True,
    single_pass: bool = False,
    changes: dict | None = None,
) -> list[dict]:
    """Per order: the steady and first-call times of each way, and the largest difference
    of the others from order by order (`baseline=False`: without a pass per order, whose
    compilation takes minutes; `single_pass`: also one pass of order K - 1, `one_pass`;
    `changes`: fields of the CPU emission policy to change, in force for every call)."""
    policy = contextlib.nullcontext()
    if changes:
        policy = taylax.emission_policy(dataclasses.replace(taylax.CPU, name="set", **changes))
    with policy:
        return _measure(orders, batch, rounds, field, baseline, single_pass)


def _measure(orders, batch, rounds, field, baseline, single_pass) -> list[dict]:
    vector_field, _, states = FIELDS[field]
    y0 = states(batch)
    t0 = jnp.zeros(())
    rows = []
    for order in orders:
        fns = {
            way: jax.jit(
                jax.vmap(
                    lambda y, o=order, m=method: taylax.ode.coefficients(vector_field, o, method=m)(
                        t0, y
                    )
                )
            )
            for way, method in WAYS.items()
        }
        if baseline:
            fns["pass per order"] = jax.jit(
                jax.vmap(lambda y, o=order: pass_per_order(vector_field, o)(t0, y))
            )
        if single_pass:
            fns["one pass of order K - 1"] = jax.jit(
                jax.vmap(lambda y, o=order: one_pass(vector_field, o - 1)(t0, y))
            )
        first, steady = {}, {name: [] for name in fns}
        for name, fn in fns.items():
            start = time.perf_counter()
            out = jax.block_until_ready(fn(y0))
            first[name] = time.perf_counter() - start
            fns[name] = (fn, out)
        b = fns["order by order"][1]
        scale = jnp.maximum(jnp.max(jnp.abs(b), axis=0), 1e-300)
        agree = max(
            float(jnp.max(jnp.abs(out - b) / scale))
            for name, (_fn, out) in fns.items()
            if name not in ("order by order", "one pass of order K - 1")
        )
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


def table(
    rows, batch: int, field: str = "three_body", rounds: int = 5, changes: dict | None = None
) -> str:
    """The results file's text: one row per order (each way's time and its growth exponent
    from the order before), and each way's exponent fitted over all orders."""
    base = rows[0]
    ways = list(base["steady_ms"])
    orders = ",".join(str(row["order"]) for row in rows)
    options = f"--orders {orders} --batch {batch}"
    options += f" --field {field}" * (field != "three_body") + f" --rounds {rounds}" * (rounds != 5)
    options += " --no-baseline" * ("pass per order" not in ways)
    options += " --pass" * ("one pass of order K - 1" in ways)
    if changes:
        options += " --set " + " ".join(f"{k}={v}" for k, v in changes.items())
    header = ["K"]
    for way in ways:
        header += [f"{way} (ms)", f"{way}: exponent from the K before"]
    header += [
        "order by order / (K / K0)^2",
        f"first call, {' / '.join(ways)} (s)",
        "largest difference from order by order (relative to each order's largest)",
    ]
    lines = [
        f"{FIELDS[field][1]}, {batch} initial states, float64, "
        f"jax {jax.__version__}, {jax.devices()[0].device_kind}. Command: "
        f"`python benchmarks/bench_ode_coefficients.py {options}`.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    previous = None
    for row in rows:
        growth = row["steady_ms"]["order by order"] / base["steady_ms"]["order by order"]
        quad = (row["order"] / base["order"]) ** 2
        cells = [str(row["order"])]
        for way in ways:
            cells.append(f"{row['steady_ms'][way]:.3f}")
            exponent = ""
            if previous is not None:
                pair = [previous["steady_ms"][way], row["steady_ms"][way]]
                exponent = f"{growth_exponent([previous['order'], row['order']], pair):.2f}"
            cells.append(exponent)
        cells.append(f"{growth / quad:.2f}")
        cells.append(" / ".join(f"{row['first_s'][way]:.1f}" for way in ways))
        cells.append(f"{row['agree']:.1e}" if np.isfinite(row["agree"]) else "-")
        lines.append("| " + " | ".join(cells) + " |")
        previous = row
    if len(rows) > 1:
        ks = [row["order"] for row in rows]
        fits = ", ".join(
            f"{way} {growth_exponent(ks, [row['steady_ms'][way] for row in rows]):.2f}"
            for way in ways
        )
        lines += [
            "",
            f"Growth exponent over all K (least-squares slope of log time against log K): {fits}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="10,20,40")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--field", choices=sorted(FIELDS), default="three_body")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-baseline", action="store_true", help="without a pass per order")
    parser.add_argument("--pass", action="store_true", help="also one pass of order K - 1")
    parser.add_argument(
        "--set", nargs="*", metavar="FIELD=VALUE", help="change the CPU emission policy's fields"
    )
    args = parser.parse_args()
    changes = parse_set(args.set)
    orders = [int(k) for k in args.orders.split(",")]
    rows = measure(
        orders,
        args.batch,
        args.rounds,
        args.field,
        baseline=not args.no_baseline,
        single_pass=getattr(args, "pass"),
        changes=changes,
    )
    text = table(rows, args.batch, args.field, args.rounds, changes)
    print(text)
    name = (
        f"ode_coefficients{'_set' * bool(changes)}.md"
        if args.field == "three_body"
        else f"ode_coefficients_{args.field}_{args.batch}{'_no_baseline' * args.no_baseline}"
        f"{'_set' * bool(changes)}.md"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / name).write_text(text)


if __name__ == "__main__":
    main()
