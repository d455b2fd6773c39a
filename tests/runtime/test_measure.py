"""Side-by-side measurement and the recommendation rules."""

from __future__ import annotations

import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from parastream.graph.torch_import import import_runnable
from parastream.zoo import ZOO
from parastream.plan.assign import assign
from parastream.runtime.host import page_faults
from parastream.runtime.measure import analyse, measure, paired_quartiles
from parastream.runtime.recommend import CandidateResult, recommend


@pytest.fixture(scope="module")
def inception():
    module, inputs = ZOO["inception_block"].factory("tiny", "infer")
    return module, inputs, import_runnable(module, inputs, name="inception_block")


def test_measure_runs_drops_and_keeps_representative_timelines(inception):
    module, inputs, rn = inception
    plan = assign(rn.graph, "matching", max_streams=2)
    m = measure(module, inputs, plan, runs=6, warmup=1, drop=2, runnable=rn, cores=2)
    assert len(m.single_walls_us) == len(m.multi_walls_us) == len(m.single_executor_walls_us) == 4
    assert m.dropped == 2 and m.streams == 2 and m.multi_threads == 1 and m.single_threads == 2
    assert m.speedup == pytest.approx(m.single_median_us / m.multi_median_us)
    assert m.multi_timeline is not None and set(m.multi_timeline.streams) == {"0", "1"}
    assert set(m.single_timeline.streams) == {"0"}
    s = m.summary()
    assert s["runs_kept"] == 4 and s["multi_threads_per_stream"] == 1
    if page_faults() is not None:  # where the OS counts page faults: one per kept timed call
        assert len(m.single_faults) == len(m.multi_faults) == 4
        assert s["faults_per_call"] == [statistics.median(m.single_faults),
                                        statistics.median(m.multi_faults)]
    lo, hi = m.speedup_quartiles
    ratios = [a / b for a, b in zip(m.single_walls_us, m.multi_walls_us)]
    assert min(ratios) <= lo <= hi <= max(ratios)
    assert s["speedup_quartiles"] == [round(lo, 4), round(hi, 4)]
    an = analyse(m)
    # timing decides among these; not "3a" (side stream never ran): both streams ran above
    assert an["triage"]["verdict"] in ("faster", "3b", "partial", "3c")
    assert an["multi"]["summary"]["median_wall_us"] == round(m.multi_median_us, 3)


def test_measure_needs_five_runs(inception):
    module, inputs, rn = inception
    plan = assign(rn.graph, "single")
    with pytest.raises(ValueError):
        measure(module, inputs, plan, runs=4, runnable=rn)


