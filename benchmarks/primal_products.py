"""Products with a transcendental function's series under `jax.vmap`: `g(t) cos(t)` for
each elementary `g`, taylax against jet and nested jvp.

Every row of a product reads both factors' primals. On XLA:CPU the kernel that writes a
short pass's `(points, K + 1)` output evaluated each element from its own row's
expression, so a primal such as `exp t` that no mark kept in a buffer was computed once
per row there, in scalar code (docs/EMISSION.md, "Transcendental values computed
once"). This script times all derivatives 0..K at `--n` points (65,536) under
`jax.jit(jax.vmap(taylax.derivatives(f, K)))`, against `jax.experimental.jet` on the
whole array ("-" where jet has no rule or fails) and nested `jax.jvp` per point under
`jax.vmap` (to `--nested-max-order`, 4), float64, in one process: the minimum over
`--rounds` interleaved rounds (`bench_batched.interleaved_minimum`). With `--set
FIELD=VALUE ...` a contender `[set]` runs taylax compiled under the platform's policy so
changed, in the same rounds. Writes `benchmarks/results/primal_products.md`.

    python benchmarks/primal_products.py
    python benchmarks/primal_products.py --functions exp,sinh --orders 6
    python benchmarks/primal_products.py --orders 4,8 --set primal_once_max_order=None
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.scipy.special as jss

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_batched import (  # noqa: E402
    calls_at,
    interleaved_minimum,
    jet_chain,
    nested_vmap_chain,
    taylax_chain,
)
from harness import changed_policy, command_line  # noqa: E402

# Arguments shifted or scaled into each function's domain on [-0.9, 0.9].
FUNCTIONS = {
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log": lambda t: jnp.log(2 + t),
    "log1p": jnp.log1p,
    "sqrt": lambda t: jnp.sqrt(2 + t),
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "atan": jnp.arctan,
    "asinh": jnp.arcsinh,
    "acosh": lambda t: jnp.arccosh(2 + t),
    "atanh": lambda t: jnp.arctanh(0.5 * t),
    "erf": jss.erf,
    "atan2": lambda t: jnp.arctan2(t, 2 + t),
    "betainc": lambda t: jss.betainc(2.0, 3.0, 0.5 + 0.3 * t),
}
RESULTS = Path(__file__).resolve().parent / "results" / "primal_products.md"


def product_with_cosine(g):
    """`t -> g(t) cos(t)`: every row of the product reads `g`'s primal."""
    return lambda t: g(t) * jnp.cos(t)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="4,6,8")
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--nested-max-order", type=int, default=4)
    parser.add_argument(
        "--set", nargs="*", default=[], help="FIELD=VALUE: the policy's changes for [set]"
    )
    parser.add_argument(
        "--functions", default=",".join(FUNCTIONS), help=f"some of {list(FUNCTIONS)}"
    )
    args = parser.parse_args(argv)

    lines = [
        f"# {command_line(__file__, sys.argv[1:] if argv is None else argv)}, "
        f"{datetime.date.today()}",
        "",
        f"{jax.devices()[0].device_kind}, jax {jax.__version__}, float64, `g(t) cos(t)` at "
        f"N = {args.n} points; ms, the minimum over interleaved rounds.",
        "",
        "| g | K | taylax | jet | nested jvp (vmap) | taylax / jet | [set] | taylax / [set] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    policy = changed_policy(args.set)
    print("\n".join(lines), flush=True)
    t = jnp.linspace(-0.9, 0.9, args.n)
    for name in args.functions.split(","):
        f = product_with_cosine(FUNCTIONS[name])
        for K in (int(k) for k in args.orders.split(",")):
            fns = {"taylax": taylax_chain(f, K), "jet": jet_chain(f, K)}
            if K <= args.nested_max_order:
                fns["nested jvp (vmap)"] = nested_vmap_chain(f, K)
            if policy is not None:
                with taylax.emission_policy(policy):  # compiled here, under the policy
                    t_aval = jax.ShapeDtypeStruct(t.shape, t.dtype)
                    fns["[set]"] = taylax_chain(f, K).lower(t_aval).compile()
            ms = interleaved_minimum(
                fns,
                {k: (t,) for k in fns},
                args.rounds,
                budget_s=20.0,
                skip_failures=True,
                calls=calls_at(args.n),
            )

            def cell(key, ms=ms):
                return f"{ms[key]:.3f}" if isinstance(ms.get(key), float) else "-"

            def ratio(key, ms=ms):
                return f"{ms['taylax'] / ms[key]:.2f}x" if isinstance(ms.get(key), float) else "-"

            line = (
                f"| {name} | {K} | {cell('taylax')} | {cell('jet')} | "
                f"{cell('nested jvp (vmap)')} | {ratio('jet')} | {cell('[set]')} | "
                f"{ratio('[set]')} |"
            )
            lines.append(line)
            print(line, flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
