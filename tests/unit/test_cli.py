"""`python -m components render|diff|docs`: every bad argument of every subcommand is refused with one line naming
the argument and what was expected, exit status 2, no traceback, nothing written; a render's output folder is
written whole or not at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from components.toolchain import render
from components.toolchain.cli import main, parser
from components.toolchain.render import ROOT
from tests.conftest import STACKS


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """Kinds of bad path: missing, in a missing folder, a file, a directory, a file of text, a JSON list, a folder
    whose plan.json is not a plan."""
    (tmp_path / "file.txt").write_text("not json: [\n")
    (tmp_path / "list.json").write_text("[1, 2]\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "not-a-render").mkdir()
    (tmp_path / "not-a-render" / "plan.json").write_text('{"resources": "none"}\n')
    return {
        "missing": str(tmp_path / "missing"),
        "in-missing": str(tmp_path / "missing" / "deeper"),
        "file": str(tmp_path / "file.txt"),
        "dir": str(tmp_path / "dir"),
        "list": str(tmp_path / "list.json"),
        "not-a-render": str(tmp_path / "not-a-render"),
    }


def render_folder(tmp_path: Path) -> str:
    """A render folder with a minimal plan (enough for the argument check)."""
    folder = tmp_path / "render"
    folder.mkdir(exist_ok=True)
    (folder / "plan.json").write_text(json.dumps({"project": "p", "stack": "dev", "resources": []}))
    return str(folder)


BAD: list[tuple[str, str, Callable[[dict[str, str]], list[str]], str]] = [
    # (subcommand, argument, argv from the bad paths, what the refusal must say)
    ("render", "--stack", lambda p: ["render", "--stack", "no-such-stack"], f"expected one of {', '.join(STACKS)}"),
    ("render", "--out", lambda p: ["render", "--stack", "dev", "--out", p["file"]], "expected a directory"),
    ("render", "--out", lambda p: ["render", "--stack", "dev", "--out", p["in-missing"]], "in an existing directory"),
    ("render", "--config-file", lambda p: ["render", "--stack", "dev", "--config-file", p["missing"]], "a YAML file"),
    ("render", "--config-file", lambda p: ["render", "--stack", "dev", "--config-file", p["dir"]], "a YAML file"),
    ("render", "--config-file", lambda p: ["render", "--stack", "dev", "--config-file", p["list"]], "a mapping"),
    (
        "render",
        "--project-dir",
        lambda p: ["render", "--stack", "dev", "--project-dir", p["missing"]],
        "an existing directory",
    ),
    (
        "render",
        "--project-dir",
        lambda p: ["render", "--stack", "dev", "--project-dir", p["file"]],
        "an existing directory",
    ),
    ("render", "--project-dir", lambda p: ["render", "--stack", "dev", "--project-dir", p["dir"]], "Pulumi project"),
    ("render", "--stack-outputs", lambda p: ["render", "--stack", "dev", "--stack-outputs", p["file"]], "not JSON"),
    ("render", "--stack-outputs", lambda p: ["render", "--stack", "dev", "--stack-outputs", p["dir"]], "a JSON file"),
    ("render", "--stack-outputs", lambda p: ["render", "--stack", "dev", "--stack-outputs", p["list"]], "a mapping"),
    ("diff", "base", lambda p: ["diff", p["missing"], p["dir"]], "nor a commit"),
    ("diff", "base", lambda p: ["diff", p["file"], p["dir"]], "(a file)"),
    ("diff", "base", lambda p: ["diff", p["dir"], p["dir"]], "no render"),
    ("diff", "base", lambda p: ["diff", p["not-a-render"], p["dir"]], "is no plan"),
    ("diff", "head", lambda p: ["diff", "HEAD", p["missing"]], "nor a commit"),
    ("diff", "head", lambda p: ["diff", "HEAD", p["not-a-render"]], "is no plan"),
    ("diff", "--format", lambda p: ["diff", "HEAD", "HEAD", "--format", "xml"], "invalid choice"),
    ("diff", "--project-dir", lambda p: ["diff", "HEAD", "HEAD", "--project-dir", p["file"]], "an existing directory"),
    ("docs", "--out", lambda p: ["docs", "--out", p["dir"]], "expected a file to write"),
    ("docs", "--out", lambda p: ["docs", "--out", p["in-missing"]], "in an existing directory"),
    ("docs", "--tiers-out", lambda p: ["docs", "--tiers-out", p["dir"]], "expected a file to write"),
    ("(none)", "command", lambda p: ["frobnicate"], "invalid choice"),
]


def test_every_argument_of_every_subcommand_has_a_bad_value_here():
    _, parsers = parser()
    arguments = {
        (name, a.option_strings[0] if a.option_strings else a.dest)
        for name, sub in parsers.items()
        for a in sub._actions
        if a.dest != "help"
    }
    untested = arguments - {(sub, arg) for sub, arg, *_ in BAD}
    assert untested <= {("diff", "--stack")}, untested  # --stack narrows a diff; any name is a valid filter


@pytest.mark.parametrize(("command", "argument", "argv", "expected"), BAD, ids=[f"{c[0]} {c[1]}" for c in BAD])
def test_a_bad_argument_is_refused_in_one_line_with_exit_2(paths, capsys, command, argument, argv, expected):
    with pytest.raises(SystemExit) as exited:
        main(argv(paths))
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert len(err.splitlines()) == 1, err
    assert f"argument {argument}" in err or f"arguments are required: {argument}" in err, err
    assert expected in err, err
    assert not Path(paths["missing"]).exists()


def test_a_missing_required_argument_is_named():
    result = subprocess.run(
        [sys.executable, "-m", "components", "render"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and result.stderr.splitlines() == [
        "python -m components render: error: the following arguments are required: --stack"
    ]


def test_a_failed_render_leaves_the_output_folder_as_it_was(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text("the previous render\n")

    def half_written(result, folder):
        (folder / "manifests").mkdir(parents=True, exist_ok=True)
        (folder / "plan.json").write_text("half\n")
        raise OSError("disk full")

    monkeypatch.setattr(render, "write", half_written)
    with pytest.raises(OSError):
        main(["render", "--stack", "dev", "--out", str(out)])
    assert (out / "plan.json").read_text() == "the previous render\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left behind


def test_a_render_replaces_the_output_folder_whole(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "manifests").mkdir(parents=True)
    (out / "manifests" / "gone.yaml").write_text("from an older render\n")
    assert main(["render", "--stack", "dev", "--out", str(out)]) == 0
    assert not (out / "manifests" / "gone.yaml").exists() and (out / "plan.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_settings_that_fail_write_nothing(tmp_path, capsys):
    config = tmp_path / "Pulumi.dev.yaml"
    config.write_text("config:\n  ai-storage-platform:objectStore:\n    backend: gcs\n")
    out = tmp_path / "out"
    assert main(["render", "--stack", "dev", "--config-file", str(config), "--out", str(out)]) == 2
    assert "objectStore.backend" in capsys.readouterr().err
    assert not out.exists()


def test_a_diff_between_two_render_folders_still_runs(tmp_path, capsys):
    folder = render_folder(tmp_path)
    assert main(["diff", folder, folder]) == 0


def test_stack_outputs_come_from_a_pipe_as_a_shell_gives_them(tmp_path):
    """`--stack-outputs <(pulumi stack output --json)`: the shell passes /dev/fd/N, a pipe; and `-` reads stdin."""
    from components.toolchain.arguments import stack_outputs

    outputs = {"metadataEngine": "redis"}
    read, write = os.pipe()
    os.write(write, json.dumps(outputs).encode())
    os.close(write)
    try:
        assert stack_outputs(f"/dev/fd/{read}") == outputs
    finally:
        os.close(read)
    fifo = tmp_path / "outputs"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"echo '{json.dumps(outputs)}' > {fifo}"])
    assert stack_outputs(str(fifo)) == outputs
    writer.wait(timeout=30)
    done = subprocess.run(
        [sys.executable, "-c", "from components.toolchain.arguments import stack_outputs as s; print(s('-'))"],
        input=json.dumps(outputs),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == str(outputs)
