"""Time per compiled kernel of `jax.jit(jax.vmap(taylax.derivatives(f, K)))` (or of a
whole-array call), from JAX's profiler: which kernel of a pass takes the time.

`f` is a Python expression in `t`, with `jnp` and `jax` in scope. The program runs
`--calls` times under `jax.profiler.trace`; the script reads the Perfetto trace and
prints each kernel's mean time per call, the most expensive first. On XLA:CPU a kernel
split over threads reports its time summed over them, so the total can exceed the wall
time. `--policy name=value,...` runs a variant of the backend's built-in policy (or of
`--base`'s), by `dataclasses.replace`. `--whole` profiles the whole-array call
`jax.jit(lambda t: taylax.derivatives(f, K)(t, ones))` instead of the `vmap`.

    python benchmarks/kernel_profile.py "jnp.sin(jnp.sqrt(1.5 + jnp.tanh(jnp.log1p(t * t))))"
    python benchmarks/kernel_profile.py "jnp.tanh(t) ** 2" --policy polynomial_rows_max_order=8
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import glob
import gzip
import json
import sys
import tempfile

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from harness import command_line  # noqa: E402


def parse_fields(text: str) -> dict:
    """`name=value,...` as a dict of Python literals (`None`, numbers, booleans)."""
    fields = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        fields[name.strip()] = ast.literal_eval(value.strip())
    return fields


def kernel_times(fn, args, calls: int) -> tuple[dict[str, float], dict[str, float]]:
    """Mean microseconds per call of each traced event, and how many times per call."""
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as directory:
        with jax.profiler.trace(directory, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(fn(*args))
        (path,) = glob.glob(f"{directory}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as handle:
            events = json.load(handle)["traceEvents"]
    total, count = collections.defaultdict(float), collections.Counter()
    for event in events:
        if event.get("ph") == "X":
            total[event["name"]] += event["dur"]
            count[event["name"]] += 1
    return {k: v / calls for k, v in total.items()}, {k: v / calls for k, v in count.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("expression", help="f(t) as a Python expression in t")
    parser.add_argument("--order", type=int, default=8)
    parser.add_argument("--points", type=int, default=65536)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--base", default=None, help="cpu, gpu or default (the backend's)")
    parser.add_argument("--policy", default="", help="name=value,... over the base policy")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument(
        "--whole", action="store_true", help="the whole array along ones, not under vmap"
    )
    args = parser.parse_args(argv)
    f = eval(f"lambda t: {args.expression}", {"jnp": jnp, "jax": jax})  # a command-line tool
    base = args.base or ("cpu" if jax.default_backend() == "cpu" else "gpu")
    builtin = {"cpu": taylax.CPU, "gpu": taylax.GPU, "default": taylax.DEFAULT}[base]
    policy = dataclasses.replace(builtin, **parse_fields(args.policy))
    if args.whole:
        program = jax.jit(lambda t: taylax.derivatives(f, args.order)(t, jnp.ones_like(t)))
    else:
        program = jax.jit(jax.vmap(taylax.derivatives(f, args.order)))

    def run(t):
        with taylax.emission_policy(policy):
            return program(t)

    t = jnp.linspace(-0.9, 0.9, args.points)
    times, counts = kernel_times(run, (t,), args.calls)
    kernels = {k: v for k, v in times.items() if "fusion" in k or k.startswith("wrapped_")}
    print(f"# {command_line(__file__, sys.argv[1:] if argv is None else argv)}")
    print(
        f"{jax.devices()[0].device_kind}, jax {jax.__version__}, float64, K = {args.order}, "
        f"{args.points} points{', whole array' if args.whole else ''}, "
        f"policy {policy.name}: {len(kernels)} kernels, "
        f"{sum(kernels.values()):.0f} us per call in all\n"
    )
    print("| kernel | us per call | times per call |\n|---|---|---|")
    for name, us in sorted(kernels.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"| {name} | {us:.1f} | {counts[name]:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
