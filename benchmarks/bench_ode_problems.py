"""ODE benchmark problems: taylax's Taylor integrator against heyoka and diffrax.

Four problems beside Kepler (`bench_ode.py`), each integrated once per tolerance of a
sweep, float64:

- `arenstorf`: the restricted three-body problem's Arenstorf orbit (mu = 0.012277471,
  the classic initial state, one period T = 17.0652165601579625588917206249);
- `lorenz`: sigma = 10, rho = 28, beta = 8/3 from (1, 1, 1) to t = 20. From (1, 1, 1)
  the orbit spirals out from an unstable focus first: an initial error has grown only
  1.7x by t = 10, 670x by t = 20 and 1.6e5x by t = 25 (`lorenz_growth`, in the results
  file). t = 20 is chaotic enough to matter and keeps every error of the sweep (tolerances
  down from 1e-6) far below the attractor's size, where all errors would read O(10);
- `pendulum`: theta'' = -sin(theta) from rest at theta = 2.5 to t = 100;
- `neural`: a fixed-weight tanh MLP y' = W2 tanh(W1 y + b1) + b2 (6 states, 16 hidden
  units, weights from `numpy.random.default_rng(0)`, W2 and b2 shaped so that the orbit
  stays bounded: `_neural_weights`) from y0 = (1, ..., 1) to t = 20.

Contenders: taylax (`jax.jit(taylax.ode.integrate(field, tol=tol))`), heyoka
(`heyoka.taylor_adaptive` at `tol`, its default order), and diffrax `Dopri8` and `Tsit5`
with a `PIDController` at `rtol = atol = tol`. Error: the final state's largest absolute
difference from a reference that heyoka computes in multiple precision (`heyoka.real`,
`--precision` bits, its default tolerance 2^-precision), checked against a second one at
`--precision + 64` bits (and for the pendulum against the closed form in Jacobi elliptic
functions, mpmath). Every contender solves the float64 problem: the constants (mu, 8/3,
the weights) and the initial state are the float64 numbers, which the references take
exactly. Time: the best of at least `--repeats` calls after the first (steady state; more
calls until they have taken 0.5 s, fewer once 5 s), the first reported apart (taylax
compiles for every tolerance, its order being static; diffrax once per solver, the
tolerance being an argument; heyoka at every construction). The load average at the start
and the end goes into the results: other processes on the cores slow every contender.

One trajectory's error is a random walk of rounding errors, so each problem also runs an
ensemble at `--ensemble-tol`: `--trajectories` starts (for the pendulum, initial angles
from 0.1 to 3.0 from rest; for the others, the problem's start moved by about 1e-6), taylax
with `batch=True` (the trajectories the minor axis of every array) and under `jax.vmap`,
against heyoka's batch mode; errors as median / 90th percentile / maximum.

Each problem writes `benchmarks/results/ode_problem_<name>.md` (the sweep, the figures'
numbers, the ensemble) and the work-precision diagram
`docs/figures/ode_work_precision_<name>.svg`.

    python benchmarks/bench_ode_problems.py                          # all four, 1e-6..1e-15
    python benchmarks/bench_ode_problems.py --problems lorenz --tols 1e-10,1e-14

`--one-function-loops` calls `taylax.ode.one_function_loops()` first, so that XLA:CPU
compiles one trajectory's loop into one function (docs/ODE.md, "Small loops in one
function"); the setting holds for the whole process.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import taylax  # noqa: E402
from bench_ode_ensemble import heyoka_chunks  # noqa: E402
from harness import add_one_function_loops, one_function_loops_first  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = ROOT / "docs" / "figures"
DEFAULT_TOLS = ",".join(f"1e-{k}" for k in range(6, 16))

# Arenstorf's orbit: mu and the initial state as float64 numbers. 1 - mu is rounded once
# here, so that every contender and the references use the same constant.
MU = 0.012277471
MU1 = 1.0 - MU
ARENSTORF_T = float("17.0652165601579625588917206249")
ARENSTORF_Y0 = np.array([0.994, 0.0, 0.0, float("-2.00158510637908252240537862224")])
BETA = 8.0 / 3.0


def _neural_weights(n: int = 6, hidden: int = 16, seed: int = 0):
    """`(W1, b1, W2, b2)` from a fixed seed: W1 and b1 Gaussian (W1 scaled by the fan-in),
    and `W2 = S W1^T`, `b2 = S c` for a random skew-symmetric `S` and Gaussian `c`.

    Why the structure: with W2 and b2 Gaussian too, tanh saturates within a few time
    units and the state drifts off along a straight line (a linear ODE from then on).
    With it the field is `S grad H` for `H(y) = sum log cosh(W1 y + b1) + c . y`, which
    the flow conserves and whose level sets are bounded: a nonlinear oscillation that
    keeps the tanh units between their linear and saturated regimes.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(hidden, n)) / np.sqrt(n)
    b1 = rng.normal(size=hidden)
    a = rng.normal(size=(n, n))
    skew = a - a.T
    c = 0.5 * rng.normal(size=n)
    return w1, b1, skew @ w1.T, skew @ c


