"""Concurrent decode of independent requests, measured: the same requests served in each
decode mode (sequential, streams, batch, batch+overlap) on the built-in decoder, with the
same scheduler, and compared (:func:`decode` -> :class:`DecodeResult`); and predicted on a
device profile (:func:`predict` -> :class:`PredictResult`): the same scheduler and
requests on the discrete-event device model, swept over concurrency and arrival rate.

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
MAX_CONCURRENCY = 4096
#: the most streams (worker threads) of ``streams`` mode; more running requests share them
MAX_STREAMS = 256
MAX_THREADS = 1024
#: the KV pool is allocated up front: past this a run is an allocation failure
MAX_KV_BYTES = 8 << 30
#: where a measured run executes
RUN_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class DecodeSettings:
    """How to serve: ``concurrency`` (most running requests), ``kv_blocks`` (the KV
    budget in blocks; None = room for ``concurrency`` requests at the model's full
    context), ``max_skip`` (passes a waiting request may be passed over), ``threads``
    (torch intra-op threads, set for the run and restored after), ``streams`` (the
    streams of ``streams`` mode, its hardware queues; None = ``concurrency`` up to
    :data:`MAX_STREAMS`; more running requests than streams share them),
    ``prefill_chunk`` (the batch modes' chunked prefill: the most prefill positions one
    step computes beside its decode rows; None: each prefill whole, on its own), ``tbo`` (batch+overlap's two-micro-batch
    overlap: "auto" splits a step only from the row count a calibration on the model
    finds it wins by 5%, "off", or that row count itself), ``probe`` (measure before the
    batch+overlap run the share of a step during which the model's kernels leave the
    interpreter free) and ``device`` ("cpu", or "cuda": each worker on its own stream)."""

    concurrency: int = 16
    kv_blocks: int | None = None
    max_skip: int = 4
    threads: int = 1
    streams: int | None = None
    prefill_chunk: int | None = None
    tbo: str | int = "auto"
    probe: bool = True
    device: str = "cpu"

    @property
    def stream_count(self) -> int:
        """The streams of ``streams`` mode: ``streams``, else one per running request up to
        :data:`MAX_STREAMS`."""
        return self.streams or min(self.concurrency, MAX_STREAMS)

    def check(self) -> None:
        """InputError naming the flag of a setting out of range."""
        from ..decode.tbo import check_tbo

        for flag, v, lo, hi in (("--concurrency", self.concurrency, 1, MAX_CONCURRENCY),
                                ("--threads", self.threads, 1, MAX_THREADS),
                                ("--streams", self.streams, 1, MAX_STREAMS)):
            if v is not None and not lo <= v <= hi:
                raise InputError(None, f"{flag} must be an integer from {lo} to {hi}, got {v}")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise InputError(None, f"--kv-blocks must be at least 1, got {self.kv_blocks}")
        if self.max_skip < 0:
            raise InputError(None, f"--max-skip must not be negative, got {self.max_skip}")
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise InputError(None, f"--prefill-chunk must be at least 1, got "
                                   f"{self.prefill_chunk}")
        check_tbo(self.tbo)
        if self.device not in RUN_DEVICES:
            raise InputError(None, f"--device: a measured run executes on "
                                   f"{' or '.join(RUN_DEVICES)}, got {self.device!r} (a device "
                                   f"profile is for --simulate)")


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
    InputError for an unknown or missing one (no torch needed)."""
    from ..decode.config import MODES

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
    from ..decode.config import RUNNABLE, SIZES
    from ..decode.model import build_model
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
                               "prediction only: predict it with --simulate --device "
                               f"PROFILE, or run {' or '.join(RUNNABLE)}")
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
    from ..decode.config import blocks_for
    from ..decode.modes import ModeSettings, run_mode

    context = decoder.config.context
    blocks = settings.kv_blocks or settings.concurrency * blocks_for(context)
    _check_pool(decoder.config, blocks)
    ms = ModeSettings(concurrency=settings.concurrency, kv_blocks=blocks,
                      max_skip=settings.max_skip, context=context,
                      streams=settings.stream_count,
                      prefill_chunk=settings.prefill_chunk, tbo=settings.tbo,
                      probe=settings.probe, device=settings.device)
    return [run_mode(decoder, m, requests, ms) for m in modes]


