"""Concurrent decode of independent requests, measured: the same requests served in each
decode mode (sequential, streams, batch, batch+overlap) on the built-in decoder, with the
same scheduler, and compared (:func:`decode` -> :class:`DecodeResult`).

Every mode's greedy tokens are compared with the first mode's (sequential when it runs):
a differing token is allowed only at a numerical tie (the two top logits within 1e-4),
and counted. Figures are measured on this machine's CPU threads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import InputError
from .result import document, extra

SCHEMA = "parastream.decode/1"
MAX_CONCURRENCY = 256
MAX_THREADS = 1024
#: the KV pool is allocated up front: past this a run is an allocation failure
MAX_KV_BYTES = 8 << 30


@dataclass(frozen=True)
class DecodeSettings:
    """How to serve: ``concurrency`` (most running requests), ``kv_blocks`` (the KV
    budget in blocks; None = room for ``concurrency`` requests at the model's full
    context), ``max_skip`` (passes a waiting request may be passed over), ``threads``
    (torch intra-op threads, set for the run and restored after), ``streams`` (the
    streams of ``streams`` mode, its hardware queues; None = ``concurrency``, more
    running requests than streams share them)."""

    concurrency: int = 16
    kv_blocks: int | None = None
    max_skip: int = 4
    threads: int = 1
    streams: int | None = None

    def check(self) -> None:
        """InputError naming the flag of a setting out of range."""
        for flag, v, lo, hi in (("--concurrency", self.concurrency, 1, MAX_CONCURRENCY),
                                ("--threads", self.threads, 1, MAX_THREADS),
                                ("--streams", self.streams, 1, MAX_CONCURRENCY)):
            if v is not None and not lo <= v <= hi:
                raise InputError(None, f"{flag} must be an integer from {lo} to {hi}, got {v}")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise InputError(None, f"--kv-blocks must be at least 1, got {self.kv_blocks}")
        if self.max_skip < 0:
            raise InputError(None, f"--max-skip must not be negative, got {self.max_skip}")


@dataclass(frozen=True)
class DecodeResult:
    """The ``parastream.decode/1`` document (:meth:`to_dict`): the model, the device
    ("CPU": measured on CPU threads), the settings and workload, one row of figures per
    mode (with ``vs_sequential``, its tokens/s over sequential's), the agreement of each
    mode's tokens with the reference mode, every request that did not finish normally
    (mode, request, outcome, reason) and notes. ``runs``: each mode's
    :class:`~parastream.decode.modes.ModeRun` (timelines included), not in the document."""

    schema: str
    model: dict
    device: str
    settings: dict
    workload: dict
    modes: list[dict]
    agreement: list[dict]
    ended_early: list[dict]
    notes: list[str] = field(default_factory=list)
    runs: tuple = extra(default=())

    def to_dict(self) -> dict:
        """The document as a JSON-ready dict (no timelines)."""
        return document(self)

    def timeline(self, mode: str) -> Any:
        """The timeline of ``mode``'s run."""
        return next(r.timeline for r in self.runs if r.mode == mode)


def check_modes(modes: str | Sequence[str]) -> tuple[str, ...]:
    """Modes from "all", a comma-separated text or a sequence, in the canonical order; an
    InputError for an unknown or missing one."""
    from ..decode.modes import MODES

    if modes == "all":
        return MODES
    names = [m.strip() for m in (modes.split(",") if isinstance(modes, str) else modes)]
    names = [m for m in names if m]
    bad = [m for m in names if m not in MODES]
    if bad or not names:
        raise InputError(None, f"--modes: {', '.join(bad) or 'none given'}: choose from "
                               f"{', '.join(MODES)} (comma-separated)")
    return tuple(m for m in MODES if m in names)


def load_model(model: Any, seed: int = 0) -> Any:
    """A size name of the built-in decoder (runnable sizes only), ``path/to/file.py:factory``
    (:func:`parastream.decode.protocol.load_factory`), or a decoder object following the
    protocol of :mod:`parastream.decode.model` (returned as it is)."""
    from ..decode.model import RUNNABLE, SIZES, build_model
    from ..decode.protocol import is_factory_spec, load_factory

    if not isinstance(model, str):
        return model
    if is_factory_spec(model):
        return load_factory(model)
    if model not in SIZES:
        raise InputError(None, f"--model: {model!r} is not a built-in size ({', '.join(SIZES)}) "
                               "nor path/to/file.py:factory")
    if model not in RUNNABLE:
        raise InputError(None, f"--model {model}: built on the meta device, shapes for "
                               "prediction only; prediction (--simulate) is not built yet, "
                               f"run {' or '.join(RUNNABLE)}")
    return build_model(model, seed=seed)


def decode(model: Any = "small", modes: str | Sequence[str] = "all", *,
           workload: Any = None, settings: DecodeSettings | None = None,
           requests: list | None = None) -> DecodeResult:
    """Serve the same requests in each of ``modes`` ("all", or names / a comma-separated
    text) on ``model`` (a size of the built-in decoder, or a decoder object) and compare.
    ``workload``: a :class:`~parastream.decode.workload.WorkloadOptions` (default: 32
    requests at once, uniform lengths, seed 0); ``requests``: the requests themselves
    (then ``workload`` only describes them). Bad input raises
    :class:`~parastream.errors.InputError`."""
    import torch

    from ..decode.workload import WorkloadOptions, make_requests

    settings = settings or DecodeSettings()
    settings.check()
    wl = workload or WorkloadOptions()
    chosen = check_modes(modes)
    decoder = load_model(model, wl.seed)
    reqs = requests if requests is not None else make_requests(wl, decoder.config.vocab)
    notes = _busy_note()
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        runs = _serve(decoder, chosen, reqs, settings)
    finally:
        torch.set_num_threads(threads)
    return _result(decoder, runs, settings, wl, notes)


def _serve(decoder: Any, modes: tuple[str, ...], requests: list,
           settings: DecodeSettings) -> list:
    """Each mode's run over the same requests and KV budget."""
    from ..decode.model import blocks_for
    from ..decode.modes import ModeSettings, run_mode

    context = decoder.config.context
    blocks = settings.kv_blocks or settings.concurrency * blocks_for(context)
    _check_pool(decoder.config, blocks)
    ms = ModeSettings(concurrency=settings.concurrency, kv_blocks=blocks,
                      max_skip=settings.max_skip, context=context,
                      streams=settings.streams or settings.concurrency)
    return [run_mode(decoder, m, requests, ms) for m in modes]


def _check_pool(cfg: Any, blocks: int) -> None:
    """InputError when ``blocks`` KV blocks of ``cfg`` would take over :data:`MAX_KV_BYTES`
    (a built-in config says its bytes per position; a decoder of the user's own may not)."""
    from ..decode.model import BLOCK_TOKENS

    per_token = getattr(cfg, "kv_bytes_per_token", None)
    if per_token is None:
        return
    need = blocks * BLOCK_TOKENS * per_token()
    if need > MAX_KV_BYTES:
        raise InputError(None, f"--kv-blocks: {blocks} blocks take {need / 2**30:.1f} GiB of "
                               f"KV memory, over the {MAX_KV_BYTES / 2**30:.0f} GiB allowed")


def _result(decoder: Any, runs: list, settings: DecodeSettings, wl: Any,
            notes: list[str]) -> DecodeResult:
    """The document of ``runs``: figures per mode, agreement, requests ended early."""
    from ..decode.metrics import agreement, measure

    rows = [measure(r).to_dict() for r in runs]
    base = next((r["tokens_per_s"] for r in rows if r["mode"] == "sequential"), None)
    for r in rows:
        r["vs_sequential"] = (round(r["tokens_per_s"] / base, 3) if base else None)
    agree = [agreement(runs[0], r).to_dict() for r in runs[1:]]
    early = [{"mode": r.mode, "request": lv.request.rid, "outcome": lv.outcome,
              "reason": lv.reason} for r in runs for lv in r.lives if lv.reason != "done"]
    cfg = decoder.config
    return DecodeResult(
        schema=SCHEMA, model=_model_doc(cfg), device="CPU",
        settings={"concurrency": settings.concurrency, "kv_blocks": runs[0].kv_blocks,
                  "max_skip": settings.max_skip, "threads": settings.threads,
                  "streams": settings.streams or settings.concurrency},
        workload={"requests": len(runs[0].lives), "rate": _rate(wl.rate),
                  "lengths": None if wl.file else wl.lengths, "seed": wl.seed,
                  "file": wl.file},
        modes=rows, agreement=agree, ended_early=early, notes=notes, runs=tuple(runs))


def _model_doc(cfg: Any) -> dict:
    """The model's shape (None for what a decoder of the user's own does not say)."""
    doc = {k: getattr(cfg, k, None) for k in ("name", "vocab", "dim", "layers", "heads",
                                               "kv_heads", "ffn", "context")}
    doc["name"] = doc["name"] or "custom"
    return doc


def _rate(rate: float) -> float | str:
    return "inf" if rate == float("inf") else rate


def _busy_note() -> list[str]:
    """A note when the machine was already loaded: the figures are then low and noisy."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return []
    cores = os.cpu_count() or 1
    if load <= cores:
        return []
    return [f"the machine was busy when the run started (load average {load:.1f} on "
            f"{cores} cores): the figures are low and noisy"]


__all__ = ["DecodeResult", "DecodeSettings", "SCHEMA", "check_modes", "decode", "load_model"]
