"""ODE gradients: taylax's forward and reverse mode against heyoka's variational equations.

For each problem, the gradient of the final-state loss `L = sum((y(T) - 0.5)^2)` with
respect to the initial state and the problem's parameter, float64, at tolerance `--tol`
(the target 0.5, not 0: see `TARGET`):

- `pendulum`: theta'' = -g sin(theta) from rest at theta = 2.5 to t = 100 (as in
  `bench_ode_problems.py`), with `g = 1` in `args`;
- `kepler`: Kepler's problem at e = 0.5 from pericentre (semi-major axis 1), over one
  orbit (T = 2 pi), with the gravitational parameter `gm = 1` in `args`;
- `arenstorf`: the restricted three-body problem's Arenstorf orbit over one period
  (`bench_ode_problems.py`), with the mass ratio `mu` in `args` (both masses' terms).

Contenders:

- taylax forward: `jax.jit(jax.jacfwd(loss))` through `taylax.ode.integrate(field, tol=tol)`;
- taylax reverse: `jax.jit(jax.grad(loss))` through
  `taylax.ode.integrate(field, tol=tol, gradients="reverse")` (the discrete adjoint);
- heyoka: `heyoka.taylor_adaptive` on `heyoka.var_ode_sys(system, var_args.vars |
  var_args.params, order=1)` at the same `tol` (the state's first-order sensitivities
  integrated with it, under the same error control), `L`'s gradient from the Jacobian;
- finite differences: central differences of heyoka's plain integrator (at its default
  tolerance, float64's epsilon) at steps `delta`, `delta / 2` and `delta / 4` in every
  input (`delta` per problem: `Problem.delta`), extrapolated twice (Richardson); their
  own error estimate is their distance from the once-extrapolated values.

The reference for all of them ("exact") is heyoka's variational equations in
`--precision`-bit arithmetic (`heyoka.real`, tolerance 2^-precision). Differences are
relative in the max norm, per block: `max|g - ref| / max|ref|` over the gradient with
respect to `y0`, and over the parameter's. Time: the best of at least `--repeats` calls
after the first (`bench_ode_problems.best_of`), the first reported apart (taylax traces
and compiles the derivative: 15-70 s a problem and mode on a 2-core machine, hence the
default of one problem; heyoka's first call is the construction, its compilation, which
heyoka's on-disk cache of compiled code serves on later runs: 0.04 s against 0.2-2.3 s).
Other processes sharing the cores slow every contender: the load average goes into the
results, which are written to `benchmarks/results/ode_gradients.md`.

    python benchmarks/bench_ode_gradients.py                        # the pendulum (~1 min)
    python benchmarks/bench_ode_gradients.py --problems pendulum,kepler,arenstorf  # ~5 min
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_ode_problems import (  # noqa: E402
    ARENSTORF_T,
    ARENSTORF_Y0,
    MU,
    Problem as BaseProblem,  # noqa: E402
    arenstorf_rhs,
    best_of,
)

RESULTS = Path(__file__).resolve().parent / "results"


# The vector fields with their parameter in `args`, for JAX and for heyoka (`par[0]`).


def kepler(t, y, args):
    r, v = y[:2], y[2:]
    return jnp.concatenate([v, -args["gm"] * r / jnp.sum(r * r, axis=0) ** 1.5])


def kepler_heyoka(hy, x, y, vx, vy):
    r3 = (x**2 + y**2) ** -1.5
    return [vx, vy, -hy.par[0] * x * r3, -hy.par[0] * y * r3]


def pendulum(t, y, args):
    return jnp.stack([y[1], -args["g"] * jnp.sin(y[0])])


def pendulum_heyoka(hy, theta, omega):
    return [omega, -hy.par[0] * hy.sin(theta)]


def arenstorf(t, s, args):
    """The planar restricted three-body problem in the rotating frame, mass ratio `mu`."""
    mu = args["mu"]
    return jnp.stack(arenstorf_rhs(*s, mu=mu, mu1=1.0 - mu))


def arenstorf_heyoka(hy, x, y, vx, vy):
    mu = hy.par[0]
    return arenstorf_rhs(x, y, vx, vy, mu=mu, mu1=1.0 - mu)


@dataclass(frozen=True)
class Problem(BaseProblem):
    """A problem of `bench_ode_problems` with one parameter: its name in `args`, its
    value, and the finite differences' largest step."""

    param: str
    value: float
    delta: float