class _WritesItsInput(torch.nn.Module):
    """x.add_(1) on its input, a step counter in a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps.add_(1)
        x.add_(1)
        return self.lin(x) * 2


def test_every_call_sees_the_inputs_as_given_and_state_carries_over():
    module = _WritesItsInput()
    x = torch.randn(4, 8)
    given_x = x.clone()
    rn = import_runnable(module, (x,), name="writes_input")
    seen = []
    # the plain module's calls are eager: the hook sees what each of them is given
    module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    plan = assign(rn.graph, "single")
    measure(module, (x,), plan, runs=5, warmup=2, drop=0, runnable=rn, cores=1, rewarm=False)
    # warm-up and timed plain calls alike start from the input as given
    assert len(seen) == 7 and all(torch.equal(t, given_x) for t in seen)
    assert torch.equal(x, given_x)  # and the caller gets its input back
    # 2 warm-up rounds and 5 timed ones of plain, single-stream and multi-stream calls
    assert module.steps.item() == 21


class _TransposesItsInput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x):  # x: (4, 8)
        x.t_()
        return x @ self.w, self.b(x)


def test_a_model_that_changes_its_inputs_layout_is_measured_from_it_every_call():
    """Its second call on the same tensor fails in eager mode too (a 4x8 by 4x3 product)."""
    module, x = _TransposesItsInput(), torch.randn(4, 8)
    rn = import_runnable(module, (x,), name="t_input")
    plan = assign(rn.graph, "matching", max_streams=2)
    m = measure(module, (x,), plan, runs=5, warmup=2, drop=0, runnable=rn, cores=2)
    assert len(m.multi_walls_us) == 5 and x.shape == (4, 8)


def test_measure_gives_back_an_input_only_the_eager_module_writes(writes_input_later):
    module, x = writes_input_later
    given = x.clone()
    rn = import_runnable(module, (x,), name="later_write")
    module.later = True
    measure(module, (x,), assign(rn.graph, "single"), runs=5, warmup=1, drop=0, runnable=rn,
            cores=1, rewarm=False)
    assert torch.equal(x, given)


def test_keep_inputs_puts_back_only_what_the_call_changed():
    from parastream.runtime.executor import keep_inputs

    x, y, z = torch.randn(3, 4), torch.randn(4), torch.randn(2, 2)
    given = (x.clone(), y.clone(), z.clone())

    def call():
        x.add_(1)
        z.unsqueeze_(0)  # the layout only
        return y * 2

    fresh = keep_inputs((x, {"y": y, "z": [z]}), call)
    assert not torch.equal(x, given[0]) and z.shape == (1, 2, 2)
    y.mul_(3)  # after the first call: not something the call writes
    fresh()
    assert torch.equal(x, given[0]) and z.shape == (2, 2) and torch.equal(z, given[2])
    assert torch.equal(y, given[1] * 3)
    unchanged = keep_inputs((x,), lambda: x.sum())
    x.add_(5)
    unchanged()  # the call wrote nothing: nothing to put back
    assert torch.equal(x, given[0] + 5)


def test_each_side_alone_is_timed_from_the_inputs_as_given(tmp_path):
    """The separate-process baseline (run's 'in separate processes' figures)."""
    from parastream.cpu import baseline

    model = tmp_path / "writes.py"
    model.write_text(
        "import torch\n"
        "SEEN = []\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        SEEN.append(x.clone())\n"
        "        x.add_(1)\n"
        "        return x * 2\n"
        "def make():\n"
        "    return M(), (torch.zeros(4),)\n")
    spec = {"model": f"{model}:make", "scale": "tiny", "phase": None, "runs": 5, "warmup": 1,
            "drop": 0, "threads": 1, "single": True, "plan": None, "candidates": []}
    out = baseline._measure(spec)
    assert out["single_us"] > 0
    import sys

    seen = next(m.SEEN for m in sys.modules.values() if getattr(m, "__file__", None) == str(model))
    # the keeper's call, 1 warm-up, 5 timed calls: all from zeros
    assert len(seen) == 7 and all(torch.equal(t, torch.zeros(4)) for t in seen)


def _r(name, sp, ok=None):
    return CandidateResult(name, sp, 1000.0, 1000.0 / sp, outputs_ok=ok)


def test_recommend_never_picks_a_candidate_under_the_margin():
    rec = recommend([_r("a", 1.03), _r("b", 0.8)], current="a")
    assert rec.action == "single" and rec.candidate is None
    assert "1.03x" in rec.summary
    assert rec.closest == "a"  # what a report shows when nothing wins
    assert recommend([_r("a", 1.5, ok=False), _r("b", 0.8)]).closest == "b"
    assert recommend([_r("a", 1.5, ok=False)]).closest is None
    # the reason says what happened: every candidate's outputs differed, or none to run
    assert "outputs unlike the single-stream model's" in recommend([_r("a", 1.5, ok=False)]).summary
    assert "no multi-stream candidate to run" in recommend([]).summary


def test_recommend_keep_change_and_bad_outputs():
    rec = recommend([_r("a", 1.30), _r("b", 1.32)], current="a")
    assert (rec.action, rec.closest) == ("keep", "a")
    rec = recommend([_r("a", 1.10), _r("b", 1.40)], current="a")
    assert (rec.action, rec.candidate, rec.closest) == ("change", "b", "b")
    rec = recommend([_r("a", 2.0, ok=False), _r("b", 1.2, ok=True)])
    assert rec.candidate == "b" and any("excluded" in e for e in rec.evidence)


walls = st.floats(min_value=1.0, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(walls, walls), min_size=1, max_size=40))
def test_paired_quartiles_bracket_the_median_round(rounds):
    single, multi = [s for s, _ in rounds], [m for _, m in rounds]
    ratios = sorted(s / m for s, m in rounds)
    lo, hi = paired_quartiles(single, multi)
    tol = 1e-9 * ratios[-1]
    assert ratios[0] - tol <= lo <= statistics.median(ratios) + tol
    assert statistics.median(ratios) - tol <= hi <= ratios[-1] + tol
    if len(rounds) == 1:
        assert lo == hi == ratios[0]


