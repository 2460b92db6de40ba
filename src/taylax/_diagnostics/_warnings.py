"""The warning a watch gives when one function compiles too often.

Its own module, below both the hooks that raise it and the watch that sets the budget,
so that neither has to import the other for it.
"""


class RecompileWarning(UserWarning):
    """A jitted function compiled more times than the watch's `recompile_budget`.

    Given once per function (by `warnings.warn`) while a `taylax.watch` is active; filter
    it as any warning, or turn it into an error in tests.

    !!! Example

        ```python
        import warnings

        import jax
        import jax.numpy as jnp
        import taylax

        f = jax.jit(lambda x: x + 1)
        with warnings.catch_warnings(record=True) as caught, taylax.watch(recompile_budget=2):
            warnings.simplefilter("always")
            for n in range(1, 5):
                f(jnp.ones(n))  # a new shape each time: four compiles
        assert any(issubclass(w.category, taylax.RecompileWarning) for w in caught)
        ```
    """
