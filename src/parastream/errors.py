"""Errors that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


class InputError(Exception):
    """Bad user input: names the file and says what is wrong with it.

    The CLI prints ``parastream: <path>: <reason>`` and exits with code 2, without a
    traceback. Library callers can catch it like any other exception.
    """

    def __init__(self, path: str | os.PathLike[str] | None, reason: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}" if self.path else reason)

    def __reduce__(self):  # raised in a worker process, it arrives whole
        return type(self), (self.path, self.reason)


def one_line(exc: BaseException) -> str:
    """``"Type: first line of the message"`` (at most 300 characters): how a library's
    multi-line exception is quoted inside a one-line error."""
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0].strip()
    return f"{type(exc).__name__}: {line}"[:300]


@contextmanager
def naming(path: str | os.PathLike[str], prefix: str = "") -> Iterator[None]:
    """Give an :class:`InputError` raised inside that names no file ``path``, its reason
    after ``prefix``: a plan's bad source model is the plan file's problem."""
    try:
        yield
    except InputError as exc:
        if exc.path is not None:
            raise
        raise InputError(path, prefix + exc.reason) from None
