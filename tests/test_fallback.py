"""The unscaled fallback (`taylax._fallback`): run only when the stretched pass needs it,
one predicate per batch under `jax.vmap`, and the same values under every transformation.

The case throughout: `1/(1.2 - t)` in float32 at order 40, whose derivatives
`k!/r^(k+1)` (r = 1.2 - t) at t = 0.2 overflow the stretched pass (h = 15.8,
coefficients `(h/r)^k`) from order 33 although they are representable up to order 34;
far from the pole (t = -3) nothing overflows.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax._compat import jaxprs_in_params
from taylax._fallback import fallback_p, is_overflow_safe

ORDER = 40
NEAR, FAR = np.float32(0.2), np.float32(-3.0)


def pole(t):
    return 1 / (1.2 - t)


def exact(t, k):
    return math.factorial(k) / (1.2 - float(t)) ** (k + 1)


def _close(got, k, t, rtol=2e-4):
    np.testing.assert_allclose(float(got), exact(t, k), rtol=rtol, err_msg=f"order {k}")


def _equations(closed):
    """Every equation of a closed jaxpr and its sub-jaxprs, with its depth."""
    out = []

    def walk(jaxpr, depth):
        for eqn in jaxpr.eqns:
            out.append((eqn, depth))
            for sub in jaxprs_in_params(eqn.params):
                walk(sub, depth + 1)

    walk(closed.jaxpr, 0)
    return out


def _fallback_cond(closed):
    """The conditional that runs the unscaled pass: the `cond` whose branches differ
    most in size."""
    conds = [e for e, _ in _equations(closed) if e.primitive.name == "cond"]
    assert conds, "no conditional in the program"

    def spread(e):
        sizes = [len(b.jaxpr.eqns) for b in e.params["branches"]]
        return max(sizes) - min(sizes)

    return max(conds, key=spread)


@pytest.mark.parametrize("t", [NEAR, FAR], ids=["near", "far"])
def test_values_near_and_far_from_the_pole(t):
    got = taylax.derivatives(pole, ORDER)(t)
    for k in range(35):
        _close(got[k], k, t)
    if t == NEAR:
        assert not np.isfinite(got[35:]).any()


@pytest.mark.parametrize("base", ["CPU", "GPU"])
def test_the_program_is_the_stretched_pass_and_one_loop_or_conditional(base, emission):
    # Under `vmap` the CPU policy lowers the fallback as a `while` loop of zero or one
    # trips carrying the derivatives (`fallback_in_loop`), the GPU policy as a
    # conditional; a whole array keeps the conditional under both. The values are the
    # same near the pole (the loop's one trip) and far from it (none). The CPU's passes
    # have loops of their own at this order.
    policy = getattr(taylax, base)
    points = jnp.asarray([NEAR, FAR])

    def counts(in_loop):
        emission(base=policy, fallback_in_loop=in_loop)
        closed = jax.make_jaxpr(taylax.derivatives(pole, ORDER))(NEAR)
        assert any(e.primitive is fallback_p for e, _ in _equations(closed))
        out = []
        for fn, args in [
            (taylax.derivatives(pole, ORDER), (NEAR,)),
            (jax.vmap(taylax.derivatives(pole, ORDER)), (points, jnp.ones_like(points))),
        ]:
            text = jax.jit(fn).lower(*args).as_text()
            out.append(
                (
                    text.count("stablehlo.while"),
                    text.count("stablehlo.case") + text.count("stablehlo.if"),
                )
            )
        got = jax.jit(taylax.derivatives(pole, ORDER))(NEAR)
        batch = jax.jit(jax.vmap(taylax.derivatives(pole, ORDER)))(points, jnp.ones_like(points))
        for k in range(35):
            _close(got[k], k, NEAR)
            _close(batch[0, k], k, NEAR)
            _close(batch[1, k], k, FAR)
        return out

    (whole, batched), (whole_then, batched_then) = counts(False), counts(True)
    assert whole[1] == 1 and whole_then == whole
    assert batched[1] == 1 and batched_then == (batched[0] + 1, 0)
    assert taylax.CPU.fallback_in_loop and not taylax.GPU.fallback_in_loop


@pytest.mark.parametrize("base", ["CPU", "GPU"])
def test_the_check_reads_the_stacks_apart_where_the_policy_says(base):
    # XLA:GPU fused the pass into the check's reduction: `fallback_check_apart` (the GPU
    # policy's choice, not the CPU's) puts one optimization barrier between them, in the
    # program and in its vmapped form.
    import dataclasses

    def barriers(policy, batched):
        fn = (
            jax.vmap(taylax.derivatives(pole, ORDER))
            if batched
            else taylax.derivatives(pole, ORDER)
        )
        args = (jnp.ones(4, jnp.float32),) * 2 if batched else (NEAR,)
        with taylax.emission_policy(policy):
            text = jax.jit(fn).lower(*args).as_text()
            got = jax.jit(taylax.derivatives(pole, ORDER))(NEAR)
        for k in range(35):
            _close(got[k], k, NEAR)
        return text.count("stablehlo.optimization_barrier")

    policy = getattr(taylax, base)
    assert policy.fallback_check_apart == (base == "GPU")
    apart = dataclasses.replace(policy, name="apart", fallback_check_apart=True)
    fused = dataclasses.replace(policy, name="fused", fallback_check_apart=False)
    for batched in (False, True):
        assert barriers(apart, batched) == barriers(fused, batched) + 1


def _fallback_program(closed):
    """The (only) `fallback_p` equation of `closed` and its program, the conditional."""
    from taylax._fallback import impl_jaxpr

    (eqn,) = [e for e, _ in _equations(closed) if e.primitive is fallback_p]
    return eqn, impl_jaxpr([v.aval for v in eqn.invars], **eqn.params)


def test_under_vmap_one_predicate_for_the_whole_batch():
    points = jnp.linspace(-3.0, 0.2, 64, dtype=jnp.float32)
    batched = jax.vmap(taylax.derivatives(pole, ORDER))
    closed = jax.make_jaxpr(batched)(points, jnp.ones_like(points))
    # Batched, the primitive binds again with the orders behind the batch axis.
    eqn, program = _fallback_program(closed)
    assert eqn.params["axis"] == 1
    cond = _fallback_cond(program)
    # A batched predicate would have made the conditional a select after both passes.
    assert cond.invars[0].aval.shape == ()
    got = batched(points, jnp.ones_like(points))
    for i in (0, 63):
        for k in range(35):
            _close(got[i, k], k, points[i])
    # Each point keeps its own merge: far points are the stretched pass's own values.
    np.testing.assert_array_equal(got[0], taylax.derivatives(pole, ORDER)(points[0]))


def test_nested_vmaps_keep_one_predicate():
    points = jnp.linspace(-3.0, 0.2, 6, dtype=jnp.float32).reshape(2, 3)
    batched = jax.vmap(jax.vmap(taylax.derivatives(pole, ORDER)))
    closed = jax.make_jaxpr(batched)(points, jnp.ones_like(points))
    eqn, program = _fallback_program(closed)
    assert eqn.params["axis"] == 2
    assert _fallback_cond(program).invars[0].aval.shape == ()
    got = jax.jit(batched)(points, jnp.ones_like(points))
    for i, j in [(0, 0), (1, 2)]:
        for k in range(35):
            _close(got[i, j, k], k, points[i, j])


def test_unbatched_values_pass_through_vmap():
    # The stacks and operands of the fallback need not all be batched (a constant output).
    def f(t, c):
        return pole(t), c * jnp.exp(t)

    points = jnp.asarray([NEAR, FAR])
    d = jax.vmap(taylax.derivatives(lambda t: f(t, 2.0), ORDER))(points, jnp.ones(2, jnp.float32))
    for i, t in enumerate([NEAR, FAR]):
        _close(d[0][i, 30], 30, t)
        np.testing.assert_allclose(d[1][i, 30], 2 * np.exp(np.float32(t)), rtol=2e-5)


def test_jvp_and_grad_through_the_fallback():
    # d/dt of the order-k derivative is the order-(k+1) one. The stretched pass's own
    # tangents hold to order 30 (past it they overflow an order before its values do);
    # at 33 the value and its tangent are the unscaled pass's.
    _, tangent = jax.jvp(taylax.derivatives(pole, ORDER), (NEAR,), (jnp.float32(1.0),))
    for k in [*range(31), 33]:
        _close(tangent[k], k + 1, NEAR, rtol=5e-4)
    # Reverse mode transposes the conditional (far from the pole: no fallback needed).
    grad = jax.grad(lambda t: taylax.derivatives(pole, ORDER)(t)[20])
    _close(grad(FAR), 21, FAR, rtol=5e-4)
    _close(jax.vmap(grad)(jnp.asarray([FAR]))[0], 21, FAR, rtol=5e-4)


def test_grad_where_the_stretched_pass_overflows():
    # The stretched pass overflows from row 33: in reverse mode the zero cotangents of
    # those rows met their infinite values (`0 * inf`) and made the gradient of row 20
    # NaN, although it is representable (`taylax._fallback.overflow_safe`).
    grad = jax.grad(lambda t: taylax.derivatives(pole, ORDER)(t)[20])(NEAR)
    _close(grad, 21, NEAR, rtol=5e-4)
    # Row 33 is the unscaled pass's: its gradient, order 34, the last one representable.
    grad = jax.grad(lambda t: taylax.derivatives(pole, ORDER)(t)[33])(NEAR)
    _close(grad, 34, NEAR, rtol=5e-4)


def test_grad_under_vmap_where_the_stretched_pass_overflows():
    # Either way round, near and far from the pole in one batch (one predicate for both).
    grad = jax.grad(lambda t: taylax.derivatives(pole, ORDER)(t)[20])
    points = jnp.asarray([NEAR, FAR])
    per_point = jax.vmap(grad)(points)
    through_vmap = jax.grad(
        lambda ts: jax.vmap(taylax.derivatives(pole, ORDER))(ts, jnp.ones_like(ts))[:, 20].sum()
    )(points)
    for i, t in enumerate([NEAR, FAR]):
        _close(per_point[i], 21, t, rtol=5e-4)
        _close(through_vmap[i], 21, t, rtol=5e-4)


def test_grad_of_an_overflowed_order_is_not_finite():
    # Order 34 is representable but its derivative (order 35) is not; orders 35 and up
    # overflow themselves. Their gradients are never a finite number.
    for k in (34, 35, ORDER):
        grad = jax.grad(lambda t, k=k: taylax.derivatives(pole, ORDER)(t)[k])(NEAR)
        assert not np.isfinite(grad), (k, grad)


def _narrow_peak(w, t, order):
    """The first derivative of `1 / (1 + w t^2)` from a pass of `order`, whose derivatives
    overflow past order 21 in float32 (about `k! 5^k` at w = 25)."""
    return taylax.derivatives(lambda s: 1 / (1 + w * s**2), order)(t)[1]


@pytest.mark.parametrize(
    "dtype, order, rtol",
    [
        ("float32", 24, 1e-6),
        ("float32", 28, 1e-6),
        ("float32", 32, 1e-6),
        ("float64", 200, 1e-13),
        ("complex64", 28, 1e-6),
        # Two narrow dtypes: float16 overflows from order 7 here, bfloat16 (float32's
        # range, 8 bits of mantissa) from about 26; their rounding sets the tolerance.
        ("float16", 12, 1e-2),
        ("bfloat16", 40, 2e-2),
    ],
)
def test_low_order_gradient_of_a_pass_whose_high_orders_overflow(dtype, order, rtol):
    # The derivative of order 1 and its gradient with respect to `w` are those of a pass
    # of order 2, which nothing overflows; the pass of `order` overflows its high orders.
    # Before, the gradient was NaN from order 24 in float32 and at 200 in float64.
    dtype = jnp.dtype(dtype)
    real = jnp.finfo(dtype).dtype
    w = jnp.asarray(25.0, real)
    t = jnp.asarray(0.1 + (0.05j if dtype.kind == "c" else 0), dtype)
    high = taylax.derivatives(lambda s: 1 / (1 + w * s**2), order)(t)
    assert not np.isfinite(high[-1]), "the case must overflow its highest order"
    low = _narrow_peak(w, t, 2)
    np.testing.assert_allclose(_narrow_peak(w, t, order), low, rtol=rtol)
    if dtype.kind == "c":
        # The real and imaginary parts of the derivative, each differentiated in `w`.
        for part in (jnp.real, jnp.imag):
            grads = [
                jax.grad(lambda w, k=k, part=part: part(_narrow_peak(w, t, k)))(w)
                for k in (2, order)
            ]
            np.testing.assert_allclose(grads[1], grads[0], rtol=rtol)
        return
    grads = [jax.grad(lambda w, k=k: _narrow_peak(w, t, k))(w) for k in (2, order)]
    assert np.isfinite(grads[1])
    np.testing.assert_allclose(grads[1], grads[0], rtol=rtol)


def test_float32_gradient_for_every_order_from_24_to_32():
    # One vmapped gradient per order, each against the pass of order 2.
    w = jnp.asarray([20.0, 25.0, 30.0], jnp.float32)
    t = jnp.float32(0.1)
    grad = jax.vmap(jax.grad(lambda w, k: _narrow_peak(w, t, k)), in_axes=(0, None))
    low = grad(w, 2)
    for k in range(24, 33):
        np.testing.assert_allclose(grad(w, k), low, rtol=1e-6, err_msg=f"order {k}")


def test_grad_through_vmap_of_a_pass_with_a_conditional():
    # A conditional in the pass is in the linear map that `overflow_safe` evaluates; under
    # `jax.grad` of `jax.vmap` JAX would batch it into a select with a `stop_gradient` on
    # the tangents, which reverse mode cannot transpose: it is evaluated as a select.
    def f(t):
        def body(c, _):
            c = jax.lax.cond(c > 0, lambda c: jnp.sin(c) + 0.5, lambda c: c * c, c)
            return c, c

        return jax.lax.cond(t > 0.5, jnp.exp, lambda t: jax.lax.scan(body, t, None, 2)[0], t)

    d = taylax.derivatives(f, 13)
    points = jnp.asarray([0.3, -0.2, 0.7], jnp.float32)
    grad = jax.grad(lambda ts: jax.vmap(d)(ts, jnp.ones_like(ts))[:, 3].sum())(points)
    # d/dt of order 3 is order 4, each point through its own branches.
    np.testing.assert_allclose(grad, jax.vmap(d)(points, jnp.ones_like(points))[:, 4], rtol=2e-5)


def test_both_passes_carry_the_overflow_safe_rule():
    # The stretched pass and the unscaled one are each differentiated through
    # `overflow_safe`, which a Taylor pass over them recognizes (and runs the pass itself).
    closed = jax.make_jaxpr(taylax.derivatives(pole, ORDER))(NEAR)
    rules = [
        e.params["jvp_jaxpr_fun"] for e, _ in _equations(closed) if "jvp_jaxpr_fun" in e.params
    ]
    assert len(rules) == 2 and all(is_overflow_safe(r) for r in rules)


def test_a_taylor_pass_over_the_fallback():
    # The outer derivative interprets the inner program, the fallback's conditional
    # included.
    outer = taylax.derivative(lambda t: taylax.derivatives(pole, ORDER)(t)[20], 2)(NEAR)
    _close(outer, 22, NEAR, rtol=1e-3)


def test_jet_merges_from_the_first_term():
    # jet's terms start at order 1: every term is merged, none kept as it is.
    (y, terms) = taylax.jet(pole, (NEAR,), ([jnp.float32(1.0)] + [jnp.float32(0.0)] * 39,))
    _close(y, 0, NEAR)
    for k in range(1, 35):
        _close(terms[k - 1], k, NEAR)


def test_an_overflow_at_a_high_order_leaves_the_primal_exact():
    # tanh(t) e^t in float32 at order 40: tanh's coefficients 39 and 40 overflow the
    # stretched pass, and the product's zeros times them (`inf * 0`) made every row of the
    # stretched pass NaN, the primal too. Orders 0..39 are representable (mpmath:
    # f^(39)(0.3) = -2.716787e38), order 40 is not (-8.2986935e38).
    f = lambda t: jnp.tanh(t) * jnp.exp(t)  # noqa: E731
    got = np.asarray(taylax.derivatives(f, ORDER)(np.float32(0.3)))
    assert np.all(np.isfinite(got[:ORDER])) and not np.isfinite(got[ORDER])
    np.testing.assert_allclose(got[0], np.tanh(0.3) * np.exp(0.3), rtol=1e-6)
    np.testing.assert_allclose(got[1], 1.6285366, rtol=1e-5)
    np.testing.assert_allclose(got[39], -2.716787e38, rtol=1e-3)


@pytest.mark.parametrize("batched", [False, True], ids=["whole", "vmap"])
def test_the_common_branch_computes_the_derivatives(batched):
    """The stretched stacks enter the conditional as coefficients and each branch
    multiplies them by `k!/h^k`: a branch that returned its operand as it is made XLA copy
    the whole output on every call (docs/EMISSION.md, "float32 past order 12")."""
    points = jnp.linspace(-3.0, 0.2, 8, dtype=jnp.float32)
    if batched:
        closed = jax.make_jaxpr(jax.vmap(taylax.derivatives(pole, ORDER)))(points, points)
    else:
        closed = jax.make_jaxpr(taylax.derivatives(pole, ORDER))(NEAR)
    _, closed = _fallback_program(closed)
    cond = _fallback_cond(closed)
    for branch in cond.params["branches"]:
        inputs = set(branch.jaxpr.invars)
        assert not any(v in inputs for v in branch.jaxpr.outvars)
    got = jax.vmap(taylax.derivatives(pole, ORDER))(points, jnp.ones_like(points))
    for k in range(35):
        _close(got[-1, k], k, points[-1])
        _close(got[0, k], k, points[0])
