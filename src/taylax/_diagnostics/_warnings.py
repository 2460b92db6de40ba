"""The warning a watch gives when one function compiles too often.

Its own module, below both the hooks that raise it and the watch that sets the budget,
so that neither has to import the other for it.
"""


class RecompileWarning(UserWarning):
    """A jitted function compiled more times than the watch's `recompile_budget`."""
