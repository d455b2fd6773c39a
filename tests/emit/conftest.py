"""Emit tests share one way to build their cases once per module."""

from __future__ import annotations

from typing import Any, Callable

import pytest


@pytest.fixture(scope="module")
def cases(request) -> Callable[[str], Any]:
    """``cases(name)``: the test module's ``Case(name)``, built at its first use and kept
    for the module's other tests (tracing and planning a model is the slow part)."""
    built: dict[str, Any] = {}
    make = request.module.Case

    def case(name: str) -> Any:
        if name not in built:
            built[name] = make(name)
        return built[name]

    return case
