"""Datasets for training: small files packed into WebDataset tar shards with a versioned manifest, staged onto a
local volume, read by ranks and DataLoader workers in resumable shares, and read ahead.

Read ``manifest.py`` first (what a published version is), then ``pack.py`` (making one), ``stage.py`` (copying
one onto the hot tier, verified), ``datasets.py`` (``ShardDataset``, for PyTorch's DataLoader) and ``reader.py``
(``PrefetchingReader``, read-ahead of any files). The file primitives (CRC32C, fsync, atomic writes) come from
``checkpoint/commit.py``.
"""

from .manifest import MANIFEST, DatasetError, Manifest
from .manifest import load as load_manifest
from .reader import PrefetchingReader

__all__ = ["MANIFEST", "DatasetError", "Manifest", "PrefetchingReader", "load_manifest"]
