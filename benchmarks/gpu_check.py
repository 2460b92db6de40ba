"""Emission policies on the default JAX backend (a GPU): taylax under several policies
against jet, nested jvp and folx, in one process.

For every (program, dtype, order) it compiles each contender once ahead of time and
records the first call (lower + compile + first run), the steady state (the minimum over
`--rounds` interleaved rounds of `--calls` calls back to back: one round of every
contender, then the next), the compiled program's fusions and `while` loops, and its
temporaries (`memory_analysis().temp_size_in_bytes`). Programs:

* three elementwise chains of our own over `--n` points (`--chains`):
  `exp(cos t) / (1 + t^2)^2 - t^3` (exp, cos, division, integer powers),
  `sqrt(1 + tanh(log1p(t^2))) sin(t)` (log1p, tanh, sqrt, sin) and
  `cos(t)^3 exp(-t^2) / (2 + sin t) + tanh(t)^2`, float64 and float32, orders 2 to 32;
  per-point and whole-array nested jvp up to order 4;
* the tanh MLP of width 128 along a direction (batch `--mlp-batch`), orders 2, 4, 8;
* the Laplacian of a tanh MLP (d = 8, 32, 128; batch `--lap-batch`) against folx;
* (`--parts`) RK4 in `fori_loop`, the Laplacian of a softplus residual network and a
  biharmonic against folx, the float32 fallback past order 12, an unrolled RK4's first
  call; `--hlo FILE` writes the optimized HLO of `--hlo-chains` at orders 2 and 4.

Not part of `make bench` (which measures the CPU). Run where a GPU is::

    PYTHONPATH=src:benchmarks python benchmarks/gpu_check.py --out results.jsonl

Each line of `--out` is one JSON record; the last lines printed are a table of ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jax.experimental import jet as jax_jet  # noqa: E402

import taylax  # noqa: E402
from bench_batched import nested_levels  # noqa: E402
from bench_large import build as build_large  # noqa: E402

try:  # noqa: SIM105
    import folx  # noqa: E402
except ImportError:  # pragma: no cover - an optional peer
    folx = None


def chain_a(t):
    return jnp.exp(jnp.cos(t)) / (1 + t**2) ** 2 - t**3


def chain_b(t):
    return jnp.sqrt(1 + jnp.tanh(jnp.log1p(t * t))) * jnp.sin(t)


def chain_c(t):
    return jnp.cos(t) ** 3 * jnp.exp(-t * t) / (2 + jnp.sin(t)) + jnp.tanh(t) ** 2


CHAINS = {
    "exp-cos-div-pow": chain_a,
    "log1p-tanh-sqrt-sin": chain_b,
    "cos-exp-div-tanh": chain_c,
}


def all_variants() -> dict[str, taylax.EmissionPolicy]:
    """Policies this script can compare (`--policies`): the GPU policy as shipped
    (`gpu-unrolled`); the two it was first chosen against (`gpu-marked`, `gpu-nomark`:
    recurrences in loops past order 8); the shipped one with tanh's line stacked
    (`gpu-tanh-stacked`) or row by row only to order 4 (`gpu-tanh4`), with values marked
    to be computed once (`gpu-marks`), with every closed form row by row to order 32
    (`gpu-rows`), with the output's rows fused into its stack (`gpu-output-fused`), and
    with that and products past order 4 as shifted sums of stacks
    (`gpu-stacked-products`: the GPU policy before 2026-11-28), with float32's unscaled
    fallback as the CPU's `while` loop rather than a conditional (`gpu-fallback-loop`);
    and the CPU's."""
    looped = dict(unroll_max_order=8, unroll_low_degree_max_order=32, polynomial_rows_max_order=1)
    rows_fused = dict(output_rows_apart_min_order=None)
    stacked_products = dict(product_rows_max_order=4, stacked_product_rows_max_order=4)
    gpu = taylax.GPU
    return {
        "gpu-marked": dataclasses.replace(
            gpu, name="gpu-marked", mark_values=True, **looped, **rows_fused, **stacked_products
        ),
        "gpu-nomark": dataclasses.replace(
            gpu, name="gpu-nomark", **looped, **rows_fused, **stacked_products
        ),
        "gpu-unrolled": gpu,
        "gpu-tanh-stacked": dataclasses.replace(
            gpu, name="gpu-tanh-stacked", polynomial_rows_max_order=1
        ),
        "gpu-tanh4": dataclasses.replace(gpu, name="gpu-tanh4", polynomial_rows_max_order=4),
        "gpu-marks": dataclasses.replace(gpu, name="gpu-marks", mark_values=True),
        "gpu-rows": dataclasses.replace(
            gpu, name="gpu-rows", rows_max_order=32, polynomial_rows_max_order=32
        ),
        "gpu-output-fused": dataclasses.replace(gpu, name="gpu-output-fused", **rows_fused),
        "gpu-stacked-products": dataclasses.replace(
            gpu, name="gpu-stacked-products", **rows_fused, **stacked_products
        ),
        "gpu-fallback-loop": dataclasses.replace(
            gpu, name="gpu-fallback-loop", fallback_in_loop=True
        ),
        "cpu": taylax.CPU,
    }


