"""A watchdog for every pipeline test: a hang dumps all thread stacks and ends the process
instead of blocking the suite (pytest-timeout is not a dependency)."""

from __future__ import annotations

import faulthandler
import sys

import pytest


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(60, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
