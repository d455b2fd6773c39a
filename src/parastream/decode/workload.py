"""The requests a decode run serves: generated (seeded Poisson arrivals, lengths from a
named distribution) or read from a JSONL workload file.

A workload file has one JSON object per line: ``arrival_s`` (seconds after the start, >= 0),
``output_tokens`` (>= 0) and either ``prompt_tokens`` (a count: the prompt's token ids are
drawn from the seed) or ``prompt`` (text: its UTF-8 bytes are the token ids); optionally
``cancel_after_tokens`` (the client cancels the request once it has that many). Blank lines
are skipped; any other bad line is an :class:`~parastream.errors.InputError` naming the file
and the line.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import msgspec
import numpy as np

from ..errors import InputError

#: prompt and output lengths by distribution name: (kind, prompt parameters, output parameters)
LENGTHS: dict[str, tuple[str, tuple[int, int], tuple[int, int]]] = {
    "fixed": ("fixed", (64, 64), (32, 32)),
    "uniform": ("uniform", (16, 96), (16, 64)),
    "lognormal": ("lognormal", (48, 384), (32, 256)),
}
DEFAULT_LENGTHS = "uniform"
#: requests generated at most (each is a Python object with its prompt's token ids)
MAX_REQUESTS = 100_000


@dataclass(frozen=True)
class Request:
    """One request: its id, arrival (seconds after the start), prompt token ids, the
    output tokens asked for and, when its client cancels it mid-decode, after how many
    tokens (None: never)."""

    rid: int
    arrival_s: float
    prompt: tuple[int, ...]
    output_tokens: int
    cancel_after_tokens: int | None = None


@dataclass(frozen=True)
class WorkloadOptions:
    """How to make the requests: ``requests`` of them, arriving at ``rate`` per second
    (Poisson; ``inf`` = all at the start), lengths from the ``lengths`` distribution,
    drawn from ``seed``; or read from ``file`` (JSONL; then ``requests`` and ``rate`` are
    not used)."""

    requests: int = 32
    rate: float = math.inf
    lengths: str = DEFAULT_LENGTHS
    seed: int = 0
    file: str | None = None

    def check(self) -> None:
        """InputError on an option out of range."""
        if not 1 <= self.requests <= MAX_REQUESTS:
            raise InputError(None, f"--requests must be an integer from 1 to {MAX_REQUESTS}, "
                                   f"got {self.requests}")
        if not self.rate > 0:
            raise InputError(None, f"--rate must be positive (inf: all at once), got {self.rate}")
        if self.lengths not in LENGTHS:
            raise InputError(None, f"--lengths must be one of {', '.join(LENGTHS)}, "
                                   f"got {self.lengths!r}")


def make_requests(opts: WorkloadOptions, vocab: int) -> list[Request]:
    """The requests of ``opts``, in arrival order, ids 0.. in that order; token ids below
    ``vocab``."""
    opts.check()
    if opts.file:
        return read_workload(opts.file, vocab, opts.seed)
    rng = np.random.default_rng(opts.seed)
    if math.isinf(opts.rate):
        arrivals = np.zeros(opts.requests)
    else:
        arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / opts.rate,
                                                                     opts.requests - 1))))
    prompts = _lengths(rng, opts.lengths, 1, opts.requests)
    outputs = _lengths(rng, opts.lengths, 2, opts.requests)
    return [Request(i, float(a), _prompt_ids(opts.seed, i, int(p), vocab), int(o))
            for i, (a, p, o) in enumerate(zip(arrivals, prompts, outputs))]


def _lengths(rng: np.random.Generator, name: str, which: int, n: int) -> np.ndarray:
    """``n`` lengths of distribution ``name``: prompt (``which`` 1) or output (2)."""
    kind, lo_hi = LENGTHS[name][0], LENGTHS[name][which]
    lo, hi = lo_hi
    if kind == "fixed":
        return np.full(n, lo)
    if kind == "uniform":
        return rng.integers(lo, hi + 1, n)
    # lognormal: median lo, clipped to [1, hi]
    return np.clip(np.rint(rng.lognormal(math.log(lo), 0.6, n)), 1, hi).astype(int)


def _prompt_ids(seed: int, rid: int, n: int, vocab: int) -> tuple[int, ...]:
    """Deterministic prompt token ids of request ``rid``."""
    rng = np.random.default_rng([seed, rid])
    return tuple(int(t) for t in rng.integers(0, vocab, n))


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    arrival_s: float
    output_tokens: int
    prompt_tokens: int | None = None
    prompt: str | None = None
    cancel_after_tokens: int | None = None


def read_workload(path: str | os.PathLike[str], vocab: int, seed: int = 0) -> list[Request]:
    """The requests of JSONL file ``path`` (see the module docstring), sorted by arrival
    (stable), ids 0.. in that order."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise InputError(path, f"cannot read the workload: {exc.strerror or exc}") from None
    rows = []
    for no, raw in enumerate(lines, 1):
        if raw.strip():
            rows.append(_parse_line(path, no, raw))
    if not rows:
        raise InputError(path, "the workload has no requests")
    rows.sort(key=lambda r: r.arrival_s)
    out = []
    for rid, r in enumerate(rows):
        ids = (tuple(b % vocab for b in r.prompt.encode("utf-8")) if r.prompt is not None
               else _prompt_ids(seed, rid, r.prompt_tokens, vocab))
        out.append(Request(rid, r.arrival_s, ids, r.output_tokens, r.cancel_after_tokens))
    return out


def _parse_line(path: str | os.PathLike[str], no: int, raw: bytes) -> _Line:
    """One workload line, checked; InputError naming ``path`` and line ``no``."""
    try:
        r = msgspec.json.decode(raw, type=_Line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InputError(path, f"line {no}: {exc}") from None
    checks = (
        (math.isfinite(r.arrival_s) and r.arrival_s >= 0,
         f"arrival_s must be a finite number >= 0, got {r.arrival_s}"),
        (r.output_tokens >= 0, f"output_tokens must not be negative, got {r.output_tokens}"),
        ((r.prompt is None) != (r.prompt_tokens is None),
         "give exactly one of prompt_tokens (a count) and prompt (text)"),
        (r.prompt_tokens is None or r.prompt_tokens >= 1,
         f"prompt_tokens must be at least 1, got {r.prompt_tokens}"),
        (r.prompt is None or bool(r.prompt), "prompt must not be empty"),
        (r.cancel_after_tokens is None or r.cancel_after_tokens >= 1,
         f"cancel_after_tokens must be at least 1, got {r.cancel_after_tokens}"),
    )
    problem = next((msg for ok, msg in checks if not ok), None)
    if problem:
        raise InputError(path, f"line {no}: {problem}")
    return r


__all__ = ["DEFAULT_LENGTHS", "LENGTHS", "Request", "WorkloadOptions", "make_requests",
           "read_workload"]
