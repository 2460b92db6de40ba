"""Shared test configuration: float64 everywhere, hypothesis profiles."""

import os
from importlib.metadata import version

# Sharding tests need 8 devices: XLA reads this flag when the CPU backend starts, so it must be
# set before anything creates an array. Single-device tests are unaffected (arrays live on
# device 0 unless sharded).
#
# The suite compiles about five thousand small programs, and compiling is most of its time.
# The backend's LLVM optimization was most of each compile: level 0 keeps every HLO pass (so
# the programs and their numerics are the ones users run) and cut the elementwise table from
# 184 s to 128 s on a 2-core machine. XLA:CPU's MLIR fusion emitters (its default) then build
# an MLIR context and its rewrite patterns for every fusion, a fixed cost of each compile;
# its older LLVM emitters compile the same fused HLO a third faster (`make test` 9m27 ->
# 6m19 on 2 cores, jaxlib 0.10.2). `make test-jax-min` runs the same cases with XLA's
# default emitters, so CI still checks the codegen users get. XLA stops at a flag it does
# not know, so the emitter flag goes only to the jaxlib versions it was tried on.
# A flag already in XLA_FLAGS wins.
_TEST_XLA_FLAGS = {
    "xla_force_host_platform_device_count": "8",
    "xla_backend_optimization_level": "0",
}
if version("jaxlib") in {"0.9.2", "0.10.2"}:
    _TEST_XLA_FLAGS["xla_cpu_use_fusion_emitters"] = "false"
for _flag, _value in _TEST_XLA_FLAGS.items():
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --{_flag}={_value}").strip()

import jax  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The float64 reference (tests/reference.py) needs x64; enable it before any test module
# creates an array.
jax.config.update("jax_enable_x64", True)

# Every example traces and compiles new programs (the nested-jvp oracle and taylax), so
# hypothesis' per-example deadline is meaningless; keep the number of examples modest so the
# whole suite stays fast. The default profile is derandomized: `make test` runs the same
# examples every time, so CI cannot turn red on a commit that did not cause it (a random seed
# once found a bug in a test's own program generator on an unrelated change).
# `HYPOTHESIS_PROFILE=thorough pytest ...` explores 200 fresh random examples per test.
for _name, _examples, _derandomize in (("taylax", 12, True), ("thorough", 200, False)):
    settings.register_profile(
        _name,
        deadline=None,
        max_examples=_examples,
        derandomize=_derandomize,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "taylax"))


import dataclasses  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def emission():
    """`emission(**changes)` puts the CPU emission policy with `changes` in force for the
    rest of the test (`emission(base=taylax.GPU)` starts from another policy). Programs
    are cached per policy, so no program built under another one is reused."""
    import contextlib

    import taylax

    with contextlib.ExitStack() as stack:

        def set_policy(base=None, **changes):
            policy = dataclasses.replace(base or taylax.CPU, name="test", **changes)
            return stack.enter_context(taylax.emission_policy(policy))

        yield set_policy


@pytest.fixture(autouse=True)
def _policy_from_the_environment():
    """`TAYLAX_TEST_POLICY=gpu pytest ...` runs the tests under another platform's emission
    policy (`make test-gpu-policy`): the CPU's tests then check the forms only that policy
    emits (rows and unrolled recurrences to other orders) on this machine. Tests that pin
    the CPU's programs keep theirs (`cpu_policy`, entered later, wins)."""
    name = os.environ.get("TAYLAX_TEST_POLICY")
    if not name:
        yield
        return
    import taylax

    with taylax.emission_policy(name):
        yield


@pytest.fixture
def cpu_policy(emission):
    """The CPU emission policy in force, whatever the backend: for tests that pin the
    programs it emits (`pytestmark = pytest.mark.usefixtures("cpu_policy")`)."""
    return emission()


def _slow_cases() -> frozenset[str]:
    path = os.path.join(os.path.dirname(__file__), "slow_cases.txt")
    with open(path) as lines:
        return frozenset(
            line.strip() for line in lines if line.strip() and not line.startswith("#")
        )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the cases listed in `slow_cases.txt` `slow` (run by `make test-slow`).

    Runs before `-m` and `-k` deselect anything, so it sees every case of each module it
    collected: a listed case of such a module that no longer exists (renamed or
    re-parametrized) stops the run, since it would otherwise come back to `make test`
    unnoticed."""
    slow = _slow_cases()
    nodes = set()
    for item in items:
        node = item.nodeid.split("tests/", 1)[-1]
        nodes.add(node)
        if node in slow:
            item.add_marker(pytest.mark.slow)
    # Modules named with a `::` on the command line are collected in part only.
    partial = {arg.split("::", 1)[0].rsplit("/", 1)[-1] for arg in config.args if "::" in arg}
    modules = {node.split("::", 1)[0] for node in nodes} - partial
    stale = sorted(case for case in slow if case.split("::", 1)[0] in modules and case not in nodes)
    if stale:
        raise pytest.UsageError(
            "tests/slow_cases.txt names cases that no longer exist; rename or remove them: "
            + ", ".join(stale)
        )


@pytest.fixture
def stacked_derivatives(emission):
    """The pass's own stacked output for `derivatives` up to `stacked_output_max_order`,
    for tests that pin what XLA makes of a pass with it. On a JAX without the `stack`
    primitive (0.9) the CPU policy selects those rows from order 2 instead (their
    concatenate along the points' minor axis was slow there; `test_selected_outputs.py`
    pins that form); this puts the stacked output back there. Elsewhere it changes
    nothing, and the policy in force stays."""
    import taylax
    from taylax import _compat

    if not _compat.HAS_STACK_PRIMITIVE:
        emission(selected_derivatives_min_order=taylax.CPU.stacked_output_max_order + 1)
