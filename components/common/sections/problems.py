"""A rejected setting (``Problem``: its key, the expectation, the value given and a hint) and the error that
carries every problem of a stack at once (``SettingsError``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class Problem:
    """One rejected setting: where it is, what was expected, what was given, and what to do."""

    key: str
    expected: str
    got: Any
    hint: str

    def __str__(self) -> str:
        got = "nothing" if self.got is MISSING else repr(self.got)
        return f"{self.key}: {self.expected}; got {got}. Hint: {self.hint}"


MISSING = object()
"""The ``got`` of a problem whose key was not given at all."""


class SettingsError(pulumi.RunError):
    """Raised when stack settings are invalid; Pulumi reports a RunError without a traceback."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid stack settings ({len(problems)} problem(s)):\n{lines}")
