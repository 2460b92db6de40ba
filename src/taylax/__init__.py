"""taylax: Taylor-mode higher-order derivatives for JAX.

k nested derivatives cost one pass of order k: every value of the program is
propagated as a truncated Taylor series, one stacked array per value.
"""

from . import ode as ode
from ._api import derivatives as derivatives, jet as jet, taylor as taylor
from ._count import equation_counts as equation_counts
from ._derivative import derivative as derivative, jacfwd as jacfwd
from ._diagnostics import (
    CompileBudgetExceeded as CompileBudgetExceeded,
    RecompileWarning as RecompileWarning,
    expect_compiles as expect_compiles,
    watch as watch,
)
from ._emitted import emitted_jaxpr as emitted_jaxpr
from ._interpret import (
    TaylorRule as TaylorRule,
    register_rule as register_rule,
    taylor_rules as taylor_rules,
)
from ._operators import (
    biharmonic as biharmonic,
    derivative_tensor as derivative_tensor,
    differential_operator as differential_operator,
    hessian_diagonal as hessian_diagonal,
    laplacian as laplacian,
    weighted_laplacian as weighted_laplacian,
)
from ._optimize import (
    make_jaxpr as make_jaxpr,
    optimize_jaxpr as optimize_jaxpr,
    optimized as optimized,
)
from ._policy import (
    CPU as CPU,
    DEFAULT as DEFAULT,
    GPU as GPU,
    EmissionPolicy as EmissionPolicy,
    emission_policy as emission_policy,
)
from ._series import Series as Series
from ._version import __version__ as __version__

__all__ = [
    "biharmonic",
    "CompileBudgetExceeded",
    "CPU",
    "DEFAULT",
    "derivative",
    "derivative_tensor",
    "derivatives",
    "differential_operator",
    "emission_policy",
    "EmissionPolicy",
    "emitted_jaxpr",
    "equation_counts",
    "expect_compiles",
    "GPU",
    "hessian_diagonal",
    "jacfwd",
    "jet",
    "laplacian",
    "make_jaxpr",
    "optimize_jaxpr",
    "optimized",
    "RecompileWarning",
    "register_rule",
    "Series",
    "taylor",
    "taylor_rules",
    "TaylorRule",
    "watch",
    "weighted_laplacian",
]
