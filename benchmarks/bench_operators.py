"""Differential operators on a batch: taylax vs folx, jax.hessian, Hessian-vector products, jet.

A tanh MLP `d -> 128 -> 128 -> 1` on a batch of 256 points (issue 15's network):

* Laplacian, d = 8, 32, 128, float32 and float64: `jax.jit(jax.vmap(op))` steady state
  for taylax (`taylax.laplacian`), folx (`folx.forward_laplacian`), the trace of
  `jax.hessian`, a loop of Hessian-vector products (`vmap` over the basis of
  `jvp(grad f)`) and `jax.experimental.jet` along every basis direction (`vmap`);
  first calls (trace + compile + run) of taylax and folx, each in a fresh process;
* `jax.grad` of a mean-squared Laplacian loss with respect to the parameters;
* biharmonic, d = 4, 8, 16, float64: taylax against folx nested in itself and
  nested `jax.hessian`.

Steady state is the minimum over interleaved rounds, each timed call right after an
untimed one of the same contender (`bench_batched.interleaved_minimum`). folx is a
benchmark-only extra (`pip install -e .[bench]`); without it its columns read "—". Writes
``benchmarks/results/operators.{md,json}`` (and ``operators.png`` with matplotlib).

    python benchmarks/bench_operators.py            # the full suite (make bench)
    python benchmarks/bench_operators.py --quick    # d = 8 and 32, float64, fewer rounds
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jax.experimental import jet as jax_jet  # noqa: E402

import taylax  # noqa: E402
from bench_batched import minimum_times  # noqa: E402

try:
    import folx
except ImportError:  # a benchmark-only extra
    folx = None

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
WIDTH, BATCH = 128, 256


def mlp_params(d, dtype, width=WIDTH, seed=0):
    key = jax.random.PRNGKey(seed)
    sizes = [d, width, width, 1]
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        key, k1, k2 = jax.random.split(key, 3)
        # `astype`: a NumPy scalar is strongly typed and would promote float32 to float64.
        w = (jax.random.normal(k1, (m, n), dtype) / np.sqrt(m)).astype(dtype)
        params.append((w, (0.1 * jax.random.normal(k2, (n,), dtype)).astype(dtype)))
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return (x @ w + b)[0]


def residual_net(params, x):
    """Softplus, residual gelu blocks and a final tanh on the same weights: activations
    that JAX writes as custom_jvp functions and chains of elementwise equations."""
    (w, b), hidden, (w_out, b_out) = params[0], params[1:-1], params[-1]
    h = jax.nn.softplus(x @ w + b)
    for w, b in hidden:
        h = h + jax.nn.gelu(h @ w + b)
    return jnp.tanh((h @ w_out + b_out)[0])


def hand_fused_laplacian(params, x):
    """The roofline: the forward Laplacian of `mlp` written out by hand.

    Per layer it maps the value, the Jacobian `J` (d rows) and the Laplacian `L`
    through the matmul, and through tanh with `t' = 1 - t^2`, `t'' = -2 t t'`:
    `J <- t' J`, `L <- t' L + t'' sum_i J_i^2`. The first Jacobian is the weight matrix
    itself. This is the dense arithmetic every forward-Laplacian method has to do.
    """
    (w, b), rest = params[0], params[1:]
    z, jac, lap = x @ w + b, w, None
    for w, b in rest:
        t = jnp.tanh(z)
        t1 = 1 - t * t
        lap_t = -2 * t * t1 * jnp.sum(jac * jac, 0)
        if lap is not None:
            lap_t = lap_t + t1 * lap
        z, jac, lap = t @ w + b, (t1 * jac) @ w, lap_t @ w
    return lap[0]


# --------------------------------------------------------------------------
# Contenders: each maps one point x (d,) to the Laplacian of f there
# --------------------------------------------------------------------------


def laplacian_contenders(f, params=None) -> dict:
    def hessian_trace(x):
        return jnp.trace(jax.hessian(f)(x))

    def hvp_loop(x):
        grad = jax.grad(f)
        basis = jnp.eye(x.size, dtype=x.dtype)
        return jnp.sum(jax.vmap(lambda v: jax.jvp(grad, (x,), (v,))[1] @ v)(basis))

    def jet_loop(x):
        basis = jnp.eye(x.size, dtype=x.dtype)

        def along(v):
            _, (_, second) = jax_jet.jet(f, (x,), ((v, jnp.zeros_like(v)),))
            return second

        return jnp.sum(jax.vmap(along)(basis))

    out = {"taylax": taylax.laplacian(f)}
    if folx is not None:
        out["folx"] = lambda x: folx.forward_laplacian(f)(x).laplacian
    out.update({"jax.hessian": hessian_trace, "hvp loop": hvp_loop, "jet": jet_loop})
    if params is not None:
        out["hand-fused"] = lambda x: hand_fused_laplacian(params, x)
    return out


def biharmonic_contenders(f, params=None) -> dict:
    def nested_hessian(x):
        return jnp.trace(jax.hessian(lambda y: jnp.trace(jax.hessian(f)(y)))(x))

    out = {"taylax": taylax.biharmonic(f), "nested jax.hessian": nested_hessian}
    if folx is not None:

        def nested_folx(x):
            inner = lambda y: folx.forward_laplacian(f)(y).laplacian  # noqa: E731
            return folx.forward_laplacian(inner)(x).laplacian

        out["nested folx"] = nested_folx
    return out


def _relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def operator_row(
    case: str, contenders, reference: str, dtype_name: str, d: int, rounds: int, net=mlp
):
    """Time every contender of one operator on one network and check taylax against
    `reference` (a dense jax.hessian contender). `contenders(f, params)` names them;
    `params` is None for a network other than the plain MLP."""
    dtype = jnp.dtype(dtype_name)
    net_params = mlp_params(d, dtype)
    f = lambda x: net(net_params, x)  # noqa: E731
    params = net_params if net is mlp else None
    xs = jax.random.normal(jax.random.PRNGKey(1), (BATCH, d), dtype)
    fns = {k: jax.jit(jax.vmap(v)) for k, v in contenders(f, params).items()}
    times = minimum_times(fns, (xs,), rounds, skip_failures=True)
    error = _relative_error(fns["taylax"](xs), fns[reference](xs))
    row = {"case": case, "dtype": dtype_name, "d": d, "ms": times, "rel_err_vs_hessian": error}
    print(json.dumps(row), flush=True)
    return row


def laplacian_rows(dims, dtypes, rounds) -> list[dict]:
    return [
        operator_row("laplacian", laplacian_contenders, "jax.hessian", dtype, d, rounds)
        for dtype in dtypes
        for d in dims
    ]


def residual_rows(dims, rounds) -> list[dict]:
    """The Laplacian of `residual_net` (no hand-fused roofline: it is the MLP's)."""
    return [
        operator_row(
            "laplacian_residual",
            laplacian_contenders,
            "jax.hessian",
            "float64",
            d,
            rounds,
            net=residual_net,
        )
        for d in dims
    ]


def grad_rows(dims, rounds) -> list[dict]:
    rows = []
    for d in dims:
        params = mlp_params(d, jnp.float64)
        xs = jax.random.normal(jax.random.PRNGKey(1), (BATCH, d))

        def loss_of(laplacian, xs=xs):
            def loss(p):
                return jnp.mean(jax.vmap(laplacian(lambda x: mlp(p, x)))(xs) ** 2)

            return jax.jit(jax.grad(loss))

        fns = {"taylax": loss_of(taylax.laplacian)}
        if folx is not None:
            fns["folx"] = loss_of(
                lambda f: lambda x: folx.forward_laplacian(f)(x).laplacian  # noqa: E731
            )
        fns["jax.hessian"] = loss_of(lambda f: lambda x: jnp.trace(jax.hessian(f)(x)))
        fns["hand-fused"] = jax.jit(
            jax.grad(
                lambda p, xs=xs: jnp.mean(jax.vmap(lambda x: hand_fused_laplacian(p, x))(xs) ** 2)
            )
        )
        times = minimum_times(fns, (params,), rounds, skip_failures=True)
        ours, theirs = fns["taylax"](params), fns["jax.hessian"](params)
        error = max(
            _relative_error(a, b) for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs))
        )
        row = {"case": "grad", "dtype": "float64", "d": d, "ms": times, "rel_err": error}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def biharmonic_rows(dims, rounds) -> list[dict]:
    reference = "nested jax.hessian"
    return [
        operator_row("biharmonic", biharmonic_contenders, reference, "float64", d, rounds)
        for d in dims
    ]