NEURAL = _neural_weights()


# The vector fields, each twice: for JAX (`f(t, y, args)`, as taylax and diffrax take it)
# and for heyoka (a function of its variables, returning the right-hand sides). The two
# are written term by term alike. The JAX ones also map a batch of states along the last
# axis, as `taylax.ode.integrate(..., batch=True)` passes them.


def arenstorf_rhs(x, y, vx, vy, mu=MU, mu1=MU1):
    """The planar restricted three-body problem in the rotating frame, mass ratio `mu`
    (`mu1 = 1 - mu`): the four right-hand sides, for JAX arrays and heyoka expressions
    alike."""
    d1 = ((x + mu) ** 2 + y**2) ** -1.5
    d2 = ((x - mu1) ** 2 + y**2) ** -1.5
    ax = x + 2 * vy - mu1 * (x + mu) * d1 - mu * (x - mu1) * d2
    ay = y - 2 * vx - mu1 * y * d1 - mu * y * d2
    return [vx, vy, ax, ay]


def arenstorf(t, s, args):
    """The planar restricted three-body problem in the rotating frame."""
    return jnp.stack(arenstorf_rhs(*s))


def arenstorf_heyoka(x, y, vx, vy):
    return arenstorf_rhs(x, y, vx, vy)


def lorenz(t, s, args):
    """Lorenz's system at sigma = 10, rho = 28, beta = 8/3."""
    x, y, z = s
    return jnp.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - BETA * z])


def lorenz_heyoka(x, y, z):
    return [10.0 * (y - x), x * (28.0 - z) - y, x * y - BETA * z]


def pendulum(t, s, args):
    """theta'' = -sin(theta) as a first-order system."""
    theta, omega = s
    return jnp.stack([omega, -jnp.sin(theta)])


def pendulum_heyoka(theta, omega):
    import heyoka as hy

    return [omega, -hy.sin(theta)]


def neural(t, y, args):
    """y' = W2 tanh(W1 y + b1) + b2 with the fixed weights `NEURAL`; `y` is `(6,)` or a
    batch `(6, B)` of states along the last axis (`integrate(..., batch=True)`)."""
    w1, b1, w2, b2 = NEURAL
    column = (slice(None),) + (None,) * (jnp.ndim(y) - 1)  # biases broadcast over a batch
    return jnp.asarray(w2) @ jnp.tanh(jnp.asarray(w1) @ y + b1[column]) + b2[column]


def neural_heyoka(*y):
    import heyoka as hy

    w1, b1, w2, b2 = NEURAL
    hidden = [
        hy.tanh(hy.sum([float(w1[j, i]) * y[i] for i in range(len(y))]) + float(b1[j]))
        for j in range(len(b1))
    ]
    return [
        hy.sum([float(w2[k, j]) * hidden[j] for j in range(len(hidden))]) + float(b2[k])
        for k in range(len(y))
    ]


@dataclass(frozen=True)
class Problem:
    """One benchmark problem: the field for JAX and for heyoka, the start and the end."""

    name: str
    title: str
    field: Callable
    heyoka_field: Callable
    y0: np.ndarray
    t_end: float


