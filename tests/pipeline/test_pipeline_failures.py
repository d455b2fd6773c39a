"""Failures: a stage raising on item k, the source raising, Ctrl-C, close() mid-run.
Every scenario must end in time, name stage and item, leave no worker behind and account
for every submitted item exactly once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from parastream.pipeline import Pipeline, PipelineError, Stage

from .helpers import live_pipeline_threads, within

BAD = 37


def boom_at(k: int, delay: float = 0.0):
    def stage(x):
        if delay:
            time.sleep(delay)
        if x == k:
            raise ValueError(f"bad item {x}")
        return x

    return stage


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("ordered", [True, False])
def test_stage_raising_on_item_k_names_stage_and_item(position, ordered):
    stages = [Stage("s0", lambda x: x), Stage("s1", lambda x: x, replicas=3),
              Stage("s2", lambda x: (time.sleep(0.0002), x)[1])]
    stages[position] = Stage(f"bad{position}", boom_at(BAD, 0.0001),
                             replicas=stages[position].replicas)
    seen: list[int] = []

    def consume():
        with Pipeline(stages, ordered=ordered) as p:
            try:
                for r in p.results(range(500)):
                    seen.append(r.id)
            finally:
                consume.stats = p.stats()

    with pytest.raises(PipelineError) as info:
        within(20, consume)
    err = info.value
    assert err.stage == f"bad{position}" and err.item_id == BAD
    assert isinstance(err.cause, ValueError) and err.__cause__ is err.cause
    assert f"stage 'bad{position}' failed on item {BAD}" in str(err)
    counts = err.counts
    assert counts["failed"] == 1
    assert counts["completed"] == len(seen) == len(set(seen))
    assert BAD not in seen
    assert sum(counts.values()) == err.submitted
    assert consume.stats.counts == counts
    assert err.submitted < 500  # intake stopped
    if ordered:
        assert seen == list(range(len(seen))) and len(seen) <= BAD
    assert live_pipeline_threads() == []


def test_source_iterator_raising_is_reported_as_the_source():
    def source():
        yield from range(10)
        raise OSError("disk gone")

    with pytest.raises(PipelineError) as info:
        within(10, lambda: list(Pipeline([Stage("a", lambda x: x)]).map(source())))
    assert info.value.stage == "<source>" and info.value.item_id == 10
    assert isinstance(info.value.cause, OSError)
    assert sum(info.value.counts.values()) == info.value.submitted <= 10
    assert live_pipeline_threads() == []


def test_two_stages_failing_at_once_report_the_first_and_count_both():
    gate = threading.Barrier(2)

    def fail_together(x):
        if x in (3, 4):
            gate.wait(timeout=5)
            raise RuntimeError(f"item {x}")
        return x

    with pytest.raises(PipelineError) as info:
        within(10, lambda: list(Pipeline([Stage("a", fail_together, replicas=2)]).map(range(50))))
    err = info.value
    assert err.item_id in (3, 4)
    assert err.counts["failed"] == 2
    assert sum(err.counts.values()) == err.submitted


def test_close_from_another_thread_stops_a_blocked_run():
    release, entered = threading.Event(), threading.Event()
    p = Pipeline([Stage("a", lambda x: x),
                  Stage("stuck", lambda x: (entered.set(), release.wait(0.05), x)[2])])
    got: list[int] = []

    def consume():
        for v in p.map(range(10_000)):
            got.append(v)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert entered.wait(10)  # items are in flight (a fixed sleep raced a slow thread start)
    within(10, p.close)
    t.join(10)
    assert not t.is_alive()
    st = p.stats()
    assert sum(st.counts.values()) == st.submitted
    assert st.counts["cancelled"] > 0 and st.counts["failed"] == 0
    assert live_pipeline_threads() == []


def test_keyboard_interrupt_shuts_every_worker_down():
    """A real SIGINT while the caller waits on the pipeline: the context manager cancels,
    every worker exits, the counts add up, the process ends (run in a subprocess so the
    signal cannot hit the test runner)."""
    script = textwrap.dedent("""
        import os, signal, threading, time
        from parastream.pipeline import Pipeline, Stage

        def slow(x):
            if x == 20:
                os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.002)
            return x

        got = []
        p = Pipeline([Stage("a", lambda x: x), Stage("slow", slow, replicas=2)])
        try:
            with p:
                for v in p.map(range(100_000)):
                    got.append(v)
        except KeyboardInterrupt:
            st = p.stats()
            left = [t.name for t in threading.enumerate() if t.name.startswith("parastream-")]
            assert left == [], left
            assert sum(st.counts.values()) == st.submitted, st.counts
            assert st.counts["completed"] == len(got)
            print("interrupted", len(got), st.counts["cancelled"])
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("interrupted"), (r.stdout, r.stderr)
