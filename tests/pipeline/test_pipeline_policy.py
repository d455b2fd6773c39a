"""The error policy (``on_error``: fail, skip, retry:N) of a pipelined and a serial run:
nothing lost, nothing duplicated, the items that succeed in order, every dropped and
retried item named."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parastream.pipeline import Pipeline, PipelineError, Stage, run_serial
from parastream.pipeline import ErrorPolicy
from parastream.pipeline.policy import MAX_RETRIES

from .helpers import live_pipeline_threads, within


class Faults:
    """A stage fn that raises on the items in ``bad`` every time and on those in ``flaky``
    the given number of times, then succeeds; counts every call."""

    def __init__(self, bad: set[int], flaky: dict[int, int]) -> None:
        self.bad, self.flaky = bad, dict(flaky)
        self.calls: dict[int, int] = {}
        self.lock = threading.Lock()

    def __call__(self, x: int) -> int:
        with self.lock:
            self.calls[x] = self.calls.get(x, 0) + 1
            n = self.calls[x]
        if x in self.bad:
            raise ValueError(f"bad item {x}\nsecond line")
        if n <= self.flaky.get(x, 0):
            raise OSError(f"flaky item {x}, call {n}")
        return 10 * x


def expected(n: int, faults: Faults, policy: ErrorPolicy) -> tuple[list[int], set[int]]:
    """The ids that must come out, and those that must be dropped."""
    dropped = {x for x in range(n)
               if x in faults.bad or faults.flaky.get(x, 0) > policy.retries}
    return [x for x in range(n) if x not in dropped], dropped


runs = st.fixed_dictionaries({
    "n": st.integers(0, 60),
    "bad": st.sets(st.integers(0, 59), max_size=8),
    "flaky": st.dictionaries(st.integers(0, 59), st.integers(1, 3), max_size=8),
    "policy": st.sampled_from(["skip", "retry:1", "retry:2", "retry:3"]),
    "position": st.integers(0, 2),
    "ordered": st.booleans(),
    "replicas": st.integers(1, 3),
})


def _stages(faults: Faults, position: int, replicas: int) -> list[Stage]:
    stages = [Stage("a", lambda x: x), Stage("b", lambda x: x, replicas=replicas),
              Stage("c", lambda x: x)]
    stages[position] = Stage("faulty", faults, replicas=stages[position].replicas)
    return stages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs)
def test_nothing_lost_nothing_duplicated_order_kept(r):
    bad = {x for x in r["bad"] if x not in r["flaky"]}
    faults = Faults(bad, r["flaky"])
    policy = ErrorPolicy.parse(r["policy"])
    want, dropped = expected(r["n"], faults, policy)
    with Pipeline(_stages(faults, r["position"], r["replicas"]), ordered=r["ordered"],
                  on_error=policy) as p:
        got = within(20, lambda: p.run(range(r["n"])))
        stats = p.stats()
    ids = [g.id for g in got]
    assert len(ids) == len(set(ids))  # nothing duplicated
    assert sorted(ids) == want  # nothing lost: every item that can succeed came out
    if r["ordered"]:
        assert ids == want  # in input order, the dropped ones passed over
    assert all(g.value == 10 * g.id for g in got)
    assert stats.counts == {"completed": len(want), "failed": len(dropped), "cancelled": 0}
    assert stats.submitted == r["n"] == stats.completed + stats.failed  # in = out + failed
    skipped = stats.errors.skipped
    assert [e.item for e in sorted(skipped, key=lambda e: e.item)] == sorted(dropped)
    assert all(e.stage == "faulty" and e.attempts == 1 + policy.retries for e in skipped)
    assert all(e.error.startswith(("ValueError: bad item", "OSError: flaky item"))
               and "\n" not in e.error for e in skipped)
    # every item that needed a second call is named, recovered or not
    retried = {e.item: e for e in stats.errors.retried}
    want_retried = {x for x in range(r["n"])
                    if policy.retries and (x in bad or x in faults.flaky)}
    assert set(retried) == want_retried
    assert all(e.recovered == (e.item not in dropped) for e in retried.values())
    doc = stats.to_dict()
    assert doc["on_error"] == str(policy) and len(doc["skipped"]) == len(dropped)
    assert live_pipeline_threads() == []


@settings(max_examples=40, deadline=None)
@given(runs)
def test_the_serial_loop_drops_and_retries_the_same_items(r):
    bad = {x for x in r["bad"] if x not in r["flaky"]}
    policy = ErrorPolicy.parse(r["policy"])
    faults = Faults(bad, r["flaky"])
    want, dropped = expected(r["n"], faults, policy)
    outs, stats, _ = run_serial(_stages(faults, r["position"], 1), range(r["n"]),
                                on_error=policy)
    assert outs == [10 * x for x in want]
    assert stats.errors.skipped_items() == sorted(dropped)
    assert stats.submitted == r["n"] == stats.completed + stats.failed
    # a retried call is called again on the same input: at most 1 + retries calls each
    assert all(n <= 1 + policy.retries for n in faults.calls.values())


def test_fail_stops_at_the_first_failing_item_as_before():
    faults = Faults({96}, {})
    with pytest.raises(PipelineError) as info:
        within(20, lambda: list(Pipeline([Stage("decode", faults)]).map(range(1000))))
    err = info.value
    assert err.item_id == 96 and err.stage == "decode"
    assert err.counts["failed"] == 1 and err.submitted < 1000
    assert str(err) == "stage 'decode' failed on item 96: ValueError: bad item 96"  # one line


def test_skip_runs_a_1000_item_run_past_its_bad_items():
    faults = Faults({96, 500, 999}, {})
    with Pipeline([Stage("decode", faults, replicas=2), Stage("post", lambda x: x + 1)],
                  on_error="skip") as p:
        got = within(30, lambda: p.run(range(1000)))
        stats = p.stats()
    assert [g.id for g in got] == [x for x in range(1000) if x not in (96, 500, 999)]
    assert [g.value for g in got] == [10 * g.id + 1 for g in got]
    assert stats.failed == 3 and stats.errors.skipped_items() == [96, 500, 999]


def test_a_keyboard_interrupt_in_a_stage_is_never_skipped():
    def stage(x):
        if x == 3:
            raise KeyboardInterrupt
        return x

    with pytest.raises(PipelineError) as info:
        within(20, lambda: list(Pipeline([Stage("a", stage)], on_error="retry:3").map(range(50))))
    assert info.value.item_id == 3 and isinstance(info.value.cause, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        run_serial([Stage("a", stage)], range(10), on_error="skip")


@pytest.mark.parametrize("text, want", [("fail", ErrorPolicy()), ("skip", ErrorPolicy("skip")),
                                        ("retry:3", ErrorPolicy("retry", 3)),
                                        (" retry:1 ", ErrorPolicy("retry", 1))])
def test_policy_text(text, want):
    assert ErrorPolicy.parse(text) == want and str(want) == text.strip()


@pytest.mark.parametrize("text, needle", [("retry:x", "integer N"), ("retry:0", "from 1"),
                                          (f"retry:{MAX_RETRIES + 1}", "from 1"),
                                          ("foo", "not one of"), ("retry", "not one of"),
                                          ("skip:2", "not one of"), ("", "not one of")])
def test_bad_policy_text_is_refused(text, needle):
    with pytest.raises(ValueError, match=needle):
        ErrorPolicy.parse(text)
    with pytest.raises(ValueError):
        Pipeline([Stage("a", lambda x: x)], on_error=text)