def test_paired_quartiles_cancel_a_slow_spell():
    """The machine turned twice as slow in the middle of round 3 (between its single- and
    multi-stream runs): the two medians say 1.0x, the rounds' own speedups 2x but for
    that one round."""
    single = [1000.0, 1000.0, 1000.0, 2000.0, 2000.0]
    multi = [500.0, 500.0, 1000.0, 1000.0, 1000.0]
    assert statistics.median(single) / statistics.median(multi) == 1.0
    assert paired_quartiles(single, multi) == (2.0, 2.0)
    assert paired_quartiles([], []) == (0.0, 0.0)


def test_recommend_cautions_when_the_rounds_do_not_clear_the_margin():
    steady = CandidateResult("a", 1.4, 1400.0, 1000.0, speedup_quartiles=(1.3, 1.5))
    rec = recommend([steady])
    assert rec.action == "change" and "noisy" not in rec.summary
    assert "(rounds 1.30-1.50x)" in rec.evidence[0]
    shaky = CandidateResult("a", 1.4, 1400.0, 1000.0, speedup_quartiles=(0.9, 1.6))
    rec = recommend([shaky], current="a")
    assert rec.action == "keep" and "0.90x or less, 36% under" in rec.summary
    assert "--runs" in rec.summary
    # the rounds' spread is put around the figure that decided: here the separate-process
    # runs (1.5x), against which a side-by-side lower quartile of 0.95x is 1.40x
    iso = CandidateResult("b", 1.02, 1020.0, 1000.0, speedup_quartiles=(0.95, 1.1),
                          iso_single_us=900.0, iso_multi_us=600.0)
    rec = recommend([iso])
    assert rec.candidate == "b" and "noisy" not in rec.summary


def test_recommend_takes_each_side_in_its_best_setting():
    """Streams that win side by side only because the single-stream baseline's OpenMP threads
    sleep between ops are not recommended once single stream was measured with them
    spinning; a candidate that still wins in its own best setting is."""
    lost = CandidateResult("a", 2.0, 2000.0, 1000.0, iso_single_us=900.0, iso_multi_us=1100.0)
    assert lost.best_single_us == 900.0 and lost.best_multi_us == 1000.0
    assert abs(lost.best_speedup - 0.9) < 1e-9
    rec = recommend([lost])
    assert rec.action == "single" and "0.90x" in rec.summary
    assert "separate processes" in rec.evidence[0]
    won = CandidateResult("b", 1.5, 1500.0, 1000.0, iso_single_us=1400.0, iso_multi_us=800.0)
    assert abs(won.best_speedup - 1.75) < 1e-9
    assert recommend([lost, won]).candidate == "b"
    # nothing measured in separate processes: the side-by-side figures decide, as before
    assert CandidateResult("c", 1.2, 1200.0, 1000.0).best_speedup == 1.2