E = 0.5
PROBLEMS = {
    "kepler": Problem(
        "kepler",
        "Kepler, e = 0.5, one orbit",
        kepler,
        kepler_heyoka,
        np.array([1 - E, 0.0, 0.0, np.sqrt((1 + E) / (1 - E))]),
        2 * np.pi,
        "gm",
        1.0,
        3e-5,
    ),
    "pendulum": Problem(
        "pendulum",
        "Pendulum from rest at theta = 2.5, t = 100",
        pendulum,
        pendulum_heyoka,
        np.array([2.5, 0.0]),
        100.0,
        "g",
        1.0,
        3e-4,
    ),
    "arenstorf": Problem(
        "arenstorf",
        "Arenstorf orbit, one period",
        arenstorf,
        arenstorf_heyoka,
        ARENSTORF_Y0,
        ARENSTORF_T,
        "mu",
        MU,
        3e-8,
    ),
}


def heyoka_system(problem: Problem):
    import heyoka as hy

    variables = hy.make_vars(*[f"y{i}" for i in range(len(problem.y0))])
    return list(zip(variables, problem.heyoka_field(hy, *variables)))


# The loss's target: `L = sum((y(T) - TARGET)^2)`. Not 0: Kepler's orbit returns to its
# pericentre after one period, where `sum(y(T)^2)` is stationary in `gm` (a change of
# the period moves the state along the orbit, to first order, only in the components
# that vanish there), so its gradient in `gm` would be 0 and no relative difference
# would mean anything.
TARGET = 0.5


def loss_gradient(y_end, jacobian):
    """`(dL/dy0, dL/dp)` of `L = sum((y(T) - TARGET)^2)` from `dy(T)/d(y0, p)`
    (`(n, n + 1)`)."""
    g = 2 * (np.asarray(y_end) - TARGET) @ jacobian
    return g[:-1], g[-1:]


# --- the contenders -------------------------------------------------------------------


def run_taylax(problem: Problem, tol: float, repeats: int, mode: str):
    """`(time, first call, steps, (dL/dy0, dL/dp))` by taylax in `mode`."""
    solve = taylax.ode.integrate(problem.field, tol=tol, max_steps=20_000, gradients=mode)
    ts = jnp.array([0.0, problem.t_end])

    def loss(y0, p):
        return jnp.sum((solve(ts, y0, {problem.param: p}).ys[-1] - TARGET) ** 2)

    derivative = jax.jacfwd if mode == "forward" else jax.grad
    grad = jax.jit(derivative(loss, argnums=(0, 1)))
    y0, p = jnp.asarray(problem.y0), jnp.asarray(problem.value)
    begin = time.perf_counter()
    jax.block_until_ready(grad(y0, p))
    first = time.perf_counter() - begin
    elapsed, (d_y0, d_p) = best_of(lambda: jax.block_until_ready(grad(y0, p)), repeats)
    steps = int(jax.jit(solve)(ts, y0, {problem.param: p}).steps)
    return elapsed, first, steps, (np.asarray(d_y0), np.asarray(d_p).reshape(1))


