"""Batched steady state on the default JAX backend (a GPU): taylax vs jet vs nested jvp.

The contenders of ``bench_batched.py`` (the same three elementwise chains and the tanh MLP
of width 128 with batch 2048), without its C roofline and fresh-process first calls, which
measure the CPU. Steady state is measured as there (``interleaved_minimum``); ``taylax
first`` is the first call of taylax's pipeline in this process (trace + compile + run).
Not part of ``make bench`` (which runs ``bench_*.py`` on the CPU); run it where a GPU is::

    PYTHONPATH=src:benchmarks python benchmarks/gpu_check.py
    PYTHONPATH=src:benchmarks python benchmarks/gpu_check.py --sizes 1048576 --orders 8,16
    PYTHONPATH=src:benchmarks python benchmarks/gpu_check.py --calls 20   # back to back
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp

from bench_batched import (
    CHAINS,
    NESTED_MAX_ORDER,
    jet_chain,
    minimum_times,
    mlp_contenders,
    mlp_params,
    nested_chain,
    nested_vmap_chain,
    taylax_chain,
)


def _line(label: str, best: dict, extra: str = "") -> str:
    others = min(v for k, v in best.items() if k != "taylax")
    times = " ".join(f"{k} {v:.3f} ms" for k, v in best.items())
    return f"{label} {times}  taylax/best {best['taylax'] / others:.2f}{extra}"


def main(argv=None) -> int:
    """Print one line per (chain, N, K) and per MLP order.

    Args:
      argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
      The exit status (0).

    Example:
      >>> main(["--sizes", "4096", "--orders", "2", "--no-mlp"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="65536,1048576", help="comma-separated N")
    parser.add_argument("--orders", default="2,4,8,16,32", help="comma-separated K")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--calls",
        type=int,
        default=1,
        help="calls back to back per timed sample (the time is per call): a GPU runs "
        "them while the host dispatches, so more than 1 times the kernels, not the wait",
    )
    parser.add_argument("--cases", default=",".join(CHAINS), help="comma-separated chains")
    parser.add_argument("--no-mlp", action="store_true")
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}", flush=True)
    for name in args.cases.split(","):
        f = CHAINS[name][0]
        for n in map(int, args.sizes.split(",")):
            t = jnp.linspace(0.1, 2.0, n)
            for K in map(int, args.orders.split(",")):
                fns = {"taylax": taylax_chain(f, K), "jet": jet_chain(f, K)}
                if K <= NESTED_MAX_ORDER:
                    fns["nested"] = nested_chain(f, K)
                    fns["nested (vmap)"] = nested_vmap_chain(f, K)
                start = time.perf_counter()
                jax.block_until_ready(fns["taylax"](t))
                first = time.perf_counter() - start
                best = minimum_times(fns, (t,), args.rounds, budget_s=60.0, calls=args.calls)
                label = f"{name:14s} N={n:8d} K={K:2d}"
                print(_line(label, best, f"  taylax first {first:.2f} s"), flush=True)
    if not args.no_mlp:
        params = mlp_params(128)
        x = jax.random.normal(jax.random.PRNGKey(1), (2048, 16))
        v = jax.random.normal(jax.random.PRNGKey(2), (2048, 16))
        for K in (2, 4, 8):
            best = minimum_times(
                mlp_contenders(params, K), (x, v), args.rounds, budget_s=60.0, calls=args.calls
            )
            print(_line(f"mlp K={K}", best), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
