"""The seed's worked example (DOMAIN.md §4): a false verdict with a Cast+Swish barrier.

    side_window [1615.25, 1634.75] us, dominator in_proj_qkv [1638.00, 1660.75] us,
    overlap 0 us, overlap_pct 0 -> false; barrier = ops 55-56 (Cast+Swish)

Rebuilt as an Ascend kernel_details.csv: GE moved the cheap precompute of the side
output (silu = Swish(Cast(T))) onto the main stream ahead of the dominator, so main
idles while the side stream runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from parastream.timeline.analyze import Options, analyze
from parastream.timeline.readers import read_path

BASE_US = 1736413971550000  # epoch microseconds, as the profiler writes them

# (stream, name, type, core, start_us, dur_us, block_dim)
ROWS = [
    ("2", "aclnnEmbedding", "Gather", "AI_VECTOR_CORE", "0.000", "10.000", 40),
    ("2", "aclnnRmsNorm_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", "1580.000", "32.500", 40),
    ("7", "moe_gate_MatMulV2", "MatMulV2", "AI_CORE", "1615.250", "9.750", 8),
    ("7", "moe_topk_TopKV2", "TopKV2", "AI_VECTOR_CORE", "1625.500", "9.250", 8),
    ("2", "aclnnCast_Cast", "Cast", "AI_VECTOR_CORE", "1635.000", "1.100", 40),
    ("2", "aclnnSwish_Swish", "Swish", "AI_VECTOR_CORE", "1636.200", "1.600", 40),
    ("2", "in_proj_qkv_MatMulV2", "MatMulV2", "AI_CORE", "1638.000", "22.750", 24),
    ("2", "attn_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC", "1661.000", "40.000", 24),
]

HEADER = ("Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
          "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,Input Shapes\n")


def _start(rel: str) -> str:
    whole, frac = rel.split(".")
    return f"{BASE_US + int(whole)}.{frac}"


@pytest.fixture()
def seed_csv(tmp_path):
    path = tmp_path / "kernel_details.csv"
    lines = [HEADER]
    for i, (s, name, typ, core, start, dur, bd) in enumerate(ROWS):
        lines.append(f'1,4294967295,{50 + i},{s},{name},{typ},dynamic,{core},"{_start(start)}\t",'
                     f'{dur},0.5,{bd},0,"""1,4096"""\n')
    path.write_text("".join(lines))
    return path


def _only_point(doc):
    pts = doc["captures"][0]["parallel_points"]
    assert len(pts) == 1
    return pts[0]


def test_seed_false_verdict_with_cast_swish_barrier(seed_csv):
    doc = analyze(read_path(seed_csv), Options(dominator_regex="in_proj_qkv"))
    p = _only_point(doc)
    assert p["side_stream"] == "7"
    assert p["side_window_us"] == [1615.25, 1634.75]
    assert p["dominator"]["name"] == "in_proj_qkv_MatMulV2"
    assert p["dominator"]["window_us"] == [1638.0, 1660.75]
    assert p["overlap_us"] == 0.0 and p["overlap_pct"] == 0.0
    assert p["verdict"] == "false"
    assert p["barrier"]["ops"] == ["aclnnCast_Cast", "aclnnSwish_Swish"]
    assert p["barrier"]["start_us"] == 1635.0


def test_seed_example_without_user_hints_finds_the_same_dominator(seed_csv):
    # main is idle during the side window: the dominator is the next main op big enough to
    # hide it, not the tiny Cast right after it
    p = _only_point(analyze(read_path(seed_csv)))
    assert p["dominator"]["name"] == "in_proj_qkv_MatMulV2"
    assert p["verdict"] == "false"
    assert [*p["barrier"]["ops"]] == ["aclnnCast_Cast", "aclnnSwish_Swish"]


def test_pinning_the_precompute_makes_it_true(seed_csv, tmp_path):
    # the fix the seed recommends: compute silu on the side stream, so main's dominator
    # starts right away and overlaps the side window
    text = seed_csv.read_text()
    text = text.replace(f'{_start("1638.000")}', f'{_start("1612.500")}')
    text = text.replace(",2,aclnnCast_Cast", ",7,aclnnCast_Cast").replace(
        ",2,aclnnSwish_Swish", ",7,aclnnSwish_Swish")
    fixed = tmp_path / "fixed" / "kernel_details.csv"
    fixed.parent.mkdir()
    fixed.write_text(text)
    p = _only_point(analyze(read_path(fixed), Options(dominator_regex="in_proj_qkv",
                                                      window_gap_us=5.0)))
    assert p["verdict"] == "true"
    assert p["overlap_pct"] >= 0.5
    assert p["barrier"] is None


def test_seed_example_from_the_command_line(seed_csv):
    out = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(seed_csv),
                          "--dominator", "in_proj_qkv", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    p = _only_point(json.loads(out))
    assert (p["verdict"], p["barrier"]["name"]) == ("false", "aclnnCast_Cast")
    md = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(seed_csv),
                         "--dominator", "in_proj_qkv", "--format", "md"],
                        capture_output=True, text=True, check=True).stdout
    assert "[1615.250, 1634.750] us" in md and "aclnnCast_Cast+aclnnSwish_Swish" in md
