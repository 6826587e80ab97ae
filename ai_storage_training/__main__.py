"""``python -m ai_storage_training doctor PATH``: see doctor.py."""

import sys

from .doctor import main

sys.exit(main())
