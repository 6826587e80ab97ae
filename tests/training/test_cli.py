"""The training command line: bad arguments of every subcommand, generated from the parser, each answered with one
line naming the argument (exit 2, no traceback, nothing written); the exit statuses; one-line runtime errors.

The cases come from ``python -m ai_storage_training``'s own parser: every subcommand wired in ``__main__.py``,
every argument it takes, bad values chosen by the argument's checked type (``cli_types``) or its choices. A new
subcommand is covered once wired; an argument that takes any text fails ``test_every_argument_is_checked``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ai_storage_training import cli, cli_types
from ai_storage_training.__main__ import SUBCOMMANDS
from ai_storage_training.checkpoint import commit

PARSER = cli.build_parser(SUBCOMMANDS)
SUBPARSERS = cli.subparsers_of(PARSER)
CHECKED = tuple(v for v in vars(cli_types).values() if isinstance(v, type) and v.__module__ == cli_types.__name__)
"""The checked argument types (each needs its rows in good_value and bad_values)."""
NAMED_LATER = {"pack", "stage", "restore-test", "list", "doctor job"}
"""Subcommands other modules add (CONTRACTS.md); covered here as soon as __main__.py lists them."""


def valued(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments that take a value (not --help, not flags)."""
    return [a for a in parser._actions if a.nargs != 0 and not isinstance(a, argparse._HelpAction)]


def name_of(action: argparse.Action) -> str:
    """How argparse names the argument in its messages."""
    return "/".join(action.option_strings) if action.option_strings else (action.metavar or action.dest)