PROBLEMS = {
    "arenstorf": Problem(
        "arenstorf",
        "Restricted three-body problem, Arenstorf orbit, one period",
        arenstorf,
        arenstorf_heyoka,
        ARENSTORF_Y0,
        ARENSTORF_T,
    ),
    "lorenz": Problem(
        "lorenz", "Lorenz system from (1, 1, 1) to t = 20", lorenz, lorenz_heyoka, np.ones(3), 20.0
    ),
    "pendulum": Problem(
        "pendulum",
        "Pendulum from rest at theta = 2.5 to t = 100",
        pendulum,
        pendulum_heyoka,
        np.array([2.5, 0.0]),
        100.0,
    ),
    "neural": Problem(
        "neural",
        "Neural vector field (tanh MLP, 6 states, 16 hidden) from (1, ..., 1) to t = 20",
        neural,
        neural_heyoka,
        np.ones(6),
        20.0,
    ),
}


def heyoka_system(problem: Problem):
    """The problem as heyoka's list of `(variable, right-hand side)` pairs."""
    import heyoka as hy

    names = [f"y{i}" for i in range(len(problem.y0))]
    variables = hy.make_vars(*names)
    variables = variables if isinstance(variables, list) else [variables]
    return list(zip(variables, problem.heyoka_field(*variables)))


def best_of(
    call: Callable, repeats: int, min_s: float = 0.5, budget_s: float = 5.0, setup=None
) -> tuple[float, object]:
    """The least wall time of `call()` (of `call(setup())` with `setup`, untimed) over at
    least `repeats` calls, more while they have taken less than `min_s` in all (calls of
    a millisecond vary by 2x from one to the next on this machine), fewer once they have
    taken `budget_s`; and the last call's result."""
    best, spent, count, out = np.inf, 0.0, 0, None
    while (count < repeats or spent < min_s) and count < 1000:
        arguments = () if setup is None else (setup(),)
        begin = time.perf_counter()
        out = call(*arguments)
        elapsed = time.perf_counter() - begin
        best, spent, count = min(best, elapsed), spent + elapsed, count + 1
        if spent > budget_s:
            break
    return best, out


# --- the reference ------------------------------------------------------------------


def reference(problem: Problem, y0s: np.ndarray, precision: int) -> list:
    """The final states of `y0s` (`(m, n)`) by heyoka in `precision`-bit arithmetic at its
    default tolerance (2^-precision), as lists of `heyoka.real`."""
    import heyoka as hy

    def real(v):
        return hy.real(float(v), precision)

    system = heyoka_system(problem)
    ta = hy.taylor_adaptive(system, [real(v) for v in y0s[0]], fp_type=hy.real, prec=precision)
    out = []
    for y0 in y0s:
        ta.time = real(0.0)
        ta.state[:] = [real(v) for v in y0]
        ta.propagate_until(real(problem.t_end))
        out.append(list(ta.state))
    return out


def double_double(values) -> np.ndarray:
    """Multiple-precision numbers (heyoka's or mpmath's, nested lists `(m, n)`) as pairs
    `(m, n, 2)`: the float64 nearest and the rest, so that errors near an ulp of the state
    are still resolved."""
    out = np.empty((len(values), len(values[0]), 2))
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            hi = float(value)
            out[i, j] = hi, float(value - hi)
    return out


def errors(y_end, ref) -> np.ndarray:
    """Per trajectory, the largest absolute difference of `y_end` (`(m, n)`) from the
    double-double reference `ref` (`(m, n, 2)`)."""
    y_end = np.asarray(y_end, float)
    return np.max(np.abs((y_end - ref[..., 0]) - ref[..., 1]), axis=-1)


def pendulum_closed_form(y0s: np.ndarray, t_end: float, digits: int = 40) -> list:
    """The pendulum's states at `t_end` (mpmath numbers) from rest at `y0s[:, 0]`, by
    Jacobi's elliptic functions: theta = 2 asin(k sn(K - t | k^2)) and
    omega = -2 k cn(K - t | k^2), k = sin(theta_0 / 2). An independent check of the
    heyoka references."""
    import mpmath

    out = []
    with mpmath.workdps(digits):
        for theta0, omega0 in y0s:
            assert omega0 == 0, "the closed form here starts at rest"
            k = mpmath.sin(mpmath.mpf(theta0) / 2)
            m = k**2
            u = mpmath.ellipk(m) - mpmath.mpf(t_end)
            out.append(
                [
                    2 * mpmath.asin(k * mpmath.ellipfun("sn", u, m=m)),
                    -2 * k * mpmath.ellipfun("cn", u, m=m),
                ]
            )
    return out


