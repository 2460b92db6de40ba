"""First call on large programs: taylax against jet and nested jvp, one fresh process each.

A large user program is where emission choices that multiply equations (rows, unrolled
recurrences) cost most: the first call of an unrolled RK4 at order 4 went from 4 s to more
than seven minutes before the program-size budget (`taylax.EmissionPolicy.budget`). The
programs, each along a direction argument `v` (`jax.jit(lambda x, v: ...)(x, v)`):

* `rk4`: 20 unrolled RK4 steps of y' = -y^3 + sin(t), a scalar (660 equations);
* `mlp30`: a 30-layer tanh MLP of width 64 summed to a scalar, at a point of R^64;
* `pendulum`: 40 unrolled explicit Euler steps of a damped pendulum, state (2,).

Each contender returns derivatives 0..K along `v` (`--outputs all`, the default):
`taylax.derivatives`' stack, jet's primal and terms and nested jvp's levels as lists.
`--outputs top` keeps the K-th alone, with which jet's program compiles faster (its first
call at K = 4 on `rk4`: 3.2 s, against 11 s for all orders). Each cell is trace +
compile + first run of the jitted function, in a fresh process, timed inside it
(imports excluded), stopped after `--timeout` seconds. Usage::

    python benchmarks/bench_large.py [--orders 2,4,8] [--programs rk4,mlp30,pendulum]

Writes `benchmarks/results/large.md` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
CONTENDERS = ("taylax", "jet", "nested jvp")
PROGRAMS = ("rk4", "mlp30", "pendulum")


def rk4_unrolled(y, steps=20, h=0.05):
    """20 RK4 steps of y' = -y^3 + sin(t), unrolled: a scalar program of 660 equations."""
    import jax.numpy as jnp

    t = 0.0
    for _ in range(steps):
        k1 = -(y**3) + jnp.sin(t)
        k2 = -((y + h / 2 * k1) ** 3) + jnp.sin(t + h / 2)
        k3 = -((y + h / 2 * k2) ** 3) + jnp.sin(t + h / 2)
        k4 = -((y + h * k3) ** 3) + jnp.sin(t + h)
        y, t = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h
    return y


def build(program: str):
    """`(f, x, v)` for one of `PROGRAMS`."""
    import jax.numpy as jnp
    import numpy as np

    if program == "rk4":
        return rk4_unrolled, jnp.float64(0.8), jnp.float64(1.0)
    if program == "mlp30":
        rng = np.random.default_rng(0)
        ws = [jnp.asarray(rng.normal(size=(64, 64)) / 8) for _ in range(30)]

        def mlp30(x):
            for w in ws:
                x = jnp.tanh(x @ w)
            return x.sum()

        return mlp30, *(jnp.asarray(rng.normal(size=64)) for _ in range(2))

    def pendulum(y, steps=40, h=0.05):
        for _ in range(steps):
            y = y + h * jnp.stack([y[1], -jnp.sin(y[0]) - 0.1 * y[1]])
        return y

    return pendulum, jnp.array([0.4, -0.2]), jnp.array([1.0, 0.5])


def child(program: str, K: int, who: str, outputs: str = "all") -> None:
    """Time one first call in this (fresh) process and print it as JSON."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from jax.experimental import jet

    import taylax
    from bench_batched import nested_levels

    f, x, v = build(program)
    if who == "taylax":

        def all_orders(x, v):
            return taylax.derivatives(f, K)(x, v)

    elif who == "jet":
        zeros = (jnp.zeros_like(v),) * (K - 1)

        # As jet returns them: stacked, the unrolled RK4's terms at K = 4 compiled for
        # more than 250 s (XLA fused the stack with the whole program), 11 s unstacked.
        def all_orders(x, v):
            primal, terms = jet.jet(f, (x,), ((v,) + zeros,))
            return [primal, *terms]

    else:

        def all_orders(x, v):
            return nested_levels(f, K, v, stacked=False)(x)

    g = jax.jit(all_orders if outputs == "all" else lambda x, v: all_orders(x, v)[-1])
    start = time.perf_counter()
    out = jax.block_until_ready(g(x, v))
    first = time.perf_counter() - start
    print(json.dumps({"first_s": first, "value": np.asarray(out).ravel()[:4].tolist()}))


def first_call(program: str, K: int, who: str, timeout: float, outputs: str = "all") -> dict:
    """`{"first_s": ..., "value": ...}` from a fresh process, or `{"timeout": seconds}`."""
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", program, str(K), who, outputs],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    except subprocess.CalledProcessError as e:
        return {"error": e.stderr.strip().splitlines()[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cell(r: dict) -> str:
    if "first_s" in r:
        return f"{r['first_s']:.2f} s"
    if "timeout" in r:
        return f"> {r['timeout']:.0f} s"
    return "skipped" if r.get("error") == "skipped" else "error"


def markdown(rows: list[dict], outputs: str = "all") -> str:
    import jax

    device = jax.devices()[0].device_kind
    lines = [
        f"First call (trace + compile + first run, fresh process; jax {jax.__version__}, "
        f"{device}, float64; outputs: {'derivatives 0..K' if outputs == 'all' else 'order K'}):",
        "",
        "| program | K | taylax | jet | nested jvp | taylax / jet |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        r = row["results"]
        ratio = "-"
        if "first_s" in r["taylax"] and "first_s" in r["jet"]:
            ratio = f"{r['taylax']['first_s'] / r['jet']['first_s']:.2f}"
        elif "first_s" in r["taylax"] and "timeout" in r["jet"]:
            ratio = f"< {r['taylax']['first_s'] / r['jet']['timeout']:.2f}"
        cells = " | ".join(_cell(r[c]) for c in CONTENDERS)
        lines.append(f"| {row['program']} | {row['order']} | {cells} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], int(argv[2]), argv[3], argv[4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="2,4,8")
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--timeout", type=float, default=100.0)
    parser.add_argument("--nested-max-order", type=int, default=2)
    parser.add_argument("--outputs", choices=("all", "top"), default="all")
    args = parser.parse_args(argv)
    rows = []
    for program in args.programs.split(","):
        for K in (int(k) for k in args.orders.split(",")):
            results = {}
            for who in CONTENDERS:
                if who == "nested jvp" and K > args.nested_max_order:
                    results[who] = {"error": "skipped"}
                    continue
                results[who] = first_call(program, K, who, args.timeout, args.outputs)
            rows.append({"program": program, "order": K, "results": results})
            print(program, K, {k: _cell(v) for k, v in results.items()}, flush=True)
    text = markdown(rows, args.outputs)
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "large.md").write_text(text)
    (RESULTS_DIR / "large.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