def good_value(action: argparse.Action) -> str:
    """A value the argument accepts ({tmp}: the test's directory, holding a-dir/, a-file and out/)."""
    if action.choices:
        return str(next(iter(action.choices)))
    kind = action.type
    if isinstance(kind, cli_types.Directory):
        return "{tmp}/a-dir"
    if isinstance(kind, cli_types.File):
        return "{tmp}/a-file"
    if isinstance(kind, cli_types.OutputFile):
        return "{tmp}/out/report.json"
    if isinstance(kind, cli_types.OutputDirectory):
        return "{tmp}/out/new-dir"
    if isinstance(kind, cli_types.Name):
        return "v1.0_rc-2"
    if isinstance(kind, cli_types.Hex):
        return "aB" * (kind.digits // 2) + "c" * (kind.digits % 2)
    if isinstance(kind, (cli_types.Integer, cli_types.Number)):
        return str(kind.minimum)
    if isinstance(kind, cli_types.Pattern):
        return kind.example
    if isinstance(kind, cli_types.Source):
        return "{tmp}/a-file"
    raise AssertionError(f"{name_of(action)}: no good value known for type {kind!r}")


def bad_values(action: argparse.Action) -> list[tuple[str, str]]:
    """(bad value, what the message must say) by the argument's type."""
    if action.choices:
        return [("no-such-choice", "invalid choice")]
    kind = action.type
    if isinstance(kind, (cli_types.Directory, cli_types.File)):
        wrong = ("{tmp}/a-file", "a file") if isinstance(kind, cli_types.Directory) else ("{tmp}/a-dir", "a directory")
        return [("{tmp}/missing", "no such path"), wrong, ("", "empty")]
    if isinstance(kind, cli_types.OutputFile):
        return [
            ("{tmp}/a-dir", "a directory"),
            ("{tmp}/missing/report.json", "no such path"),
            ("{tmp}/a-file/report.json", "a file"),
            ("{tmp}/out/", "a directory name"),
        ]
    if isinstance(kind, cli_types.OutputDirectory):
        return [
            ("{tmp}/a-file", "a file"),
            ("{tmp}/a-file/new-dir", "a file"),
            # made with its parents: only the nearest existing one must be a directory
            ("{tmp}/a-file/missing/new-dir", "a file") if kind.parents else ("{tmp}/missing/new-dir", "no such path"),
            ("", "empty"),
        ]
    if isinstance(kind, cli_types.Name):
        return [
            ("", "empty"),
            ("a/b", "not allowed"),
            ("..", "not allowed"),
            (".hidden", "not allowed"),
            ("x" * 129, "too long"),
        ]
    if isinstance(kind, cli_types.Hex):
        digits = kind.digits
        return [("", "0 characters"), ("a" * (digits + 1), "characters"), ("g" * digits, "not hexadecimal")]
    if isinstance(kind, cli_types.Integer):
        out = [(str(kind.minimum - 1), "out of range"), (str(kind.maximum + 1), "out of range")]
        wrong = [(v, "expected an integer") for v in ("x", "1.5", "nan", "")]
        return [*out, *wrong]
    if isinstance(kind, cli_types.Number):
        out = [(f"{kind.minimum - 1:g}", "out of range"), (f"{kind.maximum * 2:g}", "out of range")]
        not_finite = [(v, "not finite") for v in ("nan", "inf", "-inf", "1e999")]
        return [*out, *not_finite, ("x", "expected a number"), ("", "expected a number")]
    if isinstance(kind, cli_types.Pattern):
        return [("", kind.expected), ("x y", kind.expected)]
    if isinstance(kind, cli_types.Source):
        return [("{tmp}/missing", "no such path"), ("{tmp}/a-dir", "a directory"), ("ftp://x", "no such path")]
    raise AssertionError(f"{name_of(action)}: no bad values known for type {kind!r}")


def cases() -> list[tuple[str, str, str, str]]:
    """(subcommand, argument's dest, bad value, expected words) for every argument of every subcommand."""
    found = []
    for sub, parser in SUBPARSERS.items():
        for action in valued(parser):
            if action.choices is None and not isinstance(action.type, CHECKED):
                continue  # reported by test_every_argument_is_checked
            found += [(sub, action.dest, value, words) for value, words in bad_values(action)]
            if action.option_strings:
                found.append((sub, action.dest, "<missing>", "expected one argument"))
    return found


def command_line(sub: str, dest: str, value: str) -> list[str]:
    """The subcommand with good values for what it requires and ``value`` for ``dest`` (``<missing>``: its
    option last, with no value after it)."""
    argv, last = [sub], []
    for action in valued(SUBPARSERS[sub]):
        if action.dest == dest:
            if not action.option_strings:
                argv.append(value)
            elif value == "<missing>":
                last = [action.option_strings[0]]
            else:
                argv.append(f"{action.option_strings[0]}={value}")
        elif not action.option_strings:
            argv.append(good_value(action))
        elif action.required:
            argv.append(f"{action.option_strings[0]}={good_value(action)}")
    return argv + last


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ai_storage_training", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "out").mkdir()
    return tmp_path


def test_every_subcommand_module_exposes_add_parser_and_run():
    for name in SUBCOMMANDS:
        module = __import__(f"ai_storage_training.{name}", fromlist=["run"])
        assert callable(module.add_parser) and callable(module.run), name
    assert "doctor" in SUBPARSERS
    assert set(SUBPARSERS) - NAMED_LATER - {"doctor"} == set(), "a new subcommand: add it to CONTRACTS.md"


@pytest.mark.parametrize("sub", sorted(SUBPARSERS))
def test_every_argument_is_checked(sub):
    unchecked = [name_of(a) for a in valued(SUBPARSERS[sub]) if a.choices is None and not isinstance(a.type, CHECKED)]
    assert unchecked == [], f"{sub}: arguments taking any text (give each a cli_types type or choices): {unchecked}"


@pytest.mark.parametrize(("sub", "dest", "value", "words"), cases(), ids=lambda v: str(v) or "''")
def test_a_bad_argument_is_one_line_naming_it_exit_2_nothing_written(workspace, sub, dest, value, words):
    argv = [a.replace("{tmp}", str(workspace)) for a in command_line(sub, dest, value)]
    before = tree(workspace)
    proc = run_cli(*argv)
    action = next(a for a in valued(SUBPARSERS[sub]) if a.dest == dest)
    assert proc.returncode == cli.EXIT_BAD_ARGUMENTS, (argv, proc.stdout, proc.stderr)
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    line = proc.stderr
    assert any(n in line for n in (action.option_strings or [name_of(action)])), line
    assert words in line and f"{cli.PROG} {sub} --help" in line, line
    assert tree(workspace) == before  # nothing created, nothing half-written


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "the following arguments are required: SUBCOMMAND"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["doctor", ".", "--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["doctor"], "the following arguments are required: PATH"),
    ],
)
def test_a_bad_command_line_is_one_line_exit_2(argv, words):
    proc = run_cli(*argv)
    assert proc.returncode == cli.EXIT_BAD_ARGUMENTS and proc.stderr.count("\n") == 1, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("sub", [None, *sorted(SUBPARSERS)])