def checked_reference(problem: Problem, y0s: np.ndarray, precision: int):
    """The reference as double-double pairs `(m, n, 2)`, and bounds on its error: its
    largest difference from a second one at 64 more bits (on at most 4 of `y0s`), and for
    the pendulum from the closed form (on all)."""
    import mpmath

    ref = reference(problem, y0s, precision)
    finer = reference(problem, y0s[:4], precision + 64)
    spread = {
        f"heyoka at {precision + 64} bits": max(
            abs(float(a - b)) for row, fine in zip(ref, finer) for a, b in zip(row, fine)
        )
    }
    if problem.name == "pendulum":
        exact = pendulum_closed_form(y0s, problem.t_end)
        with mpmath.workdps(40):
            spread["the closed form (mpmath, 40 digits)"] = max(
                abs(float(mpmath.mpf(str(a)) - b))
                for row, fine in zip(ref, exact)
                for a, b in zip(row, fine)
            )
    return double_double(ref), spread


def lorenz_growth(times=(5, 10, 15, 20, 25, 30), precision: int = 192, size: float = 1e-30):
    """How much Lorenz's flow from (1, 1, 1) amplifies an error: `{t: |dy(t)| / |dy(0)|}`
    for an initial change of `size` in x (max norm), heyoka in `precision` bits."""
    import heyoka as hy

    def real(v):
        return hy.real(v, precision)

    problem = PROBLEMS["lorenz"]
    tas = [
        hy.taylor_adaptive(
            heyoka_system(problem),
            [real(1.0) + real(dx), real(1.0), real(1.0)],
            fp_type=hy.real,
            prec=precision,
        )
        for dx in (0.0, size)
    ]
    growth = {}
    for t in times:
        for ta in tas:
            ta.propagate_until(real(float(t)))
        growth[t] = max(abs(float(a - b)) for a, b in zip(*(ta.state for ta in tas))) / size
    return growth


# --- the contenders, one trajectory ---------------------------------------------------


def run_taylax(problem: Problem, tol: float, repeats: int):
    """`(time, first call, steps, final state)` of taylax's integrator."""
    solve = jax.jit(taylax.ode.integrate(problem.field, tol=tol, max_steps=10_000_000))
    ts = jnp.array([0.0, problem.t_end])
    y0 = jnp.asarray(problem.y0)
    begin = time.perf_counter()
    jax.block_until_ready(solve(ts, y0))
    first = time.perf_counter() - begin
    elapsed, sol = best_of(lambda: jax.block_until_ready(solve(ts, y0)), repeats)
    return elapsed, first, int(sol.steps), np.asarray(sol.ys[-1])


def run_heyoka(problem: Problem, tol: float, repeats: int):
    """`(time, first call, steps, final state)` of heyoka's `taylor_adaptive`: the first
    call is the construction (its compilation); each timed call propagates a fresh copy."""
    import heyoka as hy

    begin = time.perf_counter()
    ta = hy.taylor_adaptive(heyoka_system(problem), list(problem.y0), tol=tol)
    first = time.perf_counter() - begin

    def propagate(fresh):
        return int(fresh.propagate_until(problem.t_end)[3]), fresh.state.copy()

    best, out = best_of(propagate, repeats, setup=lambda: copy.deepcopy(ta))
    return best, first, *out


_DIFFRAX_SOLVES: dict = {}


