"""``parastream.workflow.pipeline.pipeline``: the pipeline demo as a library call."""

from __future__ import annotations

import pytest

from parastream.errors import InputError
from parastream.workflow.pipeline import PipelineResult, pipeline, speedup_check

pytest.importorskip("torch")
pytest.importorskip("PIL")


def test_pipeline_returns_the_comparison_and_both_timelines():
    r = pipeline(items=4, batch=2, replicas={"decode": 2}, depth=2)
    assert isinstance(r, PipelineResult)
    doc = r.to_dict()
    # the document 'parastream pipeline --format json' writes: no timelines in it
    assert list(doc) == ["device", "items", "images_per_item", "plan", "replicas", "depth",
                         "ordered", "serial", "pipelined", "speedup", "efficiency",
                         "bottleneck", "bottleneck_utilization", "outputs_identical",
                         "in_order", "on_error", "busy", "busy_share", "speedup_limit",
                         "implausible"]
    assert doc["items"] == 4 and doc["images_per_item"] == 2 and doc["depth"] == 2
    assert doc["replicas"]["decode"] == 2 and doc["outputs_identical"] and doc["in_order"]
    assert doc["pipelined"]["counts"] == {"completed": 4, "failed": 0, "cancelled": 0}
    assert doc["on_error"] == "fail" and doc["pipelined"]["skipped"] == []
    assert len(r.serial_timeline) > 0 and len(r.pipelined_timeline) > 0


@pytest.mark.parametrize("kw, msg", [({"items": 0}, "--items must be from 1"),
                                     ({"batch": 10**6}, "--batch must be from 1"),
                                     ({"threads": 0}, "--threads must be from 1"),
                                     ({"depth": 0}, "--depth must be >= 1")])
def test_sizes_out_of_bounds_are_refused_before_any_work(kw, msg):
    with pytest.raises(InputError, match=msg):
        pipeline(**kw)


def test_pipeline_takes_the_error_policy():
    r = pipeline(items=3, batch=1, on_error="retry:2")
    assert r.on_error == "retry:2" and r.pipelined["on_error"] == "retry:2"
    with pytest.raises(InputError, match="--on-error: 'retry:x'"):
        pipeline(on_error="retry:x")


@pytest.mark.parametrize("speedup, workers, cores, limit, flagged", [
    (3.92, 7, 2, 2, True),     # more than 2 cores can share: a disturbed serial baseline
    (1.9, 7, 2, 2, False),
    (5.0, 3, 16, 3, True),     # more than 3 stage workers can share
    (3.0, 3, 16, 3, False),
    (None, 6, 2, 2, False),
    (1.5, 0, 2, 1, True),
])
def test_a_speedup_above_the_workers_or_the_cores_is_implausible(speedup, workers, cores,
                                                                  limit, flagged):
    got_limit, note = speedup_check(speedup, workers, cores)
    assert got_limit == limit and (note is not None) == flagged
    if flagged:
        assert note.startswith(f"implausible speedup {speedup:.2f}x: above {limit}x")
