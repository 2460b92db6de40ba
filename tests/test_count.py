"""Tests for taylax._count: equation counts, recursively into sub-jaxprs."""

import collections
import doctest

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from taylax import _count
from taylax._count import count_equations, equation_counts


@jax.jit
def _inner(y):
    return jnp.sin(y) * y


def _program(x, xs):
    def body(carry, x_i):
        return carry + _inner(x_i), carry * x_i

    carry, _ = lax.scan(body, x, xs)
    return lax.cond(carry > 0.0, lambda a: jnp.exp(a) + a, jnp.cos, carry)


def _closed_jaxpr():
    return jax.make_jaxpr(_program)(np.float32(1.0), np.zeros(3, np.float32))


# top level: scan, gt, convert_element_type (bool -> int32 index), cond;
# scan body: jit, add, mul; jit body: sin, mul; cond branches: cos | exp, add.
_EXPECTED = collections.Counter(
    {
        "scan": 1,
        "gt": 1,
        "convert_element_type": 1,
        "cond": 1,
        "jit": 1,
        "add": 2,
        "mul": 2,
        "sin": 1,
        "cos": 1,
        "exp": 1,
    }
)


def test_counts_recurse_into_jit_scan_and_cond():
    assert equation_counts(_closed_jaxpr()) == _EXPECTED
    assert count_equations(_closed_jaxpr()) == 12


def test_accepts_open_jaxpr():
    assert equation_counts(_closed_jaxpr().jaxpr) == _EXPECTED
    assert count_equations(_closed_jaxpr().jaxpr) == 12


def test_shared_subprogram_counts_once_per_call_site():
    jaxpr = jax.make_jaxpr(lambda x: _inner(_inner(x)))(np.float32(1.0))
    assert equation_counts(jaxpr) == collections.Counter({"jit": 2, "sin": 2, "mul": 2})


def test_while_loop_counts_cond_and_body():
    def loop(x):
        return lax.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, x)

    counts = equation_counts(jax.make_jaxpr(loop)(np.float32(1.0)))
    assert counts == collections.Counter({"while": 1, "lt": 1, "mul": 1})


def test_custom_jvp_counts_call_jaxpr():
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), jnp.cos(primals[0]) * tangents[0]))
    counts = equation_counts(jax.make_jaxpr(f)(np.float32(1.0)))
    assert counts == collections.Counter({"custom_jvp_call": 1, "sin": 1})


def test_empty_jaxpr():
    assert count_equations(jax.make_jaxpr(lambda x: x)(1.0)) == 0


def test_rejects_other_types():
    with pytest.raises(TypeError, match="ClosedJaxpr or Jaxpr"):
        count_equations(lambda x: x)


def test_docstring_examples():
    failures, _ = doctest.testmod(_count, verbose=False)
    assert failures == 0