_SELECTED: list[str] = ["gpu-marked", "gpu-nomark", "gpu-unrolled"]


def variants() -> dict[str, taylax.EmissionPolicy]:
    """The policies compared in this run (`--policies`)."""
    table = all_variants()
    return {name: table[name] for name in _SELECTED}


def _first_call(fn, args, policy=None, compiler_options=None):
    """Lower, compile (with XLA's `compiler_options`, if any) and run `jax.jit(fn)` once
    under `policy`: the compiled program and the seconds it took."""
    import contextlib

    scope = taylax.emission_policy(policy) if policy is not None else contextlib.nullcontext()
    start = time.perf_counter()
    with scope:
        compiled = jax.jit(fn).lower(*args).compile(compiler_options=compiler_options)
    out = jax.block_until_ready(compiled(*args))
    return compiled, out, time.perf_counter() - start


def _round_ms(compiled, args, calls: int) -> float:
    """Time per call of `calls` calls back to back (ms)."""
    start = time.perf_counter()
    for _ in range(calls):
        out = compiled(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls * 1e3


def steady_ms(compiled, args, rounds: int, calls: int) -> float:
    """Minimum over `rounds` of the time per call of `calls` calls back to back (ms): one
    contender alone (`time_all` interleaves several)."""
    return min(_round_ms(compiled, args, calls) for _ in range(rounds))


def _describe(compiled, out, first: float) -> dict:
    text = compiled.as_text()
    memory = compiled.memory_analysis()
    temp = getattr(memory, "temp_size_in_bytes", None) if memory is not None else None
    return {
        "first_s": first,
        "fusions": text.count(" fusion("),
        "whiles": text.count(" while("),
        "temp_bytes": temp,
        "out": np.asarray(out[0] if isinstance(out, (tuple, list)) else out),
    }


def jet_along_ones(f, K: int):
    """`t -> stack(f, f', ..., f^(K))` by `jax.experimental.jet` along ones."""

    def run(t):
        terms = [jnp.ones_like(t)] + [jnp.zeros_like(t)] * (K - 1)
        y0, ys = jax_jet.jet(f, (t,), (terms,))
        return jnp.stack([y0, *ys])

    return run


def time_all(contenders: dict, args: tuple, calls: int, rounds: int, compiler_options=None) -> dict:
    """Each `(fn, policy)` contender compiled once (its first call), then timed in
    `rounds` interleaved rounds of `calls` calls back to back (one round of every
    contender, then the next), so that a drift of the device's clocks reaches all alike;
    `ms` is the minimum over the rounds. A contender that fails is recorded with its
    error and the sweep goes on. `compiler_options` go to every compile (XLA options such
    as `xla_cpu_use_fusion_emitters`)."""
    results, compiled = {}, {}
    for label, (fn, policy) in contenders.items():
        try:
            program, out, first = _first_call(fn, args, policy, compiler_options)
        except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
            results[label] = {"error": f"{type(e).__name__}: {e}"[:300]}
            continue
        compiled[label] = program
        results[label] = _describe(program, out, first)
        results[label]["ms"] = float("inf")
    for _ in range(rounds):
        for label, program in compiled.items():
            results[label]["ms"] = min(results[label]["ms"], _round_ms(program, args, calls))
    return results


def _agree(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-300))


