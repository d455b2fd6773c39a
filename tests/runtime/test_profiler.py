"""The torch profiler capture that ``run --trace`` adds on cuda, exercised on the host."""

from __future__ import annotations

import json
import os

import pytest
import torch

from parastream.runtime.profiler import capture_torch_trace


def test_capture_writes_one_kineto_file_of_the_profiled_call_only(tmp_path):
    a = torch.randn(64, 64)
    calls = []

    def call():
        calls.append(torch.is_grad_enabled())
        return torch.mm(torch.mm(torch.mm(a, a), a), a)

    path = tmp_path / "single-torch.json"
    capture_torch_trace(call, str(path), "cpu")
    assert calls == [False, False]  # one warm call, one profiled, both without autograd
    doc = json.loads(path.read_text())
    names = [e.get("name", "") for e in doc["traceEvents"]]
    assert names.count("aten::mm") == 3  # the profiled call's, not the warm call's
    assert os.listdir(tmp_path) == ["single-torch.json"]  # no scratch file beside it


def test_capture_refuses_a_device_it_cannot_profile(tmp_path):
    with pytest.raises(ValueError, match="npu"):
        capture_torch_trace(lambda: None, str(tmp_path / "x.json"), "npu")
    assert not os.listdir(tmp_path)


def _span(name, stream, ts, dur, cat="gpu_user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream}}


def test_kernel_timeline_reads_the_ops_annotation_spans_onto_plan_streams():
    from parastream.runtime.profiler import kernel_timeline

    assignment = {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1}
    doc = {"traceEvents": [
        _span("a", 7, 100.0, 5.0), _span("b", 13, 101.0, 4.0), _span("c", 13, 106.0, 2.0),
        _span("d", 7, 110.0, 3.0),
        _span("e", 7, 114.0, 1.0),  # planned on 1, ran on 7: misplaced, stays on 7's lane
        _span("a", 7, 100.0, 9.0, cat="kernel"),  # kernels are not ops here
        _span("ProfilerStep#1", 7, 99.0, 30.0),  # annotations of no plan op are skipped
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7},
    ]}
    tl = kernel_timeline(doc, assignment, "run")
    placed = {tl.op_name(i): tl.streams[tl.stream[i]] for i in range(len(tl))}
    assert placed == {"a": "0", "b": "1", "c": "1", "d": "0", "e": "0"}
    assert tl.meta["cuda_streams"] == {"0": "7", "1": "13"}
    i = [tl.op_name(k) for k in range(len(tl))].index("b")
    assert (tl.start_ns[i], tl.end_ns[i]) == (1_000, 5_000)  # from the first span, in ns
    from parastream.plan.model import Plan
    from parastream.plan.verify import verify
    from parastream.plan.io import PlanDoc

    plan = Plan(name="p", algorithm="matching", assignment=assignment, streams=2)
    check = verify(tl, PlanDoc(model="m", device="test", recommended="p", candidates=[plan]))
    assert check["misplaced_count"] == 1
    assert kernel_timeline({"traceEvents": [_span("x", 7, 0.0, 1.0)]}, assignment, "r") is None


def test_an_annotated_executor_names_its_ops_in_the_profiler_trace():
    from parastream.graph.torch_import import import_runnable
    from parastream.zoo import ZOO
    from parastream.plan.model import Plan
    from parastream.runtime.executor import MultiStreamExecutor
    from parastream.runtime.profiler import profile_call

    module, inputs = ZOO["two_chains"].factory("tiny", None)
    rn = import_runnable(module, inputs)
    plan = Plan.single(o.name for o in rn.graph.ops)  # stream 0 runs on this thread
    with MultiStreamExecutor(module, inputs, plan, runnable=rn) as ex:
        plain = json.loads(profile_call(lambda: ex.run(*inputs), "cpu"))
        ex.annotate = True
        marked = json.loads(profile_call(lambda: ex.run(*inputs), "cpu"))

    def annotations(doc):
        return {e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}

    assert not annotations(plain) & set(plan.assignment)
    assert annotations(marked) >= set(plan.assignment)


def test_kernel_timeline_keeps_main_on_a_tie():
    # CUDA 7 ran two ops of plan stream 0 and two of stream 1, CUDA 9 two of stream 1:
    # 7 is main, 9 the side stream (a greedy pick by largest count took 7 for stream 1)
    from parastream.runtime.profiler import kernel_timeline

    assignment = {"a": 0, "b": 0, "c": 1, "d": 1, "e": 1, "f": 1}
    doc = {"traceEvents": [_span(n, s, float(k * 10), 5.0) for k, (n, s) in enumerate(
        [("a", 7), ("c", 7), ("b", 7), ("d", 7), ("e", 9), ("f", 9)])]}
    tl = kernel_timeline(doc, assignment, "run")
    assert tl.meta["cuda_streams"] == {"0": "7", "1": "9"}
