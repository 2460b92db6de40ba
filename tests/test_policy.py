"""The emission policy: chosen per platform, overridable, cached per policy, and what each
built-in policy must never emit (whatever the machine the tests run on)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from reference import all_equations, nested_jvp_derivatives, rk4_unrolled
from taylax import _policy


def damped_wave(t):
    return jnp.exp(-(t**2) / 2) * jnp.cos(3 * t) / (1 + t**2)


def log_chain(t):
    return jnp.sqrt(1 + jnp.tanh(jnp.log1p(t * t))) * jnp.sin(t)


def _names(fn, *args) -> list[str]:
    return [e.primitive.name for e in all_equations(jax.make_jaxpr(fn)(*args))]


_LOOPS = {"scan", "while", "fori_loop", "map"}


# --------------------------------------------------------------------------------------------
# Choosing a policy.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "platform, expected",
    [("cpu", "cpu"), ("gpu", "gpu"), ("cuda", "gpu"), ("ROCm", "gpu"), ("tpu", "default")],
)
def test_each_platform_has_its_policy(platform, expected):
    assert _policy.for_platform(platform).name == expected


def test_the_policy_follows_the_default_device():
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        assert _policy.target_platform() == "cpu"
        assert _policy.current() is taylax.CPU
    with jax.default_device("cpu"):
        assert _policy.current() is taylax.CPU


def test_a_lowering_takes_its_platforms_policy_unless_one_is_set():
    assert _policy.for_lowering(["cuda"]) is taylax.GPU
    assert _policy.for_lowering(["cpu"]) is taylax.CPU
    with taylax.emission_policy("gpu"):
        assert _policy.for_lowering(["cpu"]) is taylax.GPU


def test_emission_policy_takes_names_and_policies_and_restores_the_previous_one():
    before = _policy.current()
    with taylax.emission_policy("GPU") as p:
        assert p is taylax.GPU and _policy.current() is taylax.GPU
        custom = dataclasses.replace(taylax.CPU, name="custom", rows_max_order=0)
        with taylax.emission_policy(custom):
            assert _policy.current() is custom
        assert _policy.current() is taylax.GPU
    assert _policy.current() is before


def test_bad_policies_are_refused_with_a_sentence():
    with pytest.raises(ValueError, match="Unknown emission policy 'fast'.*'cpu'"):
        with taylax.emission_policy("fast"):
            pass
    with pytest.raises(TypeError, match="takes a `taylax.EmissionPolicy`"):
        with taylax.emission_policy(3):
            pass
    with pytest.raises(ValueError, match="`rows_max_order` must be a non-negative integer"):
        dataclasses.replace(taylax.CPU, rows_max_order=-1)
    with pytest.raises(ValueError, match="`recurrence_block` must be at least 1"):
        dataclasses.replace(taylax.CPU, recurrence_block=0)
    with pytest.raises(ValueError, match="`element_chunk` must be a positive integer or None"):
        dataclasses.replace(taylax.CPU, element_chunk=0)
    with pytest.raises(ValueError, match="`collapsed_jvp_max_order` must be 0, 1 or 2"):
        dataclasses.replace(taylax.CPU, collapsed_jvp_max_order=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        taylax.CPU.rows_max_order = 3


def test_programs_are_cached_per_policy_and_agree():
    # The same function under two policies: two programs (the CPU's blocked loop past its
    # rows, the GPU's straight-line recurrences), the same derivatives.
    d = taylax.derivatives(log_chain, 20)
    with taylax.emission_policy("cpu"):
        cpu_names = _names(d, 0.3)
        cpu_value = d(0.3)
    with taylax.emission_policy("gpu"):
        gpu_names = _names(d, 0.3)
        gpu_value = d(0.3)
    assert _LOOPS & set(cpu_names) and not _LOOPS & set(gpu_names)
    np.testing.assert_allclose(gpu_value, cpu_value, rtol=1e-12)


def _tanh_of_a_square(t):
    return jnp.tanh(t * t - 0.5) * jnp.tan(0.5 * t)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("f", [jnp.tanh, jnp.tan, _tanh_of_a_square], ids=["tanh", "tan", "square"])
def test_tanh_and_tan_lines_row_by_row_keep_the_dtype_and_the_values(f, dtype):
    # The GPU policy builds tanh's and tan's lines row by row up to order 8; its number
    # coefficients once came in as NumPy float64 scalars and made float32 rows float64
    # (found on an H200 by the float32 chains of gpu_check.py).
    x = np.asarray(0.4 + (0.2j if np.issubdtype(dtype, np.complexfloating) else 0), dtype)
    wide = np.complex128 if np.issubdtype(dtype, np.complexfloating) else np.float64
    rtol = 1e-12 if np.dtype(dtype) in (np.float64, np.complex128) else 2e-5
    rows = dataclasses.replace(taylax.GPU, name="rows", polynomial_rows_max_order=8)
    for order in range(0, 9):
        with taylax.emission_policy(rows):
            out = taylax.derivatives(f, order)(x)
        expected = nested_jvp_derivatives(f, x.astype(wide), order=order)
        assert out.dtype == dtype, (order, out.dtype)
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=rtol, err_msg=f"order {order}")


def test_a_tanh_line_of_slope_zero_has_zero_derivatives():
    # `x - x` is a line of slope 0: every row of the polynomial is 0 (its coefficients,
    # times `0 ** k`, are all 0), which once failed to find a leading coefficient.
    rows = dataclasses.replace(taylax.GPU, name="rows", polynomial_rows_max_order=8)
    with taylax.emission_policy(rows):
        out = taylax.derivatives(lambda x: jnp.exp(jnp.tanh(x - x)), 5)(0.4)
    np.testing.assert_array_equal(out, [1.0, 0, 0, 0, 0, 0])


# --------------------------------------------------------------------------------------------
# What each policy must never emit.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["gpu", "default"])
@pytest.mark.parametrize("order", [2, 4, 8, 12, 16, 24, 32])
@pytest.mark.parametrize("f", [damped_wave, log_chain], ids=["damped_wave", "log_chain"])
def test_the_gpu_policy_never_loops_over_coefficients_elements_or_points(f, order, policy):
    # On a GPU each loop step is a launch over the whole state; the loops over elements ran
    # 4,096 trips of 256 points (122 ms against jet's 0.65 ms at order 16, H100). Other
    # accelerators (the default policy) take the GPU's choices.
    t = jnp.linspace(-0.9, 0.9, 1 << 15)
    with taylax.emission_policy(policy):
        names = _names(jax.vmap(taylax.derivatives(f, order)), t)
        whole = _names(lambda t: taylax.derivatives(f, order)(t, jnp.ones_like(t)), t)
    assert not _LOOPS & set(names) and not _LOOPS & set(whole), order


def test_the_gpu_policy_marks_no_value():
    t = jnp.linspace(-0.9, 0.9, 64)
    with taylax.emission_policy("gpu"):
        text = jax.jit(jax.vmap(taylax.derivatives(damped_wave, 8))).lower(t).as_text()
    with taylax.emission_policy("cpu"):
        marked = jax.jit(jax.vmap(taylax.derivatives(damped_wave, 8))).lower(t).as_text()
    # A mark is a division by an opaque one (a value XLA cannot fold).
    assert text.count("stablehlo.divide") < marked.count("stablehlo.divide")


def _cos_exp_div_tanh(t):
    return jnp.cos(t) ** 3 * jnp.exp(-t * t) / (2 + jnp.sin(t)) + jnp.tanh(t) ** 2


@pytest.mark.parametrize("order", [2, 8, 16])
def test_the_gpu_policy_computes_output_rows_apart_and_products_row_by_row(order):
    # XLA:GPU fused a stack with the expressions of its rows, each row recomputing what
    # it shares with the others: the rows go to buffers first (an optimization barrier
    # whose results are the stack's operands), and products are sums of row products,
    # not shifted sums of stacks (pads and slices): 0.89 -> 0.13 ms at order 8 on an
    # H200 (docs/EMISSION.md, "Fourth run").
    t = jnp.linspace(-0.9, 0.9, 64)
    with taylax.emission_policy("gpu"):
        jaxpr = jax.make_jaxpr(
            lambda t: taylax.derivatives(_cos_exp_div_tanh, order)(t, 1.0 + 0 * t)
        )(t)
        vmapped = _names(jax.vmap(taylax.derivatives(_cos_exp_div_tanh, order)), t)
    names = [e.primitive.name for e in all_equations(jaxpr)]
    assert "optimization_barrier" in names and "optimization_barrier" in vmapped
    assert "pad" not in names and "pad" not in vmapped
    barrier = next(e for e in all_equations(jaxpr) if e.primitive.name == "optimization_barrier")
    assert len(barrier.outvars) == order + 1
    with taylax.emission_policy("cpu"):
        cpu = _names(jax.vmap(taylax.derivatives(_cos_exp_div_tanh, order)), t)
    assert "optimization_barrier" not in cpu


@pytest.mark.parametrize("order", [taylax.CPU.unroll_max_order + 4, 24])
def test_the_cpu_policy_chunks_large_elementwise_loops(order):
    # On XLA:CPU a loop over chunks of elements keeps each chunk's state in cache (past
    # the unrolled orders, where recurrences loop over coefficients).
    x = jnp.linspace(0.1, 0.9, 1 << 15)
    with taylax.emission_policy("cpu"):
        names = _names(lambda x: taylax.derivatives(log_chain, order)(x, jnp.ones_like(x)), x)
    assert "scan" in names or "while" in names


def _sin_exp(t):
    return jnp.sin(t) * jnp.exp(t)


def _outer_of_a_derivative(t):
    # Inside the outer pass the inner derivative is read off one shared pass by a shift.
    return taylax.derivative(_sin_exp)(t) + t


_SLICING_CPU = dataclasses.replace(taylax.CPU, name="cpu-slices", shift_by_product_max_size=0)
_SLICING_GPU = dataclasses.replace(taylax.GPU, name="gpu-slices", shift_by_product_max_size=0)


@pytest.mark.parametrize(
    "policy, product",
    [("cpu", True), ("gpu", True), (_SLICING_CPU, False), (_SLICING_GPU, False)],
    ids=["cpu", "gpu", "cpu-slices", "gpu-slices"],
)
def test_a_nested_derivative_is_shifted_as_the_policy_says(policy, product):
    # A product with a constant shift matrix, which XLA materializes, so a chain of nested
    # derivatives does not fuse into one growing expression per consumer; with
    # `shift_by_product_max_size=0` a slice times the ratios, on any platform's policy.
    t = jnp.asarray(0.3)
    with taylax.emission_policy(policy):
        names = [
            e.primitive.name
            for e in all_equations(
                taylax.emitted_jaxpr(taylax.derivative(_outer_of_a_derivative), t)
            )
        ]
        got = taylax.derivative(_outer_of_a_derivative)(t)
    assert ("dot_general" in names) is product, names
    expected = jax.grad(jax.grad(_sin_exp))(t) + 1.0
    np.testing.assert_allclose(got, expected, rtol=1e-13)


def _tanh_layer(x):
    return jnp.sum(jnp.tanh(x * jnp.arange(1.0, x.shape[0] + 1.0)))


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_collapsed_chains_take_jax_s_rules_up_to_the_policy_s_order(limit):
    # Up to `collapsed_jvp_max_order` a collapsed pass differentiates tanh with JAX's own
    # rule (tanh' = 1 - tanh^2, no exp); past it, the engine's closed form, whose sech^2
    # is written with exp(-2|x|).
    x = jnp.linspace(0.1, 0.7, 4)
    policy = dataclasses.replace(taylax.CPU, name=f"jvp-{limit}", collapsed_jvp_max_order=limit)
    with taylax.emission_policy(policy):
        names = {
            e.primitive.name
            for e in all_equations(taylax.emitted_jaxpr(taylax.laplacian(_tanh_layer), x))
        }
        got = taylax.laplacian(_tanh_layer)(x)
    assert ("exp" in names) is (limit < 2), sorted(names)
    expected = jnp.trace(jax.hessian(_tanh_layer)(x))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("policy", ["cpu", "gpu", "default"])
@pytest.mark.parametrize("order", [1, 3, 6])
def test_every_policy_computes_the_same_derivatives(policy, order):
    t = jnp.array([-0.7, 0.2, 0.9])
    v = jnp.array([1.0, -0.5, 0.3])
    with taylax.emission_policy(policy):
        for f in (damped_wave, log_chain):
            got = taylax.derivatives(f, order)(t, v)
            np.testing.assert_allclose(got, nested_jvp_derivatives(f, t, v, order), rtol=1e-9)


# --------------------------------------------------------------------------------------------
# The program-size budget.
# --------------------------------------------------------------------------------------------


def test_within_budget_takes_the_compact_form_past_the_budget():
    p = dataclasses.replace(taylax.CPU, budget=100)
    assert p.within_budget(50, 2) is p
    assert p.within_budget(50, 3).name == "cpu-compact"
    # Orders count up to `unroll_max_order`: past it recurrences loop.
    assert dataclasses.replace(p, budget=400).within_budget(50, 32) is not p
    assert dataclasses.replace(p, budget=400).within_budget(50, 8).name == "cpu"
    assert dataclasses.replace(p, budget=None).within_budget(10**6, 32).name == "cpu"
    compact = p.compact()
    assert compact.rows_max_order == 0 and compact.budget is None
    assert compact.within_budget(10**6, 32) is compact


def test_a_large_program_grows_linearly_in_the_order(emission):
    # Rows and unrolled recurrences multiply equations (quadratic in the order); past the
    # budget the pass is stacked, and each order adds about the same few equations. (Its
    # loop stays unrolled: rolled, the pass is one trip's, within the budget.)
    emission(roll_past=None)
    y0 = jnp.float64(0.8)
    counts = {}
    for order in (4, 8, 16):
        jaxpr = jax.make_jaxpr(lambda y, order=order: taylax.derivatives(rk4_unrolled, order)(y))
        counts[order] = sum(1 for _ in all_equations(jaxpr(y0)))
    assert counts[16] - counts[8] <= 2 * (counts[8] - counts[4]) + 100, counts
    user = sum(1 for _ in all_equations(jax.make_jaxpr(rk4_unrolled)(y0)))
    assert counts[8] < 6 * user, (counts, user)


def test_the_budget_can_be_lifted(emission):
    y0 = jnp.float64(0.8)
    f = lambda y: rk4_unrolled(y, steps=3)  # noqa: E731
    compact = jax.make_jaxpr(lambda y: taylax.derivatives(f, 4)(y))(y0)
    emission(budget=10**9)
    full = jax.make_jaxpr(lambda y: taylax.derivatives(f, 4)(y))(y0)
    emission(budget=0)
    forced = jax.make_jaxpr(lambda y: taylax.derivatives(f, 4)(y))(y0)
    assert len(list(all_equations(forced))) < len(list(all_equations(full)))
    assert len(list(all_equations(compact))) == len(list(all_equations(full)))  # 87 * 4 < 1500


@pytest.mark.parametrize("order", [1, 2, 4, 7])
def test_compact_passes_agree_with_nested_jvp(order, emission):
    emission(base=taylax.CPU.compact())
    y0 = jnp.asarray([0.8, -0.3])
    v = jnp.asarray([1.0, 0.5])
    f = lambda y: rk4_unrolled(y, steps=2)  # noqa: E731
    np.testing.assert_allclose(
        taylax.derivatives(f, order)(y0, v), nested_jvp_derivatives(f, y0, v, order), rtol=1e-10
    )
    z0 = jnp.asarray([0.8 + 0.1j])
    w = jnp.asarray([1.0 - 0.5j])
    for g in (damped_wave, log_chain):
        np.testing.assert_allclose(
            taylax.derivatives(g, order)(z0, w), nested_jvp_derivatives(g, z0, w, order), rtol=1e-9
        )
