"""The progress display of long commands: a transient bar on stderr when it is a
terminal. rich is imported only then, so a command whose stderr is a file or a pipe
starts without it."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def progress(enabled: bool) -> Iterator[Any]:
    """A transient rich progress display on stderr, only when stderr is a terminal (yields
    None otherwise, so callers can skip updates)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        yield prog
