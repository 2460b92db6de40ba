"""Common layers along a direction: taylax vs nested ``jax.jvp``, steady state on batches.

The layers users put in networks and PDE models, each differentiated along a random
direction ``v`` at orders K = 1, 2, 4, float64, jitted, in one process:

* taylax: ``taylax.derivatives(f, K)(x, v)`` (all derivatives 0..K, stacked);
* nested jvp: ``jax.jvp`` nested K times along ``v``, every level's output stacked.

Steady state is the minimum over interleaved rounds (`bench_batched.interleaved_minimum`:
every contender in turn, each timed call right after an untimed one of its own). Every
row checks that the two agree. Writes ``benchmarks/results/layers.{md,json}``. With
``--set FIELD=VALUE ...`` a third contender, ``[set]``, runs taylax compiled under the
platform's policy so changed, in the same rounds; its table goes to ``layers_set.md``.

    python benchmarks/bench_layers.py                  # every layer (make bench)
    python benchmarks/bench_layers.py --layers softmax,silu_mlp --orders 2
    python benchmarks/bench_layers.py --orders 2 --set unbatched_unmarked_min_bytes=None
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_batched import interleaved_minimum, nested_levels  # noqa: E402
from harness import changed_policy  # noqa: E402

HERE = Path(__file__).resolve().parent


def _layers() -> dict[str, tuple[str, Callable, tuple[int, ...]]]:
    """name -> (description, f, input shape); weights drawn once, scaled to keep
    activations of order 1."""
    rng = np.random.default_rng(0)

    def weights(*shape, scale):
        return jnp.asarray(rng.normal(size=shape)) / scale

    w_in, w_out = weights(128, 256, scale=11), weights(256, 128, scale=16)
    wq, wk, wv = (weights(64, 64, scale=8) for _ in range(3))
    k1, k2 = weights(3, 3, 16, 16, scale=12), weights(3, 3, 16, 16, scale=12)

    def conv(x, w):
        dims = ("NHWC", "HWIO", "NHWC")
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dims)

    def mlp(act):
        return lambda x: act(x @ w_in) @ w_out

    def attention(x):
        scores = (x @ wq) @ jnp.swapaxes(x @ wk, -1, -2) / 8.0
        return jax.nn.softmax(scores, axis=-1) @ (x @ wv)

    def logsumexp(x):
        return jax.nn.logsumexp(x, axis=-1)

    def layernorm(x):
        centred = x - x.mean(-1, keepdims=True)
        return centred / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)

    def pool(x):
        return lax.reduce_window(jnp.tanh(x), -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")

    return {
        "relu_mlp": ("relu(x W1) W2, 2048 x 128 -> 256 -> 128", mlp(jax.nn.relu), (2048, 128)),
        "silu_mlp": ("silu(x W1) W2", mlp(jax.nn.silu), (2048, 128)),
        "gelu_mlp": ("gelu(x W1) W2 (tanh approximation)", mlp(jax.nn.gelu), (2048, 128)),
        "softmax": ("softmax over the last axis, 2048 x 128", jax.nn.softmax, (2048, 128)),
        "logsumexp": ("logsumexp over the last axis, 2048 x 128", logsumexp, (2048, 128)),
        "layernorm": ("layer normalization, 2048 x 128", layernorm, (2048, 128)),
        "attention": ("softmax attention, 8 x 128 tokens x 64", attention, (8, 128, 64)),
        "conv": (
            "conv 3x3 (16 -> 16), tanh, conv 3x3; 32 x 32 x 32 x 16",
            lambda x: conv(jnp.tanh(conv(x, k1)), k2),
            (32, 32, 32, 16),
        ),
        "maxpool": ("2x2 max pooling of tanh, 32 x 32 x 32 x 16", pool, (32, 32, 32, 16)),
    }


def measure(layers, orders, rounds: int, changes=()) -> list[dict]:
    """One row per layer and order; with `changes` (`FIELD=VALUE` strings) a `[set]`
    contender: taylax compiled under the policy so changed."""
    rows = []
    policy = changed_policy(changes)
    table = _layers()
    for name in layers:
        description, f, shape = table[name]
        rng = np.random.default_rng(1)
        x, v = (jnp.asarray(rng.normal(size=shape)) for _ in range(2))
        for K in orders:
            fns = {
                "taylax": jax.jit(lambda x, v, f=f, K=K: taylax.derivatives(f, K)(x, v)),
                "nested jvp": jax.jit(lambda x, v, f=f, K=K: nested_levels(f, K, v)(x)),
            }
            ours, theirs = (np.asarray(fn(x, v)) for fn in fns.values())
            if policy is not None:  # a function of its own: traced afresh under `policy`
                with taylax.emission_policy(policy):
                    fns["[set]"] = (
                        jax.jit(lambda x, v, f=f, K=K: taylax.derivatives(f, K)(x, v))
                        .lower(x, v)
                        .compile()
                    )
            outs = [ours] + ([np.asarray(fns["[set]"](x, v))] if policy is not None else [])
            scale = np.max(np.abs(theirs)) + 1e-300
            error = max(float(np.max(np.abs(o - theirs)) / scale) for o in outs)
            best = interleaved_minimum(fns, {n: (x, v) for n in fns}, rounds, budget_s=30.0)
            row = {"layer": name, "description": description, "order": K, "ms": best}
            row["relative_difference"] = error
            rows.append(row)
            ratio = best["taylax"] / best["nested jvp"]
            changed = ""
            if policy is not None:
                changed = f", [set] {best['[set]']:.3f} ms (taylax / [set] "
                changed += f"{best['taylax'] / best['[set]']:.2f})"
            print(
                f"{name:10s} K={K} taylax {best['taylax']:.3f} ms, nested jvp "
                f"{best['nested jvp']:.3f} ms ({ratio:.2f}x){changed}, difference {error:.1e}",
                flush=True,
            )
    return rows


def markdown(payload: dict) -> str:
    meta = payload["meta"]
    orders = sorted({r["order"] for r in payload["rows"]})
    lines = [
        f"Common layers along a random direction, all derivatives 0..K (jax {meta['jax']}, "
        f"{meta['cpus']} CPUs, float64, measured {meta['date'][:10]}; "
        "`benchmarks/bench_layers.py`, minimum of interleaved rounds in one process). "
        "Each cell: taylax time (taylax / nested jvp).",
        "",
        "| layer | " + " | ".join(f"K = {K}" for K in orders) + " |",
        "|---|" + "---|" * len(orders),
    ]
    by_key = {(r["layer"], r["order"]): r for r in payload["rows"]}
    for name in dict.fromkeys(r["layer"] for r in payload["rows"]):
        cells = []
        for K in orders:
            r = by_key.get((name, K))
            if r is None:
                cells.append("—")
                continue
            ours, theirs = r["ms"]["taylax"], r["ms"]["nested jvp"]
            cells.append(f"{ours:.3g} ms ({ours / theirs:.2f}×)")
        description = next(r["description"] for r in payload["rows"] if r["layer"] == name)
        lines.append(f"| {description} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def set_markdown(payload: dict, changes) -> str:
    """The `--set` run's table: taylax, `[set]` and their ratio per layer and order."""
    meta = payload["meta"]
    lines = [
        f"Common layers, taylax under the platform's policy and under it with "
        f"`{' '.join(changes)}` ([set]), in the same interleaved rounds (jax {meta['jax']}, "
        f"{meta['cpus']} CPUs, float64, {meta['date'][:10]}; `benchmarks/bench_layers.py "
        f"--set ...`).",
        "",
        "| layer | K | taylax, ms | [set], ms | taylax / [set] | nested jvp, ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        ms = r["ms"]
        lines.append(
            f"| {r['layer']} | {r['order']} | {ms['taylax']:.3f} | {ms['[set]']:.3f} | "
            f"{ms['taylax'] / ms['[set]']:.2f} | {ms['nested jvp']:.3f} |"
        )
    return "\n".join(lines)


def readme_summary(payload: dict) -> str:
    return markdown(payload)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(_layers()))
    parser.add_argument("--orders", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--set", nargs="*", default=[], help="FIELD=VALUE: the policy's changes for [set]"
    )
    args = parser.parse_args(argv)
    layers = args.layers.split(",")
    orders = [int(k) for k in args.orders.split(",")]
    meta = {
        "jax": jax.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(),
    }
    payload = {"meta": meta, "rows": measure(layers, orders, args.rounds, args.set)}
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    if args.set:  # a comparison, not the table `make bench` keeps
        (out / "layers_set.md").write_text(set_markdown(payload, args.set) + "\n")
        print(set_markdown(payload, args.set))
        return 0
    (out / "layers.json").write_text(json.dumps(payload, indent=1))
    (out / "layers.md").write_text(markdown(payload) + "\n")
    print(markdown(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
