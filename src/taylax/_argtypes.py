"""argparse value types for the command line: bounded numbers with full-sentence errors."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def bounded(
    kind: type,
    minimum: float,
    *,
    strict: bool = False,
    what: str = "a whole number",
    example: str = "10",
    why: str = "",
) -> Callable[[str], float]:
    """An argparse `type` that parses `kind` (int or float) and checks a lower bound.

    Args:
      kind: `int` or `float`.
      minimum: the smallest value allowed (excluded when `strict`).
      strict: require a value greater than `minimum`.
      what: what a value is, for the parse error ("a number of seconds").
      example: a valid value, for the parse error.
      why: appended to the bound error ("for the table to fit").

    Returns:
      A function of the flag's text; argparse puts the flag's name before its errors.

    Example:
      >>> bounded(int, 1)("3")
      3
    """

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {what} such as {example}, but got {text!r}."
            ) from None
        ok = value > minimum if strict else value >= minimum  # also rejects nan
        if not ok:
            bound = f"more than {minimum:g}" if strict else f"at least {minimum:g}"
            reason = f" {why}" if why else ""
            raise argparse.ArgumentTypeError(f"must be {bound}{reason}, but got {text}.")
        return value

    return parse
