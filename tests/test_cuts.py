"""Fusion cuts (`taylax._cuts`): a long pass is materialized every so many equations, so
that no fused kernel spans an unrolled loop whose run time XLA:CPU makes exponential. On
the CPU a long `derivatives` pass computes its output rows apart instead, uncut."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import jet

import taylax
from reference import all_equations, xla_cpu_only


def rk4_cubic(y, steps, h=0.05):
    for _ in range(steps):
        k1 = -(y**3)
        k2 = -((y + h / 2 * k1) ** 3)
        k3 = -((y + h / 2 * k2) ** 3)
        k4 = -((y + h * k3) ** 3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


# The CPU policy as it cuts a long `derivatives` pass (it computes the output rows apart
# instead); `taylor`, `jet` and the operators still cut on the CPU. Its loops stay
# unrolled (`roll_past`), as the cuts are what these tests check.
CUTTING_CPU = dataclasses.replace(
    taylax.CPU, name="cutting", output_rows_apart_min_equations=None, roll_past=None
)


def _rk4_jaxpr(steps, K, policy):
    """The jaxpr of `derivatives` of order K over `steps` RK4 steps under `policy`."""
    f = lambda y: rk4_cubic(y, steps)  # noqa: E731
    with taylax.emission_policy(policy):
        return jax.make_jaxpr(taylax.derivatives(f, K))(0.8)


def _barriers(steps, K, policy):
    return taylax.equation_counts(_rk4_jaxpr(steps, K, policy)).get("optimization_barrier", 0)


@pytest.mark.parametrize("policy", [CUTTING_CPU, taylax.GPU], ids=["cpu", "gpu"])
def test_cuts_grow_with_the_loop(policy):
    # One cut per `fusion_cut` of work: twice the steps, about twice the cuts.
    few, many = _barriers(8, 4, policy), _barriers(16, 4, policy)
    assert few >= 1 and many >= 2 * few - 1, (few, many)


def test_no_cuts_without_a_fusion_cut_or_in_a_short_pass():
    uncut = dataclasses.replace(CUTTING_CPU, name="uncut", fusion_cut=None)
    assert _barriers(16, 4, uncut) == 0
    assert _barriers(1, 4, taylax.CPU) == 0


def test_a_short_pass_is_not_cut_on_the_cpu():
    # Past `fusion_cut` but below `fusion_cut_min_work` (equations times K squared), the
    # CPU policy leaves the pass whole: a cut's kernel recomputes what its rows share. 5
    # steps are 105 equations: 945 at K = 3, 2,625 at K = 5.
    always = dataclasses.replace(CUTTING_CPU, name="always", fusion_cut_min_work=None)
    assert _barriers(5, 3, always) >= 1
    assert _barriers(5, 3, CUTTING_CPU) == 0
    assert _barriers(5, 5, CUTTING_CPU) >= 1
    assert _barriers(5, 3, taylax.GPU) >= 1


def _largest_fusion(compiled_text: str) -> int:
    """Instructions in the largest fused computation of an optimized HLO module."""
    sizes, current = [], None
    for line in compiled_text.splitlines():
        if re.match(r"^%?[\w.\-]*fused[\w.\-]* .*\{$", line):
            current = 0
        elif line.startswith("}"):
            if current is not None:
                sizes.append(current)
            current = None
        elif current is not None and " = " in line:
            current += 1
    return max(sizes)


@xla_cpu_only
def test_fused_kernels_stay_bounded_as_the_loop_grows():
    # The exponential run time comes from one fused kernel spanning the whole loop: uncut,
    # the largest kernel grows with the steps; cut, it stays near the cut's size (where
    # the cuts fall moves it a little), a fraction of the uncut kernel at half the steps.
    # A small `fusion_cut` keeps the programs small.
    def largest(steps, policy):
        f = lambda y: rk4_cubic(y, steps)  # noqa: E731
        with taylax.emission_policy(policy):
            compiled = jax.jit(taylax.derivatives(f, 2)).lower(0.8).compile()
        return _largest_fusion(compiled.as_text())

    cut = dataclasses.replace(CUTTING_CPU, name="cut", fusion_cut=48, fusion_cut_min_work=None)
    uncut = dataclasses.replace(CUTTING_CPU, name="uncut", fusion_cut=None)
    uncut_12 = largest(12, uncut)
    assert uncut_12 >= 1.8 * largest(6, uncut)
    assert largest(24, cut) <= uncut_12 / 4


@pytest.mark.parametrize("K", [2, 5])
def test_cuts_change_no_value(K):
    f = lambda y: rk4_cubic(y, 6)  # noqa: E731 (uncut, 12 steps run for minutes)
    y0 = jnp.linspace(0.5, 1.0, 7)
    cut = dataclasses.replace(CUTTING_CPU, name="cut", fusion_cut=16, fusion_cut_min_work=None)
    uncut = dataclasses.replace(CUTTING_CPU, name="uncut", fusion_cut=None)
    assert _barriers(6, K, cut) >= 1
    results = []
    for policy in (cut, uncut):
        with taylax.emission_policy(policy):
            results.append(jax.jit(jax.vmap(taylax.derivatives(f, K)))(y0))
    terms = [jnp.ones_like(y0)] + [jnp.zeros_like(y0)] * (K - 1)
    primal, series = jet.jet(f, (y0,), (terms,))
    expected = np.stack([primal, *series], axis=1)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=0)
    np.testing.assert_allclose(results[0], expected, rtol=1e-10, atol=1e-12)


def _output_barrier(steps, K, policy):
    """For each optimization barrier of a `derivatives` pass over `steps` RK4 steps, the
    number of operands of the concatenate it takes."""
    eqns = list(all_equations(_rk4_jaxpr(steps, K, policy)))
    made = {v: e for e in eqns for v in e.outvars}
    barriers = [e for e in eqns if e.primitive.name == "optimization_barrier"]
    return [len(made[b.invars[0]].invars) for b in barriers if b.invars[0] in made]


@pytest.mark.parametrize("K", [2, 4, 8, 12])
def test_a_long_pass_on_the_cpu_computes_its_output_rows_apart_uncut(K):
    # 5 RK4 steps are 105 equations, past `output_rows_apart_min_equations` (64): one
    # barrier, of the output stack padded past `fused_concat_max_operands` (XLA:CPU fuses
    # no longer concatenate, so each row stays a kernel), and no cut at any length.
    pad_to = taylax.CPU.fused_concat_max_operands + 1
    for steps in (5, 16):
        assert _output_barrier(steps, K, taylax.CPU) == [max(pad_to, K + 1)], steps
    assert _barriers(1, K, taylax.CPU) == 0  # 21 equations: the stack as before
    assert _barriers(16, K, taylax.GPU) >= 2  # the GPU's cuts, unchanged


@xla_cpu_only
def test_the_padded_output_stack_is_no_fused_kernel():
    # The stack of 9 operands is a concatenate of its own in the compiled program, not the
    # root of a kernel that computes the rows (which recomputed what they share).
    f = lambda y: rk4_cubic(y, 5)  # noqa: E731
    y0 = jnp.linspace(0.5, 1.0, 16)
    with taylax.emission_policy(taylax.CPU):
        text = jax.jit(jax.vmap(taylax.derivatives(f, 4))).lower(y0).compile().as_text()
    entry = text[text.index("ENTRY") :]
    assert re.search(r"= f64\[16,9\]\S* concatenate\(", entry), entry


@pytest.mark.parametrize("K", [1, 3, 8, 10])
@pytest.mark.parametrize("mode", ["vmap", "whole"])
def test_output_rows_apart_change_no_value(K, mode):
    # Against jet, and against the same pass with its stack fused (the policy field off):
    # rows known to the pass (K = 1, 3), rows sliced off its stack (K = 8), and a stack of
    # more than 9 rows, which needs no padding (K = 10).
    f = lambda y: rk4_cubic(y, 5)  # noqa: E731
    y0 = jnp.linspace(0.5, 1.0, 7)
    fused = dataclasses.replace(taylax.CPU, name="fused", output_rows_apart_min_equations=None)
    results = []
    for policy in (taylax.CPU, fused):
        with taylax.emission_policy(policy):
            if mode == "vmap":
                results.append(jax.jit(jax.vmap(taylax.derivatives(f, K)))(y0))
            else:
                results.append(jax.jit(taylax.derivatives(f, K))(y0, jnp.ones_like(y0)).T)
    terms = [jnp.ones_like(y0)] + [jnp.zeros_like(y0)] * (K - 1)
    primal, series = jet.jet(f, (y0,), (terms,))
    expected = np.stack([primal, *series], axis=1)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=0)
    np.testing.assert_allclose(results[0], expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("api", ["taylor", "jet"])
def test_taylor_and_jet_compute_a_long_pass_rows_apart_too(api):
    # The same rule for the normalized coefficients of `taylor` and the terms of `jet`:
    # one barrier, of the padded stack, and the values of the pass with its stack fused
    # and of `jax.experimental.jet`.
    K = 4
    f = lambda y: rk4_cubic(y, 5)  # noqa: E731
    y0 = jnp.linspace(0.5, 1.0, 7)

    def run(y):
        if api == "taylor":
            primal, coeffs = taylax.taylor(f, K)(y, 1.0)
            return jnp.stack([primal, *(coeffs * np.array([1.0, 2.0, 6.0, 24.0]))])
        primal, terms = taylax.jet(f, (y,), ((1.0,) + (0.0,) * (K - 1),))
        return jnp.stack([primal, *terms])

    fused = dataclasses.replace(taylax.CPU, name="fused", output_rows_apart_min_equations=None)
    results = []
    for policy in (taylax.CPU, fused):
        with taylax.emission_policy(policy):
            jaxpr = jax.make_jaxpr(run)(0.8)
            results.append(jax.jit(jax.vmap(run))(y0))
        names = [e.primitive.name for e in all_equations(jaxpr)]
        assert names.count("optimization_barrier") == (1 if policy is taylax.CPU else 0)
    terms = [jnp.ones_like(y0)] + [jnp.zeros_like(y0)] * (K - 1)
    primal, series = jet.jet(f, (y0,), (terms,))
    expected = np.stack([primal, *series], axis=1)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=0)
    np.testing.assert_allclose(results[0], expected, rtol=1e-10, atol=1e-12)
