"""Calibration tests start threads and child processes: each runs under the suite's
watchdog (tests/conftest.py), so that a hang ends the process rather than block the
suite."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _watchdog(watchdog):
    yield
