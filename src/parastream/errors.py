"""Errors that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

import os


class InputError(Exception):
    """Bad user input: names the file and says what is wrong with it.

    The CLI prints ``parastream: <path>: <reason>`` and exits with code 2, without a
    traceback. Library callers can catch it like any other exception.
    """

    def __init__(self, path: str | os.PathLike[str] | None, reason: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}" if self.path else reason)
