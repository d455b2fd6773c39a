"""Every pipeline test runs under the suite's watchdog (tests/conftest.py): these tests start
threads, and a hang must end the process rather than block the suite."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _watchdog(watchdog):
    yield
