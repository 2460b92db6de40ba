"""The taylax pytest plugin: an `expect_compiles` fixture and marker.

Registered through the ``pytest11`` entry point, so it is active wherever taylax is
installed::

    def test_step_does_not_recompile(expect_compiles):
        step(params, batch)                       # the first call compiles
        with expect_compiles(max=0):
            step(params, next_batch)              # same shapes: must not compile

    @pytest.mark.expect_compiles(max=1)           # the whole test body may compile once
    def test_one_compile():
        ...
"""

from __future__ import annotations

import pytest


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "expect_compiles(max=1, function=None): fail the test if jitted functions compile "
        "more than `max` times in its body (taylax.expect_compiles)",
    )


@pytest.fixture
def expect_compiles():
    """`taylax.expect_compiles`: ``with expect_compiles(max=0): ...`` fails on a compile."""
    from ._expect import expect_compiles as factory

    return factory


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("expect_compiles")
    if marker is None:
        return (yield)
    from ._expect import expect_compiles as factory

    # The check runs on exit only if the test body passed (a failure is reported as is).
    with factory(*marker.args, **marker.kwargs):
        return (yield)
