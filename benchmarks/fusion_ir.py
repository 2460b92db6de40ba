"""What XLA:CPU made of each fused kernel of an unrolled loop's Taylor pass under `vmap`.

For `jax.jit(jax.vmap(taylax.derivatives(f, K)))` over `--points` values, where `f` is one
of `bench_unrolled.PROGRAMS` unrolled `steps` times, this compiles the program with
`xla_dump_to` and prints, per fused kernel: the root instruction and shape, the number of
HLO instructions, and from the kernel's optimized LLVM IR the SIMD instructions (those on
`<N x double>` or `<N x float>` vectors), the scalar `fmul`s, and the functions the
emitter outlined beside the kernel's own. Then the time per call (`gpu_check.time_all`,
the minimum over 7 rounds of 20 calls). docs/EMISSION.md ("Concatenate roots") reads
these figures. Usage::

    python benchmarks/fusion_ir.py rk4 3 5
    python benchmarks/fusion_ir.py rk4 3 5 --set fusion_cut=None
    python benchmarks/fusion_ir.py rk4 3 5 --compiler-option xla_cpu_use_fusion_emitters=False
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_unrolled import PROGRAMS  # noqa: E402
from gpu_check import time_all  # noqa: E402
from policy_ab import parse_set  # noqa: E402
from unrolled_ab import compiler_option  # noqa: E402


def kernels(hlo: str) -> dict:
    """Fused computation name -> (root opcode, root shape, instruction count)."""
    out = {}
    for block in re.split(r"\n(?=\S)", hlo):
        head = re.match(r"%(\S+) ", block)
        root = re.search(r"ROOT \S+ = (\S+) (\S+)\(", block)
        if head and root and "fused" in head.group(1):
            count = len(re.findall(r"^\s+(?:ROOT )?%\S+ = ", block, re.M))
            out[head.group(1)] = (root.group(2), root.group(1), count)
    return out


def ir_counts(text: str) -> tuple[int, int, int]:
    """(SIMD instructions, scalar fmuls, outlined functions) of one kernel's LLVM IR."""
    simd = len(re.findall(r"= \w+ [^\n]*<\d+ x (?:double|float)>", text))
    scalar = len(re.findall(r"= fmul (?:\w+ )*(?:double|float) ", text))
    functions = len(re.findall(r"^define ", text, re.M)) - 1
    return simd, scalar, functions


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", choices=sorted(PROGRAMS))
    parser.add_argument("order", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--set", nargs="*", default=[], help="policy changes FIELD=VALUE")
    parser.add_argument("--compiler-option", action="append", default=[])
    args = parser.parse_args(argv)
    options = dict(compiler_option(o) for o in args.compiler_option)
    policy = dataclasses.replace(taylax.CPU, name="cpu", **parse_set(args.set))
    ys = jnp.linspace(0.5, 1.0, args.points)

    def f(y):
        return PROGRAMS[args.program](y, args.steps)

    fn = jax.vmap(taylax.derivatives(f, args.order))
    with tempfile.TemporaryDirectory() as dump, taylax.emission_policy(policy):
        compiled = jax.jit(fn).lower(ys).compile({**options, "xla_dump_to": dump})
        hlo = compiled.as_text()
        fused = kernels(hlo)
        ir = {}
        for path in Path(dump).glob("*_kernel_module.ir-with-opt.ll"):
            kernel = re.search(r"\.([^.]*(?:\.\d+)?)_kernel_module", path.name).group(1)
            ir[kernel] = ir_counts(path.read_text())
    entry = hlo.split("ENTRY", 1)[1]
    print("kernel | root | shape | HLO instructions | SIMD instructions | scalar fmul | outlined")
    for name, computation in re.findall(r"%(\S+) = \S+ fusion\([^)]*\).*?calls=%(\S+?),", entry):
        root, shape, count = fused.get(computation, ("?", "?", 0))
        simd, scalar, functions = ir.get(name, (0, 0, 0))
        print(f"{name} | {root} | {shape} | {count} | {simd} | {scalar} | {functions}")
    timed = time_all({"taylax": (fn, policy)}, (ys,), 20, 7, compiler_options=options or None)
    print(f"ms per call: {timed['taylax']['ms']:.3f} ({timed['taylax']['fusions']} fused kernels)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
