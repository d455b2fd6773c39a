"""The cuda code path of the decode modes against a stand-in for ``torch.cuda`` that
records every stream call per thread (no GPU here; tensors stay on the CPU): each worker
issues on its own stream (one per request in ``streams`` mode, up to ``streams``; the
device stream and the micro-batch stream in ``batch+overlap``), the two micro-batches meet
through events, the spans come from timing events, and the tokens are the cpu run's. A
cuda run without a GPU is a one-line error."""

from __future__ import annotations

import itertools
import threading
from contextlib import contextmanager

import pytest
import torch

from parastream.decode.metrics import agreement
from parastream.decode.modes import HOST_LANE, ModeSettings, run_mode
from parastream.errors import InputError

from .helpers import requests


class FakeCuda:
    """The calls the decode modes make on ``torch.cuda``, each logged with the thread's
    name; the current stream is per thread, as torch's is; events tick a clock."""

    def __init__(self):
        self.log: list[tuple] = []
        self.ids = itertools.count(1)
        self.clock = itertools.count()
        self.local = threading.local()
        self.default = self.Stream()
        self.lock = threading.Lock()

    def _note(self, *entry):
        with self.lock:
            self.log.append((threading.current_thread().name, *entry))

    def Stream(self):  # noqa: N802 - mirrors torch.cuda.Stream
        fake = self

        class S:
            id = next(fake.ids)

            def wait_event(s, ev):
                fake._note("wait", s.id, ev.id)

        return S()

    def Event(self, enable_timing=False):  # noqa: N802
        fake = self

        class E:
            id = next(fake.ids)
            t = None

            def record(e, stream):
                with fake.lock:
                    e.t = next(fake.clock)
                fake._note("record", stream.id, e.id)

            def elapsed_time(e, end):
                return (end.t - e.t) * 1e-3  # 1 us per tick, in ms

        return E()

    def current_stream(self):
        return getattr(self.local, "stream", self.default)

    @contextmanager
    def stream(self, s):
        before = self.current_stream()
        self.local.stream = s
        try:
            yield
        finally:
            self.local.stream = before

    def synchronize(self):
        self._note("synchronize")


class OnStreams:
    """The tiny decoder, noting the current stream of each call: (kind, stream, rids)."""

    def __init__(self, model, fake):
        self.model, self.fake = model, fake
        self.config = model.config
        self.calls: list[tuple[str, int, str, tuple[int, ...]]] = []

    def _note(self, kind, caches):
        self.calls.append((kind, self.fake.current_stream().id,
                           threading.current_thread().name, tuple(c.rid for c in caches)))

    def new_pool(self, blocks):
        return self.model.new_pool(blocks)

    def new_cache(self, rid, pool):
        return self.model.new_cache(rid, pool)

    def prefill(self, tokens, cache):
        self._note("prefill", [cache])
        return self.model.prefill(tokens, cache)

    def decode(self, tokens, caches):
        self._note("decode", caches)
        return self.model.decode(tokens, caches)

    def decode_phases(self, tokens, caches):
        self._note("phases", caches)  # on the first phase: where the generator runs
        return (yield from self.model.decode_phases(tokens, caches))


def _settings(**kw):
    return ModeSettings(kv_blocks=64, device="cuda", **kw)


def test_streams_mode_gives_each_worker_its_stream_and_each_request_one(tiny):
    fake = FakeCuda()
    model = OnStreams(tiny, fake)
    reqs = requests(6, output=4)
    run = run_mode(model, "streams", reqs, _settings(concurrency=3, streams=2),
                   device_mod=fake)
    cpu = run_mode(tiny, "streams", reqs, ModeSettings(concurrency=3, kv_blocks=64))
    assert [lv.tokens for lv in run.lives] == [lv.tokens for lv in cpu.lives]
    streams = {s for _, s, _, _ in model.calls}
    assert len(streams) == 2 and fake.default.id not in streams
    by_thread = {}
    for _, s, thread, _ in model.calls:
        assert by_thread.setdefault(thread, s) == s  # a worker issues on its own stream
    assert set(by_thread) == {"stream 0", "stream 1"}
    for rid in range(6):  # a request's steps stay on one stream (no preemption here)
        assert len({s for _, s, _, rids in model.calls if rids == (rid,)}) == 1
    assert run.device == "cuda" and run.timeline.device.name == "cuda"


def test_overlap_mode_runs_the_micro_batches_on_two_streams_joined_by_events(tiny):
    fake = FakeCuda()
    model = OnStreams(tiny, fake)
    reqs = requests(8)
    run = run_mode(model, "batch+overlap", reqs, _settings(concurrency=4, tbo=2),
                   device_mod=fake)
    ref = run_mode(tiny, "sequential", reqs, ModeSettings(concurrency=4, kv_blocks=64))
    a = agreement(ref, run)
    assert a.mismatches == [] and a.compared == 8
    device = {s for k, s, t, _ in model.calls if t == "device"}
    helper = {s for k, s, t, _ in model.calls if t == "device micro-batch"}
    assert len(device) == 1 and len(helper) == 1 and device != helper
    assert all(k == "phases" for k, _, t, _ in model.calls if t == "device micro-batch")
    (dev,), (mb,) = device, helper
    recorded = {e: s for _, op, s, e in (x for x in fake.log if x[1] == "record")}
    waits = [(s, recorded[e]) for _, op, s, e in (x for x in fake.log if x[1] == "wait")]
    assert (mb, dev) in waits  # the helper's stream waits for the device stream's inputs
    assert (dev, mb) in waits  # and the device stream for the helper's last phase


def test_spans_are_timed_by_events_on_the_run_clock(tiny):
    fake = FakeCuda()
    run = run_mode(tiny, "batch", requests(4), _settings(concurrency=4), device_mod=fake)
    tl = run.timeline
    dev = [k for k, lane in enumerate(tl.streams) if lane != HOST_LANE]
    spans = [(int(s), int(e)) for s, e, k in zip(tl.start_ns, tl.end_ns, tl.stream) if k in dev]
    assert spans and all(run.start_ns <= s <= e for s, e in spans)
    ticks = sorted(e - s for s, e in spans)
    assert ticks[0] % 1000 == 0  # whole event-clock ticks (1 us each), not host times
    assert ("MainThread", "synchronize") in fake.log


def test_cuda_without_a_gpu_is_a_one_line_error(tiny, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match="--device cuda: no cuda device") as err:
        run_mode(tiny, "batch", requests(2), _settings())
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="--device: 'tpu'"):
        run_mode(tiny, "batch", requests(2), ModeSettings(device="tpu"))
