"""The state of the pass being traced (`taylax._pass`): one object, nested scopes that
restore it, and per thread."""

from __future__ import annotations

import threading

import jax.numpy as jnp

import taylax
from taylax import _compat, _pass
from taylax._interpret import register_rule


def test_scopes_nest_and_restore():
    assert _pass.state() == _pass.PassState()
    with _pass.taylor_pass(6, one_kernel=True):
        with _pass.loop_body(), _pass.reading_by_rows(True):
            assert _pass.state() == _pass.PassState(6, True, True, True)
            with _pass.taylor_pass(3):  # a sub-program's pass keeps the loop body
                assert (_pass.pass_order(), _pass.in_loop_body()) == (3, True)
                assert not _pass.one_kernel_pass()
        assert _pass.state() == _pass.PassState(order=6, one_kernel=True)
    assert _pass.pass_order() is None and not _pass.read_row_by_row()


def test_each_thread_has_its_own_state():
    seen = []

    def other():
        seen.append(_pass.state())

    with _pass.taylor_pass(5), _pass.reading_by_rows(True):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == [_pass.PassState()]


def test_rules_see_the_order_of_their_pass():
    p = _compat.Primitive("taylax_test_pass_order")
    p.def_abstract_eval(lambda x: x)
    p.def_impl(lambda x: x)
    seen = []

    @register_rule(p)
    def rule(order, x):
        seen.append(_pass.pass_order())
        return x

    taylax.derivatives(lambda t: p.bind(jnp.sin(t)), 5)(0.3)
    assert seen == [5]
