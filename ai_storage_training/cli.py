"""The command line's machinery: subcommands wired from their modules, one-line argument errors, exit statuses.

``python -m ai_storage_training <subcommand>``: each subcommand lives in its own module exposing
``add_parser(subparsers)`` and ``run(args) -> int``; ``__main__.py`` lists the modules. A bad argument is
answered with one line naming it (exit 2), an error while running with one line (exit 3), never a traceback.
Arguments take their values through the checked types of ``cli_types`` (or ``choices``), so a bad path or
number is refused while parsing, before anything runs or is written.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

PROG = "python -m ai_storage_training"
EXIT_OK = 0
"""The command did its work (doctor: verdict ok or warning)."""
EXIT_CHECK_FAILED = 1
"""A check failed (doctor: critical verdict; stage, restore-test: a validation refused the data)."""
EXIT_BAD_ARGUMENTS = 2
"""An argument was refused (one line naming it and what was expected)."""
EXIT_ERROR = 3
"""An error while running: a tool or I/O failure (one line)."""
EXIT_BROKEN_PIPE = 141
"""Whoever read the output stopped reading (``| head``): 128 + SIGPIPE, as a shell tool ends, with nothing said."""
EXIT_STATUSES = (
    "Exit status: 0 ok (doctor: verdict ok or warning); 1 a check failed (doctor: critical verdict; stage, "
    "restore-test: a validation refused the data); 2 bad arguments; 3 an error while running (a tool or I/O "
    "failure); 141 the output's reader stopped reading (| head)."
)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block) naming the argument, with a hint."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(EXIT_BAD_ARGUMENTS, f"{self.prog}: error: {line} (see {self.prog} --help)\n")


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that states each option's default (``(default: 64)``) unless its text already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        quiet = action.default in (None, False, argparse.SUPPRESS) or "default" in text or not action.option_strings
        return text if quiet else f"{text} (default: %(default)s)"


def _subcommands_action(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def build_parser(modules: Iterable[str]) -> Parser:
    """The command line with one subcommand per module of this package named in ``modules``."""
    parser = Parser(prog=PROG, description="Training-side tools of ai-storage-platform.", epilog=EXIT_STATUSES)
    subparsers = parser.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    for name in modules:
        module = importlib.import_module(f"{__package__}.{name}")
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for added in set(subparsers.choices) - before:
            sub = subparsers.choices[added]
            sub.formatter_class = DefaultsFormatter
            sub.epilog = f"{sub.epilog}\n\n{EXIT_STATUSES}" if sub.epilog else EXIT_STATUSES
            sub.set_defaults(_run=module.run)
    return parser


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by its name."""
    return dict(_subcommands_action(parser).choices)


def main(modules: Iterable[str], argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the subcommand, map a failure while running to one line and exit status 3."""
    parser = build_parser(modules)
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) > 1 and f"{argv[0]} {argv[1]}" in subparsers_of(parser):  # a two-word subcommand: doctor job
        argv[:2] = [f"{argv[0]} {argv[1]}"]
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args._run
    prog = f"{PROG} {args.command}"
    try:
        return run(args)
    except BrokenPipeError:  # the reader went away (``list DIR | head``): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the contract: one line and exit 3 for any failure while running, never a traceback
        detail = " ".join(str(e).split()) or "no detail"
        print(f"{prog}: error: {type(e).__name__}: {detail}", file=sys.stderr)
        return EXIT_ERROR