def test_recommend_compares_every_candidate_with_the_runs_fastest_single_stream():
    """On a busy 2-core machine an OpenMP team stalled on a descheduled thread: one
    candidate's rounds measured single stream at 32 ms, another's at 46 us (a user's model,
    found by an audit). The stalled rounds' 250x is no speedup; against the fastest
    single-stream median of the run the candidate is slower than single stream."""
    stalled = CandidateResult("critical-path", 250.0, 32_000.0, 128.0, streams=2)
    steady = CandidateResult("matching", 0.30, 46.0, 151.0, streams=2)
    rec = recommend([stalled, steady])
    assert stalled.floor_single_us == steady.floor_single_us == 46.0
    assert stalled.best_speedup == pytest.approx(46.0 / 128.0)
    assert rec.action == "single" and rec.candidate is None
    assert any("the machine was disturbed" in e and "46 to 32,000 us" in e
               and "OpenMP" in e for e in rec.evidence)
    # on a device the hint is the host's, not an OpenMP team's
    on_gpu = recommend([stalled, steady], device="cuda")
    assert any("disturbed (another process on the host" in e and "OpenMP" not in e
               for e in on_gpu.evidence)
    assert "against this run's fastest single stream (46 us) 0.36x" in rec.evidence[0]
    # rounds that agree (within 1.5x) say nothing and change nothing but the floor
    a = CandidateResult("a", 1.5, 1500.0, 1000.0, streams=2)
    b = CandidateResult("b", 1.2, 1200.0, 1000.0, streams=2)
    rec = recommend([a, b])
    assert rec.candidate == "a" and a.best_speedup == pytest.approx(1.2)
    assert not any("disturbed" in e for e in rec.evidence)
    # the separate process's one single-stream figure, shared by all, hides no spread
    for r in (stalled, steady):
        r.iso_single_us, r.iso_multi_us = 44.0, None
    rec = recommend([stalled, steady])
    assert any("44 to 32,000 us" in e for e in rec.evidence)
    # one candidate's outputs differ, the other's speedup is implausible: both said
    wrong = CandidateResult("w", 50.0, 50_000.0, 1000.0, streams=2, outputs_ok=False)
    odd = CandidateResult("o", 50.0, 50_000.0, 1000.0, streams=2)
    rec = recommend([wrong, odd])
    assert "1 candidate(s) gave outputs unlike" in rec.summary
    assert "1 measured an implausible speedup" in rec.summary


@given(st.floats(min_value=1.0, max_value=1e4), st.integers(min_value=1, max_value=8))
def test_recommend_never_takes_a_speedup_its_streams_cannot_give(speedup, streams):
    """Every candidate stalled alike (one candidate run, its baseline stalled in every
    round): a speedup above twice the stream count is refused, whatever the margin."""
    r = CandidateResult("x", speedup, 1000.0 * speedup, 1000.0, streams=streams)
    rec = recommend([r])
    if speedup > 2.0 * streams:
        assert rec.action == "single" and "implausible" in rec.summary
        assert any(e.startswith("excluded (implausible): x") for e in rec.evidence)
    elif speedup >= 1.05:
        assert rec.candidate == "x"


def test_each_side_is_measured_in_a_process_of_its_own(monkeypatch):
    from parastream.workflow.plan import build
    from parastream.device.profile import load_profile
    from parastream.graph.models import load_model
    from parastream.graph.torch_import import import_runnable
    from parastream.cpu import baseline

    module, inputs, name, _ = load_model("two_chains", "tiny", None)
    doc = build(import_runnable(module, inputs, name=name).graph, load_profile("cpu"),
                algorithm=None, mapping=None, max_streams=None)
    cand = [c.name for c in doc.candidates if c.stream_count() > 1][:1]
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert baseline.wanted()
    got = baseline.best_settings("two_chains", "tiny", None, doc, cand, runs=5, warmup=1, drop=2,
                                 threads=2)
    assert got["errors"] == [] and got["single_us"] > 0
    assert set(got["candidates_us"]) == set(cand) and all(v > 0 for v in got["candidates_us"].values())
    bad = baseline.isolated("no_such_model", "tiny", None, "ACTIVE", runs=5, warmup=0, drop=0,
                            threads=1, single=True)
    assert "error" in bad and "failed" in bad["error"]
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert not baseline.wanted()  # the user chose: every measurement already runs under it


