"""Differential operators against dense jax.hessian / nested jax.jacfwd, float64."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import taylax
from taylax._operators import _multi_indices, interpolation_weight

jax.config.update("jax_enable_x64", True)


def init_mlp(d, width=12, depth=3, seed=0):
    key = jax.random.PRNGKey(seed)
    sizes = [d] + [width] * depth + [1]
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        key, k1, k2 = jax.random.split(key, 3)
        params.append(
            (jax.random.normal(k1, (m, n)) / np.sqrt(m), 0.1 * jax.random.normal(k2, (n,)))
        )
    return params


def tanh_mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return (x @ w + b)[0]


def residual_net(params, x):
    """Residual connections, softplus and gelu (custom_jvp rules), a final non-linearity."""
    h = jax.nn.softplus(x @ params[0][0] + params[0][1])
    for w, b in params[1:-1]:
        h = h + jax.nn.gelu(h @ w + b)
    w, b = params[-1]
    return jnp.tanh((h @ w + b)[0])


PARAMS = init_mlp(4)


def _chain(x):
    return jnp.sum(jnp.sin(x) * x[0]) * jnp.exp(x[1]) / (1 + x[2] ** 2) + jnp.tanh(x @ x)


def _vector_out(x):
    return jnp.stack([jnp.sum(x**3), jnp.prod(jnp.cos(x)), jnp.log1p(x @ x)])


def _matrix_input(x):
    return jnp.sum(jnp.tanh(x @ x.T)) + jnp.sum(x[0] ** 4)


def _controlled(x):
    def body(c, xi):
        return c * jnp.cos(xi) + xi**2, None

    out, _ = jax.lax.scan(body, 1.0, x)
    return jax.lax.cond(x[0] > 0, lambda y: y * jnp.exp(y), lambda y: -y, out)


FUNCTIONS = {
    "tanh_mlp": (lambda x: tanh_mlp(PARAMS, x), (4,)),
    "residual_softplus_gelu": (lambda x: residual_net(PARAMS, x), (4,)),
    "chain": (_chain, (4,)),
    "vector_output": (_vector_out, (3,)),
    "matrix_input": (_matrix_input, (2, 3)),
    "scan_and_cond": (_controlled, (3,)),
    "scalar_input": (lambda t: jnp.sin(t) * t**3, ()),
}


def _point(shape, seed=1):
    return jax.random.uniform(jax.random.PRNGKey(seed), shape, minval=0.1, maxval=0.9)


def _hessian(f, x):
    """Dense Hessian with inputs flattened: shape `S + (d, d)`."""
    h = jax.hessian(f)(x)
    out_shape = jnp.shape(f(x))
    return h.reshape(out_shape + (x.size, x.size))


def _close(a, b, rtol=1e-12):
    a, b = np.asarray(a), np.asarray(b)
    scale = max(np.max(np.abs(b)), 1e-300)
    assert a.shape == b.shape
    assert np.max(np.abs(a - b)) <= rtol * scale, (a, b)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_laplacian_equals_hessian_trace(name):
    f, shape = FUNCTIONS[name]
    x = _point(shape)
    h = _hessian(f, x)
    _close(taylax.laplacian(f)(x), jnp.trace(h, axis1=-2, axis2=-1))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_hessian_diagonal_equals_hessian(name):
    f, shape = FUNCTIONS[name]
    x = _point(shape)
    h = _hessian(f, x)
    diag = jnp.diagonal(h, axis1=-2, axis2=-1)
    expected = diag.reshape(diag.shape[:-1] + tuple(shape))
    _close(taylax.hessian_diagonal(f)(x), expected)


def test_laplacian_under_jit_and_vmap_with_extra_arguments():
    xs = jax.random.normal(jax.random.PRNGKey(0), (5, 4))

    def reference(params, x):
        return jnp.trace(jax.hessian(lambda x: tanh_mlp(params, x))(x))

    # `laplacian(f)(x, *args)`: derivatives in the first argument, the rest held fixed.
    lap = jax.jit(jax.vmap(lambda x: taylax.laplacian(lambda x, p: tanh_mlp(p, x))(x, PARAMS)))
    _close(lap(xs), jax.vmap(lambda x: reference(PARAMS, x))(xs))


def test_pytree_output():
    f = lambda x: {"a": jnp.sum(x**3), "b": (jnp.sin(x), 2)}  # noqa: E731
    x = _point((3,))
    out = taylax.laplacian(f)(x)
    _close(out["a"], jnp.sum(6 * x))
    _close(out["b"][0], -jnp.sin(x))
    assert out["b"][1] == 0  # an integer output does not vary


@pytest.mark.parametrize("loss_of", ["closed_over", "passed_in"])
def test_grad_of_laplacian_loss_matches_hessian_version(loss_of):
    xs = jax.random.normal(jax.random.PRNGKey(3), (6, 4))
    if loss_of == "closed_over":

        def loss(params):
            lap = taylax.laplacian(lambda x: residual_net(params, x))
            return jnp.mean(jax.vmap(lap)(xs) ** 2)
    else:

        def loss(params):
            lap = taylax.laplacian(lambda x, p: residual_net(p, x))
            return jnp.mean(jax.vmap(lambda x: lap(x, params))(xs) ** 2)

    def dense_loss(params):
        def lap(x):
            return jnp.trace(jax.hessian(lambda x: residual_net(params, x))(x))

        return jnp.mean(jax.vmap(lap)(xs) ** 2)

    ours = jax.grad(loss)(PARAMS)
    theirs = jax.grad(dense_loss)(PARAMS)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        _close(a, b, rtol=1e-10)


def test_laplacian_applies_its_factor_inside_the_pass():
    """`2 = 2!` multiplies where a chain's `y_2 = g'' / 2` is made, not the output: a
    multiply of the output was a kernel of its own, 8-10 ms of XLA:CPU compile time for
    a d = 8 Laplacian (about a tenth of its first call)."""
    f = lambda x: tanh_mlp(PARAMS, x)  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.vmap(taylax.laplacian(f)))(jnp.ones((8, 4))).jaxpr
    (out,) = jaxpr.outvars
    producer = next(e for e in jaxpr.eqns if out in e.outvars)
    assert producer.primitive.name in ("jit", "pjit")
    inner = producer.params["jaxpr"].jaxpr
    literals = [
        v.val
        for e in inner.eqns
        if e.primitive.name == "mul"
        for v in e.invars
        if hasattr(v, "val")
    ]
    assert 0.5 not in literals and 2.0 not in literals


def _many_directions_network(d: int):
    """`f(x, w1) = tanh(sin(x) w1) w2` on `d` inputs, a point `x`, the weights `w1`, and
    the generator that drew them (for further draws)."""
    rng = np.random.default_rng(d)
    w1 = jnp.asarray(rng.normal(size=(d, 6)) / np.sqrt(d))
    w2 = jnp.asarray(rng.normal(size=(6,)))

    def f(x, w1):
        return jnp.tanh(jnp.sin(x) @ w1) @ w2

    return f, jnp.asarray(rng.normal(size=d)), w1, rng


@pytest.mark.parametrize(
    "d, max_unrolled, passes, loop",
    [(64, None, 2, False), (70, None, 2, False), (70, 1, 1, True), (64, 1, 0, True)],
)
def test_many_directions_run_in_blocks(d, max_unrolled, passes, loop, emission):
    """From the CPU policy's `blocked_min_directions` on, summed passes run in blocks of
    directions: a few unrolled blocks of equal size, or a loop over full blocks and a remainder. The
    Laplacian, the weighted one and their gradient with respect to parameters equal the
    dense versions either way."""
    assert d >= taylax.CPU.blocked_min_directions
    if max_unrolled is None:
        emission()
    else:
        emission(unrolled_max_blocks=max_unrolled)
    f, x, w1, rng = _many_directions_network(d)
    h = jax.hessian(f)(x, w1)
    _close(jax.jit(taylax.laplacian(f))(x, w1), jnp.trace(h))
    a = jnp.asarray(rng.normal(size=(d, d)))
    _close(taylax.weighted_laplacian(lambda x: f(x, w1), a)(x), jnp.sum(a * h))
    grad = jax.grad(lambda w: taylax.laplacian(f)(x, w))(w1)
    _close(grad, jax.grad(lambda w: jnp.trace(jax.hessian(f)(x, w)))(w1), rtol=1e-10)
    # Outside a loop: the unrolled blocks, or the remainder after the loop.
    names = [e.primitive.name for e in jax.make_jaxpr(taylax.laplacian(f))(x, w1).eqns]
    assert sum(name in ("jit", "pjit") for name in names) == passes
    assert ("scan" in names) == loop


def test_other_backends_take_all_directions_in_one_pass():
    # Blocks of directions are taken under the CPU policy only (on an H200 they gained
    # nothing): under the GPU's one summed pass, with the same Laplacian.
    net, x, w1, _ = _many_directions_network(taylax.CPU.blocked_min_directions)

    def f(x):
        return net(x, w1)

    def names(policy):
        with taylax.emission_policy(policy):
            return [e.primitive.name for e in jax.make_jaxpr(taylax.laplacian(f))(x).eqns]

    blocked, names = names(taylax.CPU), names(taylax.GPU)
    assert blocked.count("jit") == 2 and names.count("jit") == 1 and "scan" not in names
    _close(jax.jit(taylax.laplacian(f))(x), jnp.trace(jax.hessian(f)(x)))


# --------------------------------------------------------------------------
# Weighted Laplacian
# --------------------------------------------------------------------------


def test_weighted_laplacian_constant_matrix_any_sign():
    f, _ = FUNCTIONS["chain"]
    x = _point((4,))
    a = np.random.default_rng(0).normal(size=(4, 4))  # indefinite and not symmetric
    _close(taylax.weighted_laplacian(f, a)(x), jnp.sum(a * _hessian(f, x)))


def test_weighted_laplacian_traced_and_point_dependent():
    f, _ = FUNCTIONS["tanh_mlp"]
    x = _point((4,))
    a = jnp.asarray(np.random.default_rng(1).normal(size=(4, 4)))
    h = _hessian(f, x)
    traced = jax.jit(lambda a: taylax.weighted_laplacian(f, a)(x))(a)
    _close(traced, jnp.sum(a * h))
    # Differentiable in `a`: d/da sum(a * H) = H.
    _close(jax.grad(lambda a: taylax.weighted_laplacian(f, a)(x))(a), h)

    def a_of(x):
        return jnp.outer(x, x) + jnp.eye(4)

    _close(taylax.weighted_laplacian(f, a_of)(x), jnp.sum(a_of(x) * h))


def test_weighted_laplacian_factor():
    f, _ = FUNCTIONS["residual_softplus_gelu"]
    x = _point((4,))
    s = np.random.default_rng(2).normal(size=(4, 2))
    h = _hessian(f, x)
    _close(taylax.weighted_laplacian(f, factor=s)(x), jnp.sum((s @ s.T) * h))
    _close(
        taylax.weighted_laplacian(f, factor=lambda x: jnp.diag(x))(x),
        jnp.sum(jnp.diag(x**2) * h),
    )


# --------------------------------------------------------------------------
# Biharmonic, general operators, derivative tensors
# --------------------------------------------------------------------------


def _fourth(f, x):
    t = jax.jacfwd(jax.jacfwd(jax.hessian(f)))(x)
    return t.reshape(jnp.shape(f(x)) + (x.size,) * 4)


@pytest.mark.parametrize("name", ["tanh_mlp", "residual_softplus_gelu", "chain", "scalar_input"])
def test_biharmonic_exact(name):
    f, shape = FUNCTIONS[name]
    x = _point(shape)
    t = _fourth(f, x)
    d = x.size
    expected = sum(t[..., i, i, j, j] for i in range(d) for j in range(d))
    _close(taylax.biharmonic(f)(x), expected, rtol=1e-10)


def test_interpolation_weights_reproduce_every_mixed_partial():
    """sum_j gamma_ij D^p f[j] / p! = d^i f for a polynomial with known partials."""
    d, p = 3, 4
    rng = np.random.default_rng(0)
    indices = _multi_indices(d, p)
    partials = {k: int(rng.integers(-9, 9)) for k in indices}

    def directional(j):  # D^p f[j] / p! = sum_k j^k d^k f / k!
        return sum(
            math.prod(jl**kl / math.factorial(kl) for jl, kl in zip(j, k)) * partials[k]
            for k in indices
        )

    for i in indices:
        value = sum(float(interpolation_weight(i, j)) * directional(j) for j in indices)
        assert value == pytest.approx(partials[i], abs=1e-9)


def test_differential_operator_mixed_orders():
    f, _ = FUNCTIONS["chain"]
    x = _point((4,))
    coefficients = {
        (0, 0, 0, 0): 0.5,
        (1, 0, 0, 0): 3.0,
        (1, 1, 0, 0): 2.0,
        (0, 0, 0, 2): -1.0,
        (2, 1, 0, 0): 0.25,
        (1, 1, 1, 1): 1.5,
        (0, 3, 0, 1): -0.75,
    }
    g = jax.grad(f)(x)
    h = _hessian(f, x)
    t3 = jax.jacfwd(jax.hessian(f))(x)
    t4 = _fourth(f, x)
    expected = (
        0.5 * f(x)
        + 3.0 * g[0]
        + 2.0 * h[0, 1]
        - h[3, 3]
        + 0.25 * t3[0, 0, 1]
        + 1.5 * t4[0, 1, 2, 3]
        - 0.75 * t4[1, 1, 1, 3]
    )
    _close(taylax.differential_operator(f, coefficients)(x), expected, rtol=1e-10)


def test_differential_operator_first_order_only_and_traced_coefficients():
    f, _ = FUNCTIONS["tanh_mlp"]
    x = _point((4,))
    c = jnp.asarray([1.0, -2.0])

    def op(c):
        return taylax.differential_operator(f, {(1, 0, 0, 0): c[0], (0, 0, 1, 0): c[1]})(x)

    g = jax.grad(f)(x)
    _close(jax.jit(op)(c), g[0] - 2 * g[2])
    _close(jax.grad(op)(c), jnp.stack([g[0], g[2]]))


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_derivative_tensor_matches_nested_jacfwd(order):
    f, _ = FUNCTIONS["vector_output"]
    x = _point((3,))
    nested = f
    for _ in range(order):
        nested = jax.jacfwd(nested)
    _close(taylax.derivative_tensor(f, order)(x), nested(x), rtol=1e-10)


def test_derivative_tensor_unique_entries():
    f, _ = FUNCTIONS["matrix_input"]
    x = _point((2, 3))
    indices, values = taylax.derivative_tensor(f, 3, unique=True)(x)
    assert indices.shape == (math.comb(6 + 2, 3), 6)
    assert np.all(np.sum(indices, 1) == 3)
    full = jax.jacfwd(jax.hessian(f))(x).reshape((6,) * 3)
    for j, v in zip(np.asarray(indices), np.asarray(values)):
        axes = [a for a, n in enumerate(j) for _ in range(n)]
        assert v == pytest.approx(float(full[tuple(axes)]), rel=1e-10, abs=1e-12)


# --------------------------------------------------------------------------
# Stochastic estimators: means within 3 standard errors, fixed keys
# --------------------------------------------------------------------------


def _within_three_standard_errors(samples, exact):
    samples = np.asarray(samples)
    mean = samples.mean()
    stderr = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(mean - exact) <= 3 * stderr, (mean, exact, stderr)
    return stderr


@pytest.mark.parametrize("distribution", ["rademacher", "gaussian"])
def test_stochastic_laplacian_is_unbiased(distribution):
    f, _ = FUNCTIONS["chain"]
    x = _point((4,))
    exact = float(jnp.trace(_hessian(f, x)))
    keys = jax.random.split(jax.random.PRNGKey(7), 10_000)

    def one(key):
        return taylax.laplacian(f, key=key, samples=1, distribution=distribution)(x)

    stderr = _within_three_standard_errors(jax.jit(jax.vmap(one))(keys), exact)
    assert stderr > 0  # the estimator is random: a zero spread would mean a bug
    # Many samples in one call average them.
    many = taylax.laplacian(f, key=keys[0], samples=10_000, distribution=distribution)(x)
    assert abs(float(many) - exact) <= 4 * stderr  # an independent mean of as many


def test_stochastic_biharmonic_is_unbiased():
    f, _ = FUNCTIONS["tanh_mlp"]
    x = _point((4,))
    t = _fourth(f, x)
    exact = float(sum(t[i, i, j, j] for i in range(4) for j in range(4)))
    keys = jax.random.split(jax.random.PRNGKey(11), 10_000)
    one = jax.jit(jax.vmap(lambda k: taylax.biharmonic(f, key=k, samples=1)(x)))
    _within_three_standard_errors(one(keys), exact)


# --------------------------------------------------------------------------
# Bad input: full sentences that name the argument
# --------------------------------------------------------------------------


def test_errors_name_the_argument():
    f = lambda x: jnp.sum(x**2)  # noqa: E731
    with pytest.raises(TypeError, match="`x`.*real floating-point"):
        taylax.laplacian(f)(jnp.arange(3))
    with pytest.raises(TypeError, match="complex"):
        taylax.laplacian(f)(jnp.ones(3, jnp.complex128))
    with pytest.raises(ValueError, match="`samples` needs `key`"):
        taylax.laplacian(f, samples=3)
    with pytest.raises(ValueError, match="`samples` must be a positive"):
        taylax.biharmonic(f, key=jax.random.PRNGKey(0), samples=0)
    # The distribution is checked when the operator is built, with or without a key.
    with pytest.raises(ValueError, match="`distribution` must be 'rademacher' or 'gaussian'"):
        taylax.laplacian(f, key=jax.random.PRNGKey(0), samples=2, distribution="uniform")
    with pytest.raises(ValueError, match="`distribution` chooses the random directions"):
        taylax.laplacian(f, distribution="gaussian")
    with pytest.raises(TypeError, match="`x`, which must be one array; got a dict"):
        taylax.laplacian(f)({"a": jnp.ones(2)})
    with pytest.raises(ValueError, match="exactly one of `a` and `factor`"):
        taylax.weighted_laplacian(f)
    with pytest.raises(ValueError, match=r"`a` must be a \(3, 3\) matrix"):
        taylax.weighted_laplacian(f, np.eye(2))(jnp.ones(3))
    with pytest.raises(ValueError, match="multi-indices of 2"):
        taylax.differential_operator(f, {(1, 0, 0): 1.0})(jnp.ones(2))
    with pytest.raises(TypeError, match="non-empty mapping"):
        taylax.differential_operator(f, {})
    with pytest.raises(ValueError, match="at least 1"):
        taylax.derivative_tensor(f, 0)
    with pytest.raises(TypeError, match="callable `fun`"):
        taylax.laplacian(3.0)


EMPTY_OPERATORS = [
    ("laplacian", lambda f: taylax.laplacian(f), lambda h: jnp.trace(h)),
    (
        "laplacian_stochastic",
        lambda f: taylax.laplacian(f, key=jax.random.PRNGKey(0), samples=3),
        lambda h: jnp.trace(h),
    ),
    ("hessian_diagonal", lambda f: taylax.hessian_diagonal(f), lambda h: jnp.diagonal(h)),
    ("biharmonic", lambda f: taylax.biharmonic(f), lambda h: jnp.trace(h)),
    (
        "biharmonic_stochastic",
        lambda f: taylax.biharmonic(f, key=jax.random.PRNGKey(0), samples=3),
        lambda h: jnp.trace(h),
    ),
    ("derivative_tensor", lambda f: taylax.derivative_tensor(f, 2), lambda h: h),
    ("weighted_laplacian", lambda f: taylax.weighted_laplacian(f, jnp.zeros((0, 0))), jnp.trace),
    (
        "weighted_traced",
        lambda f: taylax.weighted_laplacian(f, lambda x: jnp.zeros((0, 0))),
        jnp.trace,
    ),
    ("factor", lambda f: taylax.weighted_laplacian(f, factor=jnp.zeros((0, 2))), jnp.trace),
]


@pytest.mark.parametrize(
    "make, from_hessian", [e[1:] for e in EMPTY_OPERATORS], ids=[e[0] for e in EMPTY_OPERATORS]
)
def test_an_empty_x_gives_the_value_of_an_empty_sum(make, from_hessian):
    # With no entry to differentiate along, every sum over entries is empty: the
    # operators give what the same sums over `jax.hessian`'s (0, 0) Hessian give.
    f = lambda x: jnp.sum(jnp.sin(x)) + 1.0  # noqa: E731
    x = jnp.zeros((0,))
    want = from_hessian(jax.hessian(f)(x))
    got = make(f)(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_an_empty_x_gives_an_empty_unique_derivative_tensor():
    indices, values = taylax.derivative_tensor(lambda x: jnp.sum(x**3), 3, unique=True)(
        jnp.zeros((0,))
    )
    assert indices.shape == (0, 0) and values.shape == (0,)


def test_multi_indices_enumerate_the_simplex():
    for d, p in itertools.product(range(1, 4), range(1, 5)):
        indices = _multi_indices(d, p)
        assert len(indices) == math.comb(d + p - 1, p)
        assert len(set(indices)) == len(indices)
