"""What a run does when a stage raises on an item: the error policy and its record.

``fail`` (the default) stops the run at the first failing item. ``skip`` drops the failing
item (its final status is ``failed``) and goes on with the others. ``retry:N`` calls the
stage again on the same input, up to N more times; an item that still fails is then
dropped as under ``skip`` and the run goes on (on a long run, one bad item should cost
that item, not the run). Only :class:`Exception` is retried or skipped: a
``KeyboardInterrupt`` or ``SystemExit`` always stops the run.

Every item that needed a second call is named in :attr:`ErrorLog.retried`, every dropped
one in :attr:`ErrorLog.skipped` (item id, stage, the error's first line, calls made), so
that for a run that ended: items in = items out + items failed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import one_line

#: the most retries ``retry:N`` takes: a stage that fails this often on one input fails
MAX_RETRIES = 100
ACTIONS = ("fail", "skip", "retry")


@dataclass(frozen=True)
class ErrorPolicy:
    """``fail``, ``skip`` or ``retry`` with ``retries`` further calls (see the module)."""

    action: str = "fail"
    retries: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"error policy must be one of fail, skip, retry:N, not {self.action!r}")
        want_retries = self.action == "retry"
        if want_retries and not 1 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"retry:N needs N from 1 to {MAX_RETRIES}, got {self.retries}")
        if not want_retries and self.retries:
            raise ValueError(f"{self.action} takes no retry count")

    @classmethod
    def parse(cls, text: "str | ErrorPolicy") -> "ErrorPolicy":
        """``"fail"``, ``"skip"`` or ``"retry:N"`` (N from 1 to :data:`MAX_RETRIES`);
        a :class:`ValueError` saying what is accepted otherwise."""
        if isinstance(text, ErrorPolicy):
            return text
        word, colon, count = str(text).strip().partition(":")
        if word == "retry" and colon:
            try:
                n = int(count)
            except ValueError:
                raise ValueError(f"{text!r}: retry:N needs an integer N from 1 to "
                                 f"{MAX_RETRIES}") from None
            return cls("retry", n)
        if word in ("fail", "skip") and not colon:
            return cls(word)
        raise ValueError(f"{text!r} is not one of fail, skip, retry:N")

    @property
    def stops(self) -> bool:
        """Whether a failing item stops the run."""
        return self.action == "fail"

    def __str__(self) -> str:
        return f"retry:{self.retries}" if self.action == "retry" else self.action


@dataclass(frozen=True)
class ItemError:
    """One item's trouble at one stage: the error's first line (``Type: message``), the
    calls made and whether a later call succeeded (``recovered``)."""

    item: int
    stage: str
    error: str
    attempts: int
    recovered: bool = False

    def to_dict(self) -> dict:
        return {"item": self.item, "stage": self.stage, "error": self.error,
                "attempts": self.attempts, "recovered": self.recovered}


@dataclass(frozen=True)
class Attempts:
    """The outcome of calling a stage on one item under a policy: the last call's
    ``value`` and ``error`` (None when it succeeded), the calls made, and the last
    failure seen (``failure``; set when an earlier call failed and a later succeeded)."""

    value: Any
    error: BaseException | None
    tries: int
    failure: BaseException | None


def retry_after(error: BaseException, call: Callable[[], tuple[Any, BaseException | None]],
                policy: ErrorPolicy) -> Attempts:
    """A first call failed with ``error``: ``call()`` -> (value, error or None) again
    while it fails with an :class:`Exception` and ``policy`` leaves retries. (The first
    call is the caller's, so a call that succeeds costs nothing here.)"""
    tries, value, failure = 1, None, error
    last: BaseException | None = error
    while last is not None and tries <= policy.retries and isinstance(last, Exception):
        value, last = call()
        tries += 1
        if last is not None:
            failure = last
    return Attempts(value, last, tries, failure)


@dataclass
class ErrorLog:
    """The retried and skipped items of one run (thread-safe; sorted by item when read)."""

    policy: ErrorPolicy = field(default_factory=ErrorPolicy)
    retried: list[ItemError] = field(default_factory=list)
    skipped: list[ItemError] = field(default_factory=list)
    #: (item, stage, exception) of the dropped item with the lowest id (the others are
    #: kept as their first line only)
    first_cause: tuple[int, str, BaseException] | None = field(default=None, repr=False,
                                                               compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def note(self, item: int, stage: str, got: Attempts) -> bool:
        """Record item ``item``'s calls at ``stage``; True when its failure stops the run
        (policy ``fail``, or not an :class:`Exception`), False when it succeeded or is
        dropped (then it is in :attr:`skipped`)."""
        stops = got.error is not None and (self.policy.stops
                                           or not isinstance(got.error, Exception))
        with self._lock:
            if got.tries > 1 and got.failure is not None:
                self.retried.append(ItemError(item, stage, one_line(got.failure), got.tries,
                                              recovered=got.error is None))
            if got.error is not None and not stops:
                self.skipped.append(ItemError(item, stage, one_line(got.error), got.tries))
                if self.first_cause is None or item < self.first_cause[0]:
                    self.first_cause = (item, stage, got.error)
        return stops

    def skipped_items(self) -> list[int]:
        """The ids of the dropped items, in order."""
        with self._lock:
            return sorted(e.item for e in self.skipped)

    def to_dict(self) -> dict:
        with self._lock:
            return {"on_error": str(self.policy),
                    "skipped": [e.to_dict() for e in sorted(self.skipped, key=_key)],
                    "retried": [e.to_dict() for e in sorted(self.retried, key=_key)]}


def _key(e: ItemError) -> int:
    """By item; an item's stages stay in the order they ran (the sort is stable)."""
    return e.item


__all__ = ["ACTIONS", "MAX_RETRIES", "Attempts", "ErrorLog", "ErrorPolicy", "ItemError",
           "retry_after"]
