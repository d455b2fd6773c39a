"""The modes over random budgets, concurrency, requests and prefill chunks (hypothesis,
few examples: each runs the tiny model): every request ends once with a reason, the KV
budget is never exceeded, no request is skipped more than max_skip passes, and every
request that finishes has the reference's greedy tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.decode.metrics import TIE, first_difference
from parastream.decode.modes import CHUNKED, MODES, ModeSettings, run_mode
from parastream.decode.scheduler import FAILED, FINISHED
from parastream.decode.workload import Request

reqs_st = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 12)), min_size=1, max_size=7)


@pytest.fixture(scope="module")
def reference(tiny):
    """Greedy tokens (and top-2 gaps) of one request decoded alone with room to spare."""
    cache: dict = {}

    def tokens(prompt: tuple[int, ...], n: int):
        if (prompt, n) not in cache:
            run = run_mode(tiny, "sequential", [Request(0, 0.0, prompt, n)],
                           ModeSettings(concurrency=1, kv_blocks=64,
                                        context=tiny.config.context))
            cache[prompt, n] = (run.lives[0].tokens, run.lives[0].gaps)
        return cache[prompt, n]
    return tokens


@settings(max_examples=25)
@given(reqs_st, st.sampled_from(MODES), st.integers(1, 4), st.integers(2, 8),
       st.integers(1, 3), st.one_of(st.none(), st.integers(1, 24)))
def test_every_request_ends_once_within_the_budget(tiny, reference, spec, mode, conc,
                                                   blocks, streams, chunk):
    reqs = [Request(i, 0.0, tuple((5 * i + k) % 512 for k in range(p)), o)
            for i, (p, o) in enumerate(spec)]
    st_ = ModeSettings(concurrency=conc, kv_blocks=blocks, context=tiny.config.context,
                       streams=streams, prefill_chunk=chunk)
    run = run_mode(tiny, mode, reqs, st_)
    assert run.peak_blocks <= blocks
    assert run.prefill_chunk == (chunk if mode in CHUNKED else None)
    assert all(j.skips <= st_.max_skip for j in run.jobs)
    assert [lv.request.rid for lv in run.lives] == list(range(len(reqs)))
    for lv in run.lives:
        assert lv.outcome in (FINISHED, FAILED) and lv.reason
        if lv.outcome == FINISHED:
            want, gaps = reference(lv.request.prompt, lv.request.output_tokens)
            k = first_difference(lv.tokens, want)
            assert k is None or min(gaps[k], lv.gaps[k]) < TIE, (lv.request.rid, k)
        else:
            assert "KV blocks" in lv.reason  # the only failure without a fault