def run_heyoka(problem: Problem, tol: float, repeats: int):
    """`(time, first call, steps, (dL/dy0, dL/dp))` by heyoka's variational equations:
    the first call is the construction (its compilation); each timed call propagates a
    fresh copy and forms the gradient."""
    import heyoka as hy

    n = len(problem.y0)
    begin = time.perf_counter()
    system = hy.var_ode_sys(heyoka_system(problem), hy.var_args.vars | hy.var_args.params)
    ta = hy.taylor_adaptive(system, list(problem.y0), pars=[problem.value], tol=tol)
    first = time.perf_counter() - begin

    def propagate(fresh):
        steps = int(fresh.propagate_until(problem.t_end)[3])
        # The state, then dy/d(y0, p) row by row.
        return steps, loss_gradient(fresh.state[:n], fresh.state[n:].reshape(n, n + 1))

    best, (steps, grads) = best_of(propagate, repeats, setup=lambda: copy.deepcopy(ta))
    return best, first, steps, grads


def exact(problem: Problem, precision: int):
    """`(dL/dy0, dL/dp)` by heyoka's variational equations in `precision`-bit arithmetic
    (`heyoka.real`, its default tolerance 2^-precision), from the float64 start and
    parameter taken exactly: the reference that both float64 gradients are measured
    against."""
    import heyoka as hy

    def real(v):
        return hy.real(float(v), precision)

    n = len(problem.y0)
    system = hy.var_ode_sys(heyoka_system(problem), hy.var_args.vars | hy.var_args.params)
    ta = hy.taylor_adaptive(
        system,
        [real(v) for v in problem.y0],
        pars=[real(problem.value)],
        fp_type=hy.real,
        prec=precision,
        compact_mode=True,
    )
    ta.propagate_until(real(problem.t_end))
    state = np.array([float(v) for v in ta.state])
    return loss_gradient(state[:n], state[n:].reshape(n, n + 1))


def finite_differences(problem: Problem):
    """`((dL/dy0, dL/dp), estimate, time)`: central differences of heyoka's plain solve at
    float64's epsilon, steps `delta / 2^k`, k = 0, 1, 2, extrapolated twice; `estimate`
    the largest distance (max norm, relative) from the once-extrapolated values."""
    import heyoka as hy

    begin = time.perf_counter()
    ta = hy.taylor_adaptive(heyoka_system(problem), list(problem.y0), pars=[problem.value])
    base = np.concatenate([problem.y0, [problem.value]])

    def loss(x):
        ta.time = 0.0
        ta.state[:] = x[:-1]
        ta.pars[:] = x[-1:]
        ta.propagate_until(problem.t_end)
        return np.sum((ta.state - TARGET) ** 2)

    steps = problem.delta / 2.0 ** np.arange(3)
    unit = np.eye(len(base))
    central = np.array(
        [[(loss(base + d * e) - loss(base - d * e)) / (2 * d) for e in unit] for d in steps]
    )
    once = (4 * central[1:] - central[:-1]) / 3
    twice = (16 * once[1] - once[0]) / 15
    estimate = np.max(np.abs(twice - once[1])) / np.max(np.abs(twice))
    return (twice[:-1], twice[-1:]), estimate, time.perf_counter() - begin


def relative(got, want) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def measure(problem: Problem, tol: float, repeats: int, precision: int) -> dict:
    """Every contender on `problem`: times, steps, gradients, and the differences (per
    block, `y0` then the parameter) from heyoka's, between the two modes, and from the
    `precision`-bit reference."""
    out = {"problem": problem}
    for name, run in (
        ("forward", lambda: run_taylax(problem, tol, repeats, "forward")),
        ("reverse", lambda: run_taylax(problem, tol, repeats, "reverse")),
        ("heyoka", lambda: run_heyoka(problem, tol, repeats)),
    ):
        out[name] = run()
        print(
            f"{problem.name} {name}: {out[name][0]:.3g} s, first {out[name][1]:.3g} s, "
            f"{out[name][2]} steps",
            flush=True,
        )
    out["fd"] = finite_differences(problem)
    ref = out["heyoka"][3]

    def versus(grads, reference=ref):
        return tuple(relative(g, r) for g, r in zip(grads, reference))

    out["forward vs heyoka"] = versus(out["forward"][3])
    out["reverse vs heyoka"] = versus(out["reverse"][3])
    out["forward vs reverse"] = versus(out["forward"][3], out["reverse"][3])
    out["fd vs heyoka"] = versus(out["fd"][0])
    truth = exact(problem, precision)
    out["forward vs exact"] = versus(out["forward"][3], truth)
    out["heyoka vs exact"] = versus(out["heyoka"][3], truth)
    print(
        f"{problem.name}: "
        + ", ".join(f"{k} {v[0]:.1e} / {v[1]:.1e}" for k, v in out.items() if " vs " in k)
        + f", fd estimate {out['fd'][1]:.1e}",
        flush=True,
    )
    return out


