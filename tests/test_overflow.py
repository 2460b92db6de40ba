"""An overflow at a high order stays at the orders that overflow: every order below the
first whose true value leaves the dtype's range is finite and right (against mpmath), in
every dtype, through `derivatives`, `jet` and `taylor` under every platform's policy
(`taylor` in the compact form with the policy's `guarded_products` on), and so are the
gradients of those orders.

Before, a product's padding zeros met the overflowed coefficients of one factor
(`inf * 0`) and put NaN in every row below them, the primal too (`taylax._series`'s
`shifted_sum`, which now selects its padding, and the Toeplitz dot of scalar products,
guarded by the policy; the Toeplitz tables of series-matrix products, which select or
guard always). `derivatives` and `jet` run their unscaled fallback guarded.

The case: `h(t) = (1 / (t - c)) e^t` at `t0 = c + r`, a pole at distance `r` chosen per dtype
so that the coefficients overflow at about 60% of the order. Its normalized coefficients
are `y_k = e^t0 sum_{j<=k} (-1)^(k-j) / (j! r^(k-j+1))` and its derivatives `k! y_k`.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taylax

# dtype -> (order, tolerance relative to the largest coefficient up to k).
CASES = {
    "float16": (12, 2e-2),
    "bfloat16": (40, 6e-2),
    "float32": (40, 2e-4),
    "float64": (120, 1e-11),
    "complex64": (40, 2e-4),
    "complex128": (120, 1e-11),
}

POLICIES = {
    "cpu": taylax.CPU,
    "gpu": taylax.GPU,
    # Scalar products as one dot with a Toeplitz table (a large program's form).
    "compact": dataclasses.replace(taylax.CPU.compact(), name="compact-test"),
}


def _real_max(dtype) -> float:
    return float(jnp.finfo(jnp.dtype(dtype)).max)


def _setting(dtype: str):
    """(order, t0, r) for `dtype`: `r` puts the normalized coefficients' overflow at about
    60% of the order."""
    order, _ = CASES[dtype]
    r = math.exp(-math.log(_real_max(dtype)) / (0.6 * order))
    t0 = 1.0 + (0.1j if dtype.startswith("complex") else 0.0)
    return order, t0, r


def _truth(t0, r, order: int, derivatives: bool) -> list:
    """mpmath values of `h`'s normalized coefficients (or derivatives) 0..order."""
    mpmath.mp.dps = 60
    e = mpmath.exp(mpmath.mpc(t0.real, t0.imag) if isinstance(t0, complex) else t0)
    r = mpmath.mpf(r)
    out = []
    for k in range(order + 1):
        y = e * mpmath.fsum(
            (-1) ** (k - j) / (mpmath.factorial(j) * r ** (k - j + 1)) for j in range(k + 1)
        )
        out.append(y * mpmath.factorial(k) if derivatives else y)
    return out


def _magnitude(x) -> float:
    """The larger of the real and imaginary parts' magnitudes (what overflows)."""
    if isinstance(x, mpmath.mpc):
        return float(max(abs(x.real), abs(x.imag)))
    return float(abs(x))


def _check(got, truth, dtype: str, context: str):
    """Rows below the first overflowing order finite and within the dtype's tolerance
    (relative to the largest true value so far); that row and every row after it not
    finite (never a finite wrong number)."""
    got = np.asarray(np.asarray(got).astype(np.complex128 if "complex" in dtype else np.float64))
    limit = _real_max(dtype)
    first = next((k for k, y in enumerate(truth) if _magnitude(y) > limit), len(truth))
    assert 3 <= first < len(truth), f"{context}: the case does not overflow at a high order"
    _, rtol = CASES[dtype]
    scale = 0.0
    for k in range(first):
        want = complex(truth[k]) if "complex" in dtype else float(truth[k])
        scale = max(scale, abs(want))
        assert np.isfinite(got[k]), f"{context}: order {k} is {got[k]} (first overflow {first})"
        assert abs(got[k] - want) <= rtol * scale, (
            f"{context}: order {k} is {got[k]}, mpmath {want} (tolerance {rtol} x {scale:.3g})"
        )
    assert not np.isfinite(got[first:]).any(), (
        f"{context}: a finite value at an order whose true value overflows: "
        f"{got[first:][np.isfinite(got[first:])][:3]}"
    )


APIS = ["derivatives", "taylor", "jet"]