def test_help_states_the_exit_statuses(sub):
    proc = run_cli(*([sub] if sub else []), "--help")
    assert proc.returncode == 0
    assert " ".join(cli.EXIT_STATUSES.split()) in " ".join(proc.stdout.split())


@pytest.mark.parametrize("sub", sorted(SUBPARSERS))
def test_help_states_every_options_default(sub):
    parser = SUBPARSERS[sub]
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            help_text = " ".join((action.help or "").split())
            assert help_text in text and (f"(default: {action.default})" in text or "default" in help_text), action


SAMPLES = {
    cli_types.Directory: cli_types.Directory("the data"),
    cli_types.File: cli_types.File(),
    cli_types.OutputFile: cli_types.OutputFile(),
    cli_types.OutputDirectory: cli_types.OutputDirectory(),
    cli_types.Name: cli_types.Name("a version"),
    cli_types.Hex: cli_types.Hex(64),
    cli_types.Integer: cli_types.Integer(1, 100),
    cli_types.Number: cli_types.Number(0, 60),
    cli_types.Pattern: cli_types.Pattern("a duration", r"[0-9]+m", "10m"),
    cli_types.Source: cli_types.Source("a scrape"),
}
VARIANTS = [cli_types.OutputDirectory(parents=True)]
"""Types whose options change what they refuse."""


def test_every_checked_type_has_rows_and_refuses_each_bad_value(workspace):
    """The table covers every type, also those no wired subcommand uses yet (in process: the types alone)."""
    assert set(SAMPLES) == set(CHECKED), "a new type in cli_types: add a sample and its rows here"
    for kind in [*SAMPLES.values(), *VARIANTS]:
        action = argparse.ArgumentParser().add_argument("--x", type=kind)
        good = good_value(action).replace("{tmp}", str(workspace))
        assert kind(good) is not None
        for value, words in bad_values(action):
            with pytest.raises(argparse.ArgumentTypeError, match=re.escape(words)):
                kind(value.replace("{tmp}", str(workspace)))


def test_a_failure_while_running_is_one_line_and_exit_3(monkeypatch, tmp_path, capsys):
    from ai_storage_training.doctor import command as doctor

    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error", str(tmp_path / "shard-000.tar"))

    monkeypatch.setattr(doctor, "diagnose", broken)
    assert cli.main(SUBCOMMANDS, ["doctor", str(tmp_path)]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "doctor: error: OSError" in err and "shard-000.tar" in err


def test_an_output_file_is_written_completely_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text("the previous report\n")

    def failing_rename(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(commit.os, "rename", failing_rename)
    with pytest.raises(OSError):
        commit.write_atomically(target, b"a new report\n")
    assert target.read_text() == "the previous report\n" and tree(tmp_path) == ["report.json"]
    monkeypatch.undo()
    commit.write_atomically(target, b"a new report\n")
    assert target.read_text() == "a new report\n" and tree(tmp_path) == ["report.json"]
