"""Baseline triage: a baseline from another device is said before the verdict."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from parastream.timeline.triage import device_doubts

DATA = Path(__file__).parent.parent / "data"


def test_device_doubts_name_and_counts():
    a100 = {"device": {"name": "NVIDIA A100-SXM4-40GB", "sm_count": 108}}
    v100 = {"device": {"name": "Tesla V100-SXM2-16GB", "sm_count": 80}}
    d = device_doubts(a100, v100)
    assert len(d) == 2 and "A100" in d[0] and "V100" in d[0] and "108 SMs" in d[1]
    assert device_doubts(a100, a100) == []
    assert device_doubts({"device": {}}, v100) == []  # nothing said, nothing doubted
    npu = {"device": {"name": None, "ai_core_num": 24, "vector_core_num": 48}}
    npu2 = {"device": {"name": None, "ai_core_num": 20, "vector_core_num": 40}}
    assert [x.split(",")[0] for x in device_doubts(npu, npu2)] == [
        "the baseline's device has 24 AI cores", "the baseline's device has 48 vector cores"]


def test_a100_baseline_against_a_v100_capture_says_so(tmp_path):
    """The users' case: an A100 baseline against a V100 capture triaged without a word."""
    raw = json.loads(gzip.decompress((DATA / "kineto" / "alexnet.json.gz").read_bytes()))
    for p in raw["deviceProperties"]:
        p["name"], p["numSms"] = "Tesla V100-SXM2-16GB", 80
    v100 = tmp_path / "v100.json"
    v100.write_text(json.dumps(raw))
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(v100), "--baseline",
                        str(DATA / "kineto" / "alexnet.json.gz"), "--format", "json",
                        "--no-progress"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    tri = json.loads(r.stdout)["triage"]
    doubts = tri["baseline_doubts"]
    assert any("A100-PG509-200" in d and "V100" in d for d in doubts)
    assert any("108 SMs" in d and "80" in d for d in doubts)
    assert tri["evidence"][:len(doubts)] == doubts  # said first