def run_chains(args, emit):
    for dtype in args.dtypes.split(","):
        dt = jnp.dtype(dtype)
        t = jnp.linspace(-0.9, 0.9, args.n, dtype=dt)
        for name in args.chains.split(","):
            f = CHAINS[name]
            for K in [int(k) for k in args.orders.split(",")]:
                contenders = {}
                for label, policy in variants().items():
                    fn = jax.vmap(taylax.derivatives(f, K))
                    # (K + 1, points) as jet's stack, or as vmap returns it (`--point-major`).
                    contenders[label] = (
                        (lambda t, fn=fn: fn(t))
                        if args.point_major
                        else (lambda t, fn=fn: fn(t).T),
                        policy,
                    )
                if args.whole:
                    # The form: the whole array along a direction of ones.
                    contenders["taylax-whole"] = (
                        lambda t, f=f, K=K: taylax.derivatives(f, K)(t, jnp.ones_like(t)),
                        None,
                    )

                contenders["jet"] = (jet_along_ones(f, K), None)
                if K <= args.nested_max_order:
                    contenders["nested jvp"] = (nested_levels(f, K), None)
                    contenders["nested jvp (vmap)"] = (
                        lambda t, f=f, K=K: jax.vmap(nested_levels(f, K))(t).T,
                        None,
                    )
                record = {"program": name, "dtype": dtype, "order": K, "n": args.n}
                results = time_all(contenders, (t,), args.calls, args.rounds)
                emit(record, results, output_bytes=(K + 1) * args.n * dt.itemsize)


def run_mlp(args, emit):
    rng = np.random.default_rng(0)
    width, d_in = 128, 16
    sizes = [d_in, width, width, width, 1]
    params = [
        (jnp.asarray(rng.normal(size=(m, n)) / np.sqrt(m)), jnp.asarray(0.1 * rng.normal(size=n)))
        for m, n in zip(sizes[:-1], sizes[1:])
    ]

    def f(x):
        for w, b in params[:-1]:
            x = jnp.tanh(x @ w + b)
        w, b = params[-1]
        return x @ w + b

    x = jnp.asarray(rng.normal(size=(args.mlp_batch, d_in)))
    v = jnp.asarray(rng.normal(size=(args.mlp_batch, d_in)))
    for K in (2, 4, 8):
        contenders = {}
        for label, policy in variants().items():
            contenders[label] = (lambda x, v, K=K: taylax.derivatives(f, K)(x, v), policy)

        def jet_run(x, v, K=K):
            y0, ys = jax_jet.jet(f, (x,), ([v] + [jnp.zeros_like(v)] * (K - 1),))
            return jnp.stack([y0, *ys])

        contenders["jet"] = (jet_run, None)
        if K <= args.nested_max_order:
            contenders["nested jvp"] = (lambda x, v, K=K: nested_levels(f, K, v)(x), None)
        results = time_all(contenders, (x, v), args.calls, args.rounds)
        record = {"program": "tanh mlp", "dtype": "float64", "order": K, "n": args.mlp_batch}
        emit(record, results, output_bytes=(K + 1) * args.mlp_batch * 8)


def run_laplacian(args, emit):
    for d in [int(x) for x in args.lap_dims.split(",")]:
        rng = np.random.default_rng(d)
        sizes = [d, 128, 128, 1]
        params = [
            (
                jnp.asarray(rng.normal(size=(m, n)) / np.sqrt(m)),
                jnp.asarray(0.1 * rng.normal(size=n)),
            )
            for m, n in zip(sizes[:-1], sizes[1:])
        ]

        def f(x, params=params):
            for w, b in params[:-1]:
                x = jnp.tanh(x @ w + b)
            w, b = params[-1]
            return (x @ w + b)[0]

        pts = jnp.asarray(rng.normal(size=(args.lap_batch, d)))
        contenders = {}
        for label, policy in variants().items():
            contenders[label] = (jax.vmap(taylax.laplacian(f)), policy)
        if folx is not None:
            contenders["folx"] = (
                jax.vmap(lambda x, f=f: folx.forward_laplacian(f)(x).laplacian),
                None,
            )
        contenders["hessian trace"] = (jax.vmap(lambda x, f=f: jnp.trace(jax.hessian(f)(x))), None)
        results = time_all(contenders, (pts,), args.calls, args.rounds)
        record = {
            "program": f"laplacian d={d}",
            "dtype": "float64",
            "order": 2,
            "n": args.lap_batch,
        }
        emit(record, results, output_bytes=args.lap_batch * 8)


