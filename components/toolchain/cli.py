"""Command line: ``python -m components render --stack <name> [--out DIR]``, ``python -m components diff BASE HEAD``
and ``python -m components docs``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pulumi

from .arguments import (
    Parser,
    existing_dir,
    fail,
    output_dir,
    output_file,
    project_dir,
    render_or_ref,
    replaced,
    stack_file,
    stack_outputs,
)


def config_reference() -> str:
    """docs/config.md: the platform's keys, then a team workspace's."""
    from ..common.sections import every_key, reference
    from ..settings import PlatformSettings
    from ..settings.setting_effects import entry_of
    from ..teams.team import TeamSettings

    team = (
        "Team workspace (`ai_storage_platform.teams.team`)",
        "Keys of a team's own Pulumi project that uses the library in the namespace the platform vended to it\n"
        "(`teams.workspaces`; see `examples/team-training`), set as `<project>:<key>` (e.g.\n"
        "`team-training:workspace`) and read by `load_team_settings(stack_config())`. None is a secret.",
        TeamSettings,
    )
    platform_keys = set(every_key(PlatformSettings))

    def effect(path: str) -> str | None:
        entry = entry_of(path) if path in platform_keys else None
        return f"{entry.effect.value}: {entry.why}" if entry else None

    return reference(PlatformSettings, team, effect=effect)


def parser() -> tuple[Parser, dict[str, Parser]]:
    """The command line and its subcommands' parsers, each argument checked by its type as it is parsed."""
    parser = Parser(prog="python -m components", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    render_cmd = commands.add_parser("render", help="render a stack offline under Pulumi's mock engine")
    render_cmd.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    render_cmd.add_argument("--out", type=output_dir, help="output folder (default: build/<stack>)")
    render_cmd.add_argument("--config-file", type=stack_file, help="stack file to use instead of Pulumi.<stack>.yaml")
    render_cmd.add_argument(
        "--project-dir", type=project_dir, help="Pulumi project to render (default: this repository)"
    )
    render_cmd.add_argument(
        "--stack-outputs",
        type=stack_outputs,
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
        type=existing_dir,
        help="Pulumi project whose git refs are rendered and whose stack files acknowledge replacements "
        "(default: this repository)",
    )
    docs_cmd = commands.add_parser(
        "docs", help="write the configuration reference (docs/config.md) and the tiers' records (docs/tiers.md)"
    )
    docs_cmd.add_argument(
        "--out", type=output_file, default=Path("docs/config.md"), help="where to write the reference"
    )
    docs_cmd.add_argument(
        "--tiers-out", type=output_file, default=Path("docs/tiers.md"), help="where to write the records"
    )
    return parser, {"render": render_cmd, "diff": diff_cmd, "docs": docs_cmd}


def main(argv: list[str] | None = None) -> int:
    """Render a stack offline, diff two renders or write the configuration reference; exit 0, or 2 with one
    clear line for a bad argument, or with the settings' problems when they are invalid (a ``pulumi.RunError``:
    the SettingsError of whichever copy of the library the program imports)."""
    top, parsers = parser()
    args = top.parse_args(argv)
    if args.command == "docs":
        return docs(args)
    if args.command == "diff":
        return diff(args, parsers["diff"])
    return render_stack(args, parsers["render"])


def render_stack(args: argparse.Namespace, parser: Parser) -> int:
    """Render one stack into its output folder (whole, or not at all)."""
    from . import mock_engine, render

    root = (args.project_dir or render.ROOT).resolve()
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
    if args.config_file is None and args.stack not in stacks:
        where = f"a Pulumi.<stack>.yaml in {root}"
        fail(parser, "--stack", f"expected one of {', '.join(stacks) or 'none'} ({where}); got '{args.stack}'")
    try:
        result, _ = render.rendered(args.stack, args.config_file, root, args.stack_outputs)
    except pulumi.RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        mock_engine.close_event_loops()
    out_dir = args.out or root / "build" / args.stack
    with replaced(out_dir) as new:
        render.write(result, new)
    print(render.summary(result))
    print(f"wrote {out_dir}")
    return 0


def docs(args: argparse.Namespace) -> int:
    """Write the configuration reference and the tiers' decision records (each whole, or not at all)."""
    from .tiers_page import tiers_page

    with replaced(args.out) as new:
        new.write_text(config_reference())
    with replaced(args.tiers_out) as new:
        new.write_text(tiers_page())
    print(f"wrote {args.out} and {args.tiers_out}")
    return 0


def diff(args: argparse.Namespace, parser: Parser) -> int:
    """Print the diff; exit 1 when it blocks, 2 when a side cannot be rendered or the settings are invalid."""
    from . import plan_diff
    from .render import ROOT

    project = (args.project_dir or ROOT).resolve()
    for name in ("base", "head"):
        try:
            render_or_ref(getattr(args, name), project)
        except argparse.ArgumentTypeError as exc:
            fail(parser, name, str(exc))
    try:
        diffs = plan_diff.compare(args.base, args.head, project, args.stack)
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
