"""Fixtures shared across the test folders."""

from __future__ import annotations

import faulthandler
import sys

import pytest


@pytest.fixture
def watchdog():
    """A hang dumps all thread stacks and ends the process instead of blocking the suite
    (pytest-timeout is not a dependency). Folders with threaded tests use it autouse."""
    faulthandler.dump_traceback_later(60, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
