"""Shared test helpers: threads left behind and calls that must finish in time."""

from __future__ import annotations

import threading
from typing import Any, Callable


def live_pipeline_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("parastream-")
            and not t.name.startswith("parastream-stream-")]


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a helper thread; fail the test if it does not return in time."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test thread
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not finish within {seconds} s (hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")
