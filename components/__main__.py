"""``python -m components render|diff|docs``: the offline toolchain's command line (``toolchain/cli.py``)."""

import sys

from .toolchain.cli import main

if __name__ == "__main__":
    sys.exit(main())
