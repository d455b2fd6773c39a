"""The worked example of examples/make_seed_example.py: a false verdict with a Cast+Swish barrier.

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

def _load_example():
    """The example's own generator (examples/make_seed_example.py), so docs and test agree."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "make_seed_example.py"
    spec = importlib.util.spec_from_file_location("make_seed_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


EXAMPLE = _load_example()


def _start(rel: str) -> str:
    whole, frac = rel.split(".")
    return f"{EXAMPLE.BASE_US + int(whole)}.{frac}"


@pytest.fixture()
def seed_csv(tmp_path):
    path = tmp_path / "kernel_details.csv"
    path.write_text(EXAMPLE.csv_text(EXAMPLE.MULTI))
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


def test_triage_against_the_single_stream_baseline(seed_csv, tmp_path):
    base = tmp_path / "single" / "kernel_details.csv"
    base.parent.mkdir()
    base.write_text(EXAMPLE.csv_text(EXAMPLE.single_stream(EXAMPLE.MULTI)))
    out = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(seed_csv),
                          "--baseline", str(base), "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    tri = json.loads(out)["triage"]
    assert tri["verdict"] == "3b"
    assert any("aclnnCast_Cast+aclnnSwish_Swish" in e for e in tri["evidence"])


def test_committed_example_files_are_current():
    from pathlib import Path

    here = Path(EXAMPLE.__file__).parent
    assert (here / "seed_multi_stream" / "kernel_details.csv").read_text() == \
        EXAMPLE.csv_text(EXAMPLE.MULTI)
    assert (here / "seed_single_stream" / "kernel_details.csv").read_text() == \
        EXAMPLE.csv_text(EXAMPLE.single_stream(EXAMPLE.MULTI))


def test_side_work_left_on_the_main_stream_is_a_false_point(tmp_path):
    # the single-stream capture: the MoE gate and top-k never left stream 2; picked by
    # name, they must not be their own dominator (overlap_pct 1.0 "true" before the fix)
    base = tmp_path / "kernel_details.csv"
    base.write_text(EXAMPLE.csv_text(EXAMPLE.single_stream(EXAMPLE.MULTI)))
    doc = analyze(read_path(base), Options(side_regex="moe_(gate|topk)"))
    p = _only_point(doc)
    assert not p["dominator"]["name"].startswith("moe_")
    assert p["verdict"] == "false" and p["overlap_pct"] == 0.0
    assert p["busy_overlap_pct"] == 0.0  # main's busy time leaves the side ops out
    assert p["barrier"]["ops"] == ["aclnnCast_Cast", "aclnnSwish_Swish"]


def test_the_baseline_takes_its_own_main_stream(seed_csv, tmp_path):
    # --main-stream names the multi-stream capture's stream; a baseline whose only stream
    # has another id is still triaged (it was refused: "no stream '2'")
    base = tmp_path / "single" / "kernel_details.csv"
    base.parent.mkdir()
    text = EXAMPLE.csv_text(EXAMPLE.single_stream(EXAMPLE.MULTI))
    base.write_text(text.replace(",2,", ",3,"))
    assert ",3," in base.read_text() and ",2," not in base.read_text()
    out = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(seed_csv),
                          "--main-stream", "2", "--baseline", str(base), "--format", "json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["triage"]["verdict"] == "3b"
