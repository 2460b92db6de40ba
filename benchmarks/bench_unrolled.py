"""Steady state of unrolled loops: taylax against jet as the loop grows (issue 43, item 2).

An unrolled loop is one long chain of elementwise operations. Without fusion cuts
(`taylax._cuts`) XLA:CPU ran taylax's program in time exponential in the number of steps
(14 RK4 steps at K = 4: 0.8 s per call, jet 0.04 ms). This script times, in one process,
`jax.jit` of `taylax.derivatives(f, K)` (all orders, stacked) and of
`jax.experimental.jet` along ones (all orders, apart, as jet returns them) on:

* `rk4`: unrolled RK4 steps of y' = -y^3 (h = 0.05) from a scalar y0;
* `lorenz`: unrolled RK4 steps of the Lorenz system (h = 0.01), along y0 = (1, 1, 1);

scalar (one initial value) and under `jax.jit(jax.vmap(...))` over `--points` values, for
each number of steps and order. Each cell: the minimum over rounds of the time per call
of back-to-back calls (one call where a call takes over 0.5 s; a contender over 10 ms,
whose first call took over 60 s, or whose time at the next steps would pass 10 ms at its
last growth, is not run at more steps: "-" in its cells; nor is jet once its time grew
more than 3x over the last doubling of the steps, or once it was slow at a lower order
and no more work, `dominated`); the first call (lower + compile + run) beside it.
Usage::

    python benchmarks/bench_unrolled.py [--steps 5,10,20,40] [--orders 2,4,8]
        [--programs rk4,lorenz] [--modes scalar,vmap] [--policy cpu|gpu|cpu-uncut]
        [--fusion-cut N] [--set FIELD=VALUE ...] [--no-jet] [--jet-stacked]

`--policy cpu-uncut` is the CPU policy without fusion cuts (`fusion_cut=None`), the
program before the fix. Prints a markdown table and writes it, headed by the command,
to `benchmarks/results/unrolled.md`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import jet

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import jet_along_ones, steady_ms  # noqa: E402
from harness import command_line  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "unrolled.md"

H_RK4, H_LORENZ = 0.05, 0.01


def rk4_cubic(y, steps: int):
    """`steps` unrolled RK4 steps of y' = -y^3."""
    h = H_RK4
    for _ in range(steps):
        k1 = -(y**3)
        k2 = -((y + h / 2 * k1) ** 3)
        k3 = -((y + h / 2 * k2) ** 3)
        k4 = -((y + h * k3) ** 3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def lorenz(y, steps: int):
    """`steps` unrolled RK4 steps of the Lorenz system from `y * (1, 1, 1)`; returns x."""

    def field(u):
        x, v, z = u[0], u[1], u[2]
        return jnp.stack([10.0 * (v - x), x * (28.0 - z) - v, x * v - 8.0 / 3.0 * z])

    h = H_LORENZ
    u = y * jnp.ones(3, y.dtype)
    for _ in range(steps):
        k1 = field(u)
        k2 = field(u + h / 2 * k1)
        k3 = field(u + h / 2 * k2)
        k4 = field(u + h * k3)
        u = u + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return u[0]


PROGRAMS = {"rk4": rk4_cubic, "lorenz": lorenz}
# A contender slower than SLOW_S per call is timed once; one slower than SKIP_MS, or
# whose first call took over SKIP_FIRST_S, is not run at more steps (its time grows
# exponentially: jet's went from 0.02 ms at 10 RK4 steps to 45 ms at 20, at K = 2 on the
# 2-core CPU; its scalar K = 8 first call from 29 s at 10 steps to 113 s at 20, and at
# 40 its compile held 20 GB for over 20 minutes before it was stopped).
SLOW_S, SKIP_MS, SKIP_FIRST_S = 0.5, 10.0, 60.0
# jet's growth per doubling of the steps past which it is not run at more steps. Its `vmap`
# at K = 2 grew 3.5x, 4.5x and 6.4x from 10 to 20 RK4 steps in three runs, and its first
# call at 40 ran for over an hour: faster than any extrapolation of two cells. taylax is
# exempt: its budget bounds its program (`EmissionPolicy.within_budget`).
JET_GROWTH_SKIP = 3.0


def dominated(slow_cells: list, K: int, steps: int) -> bool:
    """Whether jet was slow (`slow_cells`, `(K, steps)` pairs) at an order no higher than
    `K` and a work `K * steps` no larger: its time grows with both. Its `vmap` over 10 RK4
    steps at K = 4 took 2.1 s per call, and its first call over 5 steps at K = 8 ran for
    over 6 minutes before it was stopped."""
    return any(k <= K and k * s <= K * steps for k, s in slow_cells)


def growth_per_doubling(history: list) -> float:
    """How much a contender's time grew over its last two cells `(steps, ms)`, per
    doubling of the steps; 1 with fewer than two."""
    if len(history) < 2:
        return 1.0
    (s0, ms0), (s1, ms1) = history[-2:]
    if s1 <= s0 or ms0 <= 0:
        return 1.0
    return (ms1 / ms0) ** (math.log(2) / math.log(s1 / s0))


def predicted_ms(history: list, steps: int) -> float | None:
    """A contender's time at `steps`, extrapolated from its last two cells `(steps, ms)`
    at the growth between them (per factor of steps); None with fewer than two. jet's
    `vmap` at K = 2 grew 5x and 6x per doubling up to 20 steps, and its first call at 40
    ran for over an hour: the skip rules on measured cells alone did not stop it."""
    if len(history) < 2:
        return None
    last_steps, last_ms = history[-1]
    return last_ms * growth_per_doubling(history) ** math.log2(steps / last_steps)


def jet_terms(f, K: int):
    """`y -> (f, f', ..., f^(K))` by jet along ones, as jet returns them: apart. (Stacked
    in the program, XLA:CPU ran jet's 5 RK4 steps at K = 4 in 16 ms instead of 0.03 ms.)"""

    def run(y):
        y0, ys = jet.jet(f, (y,), ([jnp.ones_like(y)] + [jnp.zeros_like(y)] * (K - 1),))
        return (y0, *ys)

    return run


def timed(fn, y0, policy, calls: int, rounds: int) -> dict:
    """First call (lower + compile + run) and steady state (ms) of `jax.jit(fn)(y0)`."""
    import contextlib
    import time

    scope = taylax.emission_policy(policy) if policy is not None else contextlib.nullcontext()
    start = time.perf_counter()
    with scope:
        compiled = jax.jit(fn).lower(y0).compile()
    out = jax.block_until_ready(compiled(y0))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(compiled(y0))
    once = time.perf_counter() - start
    ms = once * 1e3 if once > SLOW_S else steady_ms(compiled, (y0,), rounds, calls)
    return {"first_s": first, "ms": ms, "out": out}


def policy_named(name: str) -> taylax.EmissionPolicy:
    """`cpu`, `gpu`, or `cpu-uncut` (the CPU policy without fusion cuts)."""
    if name == "cpu-uncut":
        return dataclasses.replace(taylax.CPU, name="cpu-uncut", fusion_cut=None)
    return {"cpu": taylax.CPU, "gpu": taylax.GPU}[name]


def _ms(result) -> str:
    return "-" if result is None else f"{result['ms']:.4f}"


def _s(result) -> str:
    return "-" if result is None else f"{result['first_s']:.2f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="5,10,20,40")
    parser.add_argument("--orders", default="2,4,8")
    parser.add_argument("--programs", default="rk4,lorenz")
    parser.add_argument("--modes", default="scalar,vmap")
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--policy", default="cpu")
    parser.add_argument("--fusion-cut", type=int, default=None, help="override `fusion_cut`")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        help="FIELD=VALUE policy changes (integers, None, True or False)",
    )
    parser.add_argument("--no-jet", action="store_true", help="time taylax alone")
    parser.add_argument(
        "--jet-stacked", action="store_true", help="stack jet's terms in its program"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    policy = policy_named(args.policy)
    if args.fusion_cut is not None:
        name = f"{policy.name}-cut{args.fusion_cut}"
        policy = dataclasses.replace(policy, name=name, fusion_cut=args.fusion_cut)
    if args.set:
        from policy_ab import parse_set

        policy = dataclasses.replace(
            policy, name=f"{policy.name}+{args.set}", **parse_set(args.set)
        )
    budget = (args.calls, args.rounds)
    slow: dict[str, set] = {"taylax": set(), "jet": set()}  # (program, mode, K) past SKIP_MS
    history: dict[tuple, list] = {}  # (who, program, mode, K) -> [(steps, ms), ...]
    jet_slow: dict[tuple, list] = {}  # (program, mode) -> [(K, steps), ...] where jet was slow
    if args.no_jet:
        slow["jet"] = {
            (p, m, int(k))
            for p in PROGRAMS
            for m in ("scalar", "vmap")
            for k in args.orders.split(",")
        }
    lines = [
        command_line(__file__, sys.argv[1:] if argv is None else argv),
        "",
        f"jax {jax.__version__}, {jax.devices()[0].platform}, policy {policy.name}, float64, "
        f"{time.strftime('%Y-%m-%d')}",
    ]
    columns = ("program", "mode", "K", "steps", "taylax ms", "jet ms", "ratio")
    columns += ("taylax first s", "jet first s")
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    print("\n".join(lines), flush=True)
    for name in args.programs.split(","):
        program = PROGRAMS[name]
        for mode in args.modes.split(","):
            y0 = jnp.float64(0.8) if mode == "scalar" else jnp.linspace(0.5, 1.0, args.points)
            for K in [int(k) for k in args.orders.split(",")]:
                for steps in [int(s) for s in args.steps.split(",")]:

                    def f(y, steps=steps, program=program):
                        return program(y, steps)

                    ours = taylax.derivatives(f, K)
                    theirs = (jet_along_ones if args.jet_stacked else jet_terms)(f, K)
                    if mode == "vmap":
                        ours, theirs = jax.vmap(ours), jax.vmap(theirs)
                    key = (name, mode, K)
                    for who in ("taylax", "jet"):
                        cells = history.get((who, *key), [])
                        guess = predicted_ms(cells, steps)
                        skip = guess is not None and guess > SKIP_MS
                        if who == "jet":
                            skip |= growth_per_doubling(cells) > JET_GROWTH_SKIP
                            skip |= dominated(jet_slow.get((name, mode), []), K, steps)
                        if skip:
                            slow[who].add(key)
                    a = None if key in slow["taylax"] else timed(ours, y0, policy, *budget)
                    b = None if key in slow["jet"] else timed(theirs, y0, None, *budget)
                    for who, r in (("taylax", a), ("jet", b)):
                        if r is not None:
                            history.setdefault((who, *key), []).append((steps, r["ms"]))
                        if r is not None and (r["ms"] > SKIP_MS or r["first_s"] > SKIP_FIRST_S):
                            slow[who].add(key)
                            if who == "jet":
                                jet_slow.setdefault((name, mode), []).append((K, steps))
                    if a is not None and b is not None:
                        expected = b["out"]
                        if not args.jet_stacked:
                            expected = jnp.stack(expected, axis=-1)
                        scale = float(jnp.max(jnp.abs(expected))) + 1e-300
                        error = float(jnp.max(jnp.abs(a["out"] - expected))) / scale
                        assert error < 1e-9, f"taylax and jet disagree: {error:.2e}"
                    ratio = f"{a['ms'] / b['ms']:.2f}" if a and b else "-"
                    lines.append(
                        f"| {name} | {mode} | {K} | {steps} | {_ms(a)} | {_ms(b)} | {ratio} | "
                        f"{_s(a)} | {_s(b)} |"
                    )
                    print(lines[-1], flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
