"""Kept so code written against 0.2.0's docs still imports: ``from ai_storage_platform.redis_sentinel import
SentinelSettings``. The module moved to ``backends/metadata_engines/redis_sentinel.py`` in 0.3.0; new code
imports ``SentinelSettings`` from ``ai_storage_platform`` itself. Importing this module warns (DeprecationWarning).
"""

import warnings

from .backends.metadata_engines.redis_sentinel import SentinelSettings

__all__ = ["SentinelSettings"]

warnings.warn(
    "ai_storage_platform.redis_sentinel moved to ai_storage_platform.backends.metadata_engines.redis_sentinel; "
    "import SentinelSettings from ai_storage_platform",
    DeprecationWarning,
    stacklevel=2,
)