def _cases():
    """Every (api, dtype, policy); `make test` runs each dtype once (each api and each
    policy twice among them), `make test-slow` all."""
    for a, api in enumerate(APIS):
        for d, dtype in enumerate(sorted(CASES)):
            for p, policy in enumerate(sorted(POLICIES)):
                fast = a == d % len(APIS) and p == (d + d // len(APIS)) % len(POLICIES)
                marks = () if fast else (pytest.mark.slow,)
                yield pytest.param(api, dtype, policy, marks=marks)


def _for_taylor(policy):
    """`policy`, with `guarded_products` on for the compact form: `taylor` has no fallback
    pass, and the compact form's Toeplitz dots meet an overflowed coefficient with the
    table's zeros (`inf * 0`) unless guarded (shifted sums select their zeros)."""
    if not policy.scalar_products_as_dots:
        return policy
    return dataclasses.replace(policy, name=f"{policy.name}-guarded", guarded_products=True)


@pytest.mark.parametrize("api, dtype, policy", list(_cases()))
def test_low_orders_survive_an_overflow(api, dtype, policy):
    order, t0, r = _setting(dtype)
    x = jnp.asarray(t0, dtype)
    c = x - jnp.asarray(r, dtype)  # the pole, in the dtype: the truth uses t0 - c as it is
    r_exact = float(np.real(np.asarray(x, np.complex128) - np.asarray(c, np.complex128)))

    def h(t):
        # A product (a division's recurrence never met the bug): the pole's reciprocal,
        # whose coefficients overflow, times exp's.
        return (1 / (t - c)) * jnp.exp(t)

    one = jnp.asarray(1.0, dtype)
    chosen = _for_taylor(POLICIES[policy]) if api == "taylor" else POLICIES[policy]
    with taylax.emission_policy(chosen):
        if api == "derivatives":
            got = taylax.derivatives(h, order)(x)
        elif api == "taylor":
            primal, coeffs = taylax.taylor(h, order)(x, one)
            got = jnp.concatenate([primal[None], coeffs])
        else:
            terms = [one] + [jnp.zeros_like(one)] * (order - 1)
            primal, series = taylax.jet(h, (x,), (terms,))
            got = jnp.stack([primal, *series])
    t0_exact = complex(np.asarray(x, np.complex128)) if "complex" in dtype else float(x)
    truth = _truth(t0_exact, r_exact, order, derivatives=api != "taylor")
    _check(got, truth, dtype, f"{api} {dtype} {policy} K={order}")


# Unary steps of a random chain: smooth on the real line, so the only overflow is the
# pole's.
_STEPS = {
    "sin": jnp.sin,
    "cos": jnp.cos,
    "exp": lambda x: jnp.exp(0.5 * x),
    "tanh": jnp.tanh,
    "log1p_sq": lambda x: jnp.log1p(x * x),
    "sqrt": lambda x: jnp.sqrt(1 + x * x),
    "square": lambda x: x * x,
    "recip": lambda x: 1 / (2 + x * x),
}


@pytest.mark.slow
@settings(max_examples=6)
@given(
    steps=st.lists(st.sampled_from(sorted(_STEPS)), min_size=1, max_size=4),
    times_t=st.booleans(),
    r=st.floats(0.03, 0.08),
    t0=st.floats(-1.0, 1.0),
)
def test_random_chains_driven_to_overflow_keep_their_low_orders(steps, times_t, r, t0):
    # A random chain times a pole's reciprocal at distance r, float32 at order 32: the
    # stretched pass overflows and its fallback too from about order 25 (k!/r^k); orders
    # 0..8 must equal those of a pass of order 8, where nothing overflows.
    t0 = np.float32(t0)
    c = np.float32(t0 - r)

    def f(t):
        y = t
        for s in steps:
            y = _STEPS[s](y)
        if times_t:
            y = y * t
        return (1 / (t - c)) * y

    high = np.asarray(taylax.derivatives(f, 32)(t0), np.float64)
    low = np.asarray(taylax.derivatives(f, 8)(t0), np.float64)
    assert not np.isfinite(high).all(), "the case does not overflow"
    for k in range(9):
        scale = np.max(np.abs(low[: k + 1]))
        assert np.isfinite(high[k]), f"order {k} is {high[k]} ({steps}, times t: {times_t})"
        assert abs(high[k] - low[k]) <= 1e-3 * scale, (
            f"order {k}: {high[k]} at order 32, {low[k]} at order 8 ({steps})"
        )


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_taylor_keeps_the_orders_below_an_overflow_and_their_gradients(policy):
    # `taylor` has no fallback pass. A product's shifted sum once met the pole's
    # overflowed coefficients with its padding zeros (`inf * 0`): every order was NaN,
    # the primal too, unless the policy's `guarded_products` was set; and reverse mode
    # met them with the zero cotangents of the orders nobody reads.
    h = lambda a: lambda t: (1 / (t - a)) * jnp.exp(t)  # noqa: E731
    with taylax.emission_policy(_for_taylor(POLICIES[policy])):
        primal, coeffs = taylax.taylor(h(0.99), 160)(1.0, 1.0)
        assert not np.isfinite(coeffs[-1]), "the case does not overflow"
        np.testing.assert_allclose(primal, np.exp(1.0) / 0.01, rtol=1e-12)
        np.testing.assert_allclose(coeffs[0], np.exp(1.0) * (1 / 0.01 - 1 / 0.01**2), rtol=1e-10)
        grad = jax.grad(lambda a: taylax.taylor(h(a), 160)(1.0, 1.0)[1][1])(0.99)
        low = jax.grad(lambda a: taylax.taylor(h(a), 4)(1.0, 1.0)[1][1])(0.99)
    assert np.isfinite(grad)
    np.testing.assert_allclose(grad, low, rtol=1e-12)


@pytest.mark.parametrize("api", ["derivatives", "jet"])
def test_unstretched_passes_keep_the_gradients_below_an_overflow(api):
    # float64 below order 58 runs one pass, no stretch and no fallback: its coefficients
    # past the pole's overflow are not finite, and the gradient of order 2 must equal that
    # of a pass of order 4.
    h = lambda a: lambda t: (1 / (t - a)) * jnp.exp(t)  # noqa: E731

    def second(a, order):
        if api == "derivatives":
            return taylax.derivatives(h(a), order)(1.0)[2]
        terms = [1.0] + [0.0] * (order - 1)
        return taylax.jet(h(a), (1.0,), (terms,))[1][1]

    # The pole at 1e-7: the pass's own coefficients (1e7^k) overflow from order 44.
    a = 1 - 1e-7
    assert not np.isfinite(taylax.taylor(h(a), 57)(1.0, 1.0)[1][-1])
    grad = jax.grad(second)(a, 57)
    np.testing.assert_allclose(grad, jax.grad(second)(a, 4), rtol=1e-12)


def test_a_true_zero_below_the_overflow_is_kept():
    # Found by the random chains: log1p(t^2) / (t - c) at t0 = 0 (float32, order 32). The
    # stretched pass's order 1 is NaN (an overflow reached it through `inf * 0`), the
    # unscaled pass's is exactly 0, the true value; a 0 was never trusted (it may be an
    # underflow), but at order 1 an unscaled coefficient cannot underflow.
    c = np.float32(-0.0625)
    f = lambda t: (1 / (t - c)) * jnp.log1p(t * t)  # noqa: E731
    got = np.asarray(taylax.derivatives(f, 32)(np.float32(0.0)), np.float64)
    low = np.asarray(taylax.derivatives(f, 8)(np.float32(0.0)), np.float64)
    np.testing.assert_array_equal(got[:2], [0.0, 0.0])
    np.testing.assert_allclose(got[:9], low, rtol=1e-5)


@pytest.mark.parametrize("compact", [False, True], ids=["shifted sum", "toeplitz dot"])
def test_the_guard_poisons_rows_past_the_lower_factor_s_degree(compact):
    # A factor of degree 2 whose top coefficient overflowed, times exp's series: the rows
    # from 2 on read it, also past the factor's own degree, and must not come out as the
    # finite sums of the other terms (the dot's poison once stopped at row 2).
    from taylax._series import cauchy

    base = taylax.CPU.compact() if compact else dataclasses.replace(taylax.CPU, rows_max_order=0)
    guarded = dataclasses.replace(
        base,
        name="guarded",
        guarded_products=True,
        product_rows_max_order=0,
        stacked_product_rows_max_order=0,
    )
    a = jnp.asarray([0.25, 0.5, np.inf])
    b = jnp.asarray([math.e / math.factorial(k) for k in range(6)])
    with taylax.emission_policy(guarded):
        c = np.asarray(cauchy(a, b, 5))
    np.testing.assert_allclose(c[:2], [0.25 * b[0], 0.25 * b[1] + 0.5 * b[0]], rtol=1e-15)
    assert not np.isfinite(c[2:]).any(), c


# Products of series matrices: `dot_general` and convolutions past the orders their rows
# are unrolled to multiply a Toeplitz table of one factor by the other's rows, and the
# table's zeros meet every row. Each program is `(M / (t - c)) . (e^t N)` for a
# bilinear `.`, whose coefficients are `(M . N) y_k` with `y_k` the scalar case's.
_BILINEAR = {
    "matmul": ("ij,jk->ik", (2, 3), (3, 2)),
    "contract first axis": ("ji,jk->ik", (3, 2), (3, 2)),
    "batched": ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)),
    "matrix-vector": ("ij,j->i", (2, 3), (3,)),
    "vector-matrix, pole on the right": ("j,jk->k", (3,), (3, 2)),
    "convolution": ("conv", (4,), (3,)),
}


