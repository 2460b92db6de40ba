"""Hashes of the programs taylax emits for the benchmark set, to check that a change
leaves them as they were (or to list which ones it changed).

Usage: `python benchmarks/emitted_hashes.py [--policy cpu|gpu|default] [--hlo]`. Prints one
line per (program, order): a short hash of the emitted jaxpr's text (with `--hlo`, of the
XLA:CPU-compiled module too, without its source locations) and its number of equations.
Run it before and after a change and compare the two outputs with `diff`. A change of an
equation's parameters changes the jaxpr's hash; the compiled module's hash says whether
XLA was given another program.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import re
import sys
from pathlib import Path

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)


def _jaxprs_in_params(params):
    """The jaxprs in an equation's params (`jax.extend.core.jaxprs_in_params` from jax 0.10)."""
    for value in params.values():
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, jex_core.ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, jex_core.Jaxpr):
                yield v


jaxprs_in_params = getattr(jex_core, "jaxprs_in_params", _jaxprs_in_params)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_batched  # noqa: E402
import bench_large  # noqa: E402
import bench_layers  # noqa: E402
import bench_operators  # noqa: E402
import bench_programs  # noqa: E402
import recursion  # noqa: E402
import taylax  # noqa: E402


def _count(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for sub in jaxprs_in_params(eqn.params):
            total += _count(sub)
    return total


def cases():
    """(name, K, function of its arguments, arguments) for every program hashed."""
    t = jnp.linspace(-1.0, 1.0, 4096)
    for name, (f, _) in bench_batched.CHAINS.items():
        for K in (2, 4, 8, 12, 16, 32):
            yield f"chain {name}", K, bench_batched.taylax_chain(f, K), (t,)
    params = bench_batched.mlp_params(128)
    rng = np.random.default_rng(0)
    xv = tuple(jnp.asarray(rng.normal(size=(2048, 16))) for _ in range(2))
    for K in (2, 4, 8):
        yield "tanh mlp", K, bench_batched.mlp_contenders(params, K)["taylax"], xv
    table = bench_layers._layers()
    for name, (_, f, shape) in table.items():
        rng = np.random.default_rng(1)
        xs = tuple(jnp.asarray(rng.normal(size=shape)) for _ in range(2))
        for K in (1, 2, 4):
            yield (
                f"layer {name}",
                K,
                jax.jit(lambda x, v, f=f, K=K: taylax.derivatives(f, K)(x, v)),
                xs,
            )
    for d in (8, 32):
        p = bench_operators.mlp_params(d, jnp.float64)
        pts = jnp.ones((64, d)) * 0.1
        f = lambda x, p=p: bench_operators.mlp(p, x)  # noqa: E731
        yield f"laplacian mlp d={d}", 2, jax.jit(jax.vmap(taylax.laplacian(f))), (pts,)
        r = lambda x, p=p: bench_operators.residual_net(p, x)  # noqa: E731
        yield f"laplacian residual d={d}", 2, jax.jit(jax.vmap(taylax.laplacian(r))), (pts,)
    for case in ("rk4", "solve"):
        f, x, v = bench_programs.build_case(case)
        for K in (4, 8):
            yield (
                f"program {case}",
                K,
                jax.jit(lambda x, v, f=f, K=K: taylax.derivatives(f, K)(x, v)),
                (x, v),
            )
    for K in (2, 4):
        fn = jax.jit(lambda y, K=K: taylax.derivatives(bench_large.rk4_unrolled, K)(y))
        yield "unrolled rk4", K, fn, (jnp.float64(0.8),)
    for d in (4, 8):
        p = bench_operators.mlp_params(d, jnp.float64)
        f = lambda x, p=p: bench_operators.mlp(p, x)  # noqa: E731
        pts = jnp.ones((16, d)) * 0.1
        yield f"biharmonic mlp d={d}", 4, jax.jit(jax.vmap(taylax.biharmonic(f))), (pts,)
    # The jitted recursion of nested derivatives: the program its call emits, every
    # derivative replaced by its pass (`taylax.emitted_jaxpr`), at depth k.
    my_func = recursion.build("taylax")
    t = jnp.asarray(1.0, dtype=complex)
    for k in (3, 6, 9):
        yield "recursion", k, _Emitted(functools.partial(my_func, k=k)), (t,)


def _without_locations(text: str) -> str:
    """A compiled module's text without its source locations (the tables of file names,
    functions and stack frames, and each instruction's `metadata`), which name the
    checkout's path and line numbers: two trees that compile the same program then hash
    alike."""
    tables = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
    blocks = [b for b in text.split("\n\n") if b.split("\n", 1)[0] not in tables]
    return re.sub(r", metadata=\{[^}]*\}", "", "\n\n".join(blocks))


class _Emitted:
    """A function whose program is hashed as `taylax.emitted_jaxpr` shows it: every
    `taylax.derivative` in it replaced by its Taylor pass (`jax.make_jaxpr` would show
    each as one equation)."""

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, *args):
        return jax.jit(self.fun)(*args)

    def lower(self, *args):
        return jax.jit(self.fun).lower(*args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--policy", default=None, help="an emission policy's name (default: this platform's)"
    )
    parser.add_argument("--hlo", action="store_true", help="hash the compiled module too")
    parser.add_argument("--only", default="", help="hash only the programs whose name holds this")
    args = parser.parse_args(argv)
    import contextlib

    scope = contextlib.nullcontext()
    if args.policy is not None:
        scope = taylax.emission_policy(args.policy)
    with scope:
        for name, K, fn, xs in cases():
            if args.only not in name:
                continue
            if isinstance(fn, _Emitted):
                closed = taylax.emitted_jaxpr(fn.fun, *xs)
            else:
                closed = jax.make_jaxpr(fn)(*xs)
            digest = hashlib.sha256(str(closed).encode()).hexdigest()[:16]
            line = f"{name:32s} K={K:<3d} {digest} eqns={_count(closed.jaxpr)}"
            if args.hlo:
                text = _without_locations(fn.lower(*xs).compile().as_text())
                line += f" hlo={hashlib.sha256(text.encode()).hexdigest()[:16]}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
