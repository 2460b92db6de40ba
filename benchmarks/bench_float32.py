"""float32 derivatives at orders 13-32: the stretched pass and its fallback against one pass.

Past order 12 `k!` leaves float32's range, so `taylax.derivatives` and `taylax.jet`
run their pass along `h` times the direction and take an order from a second, unscaled
pass only where the stretched one is not finite (`taylax._fallback`). This script
measures what that costs against one pass of the same order, `taylax.taylor` (the
coefficients, no stretch, no fallback), in one process, float32 (x64 off), on the
default backend:

* `derivatives`: `jax.jit(taylax.derivatives(f, K))(t, v)` on the whole array of `--n`
  points, and per point under `jax.vmap`;
* `one pass`: `taylax.taylor(f, K)` the same two ways;
* `jet`: `taylax.jet(f, (t,), ([v, 0, ...],))` on the whole array, and its one pass:
  the same series as normalized terms (`factorial_scaled=False`: no stretch, no
  fallback). A general input series costs more than a line (no closed forms along a
  line, products of full degree), so `jet` is compared with its own one pass;
* `floor`, `jet floor`: the least either can do after one pass (the coefficients times
  `k!` and whether all are finite, in one program with no fallback to branch to): what
  the check and the products cost on top of the pass where XLA fuses them as it likes;
  `one pass, k!`: the same without the check (`derivatives` by one pass, as below order
  13, where nothing overflows);
* `jax jet`: `jax.experimental.jet` on the whole array (orders up to 16: at 24 and 32
  its steady state is seconds).

Chains: the two of `gpu_check.py`, two more of our own, and `1/(1.2 - t)` near its pole
(`pole-fallback`),
where the stretched pass overflows and the fallback runs (its worst case). Steady state
is the minimum over `--rounds` interleaved rounds (`bench_batched.interleaved_minimum`).

With `--set FIELD=VALUE ...` the two `derivatives` contenders are also compiled under
the platform's emission policy with those fields changed (`derivatives [set]`,
`derivatives (vmap) [set]`), in the same process and rounds: an A/B of one policy
choice. The table then gains their two ratios to one pass.

Each chain runs in a process of its own (`--in-process`: all in this one): after the
other chains, one cell read 1.6x its time alone (`chain_rows_apart`). Writes
`benchmarks/results/float32.md` (`float32_set.md` with `--set`).

    python benchmarks/bench_float32.py                      # K = 13, 16, 24, 32
    python benchmarks/bench_float32.py --orders 16 --n 16384
    python benchmarks/bench_float32.py --set fallback_in_loop=False
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import jet as jax_jet

import taylax
from bench_batched import interleaved_minimum
from gpu_check import CHAINS as GPU_CHAINS
from harness import changed_policy

jax.config.update("jax_enable_x64", False)


def chain_c(t):
    return jnp.sin(jnp.sqrt(1.5 + jnp.tanh(jnp.log1p(t * t))))


def chain_d(t):
    return jnp.cos(jnp.exp(0.3 * t)) / (2.0 + t**3)


def pole(t):
    return 1 / (1.2 - t)


CHAINS = {
    **GPU_CHAINS,
    "sin-sqrt-tanh-log1p": chain_c,
    "cos-exp-div-pow": chain_d,
    "pole-fallback": pole,
}
JAX_JET_MAX_ORDER = 16
RESULTS = Path(__file__).resolve().parent / "results" / "float32.md"
RESULTS_SET = RESULTS.with_name("float32_set.md")


def with_policy(fns: dict, policy, t, v) -> dict:
    """`fns`'s `derivatives` contenders compiled under `policy` (an emission policy is in
    force while a function is traced, so each is lowered and compiled inside it)."""
    out = {}
    with taylax.emission_policy(policy):
        for name in ("derivatives", "derivatives (vmap)"):
            out[f"{name} [set]"] = fns[name].lower(t, v).compile()
    return out


def _factorials(K: int):
    return np.array([math.factorial(k) for k in range(1, K + 1)], np.float32)


def _floor(one_pass, K: int, check: bool = True):
    """The least a `derivatives` with an overflow check does after one pass: the
    coefficients times `k!`, stacked under the primal, and whether all are finite, with no
    fallback to branch to. Without `check`, the derivatives alone: one pass of
    `derivatives` as it ran before the fallback."""
    factors = _factorials(K)[:, None]

    def run(t, v):
        primal, coefficients = one_pass(t, v)
        stack = jnp.concatenate([primal[None], coefficients * factors])
        return (stack, jnp.isfinite(jnp.sum(stack * 0))) if check else stack

    return run


def _jet_floor(one_pass, K: int):
    """`_floor` for `jet`: the one pass's normalized terms times `k!`, and the check."""
    factors = _factorials(K)

    def run(t, v):
        primal, terms = one_pass(t, v)
        terms = [term * factor for term, factor in zip(terms, factors)]
        return primal, terms, jnp.isfinite(sum(jnp.sum(x * 0) for x in [primal, *terms]))

    return run


