"""The jaxpr optimizer: DCE, CSE, safe identities and constant folding (re-exports only)."""

from ._api import (
    make_jaxpr as make_jaxpr,
    optimize_jaxpr as optimize_jaxpr,
    optimized as optimized,
)
