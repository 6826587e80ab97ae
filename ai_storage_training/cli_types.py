"""Checked argument types for the command line, and writing an output file completely or not at all.

Each type is an argparse ``type=``: it turns the text into a value or raises ``ArgumentTypeError`` with what
was expected and what was given, so argparse names the argument in one line (``argument --saves: expected an
integer from 1 to 100; got '0'``). tests/training/test_cli.py generates bad values for every argument from
these types: an argument with a new type needs its row in that test's table.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def _refuse(expected: str, text: str, why: str = "") -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}; got {text!r}{f' ({why})' if why else ''}")


def _kind(path: Path) -> str:
    """What is at ``path``, for a message: 'no such path', 'a directory', 'a file', ..."""
    if not os.path.lexists(path):
        return "no such path"
    if path.is_dir():
        return "a directory"
    return "a file" if path.is_file() else "neither a file nor a directory"


def _existing(text: str, noun: str, what: str, found: Callable[[Path], bool]) -> Path:
    """``text`` as a path where ``found`` holds, else the refusal naming ``noun`` (and ``what``, when given)."""
    path = Path(text)
    if not text or not found(path):
        raise _refuse(f"an existing {noun}{f' ({what})' if what else ''}", text, _kind(path) if text else "empty")
    return path


@dataclass(frozen=True)
class Directory:
    """An existing directory (``what`` says which, for the message)."""

    what: str = ""

    def __call__(self, text: str) -> Path:
        return _existing(text, "directory", self.what, Path.is_dir)


@dataclass(frozen=True)
class File:
    """An existing regular file."""

    what: str = ""

    def __call__(self, text: str) -> Path:
        return _existing(text, "file", self.what, Path.is_file)


@dataclass(frozen=True)
class OutputFile:
    """A file to write: not a directory, in a directory that exists (the file itself may exist: replaced)."""

    what: str = ""

    def __call__(self, text: str) -> Path:
        path = Path(text)
        expected = f"a file path to write{f' ({self.what})' if self.what else ''} in an existing directory"
        if not text or text.endswith(os.sep):
            raise _refuse(expected, text, "empty" if not text else "a directory name")
        if path.is_dir():
            raise _refuse(expected, text, "a directory")
        parent = path.parent
        if not parent.is_dir():
            raise _refuse(expected, text, f"{parent}: {_kind(parent)}")
        return path


@dataclass(frozen=True)
class OutputDirectory:
    """A directory to create or fill: not a file, in a directory that exists (it may exist itself); with
    ``parents``, missing parents are made too, so only the nearest existing one must be a directory."""

    what: str = ""
    parents: bool = False

    def __call__(self, text: str) -> Path:
        path = Path(text)
        where = "under an existing directory" if self.parents else "in an existing directory"
        expected = f"a directory to write{f' ({self.what})' if self.what else ''} {where}"
        if not text:
            raise _refuse(expected, text, "empty")
        if os.path.lexists(path) and not path.is_dir():
            raise _refuse(expected, text, _kind(path))
        parent = path.absolute().parent
        while self.parents and not os.path.lexists(parent) and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise _refuse(expected, text, f"{parent}: {_kind(parent)}")
        return path


@dataclass(frozen=True)
class Name:
    """A name that is one path component: letters, digits, '.', '_' or '-', not starting with '.' or '-'."""

    what: str = "a name"

    def __call__(self, text: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", text):
            why = "empty" if not text else "too long" if len(text) > 128 else "a character or start not allowed"
            raise _refuse(
                f"{self.what}: 1-128 letters, digits, '.', '_' or '-', not starting with '.' or '-'", text, why
            )
        return text


@dataclass(frozen=True)
class Hex:
    """Exactly ``digits`` hexadecimal digits (a digest such as SHA-256: 64), returned in lower case."""

    digits: int

    def __call__(self, text: str) -> str:
        if not re.fullmatch(rf"[0-9A-Fa-f]{{{self.digits}}}", text):
            why = f"{len(text)} characters" if len(text) != self.digits else "not hexadecimal"
            raise _refuse(f"{self.digits} hexadecimal digits", text, why)
        return text.lower()


@dataclass(frozen=True)
class Integer:
    """A whole number from ``minimum`` to ``maximum``."""

    minimum: int
    maximum: int

    def __call__(self, text: str) -> int:
        expected = f"an integer from {self.minimum} to {self.maximum}"
        try:
            value = int(text)
        except ValueError:
            raise _refuse(expected, text) from None
        if not self.minimum <= value <= self.maximum:
            raise _refuse(expected, text, "out of range")
        return value


@dataclass(frozen=True)
class Number:
    """A finite number from ``minimum`` to ``maximum``."""

    minimum: float
    maximum: float

    def __call__(self, text: str) -> float:
        expected = f"a number from {self.minimum:g} to {self.maximum:g}"
        try:
            value = float(text)
        except ValueError:
            raise _refuse(expected, text) from None
        if not math.isfinite(value):
            raise _refuse(expected, text, "not finite")
        if not self.minimum <= value <= self.maximum:
            raise _refuse(expected, text, "out of range")
        return value


URL = re.compile(r"https?://[^\s/?#]+[^\s]*")


@dataclass(frozen=True)
class Pattern:
    """Text that matches ``regex`` whole; ``expected`` says what it is, ``example`` is one that matches."""

    expected: str
    regex: str
    example: str

    def __call__(self, text: str) -> str:
        if not re.fullmatch(self.regex, text):
            raise _refuse(self.expected, text)
        return text


@dataclass(frozen=True)
class Source:
    """An http(s) URL, or an existing regular file."""

    what: str = ""

    def __call__(self, text: str) -> str:
        if URL.fullmatch(text):
            return text
        return str(_existing(text, "file or an http(s) URL", self.what, Path.is_file))