def _bilinear(name):
    spec, _, _ = _BILINEAR[name]
    if spec == "conv":
        return lambda x, y: jnp.convolve(x, y, precision="highest")
    return lambda x, y: jnp.einsum(spec, x, y, precision="highest")


def _entries(shape, seed):
    # Entries in [0.5, 1]: no true zero for a pole's overflow to turn into NaN
    # (`0 * inf` in the user's own scaling), and `M . N` of the order of one.
    return 0.5 + 0.5 * np.random.default_rng(seed).random(shape)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize(
    "small_product", [None, 0, 1 << 30], ids=["policy", "as dot", "every pair then a skew sum"]
)
@pytest.mark.parametrize("name", sorted(_BILINEAR))
def test_series_matrix_products_keep_the_orders_below_an_overflow(name, small_product, dtype):
    # Before, the Toeplitz table's zeros met the pole's overflowed rows (`inf * 0`) and
    # every order came out NaN, the primal too, in every dtype and policy.
    order, t0, r = _setting(dtype)
    _, sa, sb = _BILINEAR[name]
    pole_right = "right" in name
    m64, n64 = (
        (_entries(sb, 0), _entries(sa, 1)) if pole_right else (_entries(sa, 0), _entries(sb, 1))
    )
    m, n = m64.astype(dtype), n64.astype(dtype)
    x = jnp.asarray(t0, dtype)
    c = x - jnp.asarray(r, dtype)
    r_exact = float(np.real(np.asarray(x, np.complex128) - np.asarray(c, np.complex128)))
    op = _bilinear(name)

    def h(t):
        pole, smooth = (1 / (t - c)) * m, jnp.exp(t) * n
        return op(smooth, pole) if pole_right else op(pole, smooth)

    policy = (
        taylax.CPU
        if small_product is None
        else (dataclasses.replace(taylax.CPU, name="products", small_product=small_product))
    )
    with taylax.emission_policy(policy):
        primal, coeffs = taylax.taylor(h, order)(x, jnp.asarray(1.0, dtype))
    got = np.concatenate([np.asarray(primal)[None], np.asarray(coeffs)]).astype(np.complex128)
    t0_exact = complex(np.asarray(x, np.complex128)) if "complex" in dtype else float(x)
    y = _truth(t0_exact, r_exact, order, derivatives=False)
    mn = np.asarray(op(n64, m64) if pole_right else op(m64, n64))
    limit, (_, rtol) = _real_max(dtype), CASES[dtype]
    for index in np.ndindex(mn.shape):
        scale = 0.0
        for k in range(order + 1):
            want = complex(y[k] * mpmath.mpf(float(mn[index])))
            value = got[(k, *index)]
            context = f"{name} {dtype}: order {k} of entry {index} is {value}, mpmath {want}"
            if _magnitude(mpmath.mpc(want)) > limit:
                assert not np.isfinite(value), context + " (a finite value past an overflow)"
                continue
            scale = max(scale, abs(want))
            # Near the dtype's limit the sum may overflow on its way (any order of terms).
            if not np.isfinite(value) and _magnitude(mpmath.mpc(want)) > limit / 100:
                continue
            assert np.isfinite(value) and abs(value - want) <= rtol * scale, context
        assert scale > 0 and not np.isfinite(got[(order, *index)]), f"{name}: no overflow"


def test_series_matrix_products_keep_the_gradients_below_an_overflow():
    m, n = _entries((2, 3), 0), _entries((3, 2), 1)

    def first(a, order):
        h = lambda t: ((1 / (t - a)) * m) @ (jnp.exp(t) * n)  # noqa: E731
        return jnp.sum(taylax.taylor(h, order)(1.0, 1.0)[1][0])

    assert not np.isfinite(
        taylax.taylor(lambda t: ((1 / (t - 0.99)) * m) @ n, 160)(1.0, 1.0)[1][-1]
    ).all()
    grad = jax.grad(first)(0.99, 160)
    np.testing.assert_allclose(grad, jax.grad(first)(0.99, 4), rtol=1e-12)