def test_each_timed_multi_stream_run_follows_untimed_ones_while_the_team_spins(
        inception, monkeypatch):
    import time

    from parastream.runtime import host
    from parastream.runtime.executor import MultiStreamExecutor

    module, inputs, rn = inception
    plan = assign(rn.graph, "matching", max_streams=2)
    spin = 0.03
    monkeypatch.setattr(host, "team_spin_s", lambda threads: spin)
    events = []  # ("plain", end) and ("multi", start)
    hook = module.register_forward_hook(
        lambda *_: events.append(("plain", time.perf_counter())))
    try:
        with MultiStreamExecutor(module, inputs, plan, runnable=rn, intra_op_threads=1) as ex:
            real = ex.__call__

            class Counting:
                backend = None

                def __call__(self, *a):
                    events.append(("multi", time.perf_counter()))
                    return real(*a)

                def timeline(self, label):
                    return ex.timeline(label)

                def kept_state(self, *a, **k):
                    return ex.kept_state(*a, **k)

            measure(module, inputs, plan, runs=5, warmup=1, drop=2, runnable=rn, cores=2,
                    executor=Counting(), single_executor=False)
            # after the warm-up: an untimed then a timed plain call, then multi calls, the
            # last of them timed
            assert [k for k, _ in events[2:5]] == ["plain", "plain", "multi"]
            groups, current = [], None
            for kind, t in events[2:]:
                if kind == "plain":
                    if current is not None and len(current) == 1:  # the untimed one
                        current[0] = t
                        continue
                    current = [t]
                    groups.append(current)
                else:
                    current.append(t)
            assert len(groups) == 5
            for plain_end, *multi_starts in groups:
                assert len(multi_starts) >= 2              # untimed ones, then the timed one
                assert multi_starts[-1] - plain_end >= spin  # the team had stopped spinning
                # and not much longer (the bound leaves room for a descheduled caller)
                assert multi_starts[-2] - plain_end < 2 * spin + 0.1
            events.clear()
            measure(module, inputs, plan, runs=5, warmup=1, drop=2, runnable=rn, cores=2,
                    executor=Counting(), single_executor=False, rewarm=False)
            assert [k for k, _ in events] == ["plain", "multi"] * 6  # without: alternating
    finally:
        hook.remove()


def test_team_spin_is_measured_once_per_thread_count(monkeypatch):
    torch = pytest.importorskip("torch")
    from parastream.runtime import host

    monkeypatch.setattr(host, "_team_spin", {})
    threads = torch.get_num_threads()
    assert host.team_spin_s(1) == 0.0
    first = host.team_spin_s(2)
    assert 0.0 <= first <= host.TEAM_SPIN_MAX_S
    assert torch.get_num_threads() == threads  # the caller's setting is back
    calls = []
    monkeypatch.setattr(host, "_measure_team_spin", lambda *a: calls.append(a) or 1.0)
    assert host.team_spin_s(2) == first and calls == []  # cached
    assert host.team_spin_s(3) == host.TEAM_SPIN_MAX_S     # measured, capped
    assert len(calls) == 1


def test_team_spin_falls_back_where_thread_times_cannot_be_read(monkeypatch):
    torch = pytest.importorskip("torch")
    from parastream.runtime import host

    threads = torch.get_num_threads()
    for unreadable in (lambda: {}, lambda: (_ for _ in ()).throw(OSError("no /proc"))):
        monkeypatch.setattr(host, "_team_spin", {})
        monkeypatch.setattr(host, "_task_cpu_ns", unreadable)
        assert host.team_spin_s(2) == host.TEAM_SPIN_FALLBACK_S
        assert torch.get_num_threads() == threads


def test_team_spin_leaves_out_a_thread_busy_before_the_op(monkeypatch):
    pytest.importorskip("torch")
    import time

    from parastream.runtime import host

    # a thread of the caller's own that never stops computing, team or no team
    monkeypatch.setattr(host, "_task_cpu_ns", lambda: {999_999: time.perf_counter_ns()})
    monkeypatch.setattr(host, "_team_spin", {})
    assert host.team_spin_s(2) == 0.0


