"""Command line: ``python -m components render --stack <name> [--out DIR]``, ``python -m components diff BASE HEAD``
and ``python -m components docs``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pulumi


def config_reference() -> str:
    """docs/config.md: the platform's keys, then a team workspace's."""
    from ..sections import reference
    from ..settings import PlatformSettings
    from ..team import TeamSettings

    team = (
        "Team workspace (`ai_storage_platform.team`)",
        "Keys of a team's own Pulumi project that uses the library in the namespace the platform vended to it\n"
        "(`teams.workspaces`; see `examples/team-training`), set as `<project>:<key>` (e.g.\n"
        "`team-training:workspace`) and read by `load_team_settings(stack_config())`. None is a secret.",
        TeamSettings,
    )
    return reference(PlatformSettings, team)


def main(argv: list[str] | None = None) -> int:
    """Render a stack offline; exit 0, or 2 with one clear message when its settings are invalid (a
    ``pulumi.RunError``: the SettingsError of whichever copy of the library the program imports)."""
    parser = argparse.ArgumentParser(prog="python -m components", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    render_cmd = commands.add_parser("render", help="render a stack offline under Pulumi's mock engine")
    render_cmd.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    render_cmd.add_argument("--out", type=Path, help="output folder (default: build/<stack>)")
    render_cmd.add_argument("--config-file", type=Path, help="stack file to use instead of Pulumi.<stack>.yaml")
    render_cmd.add_argument("--project-dir", type=Path, help="Pulumi project to render (default: this repository)")
    render_cmd.add_argument(
        "--stack-outputs",
        type=Path,
        help="JSON outputs every StackReference reads (`pulumi stack output --json` of the stack itself, to render "
        "its next update)",
    )
    diff_cmd = commands.add_parser(
        "diff",
        help="what `pulumi up` would do to each stack between two renders, and what it means for data "
        "(exit 1: a protected or data-holding resource replaced or deleted without acknowledgement)",
    )
    diff_cmd.add_argument("base", help="render folder (one stack's, or a folder of them) or git ref")
    diff_cmd.add_argument("head", help="render folder or git ref")
    diff_cmd.add_argument("--stack", action="append", help="only this stack (repeatable; default: every stack)")
    diff_cmd.add_argument("--format", choices=["markdown", "json"], default="markdown")
    diff_cmd.add_argument(
        "--project-dir",
        type=Path,
        help="Pulumi project whose git refs are rendered and whose stack files acknowledge replacements "
        "(default: this repository)",
    )
    docs_cmd = commands.add_parser(
        "docs", help="write the configuration reference (docs/config.md) and the tiers' records (docs/tiers.md)"
    )
    docs_cmd.add_argument("--out", type=Path, default=Path("docs/config.md"), help="where to write the reference")
    docs_cmd.add_argument("--tiers-out", type=Path, default=Path("docs/tiers.md"), help="where to write the records")
    args = parser.parse_args(argv)

    if args.command == "docs":
        return docs(args)
    if args.command == "diff":
        return diff(args)

    from . import mock_engine, render

    try:
        root = (args.project_dir or render.ROOT).resolve()
        outputs = json.loads(args.stack_outputs.read_text()) if args.stack_outputs else None
        result = render.rendering(args.stack, render.run(args.stack, args.config_file, root, outputs))
    except pulumi.RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        mock_engine.close_event_loops()
    out_dir = args.out or root / "build" / args.stack
    render.write(result, out_dir)
    print(render.summary(result))
    print(f"wrote {out_dir}")
    return 0


def docs(args: argparse.Namespace) -> int:
    """Write the configuration reference and the tiers' decision records."""
    from .tiers_page import tiers_page

    args.out.write_text(config_reference())
    args.tiers_out.write_text(tiers_page())
    print(f"wrote {args.out} and {args.tiers_out}")
    return 0


def diff(args: argparse.Namespace) -> int:
    """Print the diff; exit 1 when it blocks, 2 when a side cannot be rendered or the settings are invalid."""
    from . import plan_diff
    from .render import ROOT

    try:
        diffs = plan_diff.compare(args.base, args.head, (args.project_dir or ROOT).resolve(), args.stack)
    except (plan_diff.RenderError, pulumi.RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(plan_diff.as_json(diffs))
    else:
        print(plan_diff.markdown(diffs, args.base, args.head))
    return plan_diff.exit_code(diffs)


if __name__ == "__main__":
    sys.exit(main())