def run_large(args, emit):
    """First calls on `bench_large`'s programs (`--large-programs`: the unrolled RK4, the
    30-layer tanh MLP) at `--large-orders`, each selected policy (and the RK4's compact
    form) against jet, in this process: every contender is a program of its own, so none
    reuses another's compilation."""
    for program in args.large_programs.split(","):
        f, x, v = build_large(program)
        for K in [int(k) for k in args.large_orders.split(",")]:
            contenders = {
                label: (lambda x, v, K=K, f=f: taylax.derivatives(f, K)(x, v), policy)
                for label, policy in variants().items()
            }
            if program == "rk4":
                contenders["gpu-compact"] = (
                    lambda x, v, K=K, f=f: taylax.derivatives(f, K)(x, v),
                    taylax.GPU.compact(),
                )

            def jet_run(x, v, K=K, f=f):
                y0, ys = jax_jet.jet(f, (x,), ([v] + [jnp.zeros_like(v)] * (K - 1),))
                return jnp.stack([y0, *ys])

            contenders["jet"] = (jet_run, None)
            results = time_all(contenders, (x, v), 1, 1)
            emit(
                {"program": f"large {program}", "dtype": "float64", "order": K, "n": 1},
                results,
                8 * (K + 1),
            )


def run_fallback(args, emit):
    """float32 past order 12 (a pass along a stretched line with its unscaled fallback)
    against jet, on two chains that never need the fallback: the GPU policy as shipped
    (the fallback's check apart from the pass), with the check fused into the pass
    (`fallback_check_apart=False`), and `taylax.taylor` (one pass, no stretch, no
    fallback: what the check should cost nothing against)."""
    t = jnp.linspace(-0.9, 0.9, args.n, dtype=jnp.float32)
    fused = dataclasses.replace(taylax.GPU, name="gpu-fused-check", fallback_check_apart=False)
    for name in ("log1p-tanh-sqrt-sin", "cos-exp-div-tanh"):
        f = CHAINS[name]
        for K in [int(k) for k in args.fallback_orders.split(",")]:
            whole = lambda t, f=f, K=K: taylax.derivatives(f, K)(t, jnp.ones_like(t))  # noqa: E731
            contenders = {
                "taylax-whole": (whole, None),
                "taylax-fused-check": (whole, fused),
                "taylax-taylor": (
                    lambda t, f=f, K=K: (lambda p, c: jnp.concatenate([p[None], c]))(
                        *taylax.taylor(f, K)(t, jnp.ones_like(t))
                    ),
                    None,
                ),
            }

            contenders["jet"] = (jet_along_ones(f, K), None)
            results = time_all(contenders, (t,), args.calls, args.rounds)
            emit(
                {"program": f"fallback {name}", "dtype": "float32", "order": K, "n": args.n},
                results,
                output_bytes=(K + 1) * args.n * 4,
            )


