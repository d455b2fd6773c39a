"""Side-by-side measurement and the recommendation rules."""

from __future__ import annotations

import pytest

from parastream.graph.torch_import import import_runnable
from parastream.graph.zoo import ZOO
from parastream.plan.assign import assign
from parastream.runtime.measure import analyse, measure
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
    an = analyse(m)
    assert an["triage"]["verdict"] in ("faster", "3a", "3b", "3c")
    assert an["multi"]["summary"]["median_wall_us"] == round(m.multi_median_us, 3)


def test_measure_needs_five_runs(inception):
    module, inputs, rn = inception
    plan = assign(rn.graph, "single")
    with pytest.raises(ValueError):
        measure(module, inputs, plan, runs=4, runnable=rn)


def _r(name, sp, ok=None):
    return CandidateResult(name, sp, 1000.0, 1000.0 / sp, outputs_ok=ok)


def test_recommend_never_picks_a_candidate_under_the_margin():
    rec = recommend([_r("a", 1.03), _r("b", 0.8)], current="a")
    assert rec.action == "single" and rec.candidate is None
    assert "1.03x" in rec.summary


def test_recommend_keep_change_and_bad_outputs():
    assert recommend([_r("a", 1.30), _r("b", 1.32)], current="a").action == "keep"
    rec = recommend([_r("a", 1.10), _r("b", 1.40)], current="a")
    assert (rec.action, rec.candidate) == ("change", "b")
    rec = recommend([_r("a", 2.0, ok=False), _r("b", 1.2, ok=True)])
    assert rec.candidate == "b" and any("excluded" in e for e in rec.evidence)
