"""The `Series` type: a truncated Taylor series of one array value."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ._coeffs import Array
from ._marks import shielded
from ._rows import known_rows


class Series:
    """Truncated Taylor series of one array value.

    Holds either the stacked coefficients `(d+1, *shape)` or, for a constant,
    just the primal; each form is derived from the other on demand (and then
    cached) so that constants never emit stacking equations unless a rule needs
    them stacked.

    Taylor rules (`taylax.register_rule`) take and return series. `Series(coeffs)` holds
    normalized coefficients `x_k = x^(k)/k!` stacked on a leading axis; `coeffs`,
    `primal`, `degree`, `shape` and `dtype` read them back, and `Series.constant(x)` is a
    series of degree 0.

    !!! Example

        ```python
        import jax.numpy as jnp
        import taylax

        s = taylax.Series(jnp.array([[1.0, 2.0], [0.5, 0.0], [0.25, 1.0]]))
        s.degree, s.shape  # (2, (2,)): x(s) = x_0 + x_1 s + x_2 s^2 for two entries
        s.primal           # [1.0, 2.0], coefficient 0
        taylax.Series.constant(jnp.ones(2)).degree  # 0
        ```
    """

    __slots__ = ("_coeffs", "_primal")

    def __init__(self, coeffs: Array | None = None, *, primal: Array | None = None):
        if coeffs is None and primal is None:
            raise ValueError("Internal error: a Series needs coefficients or a primal.")
        self._coeffs = coeffs
        self._primal = primal

    @classmethod
    def constant(cls, x) -> Series:
        return cls(primal=x)

    @property
    def degree(self) -> int:
        return 0 if self._coeffs is None else self._coeffs.shape[0] - 1

    @property
    def is_constant(self) -> bool:
        return self.degree == 0

    @property
    def primal(self) -> Array:
        if self._primal is None:
            known = known_rows(self._coeffs)
            if known is not None:
                # Rules divide by primals (log, powers, quotients): see `shielded`.
                self._primal = shielded(known[0])
            else:
                self._primal = lax.index_in_dim(self._coeffs, 0, keepdims=False)
        return self._primal

    @property
    def coeffs(self) -> Array:
        if self._coeffs is None:
            self._coeffs = jnp.asarray(self._primal)[None]
        return self._coeffs

    @property
    def shape(self) -> tuple[int, ...]:
        # From the static shape: indexing a traced array would emit equations.
        if self._coeffs is None:
            return tuple(np.shape(self._primal))
        return tuple(self._coeffs.shape[1:])

    @property
    def dtype(self):
        src = self._primal if self._coeffs is None else self._coeffs
        return jnp.result_type(src)

    def __repr__(self) -> str:
        try:
            return f"Series(degree={self.degree}, shape={self.shape}, dtype={self.dtype})"
        except Exception:  # e.g. a leaked tracer: never fail inside an error message
            return "Series(<unavailable>)"
