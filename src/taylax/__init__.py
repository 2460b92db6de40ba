"""taylax: Taylor-mode higher-order derivatives for JAX.

k nested derivatives cost one pass of order k: every value of the program is
propagated as a truncated Taylor series, one stacked array per value.
"""

from ._api import derivatives as derivatives, jet as jet, taylor as taylor
from ._interpret import (
    TaylorRule as TaylorRule,
    register_rule as register_rule,
    taylor_rules as taylor_rules,
)
from ._series import Series as Series

__version__ = "0.1.0"