def run_diffrax(problem: Problem, tol: float, repeats: int, solver_name: str):
    """`(time, first call, steps, final state)` of diffrax at `rtol = atol = tol`; `steps`
    as `"accepted (rejected)"`, and the state NaN where diffrax stopped short."""
    import diffrax

    key = (problem.name, solver_name)
    if key not in _DIFFRAX_SOLVES:
        solver = getattr(diffrax, solver_name)()

        # The tolerance is an argument, so one compilation serves the whole sweep.
        @jax.jit
        def solve(y0, tol):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(problem.field),
                solver,
                0.0,
                problem.t_end,
                None,
                y0,
                stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                max_steps=1_000_000,
                throw=False,
            )
            ok = sol.result == diffrax.RESULTS.successful
            y_end = jnp.where(ok, sol.ys[-1], jnp.nan)
            return y_end, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

        _DIFFRAX_SOLVES[key] = solve
    solve = _DIFFRAX_SOLVES[key]
    y0, tol_arg = jnp.asarray(problem.y0), jnp.asarray(tol)
    begin = time.perf_counter()
    jax.block_until_ready(solve(y0, tol_arg))
    first = time.perf_counter() - begin
    elapsed, (y_end, accepted, rejected) = best_of(
        lambda: jax.block_until_ready(solve(y0, tol_arg)), repeats
    )
    return elapsed, first, f"{int(accepted)} ({int(rejected)})", np.asarray(y_end)


CONTENDERS = {
    "taylax": run_taylax,
    "heyoka": run_heyoka,
    "diffrax Dopri8": lambda p, tol, r: run_diffrax(p, tol, r, "Dopri8"),
    "diffrax Tsit5": lambda p, tol, r: run_diffrax(p, tol, r, "Tsit5"),
}


# --- ensembles -----------------------------------------------------------------------


def ensemble_starts(problem: Problem, n: int, seed: int = 1) -> tuple[np.ndarray, str]:
    """`(n, dim)` initial states and their description: for the pendulum, angles spread
    evenly over 0.1..3.0 from rest; for the others, the problem's start moved by 1e-6
    times a Gaussian (a fixed seed), so that the trajectories stay alike but their
    rounding errors are independent."""
    if problem.name == "pendulum":
        starts = np.stack([np.linspace(0.1, 3.0, n), np.zeros(n)], axis=1)
        return starts, f"{n} initial angles over 0.1..3.0 from rest"
    rng = np.random.default_rng(seed)
    starts = problem.y0 + 1e-6 * rng.normal(size=(n, len(problem.y0)))
    return starts, f"{n} starts within about 1e-6 of the problem's"


def run_ensemble(problem: Problem, y0s: np.ndarray, tol: float, repeats: int, lanes: int = 4):
    """Many trajectories at `tol`: `{contender: (time, first call, steps per trajectory,
    final states)}` for taylax with `batch=True` (the trajectories the minor axis) and
    under `jax.vmap`, and heyoka's batch mode (`lanes` lanes, one thread, as
    `bench_ode_ensemble.py`)."""
    import heyoka as hy

    t_end = problem.t_end
    ts = jnp.array([0.0, t_end])
    out = {}
    for batch in (True, False):
        integrate = taylax.ode.integrate(problem.field, tol=tol, max_steps=10_000_000, batch=batch)
        solve = jax.jit(integrate if batch else jax.vmap(integrate, in_axes=(None, 0)))
        y0 = jnp.asarray(y0s.T if batch else y0s)
        begin = time.perf_counter()
        jax.block_until_ready(solve(ts, y0))
        first = time.perf_counter() - begin
        elapsed, sol = best_of(
            lambda solve=solve, y0=y0: jax.block_until_ready(solve(ts, y0)), repeats
        )
        y_end = sol.ys[-1].T if batch else sol.ys[:, -1]
        name = "taylax (batch=True)" if batch else "taylax (vmap)"
        out[name] = (elapsed, first, np.asarray(sol.steps), np.asarray(y_end))

    n = len(y0s)
    padded = np.concatenate([y0s, np.repeat(y0s[-1:], -n % lanes, axis=0)])
    begin = time.perf_counter()
    template = hy.taylor_adaptive_batch(
        heyoka_system(problem), np.ascontiguousarray(padded[:lanes].T), tol=tol
    )
    first = time.perf_counter() - begin

    def fresh():
        return heyoka_chunks(template, padded, lanes)

    def propagate(chunks):
        for ta in chunks:
            ta.propagate_until(t_end)
        return chunks

    best, chunks = best_of(propagate, repeats, setup=fresh)
    ends = np.concatenate([ta.state.T for ta in chunks])[:n]
    steps = np.asarray([int(r[3]) for ta in chunks for r in ta.propagate_res][:n])
    out[f"heyoka (batch of {lanes})"] = (best, first, steps, ends)
    return out


