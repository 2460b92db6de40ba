"""A/B of one emission-policy change against a built-in policy, on the programs it moves.

Compares `--base` (a built-in policy: cpu, gpu, default) with the same policy changed by
`--set FIELD=VALUE ...`, side by side:

* `chains`: the elementwise chains of `gpu_check.py` and `bench_batched.py` (with
  `--untuned`, `untuned_chains.py`'s too) under `jax.vmap` over `--n` points, with jet
  (not with `--no-jet`), in one process (minimum of `--rounds` rounds of 5 calls; first
  call = lower + compile + first run);
* `mlp`: the tanh MLP of `bench_batched.py` along a direction (batch 2048), one process,
  minimum of interleaved calls;
* `rk4`: RK4 in `fori_loop` (`bench_programs.py`), first call and steady state, in
  alternating fresh processes;
* `recursion`: the jitted recursion's first call (`benchmarks/recursion.py`), alternating
  fresh processes.

Usage::

    python benchmarks/policy_ab.py --set unroll_max_order=16 --orders 12,16 --parts chains,mlp
    python benchmarks/policy_ab.py --set unroll_max_order=16 --parts recursion --ks 9,20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def policies(base: str, changes: dict):
    import taylax

    start = {"cpu": taylax.CPU, "gpu": taylax.GPU, "default": taylax.DEFAULT}[base]
    return {"base": start, "changed": dataclasses.replace(start, name="changed", **changes)}


def parse_set(items) -> dict:
    """`FIELD=VALUE` strings as policy changes: integers, None, True or False."""
    out = {}
    for item in items or []:
        key, _, value = item.partition("=")
        named = {"None": None, "True": True, "False": False}
        out[key] = named[value] if value in named else int(value)
    return out


def chains(args, pols) -> None:
    import jax
    import jax.numpy as jnp
    from jax.experimental import jet

    import taylax
    from bench_batched import CHAINS
    from gpu_check import CHAINS as MORE, steady_ms

    t = jnp.linspace(-0.9, 0.9, args.n)
    table = {**MORE, **{name: f for name, (f, _) in CHAINS.items()}}
    if args.untuned:
        from untuned_chains import CHAINS as UNTUNED  # sets x64 on again after its imports

        table.update(UNTUNED)
    for K in args.orders:
        for name, f in table.items():
            row = {}
            for label, policy in pols.items():
                start = time.perf_counter()
                with taylax.emission_policy(policy):
                    c = jax.jit(jax.vmap(taylax.derivatives(f, K))).lower(t).compile()
                jax.block_until_ready(c(t))
                row[label] = (steady_ms(c, (t,), args.rounds, 5), time.perf_counter() - start)

            if not args.no_jet:

                def jet_run(t, f=f, K=K):
                    zeros = (jnp.zeros_like(t),) * (K - 1)
                    return jet.jet(f, (t,), ((jnp.ones_like(t),) + zeros,))

                start = time.perf_counter()
                c = jax.jit(jet_run).lower(t).compile()
                jax.block_until_ready(c(t))
                row["jet"] = (steady_ms(c, (t,), args.rounds, 5), time.perf_counter() - start)
            cells = ", ".join(f"{k} {ms:.2f} ms (first {s:.2f} s)" for k, (ms, s) in row.items())
            print(f"chain {name} K={K}: {cells}", flush=True)


def mlp(args, pols) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import taylax
    from bench_batched import mlp_contenders, mlp_params

    params = mlp_params(128)
    rng = np.random.default_rng(0)
    x, v = (jnp.asarray(rng.normal(size=(2048, 16))) for _ in range(2))
    for K in args.orders:
        compiled = {}
        for label, policy in pols.items():
            with taylax.emission_policy(policy):
                start = time.perf_counter()
                c = mlp_contenders(params, K)["taylax"].lower(x, v).compile()
                compiled[label] = (c, time.perf_counter() - start)
        best = {label: float("inf") for label in compiled}
        for _ in range(args.rounds * 5):
            for label, (c, _) in compiled.items():
                start = time.perf_counter()
                jax.block_until_ready(c(x, v))
                best[label] = min(best[label], time.perf_counter() - start)
        cells = ", ".join(
            f"{k} {best[k] * 1e3:.2f} ms (compile {compiled[k][1]:.2f} s)" for k in compiled
        )
        print(f"tanh mlp K={K}: {cells}", flush=True)


_RK4_CHILD = """
import json, sys, time, dataclasses
import jax
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {here!r})
import taylax, bench_programs
from policy_ab import policies
pol = policies({base!r}, {changes!r})[{label!r}]
f, x, v = bench_programs.build_case("rk4")
with taylax.emission_policy(pol):
    g = jax.jit(lambda x, v: taylax.derivatives(f, {K})(x, v))
    s = time.perf_counter(); jax.block_until_ready(g(x, v)); first = time.perf_counter() - s
    best = 1e9
    for _ in range(30):
        s = time.perf_counter()
        jax.block_until_ready(g(x, v))
        best = min(best, time.perf_counter() - s)
print(json.dumps([first, best * 1e3]))
"""

_RECURSION_CHILD = """
import runpy, sys
sys.path.insert(0, {here!r})
import taylax
from policy_ab import policies
sys.argv = ["recursion.py", "taylax", "{k}"]
with taylax.emission_policy(policies({base!r}, {changes!r})[{label!r}]):
    runpy.run_path({here!r} + "/recursion.py", run_name="__main__")
"""


def _child(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def fresh_processes(args, pols, changes) -> None:
    fmt = dict(here=str(HERE), base=args.base, changes=changes)
    for part in ("rk4", "recursion"):
        if part not in args.parts:
            continue
        for value in args.orders if part == "rk4" else args.ks:
            seen = {label: [] for label in pols}
            for _ in range(args.processes):
                for label in pols:
                    if part == "rk4":
                        out = json.loads(_child(_RK4_CHILD.format(K=value, label=label, **fmt)))
                        seen[label].append(f"first {out[0]:.2f} s steady {out[1]:.3f} ms")
                    else:
                        code = _RECURSION_CHILD.format(k=value, label=label, **fmt)
                        seen[label].append(f"{json.loads(_child(code))['first_call_s']:.2f} s")
            print(f"{part} {value}: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in seen.items()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="cpu")
    parser.add_argument(
        "--set", nargs="*", help="FIELD=VALUE changes (integers, None, True or False)"
    )
    parser.add_argument("--parts", default="chains,mlp,rk4,recursion")
    parser.add_argument("--orders", default="12,16")
    parser.add_argument("--ks", default="9,20")
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument(
        "--no-jet", action="store_true", help="chains without jet (whose compile grows past K = 16)"
    )
    parser.add_argument(
        "--untuned", action="store_true", help="chains: untuned_chains.py's chains too"
    )
    args = parser.parse_args(argv)
    args.orders = [int(k) for k in args.orders.split(",")]
    args.ks = [int(k) for k in args.ks.split(",")]
    args.parts = args.parts.split(",")
    import jax

    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, str(HERE))
    changes = parse_set(args.set)
    pols = policies(args.base, changes)
    print(f"# {args.base} against {changes}; jax {jax.__version__}, {jax.devices()[0].device_kind}")
    if "chains" in args.parts:
        chains(args, pols)
    if "mlp" in args.parts:
        mlp(args, pols)
    fresh_processes(args, pols, changes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