def report(results, tol: float, precision: int, command: str, load) -> str:
    import heyoka as hy

    def pair(v):
        return f"{v[0]:.1e} / {v[1]:.1e}"

    lines = [
        f"Gradients of L = sum((y(T) - {TARGET})^2) w.r.t. y0 / the parameter, tol {tol:.0e}, "
        f"float64, jax {jax.__version__}, heyoka {hy.__version__}, {jax.devices()[0].device_kind}. "
        f"Command: `{command}`. Load average (1 min) at the start and the end: "
        f"{load[0]:.1f} / {load[1]:.1f} ({os.cpu_count()} cores).",
        "",
        "Largest relative differences (max norm per block: y0 / parameter). Exact: heyoka's "
        f"variational equations at {precision} bits. FD: Richardson finite differences of "
        "heyoka's plain float64 solve, with their own error estimate:",
        "",
        "| problem | parameter | steps, taylax / heyoka var. | forward vs heyoka | reverse vs "
        "heyoka | forward vs reverse | forward vs exact | heyoka vs exact | FD vs heyoka | "
        "FD estimate |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        p = r["problem"]
        lines.append(
            f"| {p.title} | {p.param} = {p.value:g} | {r['forward'][2]} / {r['heyoka'][2]} | "
            f"{pair(r['forward vs heyoka'])} | {pair(r['reverse vs heyoka'])} | "
            f"{pair(r['forward vs reverse'])} | {pair(r['forward vs exact'])} | "
            f"{pair(r['heyoka vs exact'])} | {pair(r['fd vs heyoka'])} | {r['fd'][1]:.1e} |"
        )
    lines += [
        "",
        "Times, steady state (first call; for heyoka its construction, which heyoka's "
        "on-disk cache of compiled code may have served):",
        "",
        "| problem | taylax forward (s) | taylax reverse (s) | heyoka var. eqs (s) |",
        "|---|---|---|---|",
    ]
    for r in results:
        cells = " | ".join(
            f"{r[k][0]:.3g} ({r[k][1]:.3g})" for k in ("forward", "reverse", "heyoka")
        )
        lines.append(f"| {r['problem'].title} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="pendulum")
    parser.add_argument("--tol", type=float, default=1e-14)
    parser.add_argument("--repeats", type=int, default=5, help="steady calls, best taken")
    parser.add_argument("--precision", type=int, default=128, help="the reference's bits")
    args, _ = parser.parse_known_args(argv)  # `make bench` may pass other suites' options
    names = args.problems.split(",")
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problem(s): {', '.join(unknown)}")
    options = [
        f"--{key} {value}" for key, value in vars(args).items() if value != parser.get_default(key)
    ]
    command = " ".join(["python benchmarks/bench_ode_gradients.py", *options])
    load_start = os.getloadavg()[0]
    results = [measure(PROBLEMS[name], args.tol, args.repeats, args.precision) for name in names]
    load = (load_start, os.getloadavg()[0])
    text = report(results, args.tol, args.precision, command, load)
    print(text, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ode_gradients.md").write_text(text)


if __name__ == "__main__":
    main()
