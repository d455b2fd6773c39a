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
    n = capture_torch_trace(call, str(path), "cpu")
    assert calls == [False, False]  # one warm call, one profiled, both without autograd
    doc = json.loads(path.read_text())
    names = [e.get("name", "") for e in doc["traceEvents"]]
    assert n == len(doc["traceEvents"])
    assert names.count("aten::mm") == 3  # the profiled call's, not the warm call's
    assert os.listdir(tmp_path) == ["single-torch.json"]  # no scratch file beside it


def test_capture_refuses_a_device_it_cannot_profile(tmp_path):
    with pytest.raises(ValueError, match="npu"):
        capture_torch_trace(lambda: None, str(tmp_path / "x.json"), "npu")
    assert not os.listdir(tmp_path)
