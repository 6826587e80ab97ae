"""``python -m ai_storage_training doctor|pack|stage ...``: doctor.py, pack.py, stage.py."""

import argparse
import sys

if sys.argv[1:2] in (["pack"], ["stage"]):
    from . import pack, stage

    parser = argparse.ArgumentParser(prog="python -m ai_storage_training")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (pack, stage):
        module.add_parser(commands)
    args = parser.parse_args()
    sys.exit(args.run(args))
from .doctor import main

sys.exit(main())