def _check_pool(cfg: Any, blocks: int) -> None:
    """InputError when ``blocks`` KV blocks of ``cfg`` would take over :data:`MAX_KV_BYTES`
    (a built-in config says its bytes per position; a decoder of the user's own may not)."""
    from ..decode.config import BLOCK_TOKENS

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
    from ..decode.predict_sweep import rate_label

    rows = [measure(r).to_dict() for r in runs]
    base = next((r["tokens_per_s"] for r in rows if r["mode"] == "sequential"), None)
    for r in rows:
        r["vs_sequential"] = (round(r["tokens_per_s"] / base, 3) if base else None)
    agree = [agreement(runs[0], r).to_dict() for r in runs[1:]]
    early = [{"mode": r.mode, "request": lv.request.rid, "outcome": lv.outcome,
              "reason": lv.reason} for r in runs for lv in r.lives if lv.reason != "done"]
    cfg = decoder.config
    return DecodeResult(
        schema=SCHEMA, model=_model_doc(cfg), device=runs[0].device.upper(),
        settings={"concurrency": settings.concurrency, "kv_blocks": runs[0].kv_blocks,
                  "max_skip": settings.max_skip, "threads": settings.threads,
                  "streams": settings.stream_count,
                  "prefill_chunk": settings.prefill_chunk, "tbo": settings.tbo,
                  "probe": settings.probe},
        workload={"requests": len(runs[0].lives), "rate": rate_label(wl.rate),
                  "lengths": None if wl.file else wl.lengths, "seed": wl.seed,
                  "file": wl.file},
        modes=rows, agreement=agree, ended_early=early, notes=notes, runs=tuple(runs))


def _model_doc(cfg: Any) -> dict:
    """The model's shape (None for what a decoder of the user's own does not say)."""
    doc = {k: getattr(cfg, k, None) for k in ("name", "vocab", "dim", "layers", "heads",
                                               "kv_heads", "ffn", "context")}
    doc["name"] = doc["name"] or "custom"
    return doc


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


# ------------------------------------------------------------------ prediction

PREDICT_SCHEMA = "parastream.decode-predict/1"
#: the size predicted when none is named
PREDICT_MODEL = "7b"
#: requests generated for a prediction when none is said: enough to fill the sweep's
#: highest default concurrency
PREDICT_REQUESTS = 256


