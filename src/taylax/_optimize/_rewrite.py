"""The forward rewriter shared by folding, simplification and CSE.

One walk over the equations, in order, with a substitution of variables: each
equation gets its (substituted) inputs, its sub-jaxprs are optimized by the
caller's function, then each *step* may forward its outputs to existing atoms,
emit replacement equations, or let it through. Steps see the program as
rewritten so far (`defs` maps a variable to the equation that now defines it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import _compat
from . import _ir

# A step returns True when it has handled the equation (forwarded or emitted it).
Step = Callable[["Rewriter", Any], bool]


class Rewriter:
    """State of one forward walk over a jaxpr.

    Attributes:
      known: constant variables with their concrete values (from ClosedJaxpr consts).
      allow_new_consts: whether a step may add constant variables (top level only:
        sub-jaxprs keep their signature and consts).
      unsafe_math: whether rewrites that may change nan/inf or rounding are allowed.
      changed: whether anything was rewritten.
    """

    def __init__(self, jaxpr, consts, *, steps: Sequence[Step], sub_fn, allow_new_consts, unsafe):
        self.jaxpr = jaxpr
        # Read once: where a jaxpr holds its constants' values, a rewritten one that has
        # not been given them yet lists its constants among its inputs (`_compat.input_vars`).
        self.constvars, self.invars = _compat.input_vars(jaxpr, len(consts))
        self.known: dict[Any, Any] = {}
        for v, c in zip(self.constvars, consts):
            value = None if c is None else _ir.concrete(c)
            if value is not None:
                self.known[v] = value
        self.consts = list(consts)
        self.steps = steps
        self.sub_fn = sub_fn
        self.allow_new_consts = allow_new_consts
        self.unsafe_math = unsafe
        self.changed = False
        self.sub: dict[Any, Any] = {}
        self.defs: dict[Any, Any] = {}
        self.order: dict[Any, int] = {}
        self.eqns: list = []
        self.new_constvars: list = []
        self.cse_table: dict[Any, list] = {}

    # -- atoms -------------------------------------------------------------------------

    def read(self, atom):
        """The atom that now stands for `atom`."""
        while _ir.is_var(atom) and atom in self.sub:
            atom = self.sub[atom]
        return atom

    def forward(self, outvar, atom) -> None:
        """Replaces every later use of `outvar` by `atom`."""
        if not isinstance(outvar, _compat.DropVar):
            self.sub[outvar] = self.read(atom)
        self.changed = True

    def _number(self, v) -> None:
        self.order[v] = len(self.order)

    def add_const(self, value, aval):
        """A new constant variable holding `value` (only when `allow_new_consts`)."""
        v = _compat.Var(aval)
        self.new_constvars.append(v)
        self.consts.append(value)
        self.known[v] = value
        self._number(v)
        return v

    # -- equations ---------------------------------------------------------------------

    def emit(self, eqn) -> None:
        """Appends `eqn` to the rewritten program as it is."""
        self.eqns.append(eqn)
        for v in eqn.outvars:
            self.defs[v] = eqn
            self._number(v)

    def process(self, eqn) -> None:
        """Runs the steps on `eqn` (inputs already substituted) and emits what is left."""
        for step in self.steps:
            if step(self, eqn):
                return
        self.emit(eqn)

    def new_eqn(self, primitive, invars, aval, params) -> Any:
        """Processes a new single-output equation and returns the atom of its result."""
        out = _compat.Var(aval)
        self.changed = True
        self.process(_compat.new_jaxpr_eqn(list(invars), [out], primitive, params, set()))
        return self.read(out)

    def run(self):
        """Rewrites the whole jaxpr; returns `(jaxpr, consts)`."""
        for v in (*self.constvars, *self.invars):
            self._number(v)
        for eqn in self.jaxpr.eqns:
            invars = [self.read(a) for a in eqn.invars]
            if any(a is not b for a, b in zip(invars, eqn.invars)):
                eqn = eqn.replace(invars=invars)
            params = _ir.map_params(eqn.params, self.sub_fn)
            if params is not eqn.params:
                eqn = eqn.replace(params=params)
                self.changed = True
            self.process(eqn)
        outvars = [self.read(a) for a in self.jaxpr.outvars]
        if not self.changed:
            return self.jaxpr, self.consts
        jaxpr = self.jaxpr.replace(
            constvars=[*self.constvars, *self.new_constvars],
            invars=list(self.invars),
            outvars=outvars,
            eqns=self.eqns,
        )
        return jaxpr, self.consts
