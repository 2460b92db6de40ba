"""XLA:CPU's small loops compiled into one function: the switch a single trajectory needs.

XLA:CPU runs a compiled program as a sequence of kernels, one per fusion, and a
`while` loop's body as such a sequence on every trip. One trajectory's Taylor step is
40-55 small kernels, and their dispatch was half of its time (docs/ODE.md). XLA:CPU
compiles a loop into one function instead where a trip touches fewer bytes than a
threshold (1,024 by default) and the loop holds no scatter, sort, FFT or custom call; the
integrator's loop holds none of those, and `one_function_loops` raises the threshold.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from jax import lax

# The backend option XLA:CPU reads (`xla_backend_extra_options`, a map of strings).
_OPTION = "xla_cpu_small_while_loop_byte_threshold"
_FLAG = "--xla_backend_extra_options"
# XLA's mark on a loop it compiled into one function, in the compiled program's text.
_MARK = "xla_cpu_small_call"
# A probe loop whose trip touches about 4 KiB: over XLA's default, under any threshold
# `one_function_loops` takes.
_PROBE_ELEMENTS = 256
_MIN_BYTES = 1 << 14


def one_function_loops(max_bytes: int = 1 << 18) -> str:
    """Let XLA:CPU compile every `while` loop whose one trip touches fewer than
    `max_bytes` bytes into one function, for the rest of the process. Call it before JAX
    creates an array or compiles anything.

    A single trajectory of `taylax.ode.integrate` is a loop of small kernels; XLA:CPU
    runs each as a task of its own, and on the CPU their dispatch took half of a step.
    Compiled into one function, one trajectory at tolerance 1e-14 ran 1.7-4.6x faster on the
    benchmark problems (pendulum 0.78 to 0.17 ms, Arenstorf 1.23 to 0.38 ms, Lorenz 0.77
    to 0.20 ms, the neural field 2.7 to 1.6 ms; docs/ODE.md, "Small loops in one
    function"), and compiled no slower. A batch of trajectories touches more bytes a
    trip: with the default threshold up to about 16 compile whole, and a larger one
    made batches of 64 to 1,024 faster or slower by up to 2x, depending on the field.

    This sets the environment variable `XLA_FLAGS`, which XLA reads once, when JAX's
    CPU backend starts; it applies to every program the process compiles for the CPU,
    yours too, and to nothing on GPUs. Setting `XLA_FLAGS` yourself before Python starts
    does the same:
    `XLA_FLAGS=--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=262144`.

    **Arguments:**

    - `max_bytes`: the threshold, an integer of at least 16,384. The default, 256 KiB,
      covers every benchmark problem's trajectory at order 20 (the neural field, 6
      states and 16 hidden units, needs more than 64 KiB).

    **Returns:** the value `XLA_FLAGS` now holds.

    **Example:**

        ```python
        import taylax

        taylax.ode.one_function_loops()  # first, before any array

        import jax
        import jax.numpy as jnp

        solve = jax.jit(taylax.ode.integrate(lambda t, y, args: -y))
        solve(jnp.array([0.0, 1.0]), jnp.array([1.0]))
        ```

    Raises `ValueError` where `max_bytes` is not an integer of at least 16,384 or where
    `XLA_FLAGS` already sets `--xla_backend_extra_options` (add
    `xla_cpu_small_while_loop_byte_threshold=<bytes>` to its list yourself), and
    `RuntimeError` where a probe loop still compiles apart (JAX's CPU backend had started
    before the call, or this XLA does not know the option) or cannot be compiled on the
    CPU (`JAX_PLATFORMS` without `cpu`); `XLA_FLAGS` is then left as it was.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < _MIN_BYTES:
        raise ValueError(
            f"one_function_loops takes max_bytes as an integer of at least {_MIN_BYTES:,}; "
            f"got {max_bytes!r}."
        )
    flags = os.environ.get("XLA_FLAGS", "")
    setting = f"{_FLAG}={_OPTION}={max_bytes}"
    if setting in flags.split():
        # Called again with the same threshold: nothing to add.
        flags = " ".join(f for f in flags.split() if f != setting)
    if _FLAG in flags:
        raise ValueError(
            f"XLA_FLAGS already sets {_FLAG} ({flags!r}), and a second setting would "
            f"replace it: add {_OPTION}={max_bytes} to that option's comma-separated list "
            "yourself instead of calling one_function_loops."
        )
    before = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{flags} {setting}".strip()
    try:
        one_function, problem = _probe_is_one_function(), None
    except Exception as error:  # no CPU backend here, or a platform that failed to start
        one_function, problem = False, error
    if not one_function:
        # Leave the environment as it was: processes started from this one would
        # otherwise take a setting this one does not have.
        if before is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = before
        if problem is not None:
            raise RuntimeError(
                "one_function_loops could not compile its probe loop on JAX's CPU backend "
                f"({type(problem).__name__}: {problem}); the setting applies to XLA:CPU "
                "only, so call it where JAX has a CPU backend. XLA_FLAGS is restored."
            ) from problem
        raise RuntimeError(
            f"one_function_loops set XLA_FLAGS to {setting}, but a probe loop still "
            "compiled as separate kernels: JAX's CPU backend had started before this call "
            "(call one_function_loops before creating any array or compiling anything, or "
            "set XLA_FLAGS before starting Python), or this XLA does not know the option. "
            "XLA_FLAGS is restored."
        )
    return os.environ["XLA_FLAGS"]


def _probe_is_one_function() -> bool:
    """Whether XLA:CPU compiles a loop whose trip touches about 4 KiB into one function."""

    def loop(x, trips):
        # The trip count an argument: a loop of known count may be unrolled.
        return lax.fori_loop(0, trips, lambda _, c: jnp.sin(c) * 0.5 + c, x)

    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.ones(_PROBE_ELEMENTS, jnp.float32), cpu)
    trips = jax.device_put(jnp.asarray(3, jnp.int32), cpu)
    return _MARK in jax.jit(loop).lower(x, trips).compile().as_text()
