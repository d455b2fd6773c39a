"""Two-micro-batch overlap (TBO): a split step computes what the whole step does, a fault
in it changes no cache, the calibration's threshold rule, the gate (only steps of at
least the threshold's rows are split, and none when the calibration says never), and the
interpreter probe's figures in the run's metrics."""

from __future__ import annotations

import threading

import pytest
import torch

from parastream.decode import calibrate as cal
from parastream.decode.device import Worker
from parastream.decode.metrics import agreement, measure
from parastream.decode.modes import ModeSettings, run_mode
from parastream.decode.scheduler import FAILED, FINISHED
from parastream.decode.tbo import split_decode

from .helpers import Faulty, requests


def _caches(model, n, pool_blocks=64):
    pool = model.new_pool(pool_blocks)
    caches = []
    for i in range(n):
        c = model.new_cache(i, pool)
        c.table = list(range(4 * i, 4 * i + 4))
        model.prefill(list(range(1, 8 + 5 * i)), c)
        caches.append(c)
    return caches


@pytest.fixture
def helper():
    w = Worker("micro-batch")
    yield w
    w.close()


def test_a_split_step_computes_the_whole_step(tiny, helper):
    caches = _caches(tiny, 5)
    lengths = [c.length for c in caches]
    whole = tiny.decode([3, 4, 5, 6, 7], caches)
    for c, n in zip(caches, lengths):
        c.length = n
    split = split_decode(tiny, [3, 4, 5, 6, 7], caches, helper)
    assert [c.length for c in caches] == [n + 1 for n in lengths]
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)
    assert torch.equal(split.argmax(-1), whole.argmax(-1))


class _PhaseFault:
    """The tiny decoder whose phases raise for request ``rid`` at its ``at``-th phase."""

    def __init__(self, model, rid, at=3):
        self.model, self.rid, self.at = model, rid, at
        self.config = model.config

    def decode_phases(self, tokens, caches):
        inner = self.model.decode_phases(tokens, caches)
        for k in range(10_000):
            if k == self.at and any(c.rid == self.rid for c in caches):
                raise RuntimeError("injected phase fault")
            try:
                phase = next(inner)
            except StopIteration as stop:
                return stop.value
            yield phase


def test_a_fault_in_either_micro_batch_leaves_every_cache_as_it_was(tiny, helper):
    for rid in (0, 3):  # in the first half (this thread), in the second (the helper)
        caches = _caches(tiny, 4)
        lengths = [c.length for c in caches]
        with pytest.raises(RuntimeError, match="injected phase fault"):
            split_decode(_PhaseFault(tiny, rid), [1, 2, 3, 4], caches, helper)
        assert [c.length for c in caches] == lengths
        assert helper.submit(lambda w: "idle").result() == "idle"  # nothing left running


@pytest.mark.parametrize("whole,split,want", [
    ([10, 20, 40, 80], [12, 21, 30, 50], 8),  # wins from 8 rows on
    ([10, 20, 40, 80], [9, 30, 30, 50], 8),  # a win at 2 alone, below a loss, not taken
    ([10, 20, 40, 80], [12, 22, 42, 78], None),  # 2.5% at 16: under the 5% margin
    ([10, 20, 40, 80], [5, 10, 20, 40], 2),
])
def test_the_threshold_is_the_smallest_size_of_an_unbroken_win(whole, split, want):
    assert cal.smallest_win([2, 4, 8, 16], whole, split, 0.05) == want


def test_calibration_times_each_size_both_ways(tiny):
    c = cal.calibrate_split(tiny, [1, 2, 4], reps=2)
    assert c.sizes == (2, 4) and len(c.whole_ms) == len(c.split_ms) == 2
    assert all(t > 0 for t in c.whole_ms + c.split_ms)
    assert c.threshold in (None, 2, 4) and c.to_dict()["sizes"] == (2, 4)
    assert cal.batch_sizes(12) == [2, 4, 8, 12] and cal.batch_sizes(1) == [2]


def test_a_decoder_without_phases_is_never_split(tiny):
    c = cal.calibrate_split(Faulty(tiny, rid=99, at=0), [2, 4])
    assert c.threshold is None and "decode_phases" in c.reason
    run = run_mode(Faulty(tiny, rid=99, at=0), "batch+overlap", requests(4),
                   ModeSettings(concurrency=4, kv_blocks=64, tbo=2))
    assert run.tbo_at is None


@pytest.fixture(scope="module")
def reference(tiny):
    return run_mode(tiny, "sequential", requests(8), ModeSettings(concurrency=4, kv_blocks=64))


def _decode_steps(run) -> list[tuple[int, bool]]:
    tl = run.timeline
    names = [tl.op_name(i) for i in range(len(tl))]
    return [(int(n.split("B=")[1].split()[0]), n.endswith("2mb"))
            for n in names if n.startswith("decode B=")]


