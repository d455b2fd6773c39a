"""Fixtures shared across the test folders."""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest
from hypothesis import settings

# no per-example deadline: CI runs two test workers on two cores, and an example that is
# descheduled (or meets a garbage collection) is not a failure of the property
settings.register_profile("parastream", deadline=None)
settings.load_profile("parastream")

#: seconds one threaded test may run before its stacks are dumped and the process ends
try:
    WATCHDOG_S = float(os.environ.get("PARASTREAM_TEST_WATCHDOG_S", "300"))
except ValueError:
    WATCHDOG_S = 300.0


@pytest.fixture
def watchdog():
    """A hang dumps all thread stacks and ends the process instead of blocking the suite
    (pytest-timeout is not a dependency). Folders with threaded tests use it autouse. A
    hang detector, not a time limit: generous, since a loaded CI machine stretches the
    tests that start Python subprocesses."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