def rk4_fori(y, steps=100, h=0.01):
    """RK4 of y' = -y^3 + sin(t) in `lax.fori_loop`, elementwise over `y`."""

    def field(t, y):
        return -(y**3) + jnp.sin(t)

    def step(i, y):
        t = i * h
        k1 = field(t, y)
        k2 = field(t + h / 2, y + h / 2 * k1)
        k3 = field(t + h / 2, y + h / 2 * k2)
        k4 = field(t + h, y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    return jax.lax.fori_loop(0, steps, step, y)


def run_fori(args, emit):
    """RK4 in `fori_loop` over a batch of initial values, derivatives in y0."""
    for dtype in args.dtypes.split(","):
        dt = jnp.dtype(dtype)
        y = jnp.linspace(0.5, 1.0, args.fori_batch, dtype=dt)
        for K in (2, 4, 8):
            contenders = {
                "taylax-whole": (
                    lambda y, K=K: taylax.derivatives(rk4_fori, K)(y, jnp.ones_like(y)),
                    None,
                )
            }

            contenders["jet"] = (jet_along_ones(rk4_fori, K), None)
            if K <= args.nested_max_order:
                contenders["nested jvp"] = (nested_levels(rk4_fori, K), None)
            results = time_all(contenders, (y,), args.calls, args.rounds)
            emit(
                {"program": "rk4 fori", "dtype": dtype, "order": K, "n": args.fori_batch},
                results,
                output_bytes=(K + 1) * args.fori_batch * dt.itemsize,
            )


def run_operators(args, emit):
    """The Laplacian of the softplus residual network and the biharmonic of the tanh
    MLP (`bench_operators.py`'s networks) against folx, float64."""
    from bench_operators import mlp, mlp_params, residual_net

    for d in [int(x) for x in args.lap_dims.split(",")]:
        params = mlp_params(d, jnp.float64)
        pts = jax.random.normal(jax.random.PRNGKey(d), (args.lap_batch, d), jnp.float64)
        cases = [("residual laplacian", residual_net, taylax.laplacian, args.lap_batch)]
        if d <= 32:
            cases.append(("biharmonic", mlp, taylax.biharmonic, args.lap_batch // 4))
        for case, net, op, batch in cases:
            f = lambda y, net=net, params=params: net(params, y)  # noqa: E731
            contenders = {"taylax": (jax.vmap(op(f)), None)}
            if folx is not None:
                lap = lambda g: lambda y: folx.forward_laplacian(g)(y).laplacian  # noqa: E731
                folx_op = lap(f) if case.endswith("laplacian") else lap(lap(f))
                contenders["folx"] = (jax.vmap(folx_op), None)
            results = time_all(contenders, (pts[:batch],), args.calls, args.rounds)
            emit(
                {"program": f"{case} d={d}", "dtype": "float64", "order": 2, "n": batch},
                results,
                output_bytes=batch * 8,
            )


def dump_hlo(args):
    """The optimized HLO of taylax (whole array, vmapped, `taylor`; the vmapped form also
    under each of `--hlo-policies`), jet and nested jvp (up to `--nested-max-order`) on the
    chains `--hlo-chains` at the orders `--hlo-orders`, in `--hlo-dtypes`, into `--hlo`
    (one file, gzip-compressed where its name ends in `.gz`)."""
    import contextlib
    import gzip

    table = all_variants()
    hlo_policies = [table[name] for name in filter(None, args.hlo_policies.split(","))]
    opener = gzip.open if args.hlo.endswith(".gz") else open
    with opener(args.hlo, "wt") as out:
        for name in args.hlo_chains.split(","):
            f = CHAINS[name]
            for dtype in args.hlo_dtypes.split(","):
                t = jnp.linspace(-0.9, 0.9, args.n, dtype=dtype)
                for K in [int(k) for k in args.hlo_orders.split(",")]:
                    vmapped = lambda t, f=f, K=K: jax.vmap(taylax.derivatives(f, K))(t).T  # noqa: E731
                    fns = {
                        "taylax-whole": (
                            lambda t, f=f, K=K: taylax.derivatives(f, K)(t, jnp.ones_like(t)),
                            None,
                        ),
                        "taylax-vmap": (vmapped, None),
                        "taylax-taylor": (
                            lambda t, f=f, K=K: taylax.taylor(f, K)(t, jnp.ones_like(t))[1],
                            None,
                        ),
                        "jet": (jet_along_ones(f, K), None),
                    }
                    for policy in hlo_policies:
                        fns[f"taylax-vmap {policy.name}"] = (vmapped, policy)
                    if K <= args.nested_max_order:
                        fns["nested jvp (vmap)"] = (
                            lambda t, f=f, K=K: jax.vmap(nested_levels(f, K))(t).T,
                            None,
                        )
                        fns["nested jvp"] = (nested_levels(f, K), None)
                    for label, (fn, policy) in fns.items():
                        scope = (
                            taylax.emission_policy(policy)
                            if policy is not None
                            else contextlib.nullcontext()
                        )
                        with scope:
                            compiled = jax.jit(fn).lower(t).compile()
                        out.write(f"\n\n#### {name} {dtype} {label} K={K}\n")
                        out.write(compiled.as_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 20)
    parser.add_argument("--orders", default="2,4,8,16,32")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--nested-max-order", type=int, default=4)
    parser.add_argument("--mlp-batch", type=int, default=65536)
    parser.add_argument("--lap-dims", default="8,32,128")
    parser.add_argument("--lap-batch", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--chains", default=",".join(CHAINS), help=f"some of {list(CHAINS)}")
    parser.add_argument("--hlo-chains", default="cos-exp-div-tanh")
    parser.add_argument("--hlo-orders", default="2,4")
    parser.add_argument("--fallback-orders", default="16,24")
    parser.add_argument("--hlo-dtypes", default="float64,float32")
    parser.add_argument("--parts", default="mlp,laplacian,chains,large")
    parser.add_argument("--fori-batch", type=int, default=65536)
    parser.add_argument("--large-programs", default="rk4,mlp30")
    parser.add_argument("--large-orders", default="2,4,8")
    parser.add_argument(
        "--point-major",
        action="store_true",
        help="chains: the vmapped form's output as vmap returns it, (points, K + 1)",
    )
    parser.add_argument(
        "--no-whole",
        dest="whole",
        action="store_false",
        help="chains: time the vmapped form under each policy only, not the whole-array call",
    )
    parser.add_argument(
        "--hlo-policies",
        default="",
        help="also write the vmapped form's HLO under these policies (names as --policies)",
    )
    parser.add_argument("--hlo", default=None, help="write optimized HLO of small cases here")
    parser.add_argument("--out", default=None, help="append JSON records to this file")
    parser.add_argument(
        "--policies", default=",".join(_SELECTED), help=f"some of {sorted(all_variants())}"
    )
    args = parser.parse_args(argv)
    _SELECTED[:] = args.policies.split(",")
    sink = open(args.out, "a") if args.out else None  # noqa: SIM115
    table = []
    print(f"# {jax.devices()[0].device_kind}, jax {jax.__version__}", flush=True)

    def emit(record, results, output_bytes):
        ref = next((r["out"] for r in results.values() if "out" in r), None)
        clean = {}
        for label, r in results.items():
            r = dict(r)
            if "out" in r:
                r["difference"] = _agree(r.pop("out"), ref)
            clean[label] = r
        record = dict(record, output_bytes=output_bytes, results=clean)
        if sink is not None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()
        ours = set(variants()) | {"gpu-compact"} | {k for k in clean if k.startswith("taylax")}
        peers = [r["ms"] for k, r in clean.items() if "ms" in r and k not in ours]
        best = min(peers) if peers else float("nan")
        jet = clean.get("jet", {}).get("ms", float("nan"))
        cells = []
        for label, r in clean.items():
            if "ms" not in r:
                cells.append(f"{label} ERR")
                continue
            temp = r["temp_bytes"] / output_bytes if r["temp_bytes"] is not None else float("nan")
            cells.append(
                f"{label} {r['ms']:.3f}ms first {r['first_s']:.2f}s f{r['fusions']} w{r['whiles']} "
                f"t{temp:.2f}"
                + (f" /best {r['ms'] / best:.2f} /jet {r['ms'] / jet:.2f}" if label in ours else "")
            )
        line = f"{record['program']} {record['dtype']} K={record['order']}: " + " | ".join(cells)
        table.append(line)
        print(line, flush=True)

    if args.hlo:
        dump_hlo(args)
    for part in filter(None, args.parts.split(",")):
        parts = {
            "chains": run_chains,
            "mlp": run_mlp,
            "laplacian": run_laplacian,
            "large": run_large,
            "fallback": run_fallback,
            "fori": run_fori,
            "operators": run_operators,
        }
        parts[part](args, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