def first_call_child(kind: str, d: int) -> dict:
    """In a fresh process: trace + compile + run of one contender's batched Laplacian."""
    params = mlp_params(d, jnp.float64)
    f = lambda x: mlp(params, x)  # noqa: E731
    xs = jax.random.normal(jax.random.PRNGKey(1), (BATCH, d))
    jax.block_until_ready(xs)
    fn = jax.jit(jax.vmap(laplacian_contenders(f)[kind]))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(xs))
    return {"case": "first_call", "kind": kind, "d": d, "seconds": time.perf_counter() - t0}


def first_calls(dims) -> list[dict]:
    rows = []
    kinds = ["taylax"] + (["folx"] if folx is not None else [])
    for d in dims:
        for kind in kinds:
            cmd = [sys.executable, __file__, "--first-call", kind, str(d)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                row = {"case": "first_call", "kind": kind, "d": d, "seconds": None}
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _fmt(ms) -> str:
    if not isinstance(ms, (int, float)) or ms == float("inf"):
        return "—" if not isinstance(ms, str) else ms
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms"


def _ratio(ms: dict, other: str, ours: str = "taylax") -> str:
    """`ms[ours] / ms[other]`, or a dash where either is missing."""
    ours, theirs = ms.get(ours), ms.get(other)
    if not isinstance(ours, float) or not isinstance(theirs, float) or theirs == float("inf"):
        return "—"
    return f"{ours / theirs:.2f}×"


# The contenders of table (g)'s Laplacian-like rows, and those it gives ratios against.
_COLUMNS = ("taylax", "folx", "jax.hessian", "hvp loop", "jet", "hand-fused")
_RATIOS = ("folx", "hand-fused", "jax.hessian")


def _laplacian_row(label: str, result: dict, absent=()) -> str:
    """One row of table (g): times and ratios, blank for the contenders this row does not
    run (`absent`), a dash for one that is missing or failed."""
    ms = result["ms"]
    times = ["" if n in absent else _fmt(ms.get(n)) for n in _COLUMNS]
    ratios = ["" if n in absent else _ratio(ms, n) for n in _RATIOS]
    cells = [label, result["dtype"], str(result["d"]), *times, *ratios]
    return "| " + " | ".join(cells) + " |"


def readme_summary(payload: dict) -> str:
    meta = payload["meta"]
    lines = [
        f"(g) Differential operators on a tanh MLP `d -> {WIDTH} -> {WIDTH} -> 1`, batch "
        f"{BATCH}, `jax.jit(jax.vmap(op))` steady state (minimum of interleaved rounds, each "
        "timed call right after an untimed one of the same contender), "
        f"{meta['machine']}, measured {meta['date'][:10]} (`benchmarks/results/operators.md`). "
        "Ratios are taylax / the contender (below 1: taylax wins).",
        "",
        "| operator | dtype | d | taylax | folx | jax.hessian | HVP loop | jet | "
        "hand-fused | taylax / folx | taylax / hand-fused | taylax / jax.hessian |",
        "|---|---|---:|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        ("Laplacian", payload["laplacian"], ()),
        ("Laplacian, residual softplus/gelu net", payload.get("residual", []), ("hand-fused",)),
        ("grad of mean Laplacian²", payload["grad"], ("hvp loop", "jet")),
    ]
    for label, results, absent in rows:
        lines += [_laplacian_row(label, r, absent) for r in results]
    if payload["biharmonic"]:
        lines += [
            "",
            "| biharmonic | d | taylax | nested folx | nested jax.hessian | taylax / nested folx "
            "| taylax / nested jax.hessian |",
            "|---|---:|---|---|---|---|---|",
        ]
        for r in payload["biharmonic"]:
            ms = r["ms"]
            lines.append(
                f"| float64 | {r['d']} | {_fmt(ms['taylax'])} | {_fmt(ms.get('nested folx'))} | "
                f"{_fmt(ms['nested jax.hessian'])} | {_ratio(ms, 'nested folx')} | "
                f"{_ratio(ms, 'nested jax.hessian')} |"
            )
    if payload["first_calls"]:
        by = {(r["kind"], r["d"]): r["seconds"] for r in payload["first_calls"]}
        dims = sorted({r["d"] for r in payload["first_calls"]})
        cells = []
        for d in dims:
            ours, theirs = by.get(("taylax", d)), by.get(("folx", d))
            text = f"d = {d}: {ours:.2f} s" if ours is not None else f"d = {d}: —"
            if theirs is not None and ours is not None:
                text += f" vs folx {theirs:.2f} s ({ours / theirs:.2f}×)"
            cells.append(text)
        lines += ["", "Laplacian first call (fresh process, float64): " + "; ".join(cells) + "."]
    laplacians = payload["laplacian"] + payload.get("residual", [])
    errors = [r["rel_err_vs_hessian"] for r in laplacians if r["dtype"] == "float64"]
    if errors:
        lines += [
            "",
            f"Largest relative difference from the trace of `jax.hessian` in float64: "
            f"{max(errors):.1e} (Laplacian), "
            + ", ".join(f"{r['rel_err']:.1e}" for r in payload["grad"])
            + " (its gradient).",
        ]
    return "\n".join(lines)


def plot(payload: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, dtype in zip(axes, ("float32", "float64")):
        rows = [r for r in payload["laplacian"] if r["dtype"] == dtype]
        if not rows:
            continue
        dims = [r["d"] for r in rows]
        for name in ("taylax", "folx", "hand-fused", "jax.hessian", "hvp loop", "jet"):
            values = [r["ms"].get(name) for r in rows]
            if all(isinstance(v, float) for v in values):
                ax.plot(dims, values, marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="d", ylabel="ms per batch", title=dtype)
        ax.set_xticks(dims, [str(d) for d in dims])
        ax.legend()
    fig.suptitle(f"Laplacian of a tanh MLP d -> {WIDTH} -> {WIDTH} -> 1, batch {BATCH}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def markdown(payload: dict) -> str:
    return (
        f"# Differential operators ({payload['meta']['date'][:10]})\n\n{readme_summary(payload)}\n"
    )


def main(argv=None) -> int:
    """Run the operator suite and write ``results/operators.{md,json,png}``.

    Args:
      argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
      The exit status (0).

    Example:
      >>> main(["--quick"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d = 8 and 32, float64")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    parser.add_argument("--first-call", nargs=2, metavar=("KIND", "D"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--residual-batch",
        type=int,
        default=None,
        help="only the residual network's Laplacian at this batch, d = 8, 32, 128 (printed)",
    )
    args = parser.parse_args(argv)
    if args.first_call:
        kind, d = args.first_call
        print(json.dumps(first_call_child(kind, int(d))))
        return 0
    if args.residual_batch:
        global BATCH
        BATCH = args.residual_batch
        for row in residual_rows([8, 32, 128], args.rounds):
            ms = row["ms"]
            print(f"d = {row['d']}, batch {BATCH}: taylax / folx {ms['taylax'] / ms['folx']:.2f}")
        return 0
    dims = [8, 32] if args.quick else [8, 32, 128]
    dtypes = ["float64"] if args.quick else ["float32", "float64"]
    rounds = 5 if args.quick else args.rounds
    payload = {
        "meta": {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"jax {jax.__version__}, {os.cpu_count()} CPUs ({platform.machine()})",
            "folx": getattr(folx, "__version__", "installed") if folx else None,
        },
        "laplacian": laplacian_rows(dims, dtypes, rounds),
        "residual": residual_rows(dims[:2], rounds),
        "grad": grad_rows(dims[:2], rounds),
        "biharmonic": biharmonic_rows([4, 8] if args.quick else [4, 8, 16], rounds),
        "first_calls": first_calls(dims),
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "operators.json").write_text(json.dumps(payload, indent=1))
    (out / "operators.md").write_text(markdown(payload))
    plot(payload, out / "operators.png")
    print(markdown(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
