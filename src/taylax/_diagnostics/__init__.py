"""Compile diagnostics: why a jitted function traced or compiled again, and what it cost."""

from ._events import (
    CAUSES as CAUSES,
    CompileEvent as CompileEvent,
    FunctionSummary as FunctionSummary,
)
from ._expect import (
    CompileBudgetExceeded as CompileBudgetExceeded,
    ExpectCompiles as ExpectCompiles,
    expect_compiles as expect_compiles,
)
from ._warnings import RecompileWarning as RecompileWarning
from ._watch import Watch as Watch, watch as watch