@dataclass(frozen=True)
class PredictResult:
    """The ``parastream.decode-predict/1`` document (:meth:`to_dict`): the model's shape,
    the device profile and its label (every figure is simulated), the launch mode, the
    host's cost per step, the sweep's settings and workload, the rates run, the
    two-micro-batch gate (threshold and calibration curve), one row per concurrency and
    rate (each mode's figures and the winner by tokens/s) and notes."""

    schema: str
    model: dict
    device: str
    label: str
    launch: str
    host: dict
    settings: dict
    workload: dict
    rates: list
    two_micro_batch: dict
    sweep: list[dict]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The document as a JSON-ready dict."""
        return document(self)


def predict(model: str = PREDICT_MODEL, device: Any = None, modes: str | Sequence[str] = "all",
            *, workload: Any = None, settings: Any = None) -> PredictResult:
    """Predict ``modes`` of decode for ``model`` (a built-in size: its shapes) on
    ``device`` (a shipped profile name, a profile file or a
    :class:`~parastream.device.profile.DeviceProfile`; default ascend910b): the same
    scheduler and requests on the discrete-event device model, swept over the
    concurrencies and rates of ``settings`` (a
    :class:`~parastream.decode.predict_sweep.SweepSettings`; its ``modes`` are replaced
    by ``modes``). ``workload``: a :class:`~parastream.decode.workload.WorkloadOptions`
    (default: 256 requests, uniform lengths, seed 0; a file keeps its arrivals). Needs no
    torch. Bad input raises :class:`~parastream.errors.InputError`."""
    import dataclasses

    from ..decode.predict_sweep import SweepSettings, predict_sweep
    from ..decode.workload import WorkloadOptions, make_requests

    cfg = _predict_config(model)
    profile = _predict_profile(device)
    sweep_settings = dataclasses.replace(settings or SweepSettings(), modes=check_modes(modes))
    _check_sweep(sweep_settings, profile)
    wl = workload or WorkloadOptions(requests=PREDICT_REQUESTS)
    reqs = make_requests(wl, cfg.vocab)
    if wl.file:
        _refuse_prompt_text(wl.file)
    sw = predict_sweep(cfg, profile, reqs, sweep_settings, own_arrivals=bool(wl.file))
    return _predict_result(cfg, profile, sweep_settings, wl, sw, len(reqs))


def _predict_config(model: Any) -> Any:
    """The shapes of built-in size ``model`` (InputError for anything else)."""
    from ..decode.config import SIZES

    if not isinstance(model, str) or model not in SIZES:
        raise InputError(None, f"--simulate predicts a built-in size ({', '.join(SIZES)}), "
                               f"not {model!r}: a decoder of your own has no shapes to price")
    return SIZES[model]


def _predict_profile(device: Any) -> Any:
    """The device profile named (default ascend910b), or the profile given."""
    from ..device.profile import DEFAULT_DEVICE, DeviceProfile, load_profile, warn_if_noted

    if isinstance(device, DeviceProfile):
        return device
    profile = load_profile(device or DEFAULT_DEVICE)
    warn_if_noted(profile)
    return profile


def _check_sweep(s: Any, profile: Any) -> None:
    """InputError naming the flag of a sweep setting out of range."""
    from ..sim.run import require_mode

    if not s.concurrency or not all(1 <= c <= MAX_CONCURRENCY for c in s.concurrency):
        raise InputError(None, "--sweep wants concurrencies from 1 to "
                               f"{MAX_CONCURRENCY} like 1,4,16, got {list(s.concurrency)}")
    if s.rates is not None and not (s.rates and all(r > 0 for r in s.rates)):
        raise InputError(None, f"--rates wants positive rates like inf,20,50, got "
                               f"{list(s.rates)}")
    if s.launch not in ("eager", "graph"):
        raise InputError(None, f"--launch must be eager or graph, got {s.launch!r}")
    require_mode(profile, s.launch)
    if not (s.host.step_us >= 0 and s.host.request_us >= 0):
        raise InputError(None, "--host-us: the host's costs must not be negative")
    DecodeSettings(kv_blocks=s.kv_blocks, max_skip=s.max_skip,
                   prefill_chunk=s.prefill_chunk).check()


def _refuse_prompt_text(path: str) -> None:
    """InputError at the first line of workload ``path`` that gives prompt text: its
    token count needs the model's tokenizer, which a prediction does not have."""
    import msgspec

    with open(path, "rb") as f:
        for no, raw in enumerate(f.read().splitlines(), 1):
            if raw.strip() and "prompt" in msgspec.json.decode(raw):
                raise InputError(path, f"line {no}: prompt text needs the model's "
                                       "tokenizer to count its tokens; --simulate takes "
                                       "prompt_tokens")


def _predict_result(cfg: Any, profile: Any, s: Any, wl: Any, sw: Any,
                    requests: int) -> PredictResult:
    from ..sim.run import sim_label

    gate = sw.gate
    return PredictResult(
        schema=PREDICT_SCHEMA, model=_model_doc(cfg), device=profile.name,
        label=sim_label(profile), launch=s.launch,
        host={"step_us": s.host.step_us, "request_us": s.host.request_us,
              "said": s.host.describe()},
        settings={"concurrency": list(s.concurrency), "modes": list(s.modes),
                  "max_skip": s.max_skip, "kv_blocks": s.kv_blocks,
                  "prefill_chunk": s.prefill_chunk, "hw_queues": profile.hw_queues},
        workload={"requests": requests, "lengths": None if wl.file else wl.lengths,
                  "seed": wl.seed, "file": wl.file},
        rates=sw.rates,
        two_micro_batch={"threshold_tokens": gate.threshold,
                         "curve": [{"forward": k, "tokens": t, "speedup": round(r, 3)}
                                   for k, t, r in gate.curve]},
        sweep=sw.rows)


__all__ = ["DecodeResult", "DecodeSettings", "PREDICT_SCHEMA", "PredictResult", "SCHEMA",
           "check_modes", "decode", "load_model", "predict"]
