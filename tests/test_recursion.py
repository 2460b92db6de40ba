"""The recursion benchmark (`benchmarks/recursion.py`): fresh-process measurement and fits."""

import math
import sys
from pathlib import Path

import pytest

# The benchmark scripts import their shared modules by plain name, as `python
# benchmarks/bench_x.py` puts benchmarks/ on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import recursion  # noqa: E402


def test_fitted_exponent_recovers_a_power_law():
    rows = [{"k": k, "equations": 7 * k**2} for k in (8, 12, 16, 24)]
    assert recursion.fitted_exponent(rows) == pytest.approx(2.0)
    # Fewer than two points at k >= k_min: no fit.
    assert math.isnan(recursion.fitted_exponent([{"k": 9, "equations": 10}]))


def test_max_relative_difference_is_relative_to_the_reference():
    a = {"value": [[1.0, 0.0], [0.0, 2.0 + 1e-9]]}
    b = {"value": [[1.0, 0.0], [0.0, 2.0]]}
    assert recursion.max_relative_difference(a, b) == pytest.approx(0.5e-9)


def test_measure_runs_fresh_processes_and_both_contenders_agree():
    ours = recursion.measure([2], "taylax", timeout_s=120)
    theirs = recursion.measure([2], "jax", timeout_s=120)
    assert [r["status"] for r in ours + theirs] == ["ok", "ok"]
    assert ours[0]["first_call_s"] > 0 and ours[0]["equations"] > 0
    assert recursion.max_relative_difference(ours[0], theirs[0]) < 1e-12
