"""The four modes on the same requests: greedy tokens identical (a difference allowed only
at a numerical tie, and counted), nothing lost, the KV budget kept, and each fault ending
only its own request with a reason."""

from __future__ import annotations

import pytest

from parastream.decode.metrics import agreement, measure
from parastream.decode.modes import MODES, ModeSettings, run_mode
from parastream.decode.scheduler import FAILED, FINISHED
from parastream.decode.workload import Request

from .helpers import Faulty, requests


def _settings(model, **kw) -> ModeSettings:
    kw.setdefault("concurrency", 4)
    kw.setdefault("kv_blocks", 64)
    return ModeSettings(context=model.config.context, **kw)


def _tokens(run) -> dict[int, list[int]]:
    return {lv.request.rid: lv.tokens for lv in run.lives if lv.outcome == FINISHED}


@pytest.fixture(scope="module")
def clean(tiny):
    """Every mode over 10 requests, and the sequential run as the reference."""
    reqs = requests(10)
    return reqs, {m: run_mode(tiny, m, reqs, _settings(tiny)) for m in MODES}


def test_all_modes_give_the_same_greedy_tokens(clean):
    reqs, runs = clean
    ref = runs["sequential"]
    for mode, run in runs.items():
        a = agreement(ref, run)
        assert a.mismatches == [], mode
        assert a.compared == len(reqs)
        assert a.identical + len(a.ties) == len(reqs)
        assert all(len(lv.tokens) == lv.request.output_tokens for lv in run.lives)


def test_nothing_lost_and_the_figures_add_up(clean):
    reqs, runs = clean
    for mode, run in runs.items():
        m = measure(run)
        assert m.finished + m.failed == len(reqs) == m.requests
        assert m.tokens == sum(r.output_tokens for r in reqs)
        assert 0 < m.busy_share <= 1 and 0 < m.host_share < 1
        assert 0 < m.jain <= 1
        assert m.schedule_ms["p50"] > 0 and m.idle_between_steps_ms["p50"] >= 0
        assert run.peak_blocks <= run.kv_blocks


@pytest.mark.parametrize("mode", ["batch", "batch+overlap"])
@pytest.mark.parametrize("kv_blocks", [64, 8])
def test_chunked_prefill_keeps_the_tokens_and_the_decodes_running(tiny, mode, kv_blocks):
    """Long prompts in chunks of 16 beside the running decodes: the sequential tokens,
    the budget kept (8 blocks preempt), and steps that carry a chunk and decode rows."""
    reqs = [Request(i, 0.0, tuple((7 * i + 3 * k + 1) % 512 for k in range(12 + 9 * i)),
                    6 + i % 3) for i in range(8)]
    ref = run_mode(tiny, "sequential", reqs, _settings(tiny))
    run = run_mode(tiny, mode, reqs, _settings(tiny, kv_blocks=kv_blocks, prefill_chunk=16))
    a = agreement(ref, run)
    assert a.mismatches == [] and a.compared == len(reqs)
    assert run.prefill_chunk == 16 and run.peak_blocks <= kv_blocks
    tl = run.timeline
    names = [tl.op_name(i) for i in range(len(tl))]
    assert not any(n.startswith("prefill") for n in names)
    chunks = [n for n in names if n.startswith("chunk")]
    assert chunks and all(int(b) - int(a) <= 16 for a, b in
                          (n.split()[-1].split(":") for n in chunks))
    if kv_blocks == 64:  # no preemption: the longest prompt (75) takes five chunks
        assert sum(n.startswith("chunk r7 ") for n in names) == 5


def test_a_decoder_without_extend_prefills_whole(tiny):
    reqs = requests(4)
    run = run_mode(Faulty(tiny, rid=99, at=0), "batch", reqs,
                   _settings(tiny, prefill_chunk=4))
    assert run.prefill_chunk is None
    assert all(lv.outcome == FINISHED for lv in run.lives)


def test_sequential_runs_one_request_at_a_time(clean):
    _, runs = clean
    seq = runs["sequential"]
    spans = sorted((lv.times_ns[0], lv.times_ns[-1]) for lv in seq.lives)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("mode", MODES)
def test_a_tight_kv_budget_preempts_and_keeps_the_tokens(tiny, clean, mode):
    reqs, runs = clean
    # 6 blocks of 16 positions for 4 running requests of up to 25 positions each
    run = run_mode(tiny, mode, reqs, _settings(tiny, kv_blocks=6))
    if mode != "sequential":
        assert run.preemptions > 0
    assert run.peak_blocks <= 6
    a = agreement(runs["sequential"], run)
    assert a.mismatches == [] and a.compared == len(reqs)


@pytest.mark.parametrize("mode", MODES)
def test_each_fault_ends_only_its_own_request(tiny, clean, mode):
    reqs, runs = clean
    ctx = tiny.config.context
    faulty = [*reqs[:6],
              Request(6, 0.0, (1, 2, 3), 0),  # zero output tokens
              Request(7, 0.0, tuple(range(ctx)), 4),  # prompt over the context
              Request(8, 0.0, tuple(range(1, 100)), 40),  # too big for the KV budget
              Request(9, 0.0, reqs[9].prompt, reqs[9].output_tokens, 2)]  # cancelled
    # request 2 raises from its 4th decode step on (position >= prompt + 3)
    model = Faulty(tiny, rid=2, at=len(reqs[2].prompt) + 3)
    run = run_mode(model, mode, faulty, _settings(tiny, kv_blocks=8))
    by = {lv.request.rid: lv for lv in run.lives}
    assert by[2].outcome == FAILED and "injected fault" in by[2].reason
    assert "\n" not in by[2].reason and len(by[2].tokens) == 4
    assert by[6].outcome == FINISHED and by[6].reason == "zero output tokens asked"
    assert by[7].outcome == FAILED and "context" in by[7].reason
    assert by[8].outcome == FAILED and "KV blocks" in by[8].reason
    assert (by[9].outcome, by[9].reason) == (FAILED, "cancelled after 2 tokens")
    ref = _tokens(runs["sequential"])
    assert by[9].tokens == ref[9][:2]
    for rid in (0, 1, 3, 4, 5):
        assert by[rid].outcome == FINISHED and by[rid].tokens == ref[rid], rid
    assert len(run.lives) == 10 and all(lv.outcome in (FINISHED, FAILED) for lv in run.lives)
    assert run.peak_blocks <= 8


def test_a_fault_at_prefill_ends_only_its_request(tiny, clean):
    reqs, runs = clean
    run = run_mode(Faulty(tiny, rid=4, at=0), "batch", reqs, _settings(tiny))
    by = {lv.request.rid: lv for lv in run.lives}
    assert by[4].outcome == FAILED and by[4].tokens == []
    assert all(by[r].tokens == _tokens(runs["sequential"])[r] for r in by if r != 4)


def test_arrivals_are_waited_for(tiny):
    reqs = [Request(i, 0.02 * i, (1, 2, 3, 4), 3) for i in range(4)]
    run = run_mode(tiny, "batch", reqs, _settings(tiny))
    for lv in run.lives:
        assert lv.times_ns[0] - run.start_ns >= lv.request.arrival_s * 1e9
    assert measure(run).finished == 4


def test_an_unknown_mode_is_refused(tiny):
    with pytest.raises(ValueError, match="mode must be one of"):
        run_mode(tiny, "pipelined", requests(1), _settings(tiny))
