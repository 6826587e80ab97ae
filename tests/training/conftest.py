"""Fixtures the training library's tests share."""

import os
import shutil

import pytest


@pytest.fixture
def fio():
    """The real fio, or a skip naming the package (a failure where the data path is required)."""
    if shutil.which("fio") is None:
        if os.environ.get("AI_STORAGE_REQUIRE_DATAPATH") == "1":
            pytest.fail("fio is not installed (apt-get install fio)")
        pytest.skip("fio is not installed (apt-get install fio)")
