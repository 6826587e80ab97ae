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


DOCTOR_SAYS = "python -m ai_storage_training doctor: "
"""How each of the doctor's progress lines on stderr begins (a test named as it starts)."""


def beyond_progress(stderr: str) -> list[str]:
    """What the doctor wrote on stderr besides its progress lines."""
    return [line for line in stderr.splitlines() if not line.startswith(DOCTOR_SAYS) or " doctor: error: " in line]
