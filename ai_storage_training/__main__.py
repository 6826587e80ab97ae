"""``python -m ai_storage_training <subcommand>``: the subcommands, one module of this package each (exposing
``add_parser(subparsers)`` and ``run(args) -> int``); adding one is adding its module's name here."""

import sys

from . import cli

SUBCOMMANDS = [
    "doctor.command",
    "doctor.job",
    "data.pack",
    "data.stage",
    "checkpoint.restore_test",
    "checkpoint.listing",
]
"""Module names, one a line (a merge adds a line); each module's ``add_parser`` names its subcommand."""

if __name__ == "__main__":
    sys.exit(cli.main(SUBCOMMANDS))
