"""Kineto (PyTorch profiler) reader: device properties."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from parastream.timeline.readers import kineto

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "kineto" / "cuda_event_sync_multi_stream.json.gz"


@pytest.mark.parametrize("sms", [-5, 0, 10**30])
def test_an_implausible_multiprocessor_count_is_ignored_with_a_warning(tmp_path, sms):
    doc = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    assert kineto.read(str(SAMPLE)).device.sm_count == 108  # the sample's A100s
    for p in doc["deviceProperties"]:
        p["numSms"] = sms
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    tl = kineto.read(str(f))
    assert tl.device.sm_count is None
    assert any(f"numSms {sms} ignored" in w for w in tl.warnings), tl.warnings