def test_steps_at_or_above_the_threshold_are_split_and_keep_the_tokens(tiny, reference):
    run = run_mode(tiny, "batch+overlap", requests(8),
                   ModeSettings(concurrency=4, kv_blocks=64, tbo=3, prefill_chunk=8))
    assert run.tbo_at == 3
    steps = _decode_steps(run)
    assert {b for b, s in steps if s} and all(s == (b >= 3) for b, s in steps)
    a = agreement(reference, run)
    assert a.mismatches == [] and a.compared == 8
    assert measure(run).tbo_at == 3
    assert "device micro-batch" not in {t.name for t in threading.enumerate()}  # closed
    tl = run.timeline  # the second half's phases on their own lane
    assert tl.streams == ["device", "device micro-batch", "scheduler"]
    mb = tl.stream == tl.streams.index("device micro-batch")
    assert {tl.op_name(i) for i in mb.nonzero()[0]} == {"mb2 attention", "mb2 mlp"}
    batch = run_mode(tiny, "batch", requests(8), ModeSettings(concurrency=4, kv_blocks=64,
                                                              tbo=3))
    assert batch.tbo_at is None and not any(s for _, s in _decode_steps(batch))


def test_a_calibration_that_says_never_splits_nothing(tiny, monkeypatch):
    never = cal.Calibration((2, 4), (1.0, 2.0), (3.0, 4.0), 0.05, None)
    monkeypatch.setattr("parastream.decode.modes.calibrate_split", lambda *a, **k: never)
    run = run_mode(tiny, "batch+overlap", requests(6),
                   ModeSettings(concurrency=4, kv_blocks=64, tbo="auto"))
    assert run.calibration is never and run.tbo_at is None
    assert not any(s for _, s in _decode_steps(run))
    assert measure(run).tbo_calibration["whole_ms"] == (1.0, 2.0)


def test_a_fault_in_a_split_step_ends_only_its_request(tiny, reference):
    class Faults(Faulty):  # request 2 raises from its 3rd decode step on, split or not
        def decode_phases(self, tokens, caches):
            if any(c.rid == self.rid and c.length >= self.at for c in caches):
                raise RuntimeError("injected fault")
            return self.model.decode_phases(tokens, caches)

    reqs = requests(8)
    run = run_mode(Faults(tiny, rid=2, at=len(reqs[2].prompt) + 2), "batch+overlap", reqs,
                   ModeSettings(concurrency=4, kv_blocks=64, tbo=2))
    by = {lv.request.rid: lv for lv in run.lives}
    assert by[2].outcome == FAILED and "injected fault" in by[2].reason
    for lv in reference.lives:
        if lv.request.rid != 2:
            assert by[lv.request.rid].outcome == FINISHED
            assert by[lv.request.rid].tokens == lv.tokens


def test_the_interpreter_probe_is_in_the_run_and_its_metrics(tiny):
    p = cal.probe_interpreter(tiny, 4, seconds=0.02, rounds=1)
    assert p.batch == 4 and p.step_ms > 0 and p.idle_rate > 0
    assert 0 <= p.free_share <= 1 and 0 <= p.raw_share <= 1 and p.probed_ms > 0
    run = run_mode(tiny, "batch+overlap", requests(4),
                   ModeSettings(concurrency=4, kv_blocks=64, probe=True))
    m = measure(run)
    assert run.probe is not None and m.interpreter_free_share == run.probe.free_share
    assert m.interpreter_probe["batch"] == 4
    assert 0 < m.host_step_share < 1
    assert run_mode(tiny, "batch", requests(4), ModeSettings(kv_blocks=64, probe=True)).probe \
        is None


def test_bad_tbo_settings_are_one_line_errors():
    from parastream.errors import InputError

    for bad in ("sometimes", 1, 0):
        with pytest.raises(InputError, match="--tbo"):
            ModeSettings(tbo=bad)


def _probe(free: float) -> cal.InterpreterProbe:
    return cal.InterpreterProbe(batch=4, step_ms=10.0, probed_ms=11.0, idle_rate=100.0,
                                busy_rate=100.0 * free, raw_share=free, free_share=free)


@pytest.mark.parametrize("free, ahead", [(0.0, False), (0.19, False), (0.2, True), (0.9, True)])
def test_the_probe_gates_one_step_ahead_scheduling(tiny, reference, monkeypatch, free, ahead):
    monkeypatch.setattr("parastream.decode.modes.probe_interpreter", lambda *a, **k: _probe(free))
    run = run_mode(tiny, "batch+overlap", requests(8),
                   ModeSettings(concurrency=4, kv_blocks=64, probe=True))
    assert run.ahead is ahead and measure(run).one_step_ahead is ahead
    assert [lv.tokens for lv in run.lives] == [lv.tokens for lv in reference.lives]


def test_without_the_probe_batch_overlap_schedules_ahead_and_batch_never(tiny):
    assert run_mode(tiny, "batch+overlap", requests(4),
                    ModeSettings(concurrency=4, kv_blocks=64, probe=False)).ahead
    assert not run_mode(tiny, "batch", requests(4), ModeSettings(kv_blocks=64, probe=True)).ahead