def contenders(f, K: int) -> dict:
    def jet_terms(v):
        return [v] + [jnp.zeros_like(v)] * (K - 1)

    fns = {
        "derivatives": taylax.derivatives(f, K),
        "derivatives (vmap)": jax.vmap(taylax.derivatives(f, K)),
        "one pass": taylax.taylor(f, K),
        "one pass (vmap)": jax.vmap(taylax.taylor(f, K)),
        "jet": lambda t, v: taylax.jet(f, (t,), (jet_terms(v),)),
        "jet one pass": lambda t, v: taylax.jet(f, (t,), (jet_terms(v),), factorial_scaled=False),
    }
    fns["floor"] = _floor(fns["one pass"], K)
    fns["one pass, k!"] = _floor(fns["one pass"], K, check=False)
    fns["jet floor"] = _jet_floor(fns["jet one pass"], K)
    if K <= JAX_JET_MAX_ORDER:
        fns["jax jet"] = lambda t, v: jax_jet.jet(f, (t,), (jet_terms(v),))
    return {name: jax.jit(fn) for name, fn in fns.items()}


def chain_rows(name: str, args, policy) -> list[str]:
    """The table's rows of one chain, measured in this process."""
    lines = []
    f = CHAINS[name]
    # Near the pole for `pole`, a span inside every chain's domain for the others.
    lo, hi = (0.1, 0.3) if f is pole else (0.1, 0.9)
    t = jnp.linspace(lo, hi, args.n, dtype=jnp.float32)
    v = jnp.ones_like(t)
    for K in (int(k) for k in args.orders.split(",")):
        fns = contenders(f, K)
        if policy is not None:
            fns.update(with_policy(fns, policy, t, v))
        ms = interleaved_minimum(fns, {n: (t, v) for n in fns}, args.rounds, budget_s=30.0)
        row = {
            "chain": name,
            "K": K,
            "ms": ms,
            "derivatives / one pass": ms["derivatives"] / ms["one pass"],
            "vmap / one pass": ms["derivatives (vmap)"] / ms["one pass (vmap)"],
            "jet / jet one pass": ms["jet"] / ms["jet one pass"],
            "floor / one pass": ms["floor"] / ms["one pass"],
            "jet floor / jet one pass": ms["jet floor"] / ms["jet one pass"],
            "derivatives / one pass, k!": ms["derivatives"] / ms["one pass, k!"],
        }
        cells = " | ".join(
            f"{row[key]:.2f}x"
            for key in (
                "vmap / one pass",
                "jet / jet one pass",
                "floor / one pass",
                "jet floor / jet one pass",
                "derivatives / one pass, k!",
            )
        )
        cells += " |"
        if policy is not None:
            row["[set] / one pass"] = ms["derivatives [set]"] / ms["one pass"]
            row["[set] vmap / one pass"] = ms["derivatives (vmap) [set]"] / ms["one pass (vmap)"]
            cells += f" {row['[set] / one pass']:.2f}x | {row['[set] vmap / one pass']:.2f}x |"
        times = ", ".join(f"{ms[k]:.2f}" for k in fns)
        lines.append(f"| {name} | {K} | {row['derivatives / one pass']:.2f}x | {cells} {times} |")
        print(json.dumps(row), file=sys.stderr)
    return lines


def chain_rows_apart(name: str, argv: list[str]) -> list[str]:
    """`chain_rows` in a process of its own. Run after the other chains in one process,
    a cell read up to 1.6x its time in a process of its own (`cos-exp-div-tanh` at K = 16
    under `vmap`: 17.9 against 9.2 ms), the heap that earlier chains left behind."""
    rest, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--chains":
            skip = True
        elif not arg.startswith("--chains="):
            rest.append(arg)
    cmd = [sys.executable, __file__, *rest, "--chains", name, "--rows-only"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{name}: the child process failed:\n{done.stderr[-3000:]}")
    return [line for line in done.stdout.splitlines() if line.startswith(f"| {name} |")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", default="13,16,24,32")
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--chains", default=None, help="comma-separated names (default: all)")
    parser.add_argument(
        "--set", nargs="*", default=[], help="FIELD=VALUE: also the derivatives under that policy"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="every chain in this process (default: one each)"
    )
    parser.add_argument("--rows-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    policy = changed_policy(args.set)
    if args.rows_only:
        for name in args.chains.split(","):
            for line in chain_rows(name, args, policy):
                print(line, flush=True)
        return 0
    names = args.chains.split(",") if args.chains else list(CHAINS)
    lines = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    emit(f"# {jax.devices()[0].device_kind}, jax {jax.__version__}, float32, N = {args.n}")
    header = (
        "| chain | K | derivatives / one pass | vmap / one pass (vmap) | jet / jet one pass"
        " | floor / one pass | jet floor / jet one pass | derivatives / one pass, k! |"
    )
    if policy is not None:
        emit(f"With {' '.join(args.set)} ([set]):")
        header += " [set] / one pass | [set] vmap / one pass (vmap) |"
    names_ms = (
        "derivatives, vmap, one pass, one pass (vmap), jet, jet one pass, floor, one pass k!,"
        " jet floor, jax jet"
    )
    emit(header + f" ms: {names_ms}{', [set], [set] vmap' if policy else ''} |")
    emit("|---" * (header.count("|")) + "|")
    for name in names:
        if args.in_process or len(names) == 1:
            rows = chain_rows(name, args, policy)
        else:
            rows = chain_rows_apart(name, argv if argv is not None else sys.argv[1:])
        for line in rows:
            emit(line)
    out = RESULTS if policy is None else RESULTS_SET
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