def test_auto_ranks_candidates_by_the_models_own_op_times(inception):
    from parastream.device.profile import load_profile
    from parastream.workflow.plan import build
    from parastream.workflow.run import rank_by_op_times
    from parastream.sim.run import simulate_plan

    module, inputs, rn = inception
    prof = load_profile("cpu")
    doc = build(rn.graph, prof, algorithm=None, mapping=None, max_streams=None, source={})
    multi = [c for c in doc.candidates if c.stream_count() > 1]
    assert len(multi) >= 2
    ranked, costs = rank_by_op_times(module, inputs, rn, prof, multi)
    assert sorted(c.name for c in ranked) == sorted(c.name for c in multi)
    assert costs is not None and all(costs[o.name].measured for o in rn.graph.ops)
    walls = [simulate_plan(rn.graph, c, prof, costs=costs).result.wall_us for c in ranked]
    assert walls == sorted(walls)
    assert rank_by_op_times(module, inputs, rn, prof, []) == ([], None)


def test_start_lags_count_from_when_a_stream_could_start():
    """A side stream whose first op waits for an event lags from that event's op end; one
    with nothing to wait for lags from the run's first op; the first stream lags 0."""
    from parastream.plan.model import Event, Plan
    from parastream.runtime.measure import Measurement, late_starts, start_lags_us
    from parastream.timeline.model import TimelineBuilder

    plan = Plan(name="p", algorithm="manual", streams=3,
                assignment={"a0": 0, "a1": 0, "b0": 1, "c0": 2},
                events=[Event("a0", "b0")])
    us = 1000

    def run(c0_start_us):
        b = TimelineBuilder("test", "parastream-cpu")
        b.add_op("0", "a0", 0, 100 * us)
        b.add_op("0", "a1", 100 * us, 900 * us)
        b.add_op("1", "b0", 150 * us, 300 * us)  # could start at 100 us (after a0): lag 50
        b.add_op("2", "c0", c0_start_us * us, (c0_start_us + 100) * us)  # nothing to wait for
        return b.build()

    assert start_lags_us(run(700), plan) == {"0": 0.0, "1": 50.0, "2": 700.0}
    assert start_lags_us(run(10), plan) == {"0": 0.0, "1": 50.0, "2": 10.0}
    # worst lag per run: 700, 300, 50, 50; late (>= 200 us) in 2 of 4 runs
    m = Measurement(plan="p", single_walls_us=[1000.0] * 4, multi_walls_us=[1000.0] * 4,
                    single_executor_walls_us=[], dropped=2, single_threads=2,
                    multi_threads=1, streams=3,
                    multi_timelines=[run(700), run(300), run(10), run(20)])
    doc = late_starts(m, plan)
    assert doc == {"median_lag_us": 175.0, "late_runs": 2, "late_median_us": 500.0, "runs": 4,
                   "threshold_us": 200.0, "frequent": True}
    m.multi_timelines = m.multi_timelines[2:]
    assert late_starts(m, plan)["late_runs"] == 0 and not late_starts(m, plan)["frequent"]


def test_recommend_withholds_a_win_measured_on_a_busy_machine():
    # a busy neighbour stalls the single-stream model's thread team, not the streams'
    rec = recommend([_r("a", 3.4), _r("b", 1.2)], current="b", busy_share=0.6)
    assert rec.action == "single" and rec.candidate is None and rec.closest == "a"
    assert "quiet machine" in rec.summary and "60%" in rec.summary
    # busy for a short spell only: the win stands
    assert recommend([_r("a", 3.4), _r("b", 1.2)], busy_share=0.3).candidate == "a"


def test_busy_evidence_counts_only_a_sampled_cpu():
    from parastream.runtime.recommend import BUSY_MIN_SAMPLES, busy_evidence

    assert busy_evidence(0.6, BUSY_MIN_SAMPLES, "cpu") == 0.6
    # a few samples are no evidence: on 2 cores one runnable task is half of them
    assert busy_evidence(0.6, BUSY_MIN_SAMPLES - 1, "cpu") == 0.0
    # a device's streams share no OpenMP team with the busy host
    assert busy_evidence(0.6, 100, "cuda") == 0.0
