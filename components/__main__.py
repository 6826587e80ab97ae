"""Command line: ``python -m components render --stack <name> [--out DIR]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pulumi


def config_reference() -> str:
    """docs/config.md: the platform's keys, then a team workspace's."""
    from .section import reference
    from .settings import PlatformSettings
    from .team import TeamSettings

    team = (
        "Team workspace (`ai_storage_platform.team`)",
        "Keys of a team's own Pulumi project that uses the library on a cluster running the platform (see\n"
        "`examples/team-training`), set as `<project>:<key>` (e.g. `team-training:namespace`) and read by\n"
        "`load_team_settings(stack_config())`.",
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
        "its next update, or of the platform stack a team project references)",
    )
    docs_cmd = commands.add_parser("docs", help="write the configuration reference (docs/config.md)")
    docs_cmd.add_argument("--out", type=Path, default=Path("docs/config.md"), help="where to write it")
    args = parser.parse_args(argv)

    if args.command == "docs":
        args.out.write_text(config_reference())
        print(f"wrote {args.out}")
        return 0

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


if __name__ == "__main__":
    sys.exit(main())
