"""`taylax.ode.one_function_loops`: XLA:CPU compiles one trajectory's loop into one
function. XLA reads the setting once per process, so the cases that compile run in
fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import taylax


def _run(code: str, **env_vars: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(env_vars)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env
    )


def test_one_trajectory_compiles_into_one_function():
    # The same solve with and without the setting: one function where the setting is
    # on, the same solution to the last bits the integrator's tolerance allows.
    code = """
        import json
        import taylax
        if ON:
            taylax.ode.one_function_loops()
        import jax, jax.numpy as jnp, numpy as np
        jax.config.update("jax_enable_x64", True)
        field = lambda t, y, args: jnp.stack([y[1], -jnp.sin(y[0])])
        solve = jax.jit(taylax.ode.integrate(field, tol=1e-13))
        ts, y0 = jnp.linspace(0.0, 10.0, 5), jnp.array([1.0, 0.0])
        text = solve.lower(ts, y0).compile().as_text()
        print(json.dumps(["xla_cpu_small_call" in text, np.asarray(solve(ts, y0).ys).tolist()]))
    """
    on = _run(code.replace("ON", "True"))
    off = _run(code.replace("ON", "False"))
    assert on.returncode == 0, on.stderr
    assert off.returncode == 0, off.stderr
    (one_on, ys_on), (one_off, ys_off) = (json.loads(r.stdout) for r in (on, off))
    assert (one_on, one_off) == (True, False)
    np.testing.assert_allclose(ys_on, ys_off, rtol=1e-12, atol=1e-13)


def test_too_late_is_an_error_and_restores_the_environment():
    done = _run(
        """
        import os
        import jax.numpy as jnp
        jnp.ones(3)  # starts the CPU backend: XLA has read XLA_FLAGS
        import taylax
        try:
            taylax.ode.one_function_loops()
        except RuntimeError as error:
            print("XLA_FLAGS" in os.environ, "before creating any array" in str(error))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_without_a_cpu_backend_it_is_an_error():
    done = _run(
        """
        import os
        import taylax
        try:
            taylax.ode.one_function_loops()
        except RuntimeError as error:
            print("XLA_FLAGS" in os.environ, "applies to XLA:CPU only" in str(error))
        """,
        JAX_PLATFORMS="no-such-platform",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_bad_thresholds_are_errors():
    for bad in (100, 2.5e5, True, "262144"):
        with pytest.raises(ValueError, match="max_bytes as an integer of at least 16,384"):
            taylax.ode.one_function_loops(bad)


def test_an_existing_backend_option_is_not_replaced(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_extra_options=some_option=1")
    with pytest.raises(ValueError, match="add xla_cpu_small_while_loop_byte_threshold=262144"):
        taylax.ode.one_function_loops()
    assert os.environ["XLA_FLAGS"] == "--xla_backend_extra_options=some_option=1"
