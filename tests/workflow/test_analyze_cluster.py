"""``parastream analyze`` of a folder of ranks as a user runs it: generated clusters
(benchmarks/gen_cluster.py, NCCL-style Kineto traces and HCCL-style Ascend folders) with
a planted slow rank and clock offsets. The document's cross-rank answers name the planted
straggler first and measure the offsets; the engine does not change the document; the
text, Markdown and HTML reports put the ranking first; a truncated rank leaves the others'
answers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parastream.report.markdown import render_markdown
from parastream.report.text import render_text
from parastream.workflow.analyze import analyze

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "benchmarks" / "gen_cluster.py"
SLOW, SKEW_US, RANKS, STEPS = 5, 300, 8, 3


def _generate(out: Path, fmt: str) -> Path:
    subprocess.run([sys.executable, str(GEN), str(out), "--format", fmt, "--ranks", str(RANKS),
                    "--events", "4000", "--steps", str(STEPS), "--slow-rank", str(SLOW),
                    "--slow-factor", "1.5", "--clock-skew-us", str(SKEW_US), "--seed", "3",
                    *(["--gzip"] if fmt == "kineto" else [])],
                   check=True, capture_output=True, timeout=300)
    return out


def _planted_offsets(fmt: str) -> list[int]:
    sys.path.insert(0, str(GEN.parent))
    import gen_cluster as gc

    s = gc.Settings(ranks=RANKS, events=4000, steps=STEPS, seed=3, slow_rank=SLOW,
                    slow_factor=1.5, clock_skew_us=SKEW_US, fmt=fmt)
    return [int(x) for x in gc.plan(s).offset_ns]


@pytest.fixture(scope="module", params=["kineto", "ascend"])
def cluster(request, tmp_path_factory) -> tuple[str, Path, dict]:
    """(format, folder, the analysis document, analysed in this process)."""
    folder = _generate(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, folder, analyze(str(folder), jobs=1).to_dict()


def test_the_planted_straggler_is_ranked_first(cluster):
    fmt, _, doc = cluster
    c = doc["cluster"]
    assert c["ranking"][0]["rank"] == SLOW and c["ranking"][0]["caused_wait_ns"] > 0
    assert [r["rank"] for r in c["ranks"]] == list(range(RANKS))
    assert all(st["critical_rank"] == SLOW for st in c["steps"])
    # the offsets are measured by the collectives: within a few microseconds of the planted
    got = [r["offset_ns"] for r in c["ranks"]]
    assert max(abs(g - p) for g, p in zip(got, _planted_offsets(fmt))) < 20_000
    assert max(abs(p) for p in _planted_offsets(fmt)) > 100_000  # (there is something to find)
    json.dumps(doc)


def test_text_and_markdown_put_the_ranking_first(cluster):
    _, _, doc = cluster
    text = render_text(doc, width=170, summary_only=True)
    lines = text.splitlines()
    assert lines[1].startswith(f"straggler: rank {SLOW}: arrived last")
    assert text.index("per rank, by the wait they caused") < text.index("per rank, slowest first")
    table = text[text.index("per rank, by the wait they caused"):text.index("slowest rank")]
    first_row = [ln for ln in table.splitlines() if re.match(r"^\s+\d+\s", ln)][0]
    assert first_row.split()[0] == str(SLOW)  # the ranks by the wait they caused
    md = render_markdown(doc, summary_only=True)
    assert md.splitlines()[2].startswith(f"**Straggler:** rank {SLOW}: ")
    assert "| comm wait ms | waiting % of wall | times last | clock offset us |" in md


def test_the_engine_does_not_change_the_document(cluster):
    fmt, folder, doc = cluster
    if fmt != "kineto":
        pytest.skip("one format is enough for the engine")
    assert analyze(str(folder), jobs=2).to_dict() == doc


def test_the_html_report_has_the_wait_heat_map(cluster, tmp_path):
    fmt, folder, doc = cluster
    if fmt != "kineto":
        pytest.skip("one format is enough for the page")
    page_path = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(folder), "--html",
                        str(page_path), "--format", "json", "-j", "1", "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    page = page_path.read_text()
    ranks = page[page.index('id="ranks"'):page.index('id="summary"')]
    heat = ranks[ranks.index('<svg class="heatmap"'):ranks.index("</svg>")]
    assert heat.count("<rect") == RANKS * len(doc["cluster"]["steps"])
    assert f"rank {SLOW}, step" in heat
    assert "Collectives of largest arrival skew" in ranks and "Communication matrix" in ranks
    assert ranks.index(f"rank {SLOW}: arrived last") < ranks.index("<svg")
    assert not re.search(r'(src|href)="https?://', page)  # nothing fetched from a network


def test_a_truncated_rank_leaves_the_others_answers(cluster, tmp_path):
    fmt, folder, _ = cluster
    if fmt != "kineto":
        pytest.skip("the broken-member path is the same for every format")
    for f in folder.iterdir():
        data = f.read_bytes()
        (tmp_path / f.name).write_bytes(data[: len(data) // 2] if f.name == "rank-2.json.gz"
                                        else data)
    warned: list[str] = []
    doc = analyze(str(tmp_path), jobs=1, warn=warned.append).to_dict()
    assert [b["source"] for b in doc["broken"]] == [str(tmp_path / "rank-2.json.gz")]
    assert any(f"{RANKS - 1} of {RANKS} analysed" in w for w in warned)
    assert doc["cluster"]["ranking"][0]["rank"] == SLOW
    assert [r["rank"] for r in doc["cluster"]["ranks"]] == [r for r in range(RANKS) if r != 2]
