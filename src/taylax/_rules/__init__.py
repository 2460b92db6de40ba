"""The Taylor rule table, one module per primitive family.

Importing this package registers every built-in rule into
`taylax._interpret.taylor_rules`.
"""

from . import (  # noqa: F401  (imported for their registrations)
    _arithmetic,
    _calls,
    _control,
    _decompositions,
    _linalg,
    _parallel,
    _reductions,
    _special,
    _structural,
    _transcendental,
)
