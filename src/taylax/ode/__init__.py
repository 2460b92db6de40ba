"""Taylor methods for ODEs: the solution's Taylor coefficients from any JAX vector field,
and an adaptive Taylor integrator built on them."""

from ._coefficients import coefficients as coefficients
from ._integrate import Solution as Solution, integrate as integrate

__all__ = ["coefficients", "integrate", "Solution"]
