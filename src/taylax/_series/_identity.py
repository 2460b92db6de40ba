"""Facts about particular arrays, recorded by identity while a pass is traced.

How a series was built decides how its readers should use it (its rows are buffers, it
is a line with a known direction, a shifted sum made it), and an equal array built
another way does not share that. So the facts are kept per array object, tracers
included: by `id`, with a weak reference that checks the entry is still that array and
lets it die with the array.
"""

from __future__ import annotations

import weakref


class ArrayMarks:
    """A set of arrays by identity, each with an optional value.

    !!! Example

        ```python
        import jax.numpy as jnp

        marks = ArrayMarks()
        x = marks.mark(jnp.ones(3), "a line")
        assert x in marks and marks.get(x) == "a line"
        assert jnp.ones(3) not in marks   # an equal array, not this one
        ```
    """

    def __init__(self) -> None:
        self._arrays: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._values: dict[int, object] = {}

    def mark(self, array, value=None):
        """Record `array` (and `value`, if any, for `get`); returns `array`."""
        key = id(array)
        self._arrays[key] = array
        if value is not None:
            self._values[key] = value
            # The value goes with the array: its id may be another array's later.
            weakref.finalize(array, self._values.pop, key, None)
        return array

    def __contains__(self, array) -> bool:
        return self._arrays.get(id(array)) is array

    def get(self, array):
        """The value recorded with `array` (this very array), or None."""
        return self._values.get(id(array)) if array in self else None