# --- reports --------------------------------------------------------------------------


def _summary(values) -> str:
    q = np.quantile(values, [0.5, 0.9])
    return f"{q[0]:.1e} / {q[1]:.1e} / {np.max(values):.1e}"


def sweep(problem: Problem, tols, contenders, repeats: int, precision: int):
    """Every contender at every tolerance: rows of `(tol, contender, time, first, steps,
    error)`, and the reference's checks."""
    ref, spread = checked_reference(problem, problem.y0[None], precision)
    print(f"{problem.name}: reference checks {spread}", flush=True)
    rows = []
    for tol in tols:
        for name in contenders:
            elapsed, first, steps, y_end = CONTENDERS[name](problem, tol, repeats)
            error = float(errors(y_end[None], ref)[0])
            rows.append((tol, name, elapsed, first, steps, error))
            print(
                f"{problem.name} {tol:.0e} {name}: {elapsed:.4g} s, first {first:.3g} s, "
                f"{steps} steps, error {error:.2e}",
                flush=True,
            )
    return rows, spread


def plot(problem: Problem, rows, path: Path) -> None:
    """Error against time, one line per contender, the tolerances marked on taylax's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Text as text and no date or random ids: small SVGs that change only with the data.
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "taylax"})
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    styles = {"taylax": "o-", "heyoka": "s-", "diffrax Dopri8": "^--", "diffrax Tsit5": "v--"}
    for name, style in styles.items():
        mine = [r for r in rows if r[1] == name and np.isfinite(r[5])]
        if not mine:
            continue
        # An error of exactly 0 (the reference to the last bit) is drawn at 1e-17.
        ax.loglog([r[2] for r in mine], [max(r[5], 1e-17) for r in mine], style, label=name, ms=4)
        if name == "taylax":
            for r in mine:
                ax.annotate(
                    f"{r[0]:.0e}",
                    (r[2], max(r[5], 1e-17)),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
    ax.set_xlabel("wall time, steady state (s)")
    ax.set_ylabel("final-state error (max norm)")
    ax.set_title(f"{problem.title}\n2-core CPU, float64, jax {jax.__version__}", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def report(problem: Problem, rows, spread, command: str, load, ensemble=None, notes=()) -> str:
    """The results file's text: the sweep, taylax / heyoka at each tolerance, the
    ensemble table where there is one, and `notes` (lines) after the reference's. `load`:
    the load average at the start and the end, since other processes sharing the cores
    slow every contender's calls."""
    import heyoka as hy

    lines = [
        f"{problem.title}, float64, jax {jax.__version__}, heyoka {hy.__version__}, "
        f"{jax.devices()[0].device_kind}. Command: `{command}`. Load average (1 min) at the "
        f"start and the end: {load[0]:.1f} / {load[1]:.1f} ({os.cpu_count()} cores).",
        "",
        "Reference: heyoka in multiple precision; its largest difference from "
        + "; from ".join(f"{k}: {v:.1e}" for k, v in spread.items())
        + ".",
        *notes,
        "",
        "| tol | contender | time (s) | first call (s) | steps | final-state error |",
        "|---|---|---|---|---|---|",
    ]
    for tol, name, elapsed, first, steps, error in rows:
        lines.append(
            f"| {tol:.0e} | {name} | {elapsed:.3g} | {first:.3g} | {steps} | {error:.1e} |"
        )
    by = {(r[0], r[1]): r for r in rows}
    tols = sorted({r[0] for r in rows}, reverse=True)
    if all((tol, name) in by for tol in tols for name in ("taylax", "heyoka")):
        lines += [
            "",
            "taylax / heyoka:",
            "",
            "| tol | error ratio | time ratio | steps, taylax / heyoka |",
            "|---|---|---|---|",
        ]
        for tol in tols:
            ours, theirs = by[(tol, "taylax")], by[(tol, "heyoka")]
            ratio = ours[5] / theirs[5] if theirs[5] > 0 else np.inf
            lines.append(
                f"| {tol:.0e} | {ratio:.2f} | {ours[2] / theirs[2]:.1f} | {ours[4]} / {theirs[4]} |"
            )
    if ensemble is not None:
        tol, description, results, spread = ensemble
        lines += [
            "",
            f"Ensemble: {description}, to t = {problem.t_end:g}, tol {tol:.0e}. Reference "
            "as above; its largest difference from "
            + "; from ".join(f"{k}: {v:.1e}" for k, v in spread.items())
            + ".",
            "",
            "| contender | time (s) | first call (s) | steps (median / max) | final-state "
            "error (median / 90% / max) |",
            "|---|---|---|---|---|",
        ]
        medians = {}
        for name, (elapsed, first, steps, error) in results.items():
            medians[name] = np.median(error)
            lines.append(
                f"| {name} | {elapsed:.3g} | {first:.3g} | {int(np.median(steps))} / "
                f"{int(np.max(steps))} | {_summary(error)} |"
            )
        heyoka_median = next(v for k, v in medians.items() if k.startswith("heyoka"))
        lines += [
            "",
            "Median final-state error over heyoka's: "
            + ", ".join(
                f"{k} {v / heyoka_median:.2f}" for k, v in medians.items() if k.startswith("taylax")
            )
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--tols", default=DEFAULT_TOLS)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--repeats", type=int, default=5, help="steady calls, best taken")
    parser.add_argument("--precision", type=int, default=192, help="reference's bits")
    parser.add_argument(
        "--trajectories", type=int, default=64, help="the ensemble's size (0: none)"
    )
    parser.add_argument("--ensemble-tol", type=float, default=1e-14)
    add_one_function_loops(parser)
    args = parser.parse_args(argv)
    one_function_loops_first(args)
    tols = [float(v) for v in args.tols.split(",")]
    contenders = args.contenders.split(",")
    unknown = [c for c in contenders if c not in CONTENDERS] + [
        p for p in args.problems.split(",") if p not in PROBLEMS
    ]
    if unknown:
        parser.error(f"unknown contender(s) or problem(s): {', '.join(unknown)}")
    for name in args.problems.split(","):
        problem = PROBLEMS[name]
        # The command that reproduces this problem's file: the options that differ from
        # their defaults.
        options = [f"--problems {name}"] + [
            f"--{key.replace('_', '-')}"
            if value is True
            else f"--{key.replace('_', '-')} {value!r}"
            if " " in str(value)
            else f"--{key.replace('_', '-')} {value}"
            for key, value in vars(args).items()
            if key != "problems" and value != parser.get_default(key)
        ]
        command = "python benchmarks/bench_ode_problems.py " + " ".join(options)
        load_start = os.getloadavg()[0]
        rows, spread = sweep(problem, tols, contenders, args.repeats, args.precision)
        ensemble, notes = None, ()
        if name == "lorenz":
            growth = lorenz_growth()
            notes = (
                "",
                "Growth of an initial error of 1e-30 in x (max norm, heyoka at 192 bits): "
                + ", ".join(f"{g:.2g}x at t = {t}" for t, g in growth.items())
                + ".",
            )
        if args.trajectories > 0:
            y0s, description = ensemble_starts(problem, args.trajectories)
            ref, ens_spread = checked_reference(problem, y0s, args.precision)
            results = {
                k: (elapsed, first, steps, errors(y_end, ref))
                for k, (elapsed, first, steps, y_end) in run_ensemble(
                    problem, y0s, args.ensemble_tol, args.repeats
                ).items()
            }
            ensemble = (args.ensemble_tol, description, results, ens_spread)
        load = (load_start, os.getloadavg()[0])
        text = report(problem, rows, spread, command, load, ensemble, notes)
        print(text, flush=True)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"ode_problem_{name}.md").write_text(text)
        plot(problem, rows, FIGURES / f"ode_work_precision_{name}.svg")


if __name__ == "__main__":
    main()
