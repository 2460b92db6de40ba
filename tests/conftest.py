"""Shared test configuration: float64 everywhere, hypothesis profiles."""

import os

import jax
from hypothesis import HealthCheck, settings

# The float64 reference (tests/reference.py) needs x64; enable it before any test module
# creates an array.
jax.config.update("jax_enable_x64", True)

# Every example traces and compiles new programs (the nested-jvp oracle and taylax), so
# hypothesis' per-example deadline is meaningless; keep the number of examples modest so the
# whole suite stays fast. `HYPOTHESIS_PROFILE=thorough pytest ...` explores more.
for _name, _examples in (("taylax", 12), ("thorough", 200)):
    settings.register_profile(
        _name,
        deadline=None,
        max_examples=_examples,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "taylax"))
