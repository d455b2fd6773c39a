"""The scheduler's properties, over random workloads (hypothesis): nothing lost or
duplicated, the KV budget never exceeded, no block held twice, no request skipped more
than max_skip passes; and its rules on small cases: FCFS, preemption of the least wasted
work with the queue place kept, the faults that end a request at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.decode.config import blocks_for
from parastream.decode.scheduler import (FAILED, FINISHED, RUNNING, WAITING, Job, Scheduler,
                                         SchedulerSettings)

jobs_st = st.lists(st.tuples(st.integers(1, 70), st.integers(0, 30), st.integers(0, 6)),
                   min_size=1, max_size=14)
settings_st = st.builds(SchedulerSettings, max_running=st.integers(1, 5),
                        kv_blocks=st.integers(1, 16), max_skip=st.integers(0, 3),
                        context=st.integers(24, 120),
                        prefill_chunk=st.one_of(st.none(), st.integers(1, 40)))


def _check_invariants(s: Scheduler, scheduled: bool) -> None:
    held = [b for j in s.running for b in j.table]
    assert len(held) == len(set(held)), "a block held twice"
    assert len(held) + len(s.free) == s.settings.kv_blocks
    assert s.held <= s.settings.kv_blocks
    assert len(s.running) <= s.settings.max_running
    for j in s.running if scheduled else ():  # the blocks of the step just decided
        assert len(j.table) >= blocks_for(j.step_positions)
        if not j.prefilling:
            assert j.step_positions == j.positions
    for j in s.waiting + s.running:
        assert j.skips <= s.settings.max_skip


def _check_chunks(s: Scheduler, step) -> None:
    """A pass's chunks: within its prefill budget, contiguous from where each job's
    prefill stands, no job both in a chunk and decoding."""
    chunk = s.settings.prefill_chunk
    if chunk is None:
        assert step.chunks == []
        return
    assert step.prefill == []
    assert sum(c.stop - c.start for c in step.chunks) <= chunk
    for c in step.chunks:
        assert c.start == c.job.filled < c.stop <= c.job.target
        assert c.final == (c.stop == c.job.target)
        assert c.job not in step.decode


def _drive(s: Scheduler, jobs: list[Job], arrive: list[int], fail_every: int) -> None:
    """Add each job at its arrival pass, schedule, advance; every ``fail_every``-th pass
    the first job of the step fails (a model fault)."""
    for k in range(10_000):
        for j, a in zip(jobs, arrive):
            if a == k:
                s.add(j)
        if s.idle and k > max(arrive):
            return
        step = s.schedule()
        _check_invariants(s, scheduled=True)
        _check_chunks(s, step)
        if fail_every and k % fail_every == fail_every - 1 and step.jobs:
            s.fail(step.jobs[0], "model fault")
        s.advance(step)
        _check_invariants(s, scheduled=False)
    raise AssertionError("the scheduler did not drain")


@settings(max_examples=300)
@given(jobs_st, settings_st, st.sampled_from([0, 3, 7]))
def test_nothing_lost_budget_kept_skips_bounded(spec, cfg, fail_every):
    jobs = [Job(i, i, p, o) for i, (p, o, _) in enumerate(spec)]
    arrive = sorted(a for *_, a in spec)
    s = Scheduler(cfg)
    _drive(s, jobs, arrive, fail_every)
    ended = [j.rid for j in s.ended]
    assert sorted(ended) == list(range(len(jobs))), "lost or duplicated"
    assert all(j.state in (FINISHED, FAILED) and j.reason for j in jobs)
    assert all(j.skips <= cfg.max_skip for j in jobs)
    assert len(s.free) == cfg.kv_blocks
    for j in jobs:
        if j.state == FINISHED and j.reason == "done":
            assert j.generated == j.output


def _run_until_idle(s: Scheduler) -> list:
    passes = []
    while not s.idle:
        p = s.schedule()
        passes.append(p)
        s.advance(p)
    return passes


def test_fcfs_admits_in_arrival_order():
    s = Scheduler(SchedulerSettings(max_running=2, kv_blocks=100))
    jobs = [Job(i, i, 10, 3) for i in range(4)]
    for j in jobs:
        s.add(j)
    first = s.schedule()
    assert [j.rid for j in first.prefill] == [0, 1]
    assert all(j.passes_waited == 1 for j in jobs[2:])


def test_preemption_takes_the_least_wasted_work_and_keeps_its_place():
    # 4 blocks of 16: job 0 (40 positions, 3 blocks) and job 1 (8, 1 block) fill it;
    # job 0 crossing 48 positions needs a fourth block: job 1 (least to recompute) goes
    s = Scheduler(SchedulerSettings(max_running=4, kv_blocks=4))
    a, b, c = Job(0, 0, 40, 20), Job(1, 1, 8, 20), Job(2, 2, 60, 1)
    for j in (a, b):
        s.add(j)
    s.add(c)  # waits: no blocks
    p = s.schedule()
    assert [j.rid for j in p.prefill] == [0, 1] and c.state == WAITING
    for _ in range(12):
        p = s.schedule()
        s.advance(p)
        if p.preempted:
            break
    assert [j.rid for j in p.preempted] == [1]
    assert b.state == WAITING and b.preemptions == 1
    assert [j.rid for j in s.waiting] == [1, 2], "the victim keeps its queue place"
    assert not p.prefill, "nobody is admitted in a pass that preempts"


def _blocked_case(max_skip: int):
    """A runs (2 of 6 blocks); B (5 blocks) does not fit beside it; C and D (1 block
    each) arrive behind B, one pass apart."""
    s = Scheduler(SchedulerSettings(max_running=8, kv_blocks=6, max_skip=max_skip))
    a, b, c, d = Job(0, 0, 17, 3), Job(1, 1, 70, 2), Job(2, 2, 5, 2), Job(3, 3, 5, 2)
    s.add(a)
    s.advance(s.schedule())
    s.add(b)
    s.add(c)
    first = s.schedule()
    s.advance(first)
    s.add(d)
    second = s.schedule()
    return b, first, second


def test_at_max_skip_zero_nobody_passes_a_waiting_job():
    b, first, second = _blocked_case(0)
    assert first.prefill == [] and second.prefill == []
    assert b.skips == 0


def test_a_job_at_max_skip_blocks_everyone_behind_it():
    b, first, second = _blocked_case(1)
    assert [j.rid for j in first.prefill] == [2] and b.skips == 1  # C went first once
    assert second.prefill == [] and b.skips == 1  # D waits behind B


def test_faults_end_only_their_own_request():
    s = Scheduler(SchedulerSettings(max_running=4, kv_blocks=4, context=100))
    zero, over, huge, ok = (Job(0, 0, 5, 0), Job(1, 1, 100, 3), Job(2, 2, 50, 30),
                            Job(3, 3, 10, 3))
    for j in (zero, over, huge, ok):
        s.add(j)
    assert (zero.state, zero.reason) == (FINISHED, "zero output tokens asked")
    assert over.state == FAILED and "context of 100" in over.reason
    assert huge.state == WAITING  # 50 positions fit 4 blocks; 65 will not
    _run_until_idle(s)
    assert huge.state == FAILED and "budget is 4" in huge.reason
    assert ok.state == FINISHED and ok.generated == 3
    assert sorted(j.rid for j in s.ended) == [0, 1, 2, 3]


def test_a_request_stops_when_its_context_is_full():
    s = Scheduler(SchedulerSettings(max_running=1, kv_blocks=10, context=20))
    j = Job(0, 0, 15, 100)
    s.add(j)
    _run_until_idle(s)
    assert j.state == FINISHED and j.positions == 20 and "context full" in j.reason


def test_a_running_job_never_holds_fewer_blocks_than_its_step_needs():
    s = Scheduler(SchedulerSettings(max_running=3, kv_blocks=12))
    for i in range(3):
        s.add(Job(i, i, 14 + i, 20))
    for _ in range(25):
        p = s.schedule()
        for j in p.jobs:
            assert j.state == RUNNING and len(j.table) >= blocks_for(j.positions)
        s.advance(p)


def test_a_long_prompt_is_prefilled_in_chunks_beside_the_running_decodes():
    # job 0 decodes; job 1's 100-position prompt comes in chunks of 32: job 0 decodes a
    # token in every pass meanwhile, and job 1's blocks grow with its chunks
    s = Scheduler(SchedulerSettings(max_running=4, kv_blocks=20, prefill_chunk=32))
    a, b = Job(0, 0, 10, 20), Job(1, 1, 100, 3)
    s.add(a)
    s.advance(s.schedule())
    s.add(b)
    seen = []
    for _ in range(4):
        p = s.schedule()
        assert p.decode == [a]
        seen.append([(c.start, c.stop, c.final, len(b.table)) for c in p.chunks])
        s.advance(p)
    assert seen == [[(0, 32, False, 2)], [(32, 64, False, 4)], [(64, 96, False, 6)],
                    [(96, 100, True, 7)]]
    assert b.generated == 1 and not b.prefilling
    p = s.schedule()
    assert p.decode == [a, b] and p.chunks == []


def test_a_preempted_chunked_prefill_starts_again_from_zero():
    s = Scheduler(SchedulerSettings(max_running=4, kv_blocks=5, prefill_chunk=16))
    a, b = Job(0, 0, 47, 20), Job(1, 1, 60, 2)
    s.add(a)
    for _ in range(3):  # a's 47 positions in three chunks: 3 blocks
        s.advance(s.schedule())
    s.add(b)
    s.advance(s.schedule())  # b's first chunk: 1 block; a decodes
    assert b.prefilling and b.filled == 16 and len(b.table) == 1
    preempted = []
    for _ in range(6):
        p = s.schedule()
        preempted += p.preempted
        s.advance(p)
        if preempted:
            break
    assert preempted == [b] and b.state == WAITING
    assert (b.filled, b.target, b.table) == (0, 0, [])
