"""Stacks under `vmap`: which elementwise functions' compiled programs keep a
(points, coefficients) buffer, and their steady state against jet and nested jvp.

Under `jax.vmap(taylax.derivatives(f, K))` a series built as one stacked array becomes a
(points, K + 1) array, the points leading: XLA writes it point by point and its readers
take each coefficient as a strided column. Rows kept apart (`taylax._series.known_rows`)
stay (points,) arrays. For each function `u` of the list, applied along a line (`u(t)`)
and to a series of full degree (`u(0.5 + 0.3 t sin t)`), this script compiles the
`vmap` over `--audit-points` points and lists the buffers of that shape that are not the
output, and the number of kernels. With `--time`, it also times each program against
jet over `--points` points (float64, minimum over interleaved rounds; a function jet has
no rule for reads `-`) and nested `jax.jvp` on the whole array.

    python benchmarks/point_major.py
    python benchmarks/point_major.py --order 8 --time --functions log1p,atan2,pow2.5
    python benchmarks/point_major.py --time --whole --functions logaddexp,pow2.5

`--whole` times taylax on the whole array (`jax.jit(derivatives(f, K))(t, ones)`) instead
of under `vmap`; the audit columns stay the `vmap`'s.

Run it in two checkouts (`PYTHONPATH=<tree>/src`) to compare them.
"""

from __future__ import annotations

import argparse
import re
import sys

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_batched import interleaved_minimum, jet_chain, nested_chain, taylax_chain  # noqa: E402
from harness import command_line  # noqa: E402

FUNCTIONS = {
    "exp": jnp.exp,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "sqrt": jnp.sqrt,
    "sin": jnp.sin,
    "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid,
    "atan": jnp.arctan,
    "asin": jnp.arcsin,
    "asinh": jnp.arcsinh,
    "acosh": lambda x: jnp.arccosh(1 + x),
    "atanh": jnp.arctanh,
    "erf": jax.scipy.special.erf,
    "erf_inv": jax.scipy.special.erfinv,
    "recip": lambda x: 1 / x,
    "pow3": lambda x: x**3,
    "pow2.5": lambda x: x**2.5,
    "atan2": lambda x: jnp.arctan2(x, 1 + x * x),
    "gelu": jax.nn.gelu,
    "softplus": jax.nn.softplus,
    "log_sigmoid": jax.nn.log_sigmoid,
    "logaddexp": lambda x: jnp.logaddexp(x, 0.5 * x * x),
    "logaddexp2": lambda x: jnp.logaddexp2(x, 0.0),
    "log_ndtr": jax.scipy.special.log_ndtr,
    "sinc": jnp.sinc,
}
# jax 0.9 has neither `erfcx` nor `dawsn`.
FUNCTIONS.update(
    {
        name: getattr(jax.scipy.special, name)
        for name in ("erfcx", "dawsn")
        if hasattr(jax.scipy.special, name)
    }
)
if hasattr(jax.scipy.special, "erfcx"):
    # Complex erfcx (JAX's Faddeeva function of `i z`) over |z| up to about 13, across
    # both half-planes: its rule chooses per point between two methods.
    FUNCTIONS["erfcx_complex"] = lambda x: jax.scipy.special.erfcx(x * (9 + 9j) + 0.5j)


def general(t):
    """A series of full degree with values in (0.2, 0.8), inside every function's domain."""
    return 0.5 + 0.3 * jnp.sin(t) * t


def point_major_buffers(f, order: int, points: int) -> tuple[list[str], int]:
    """The (points, k > 1) buffers other than the output in `jax.vmap(derivatives(f,
    order))`'s compiled program over `points` points, and its number of kernels."""
    t = jnp.linspace(-0.9, 0.9, points)
    text = jax.jit(jax.vmap(taylax.derivatives(f, order))).lower(t).compile().as_text()
    entry = re.search(r"ENTRY.*?\n}", text, re.S).group(0)
    found = []
    for line in entry.splitlines():
        m = re.match(rf"\s*(ROOT )?(%\S+) = \w+\[{points},(\d+)\]\{{1,0\}} (\w[\w-]*)", line)
        if m and not m.group(1) and int(m.group(3)) > 1:
            if m.group(4) not in ("parameter", "constant"):
                found.append(f"{m.group(2)}[{m.group(3)}]")
    kernels = len(re.findall(r"^\s*(?:ROOT )?%\S+ = \S+ fusion\(", entry, re.M))
    return found, kernels


def whole_array(f, order: int):
    """`taylax.derivatives(f, order)` along direction 1 on the whole array, jitted."""
    return jax.jit(lambda t: taylax.derivatives(f, order)(t, jnp.ones_like(t)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", type=int, default=8)
    parser.add_argument("--functions", default=",".join(FUNCTIONS))
    parser.add_argument("--audit-points", type=int, default=4096)
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--whole", action="store_true", help="time taylax on the whole array")
    parser.add_argument("--points", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"# {command_line(__file__, sys.argv[1:] if argv is None else argv)}")
    mode = "taylax on the whole array" if args.whole else "taylax under vmap"
    device = f"{jax.devices()[0].device_kind}, jax {jax.__version__}"
    print(f"{device}, float64, K = {args.order}, {mode}\n")
    head = "| function | input | kernels | (points, k) buffers |"
    rule = "|---|---|---|---|"
    if args.time:
        head += " taylax ms | jet ms | nested jvp ms | taylax / jet | taylax / nested jvp |"
        rule += "---|---|---|---|---|"
    print(head + "\n" + rule, flush=True)
    t = jnp.linspace(-0.9, 0.9, args.points)
    for name in args.functions.split(","):
        u = FUNCTIONS[name]
        for label, f in (("line", u), ("series", lambda s, u=u: u(general(s)))):
            found, kernels = point_major_buffers(f, args.order, args.audit_points)
            row = f"| {name} | {label} | {kernels} | {' '.join(found) or '-'} |"
            if args.time:
                taylax = whole_array(f, args.order) if args.whole else taylax_chain(f, args.order)
                fns = {"taylax": taylax, "nested": nested_chain(f, args.order)}
                try:
                    fns["jet"] = jet_chain(f, args.order)
                    jax.block_until_ready(fns["jet"](t))
                except Exception:  # jet has no rule (a KeyError, or a custom_jvp it trips on)
                    del fns["jet"]
                ms = interleaved_minimum(
                    fns, {k: (t,) for k in fns}, args.rounds, budget_s=15.0, calls=4
                )
                jet = f"{ms['jet']:.2f}" if "jet" in ms else "-"
                to_jet = f"{ms['taylax'] / ms['jet']:.2f}" if "jet" in ms else "-"
                row += (
                    f" {ms['taylax']:.2f} | {jet} | {ms['nested']:.2f} | {to_jet} | "
                    f"{ms['taylax'] / ms['nested']:.2f} |"
                )
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
