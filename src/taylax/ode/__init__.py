"""Taylor methods for ODEs: the solution's Taylor coefficients from any JAX vector field,
an adaptive Taylor integrator built on them, and a diffrax solver (`Taylor`, which needs
diffrax and is imported on first access)."""

import typing

from ._coefficients import coefficients as coefficients
from ._integrate import Solution as Solution, integrate as integrate
from ._small_loops import one_function_loops as one_function_loops
from ._tolerance import default_order as default_order

if typing.TYPE_CHECKING:
    from ._diffrax import Taylor as Taylor

__all__ = [
    "coefficients",
    "default_order",
    "integrate",
    "one_function_loops",
    "Solution",
    "Taylor",
]


def __getattr__(name: str):
    # `Taylor` imports diffrax, an optional dependency: it is loaded on first access, so
    # that `import taylax.ode` never imports diffrax.
    if name != "Taylor":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from ._diffrax import Taylor
    except ImportError as error:
        raise ImportError(
            "taylax.ode.Taylor needs diffrax, which could not be imported "
            f"({error}): pip install 'diffrax>=0.7' (or 'taylax[diffrax]')."
        ) from error
    globals()["Taylor"] = Taylor
    return Taylor


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Taylor"})
