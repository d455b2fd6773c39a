"""`parastream demo` end to end: the report folder, and the page in a headless browser."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from parastream.workflow.demo import DEFAULT_MODEL  # noqa: E402


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--out", str(out), "--runs", "5",
                        "--candidates", "1", "--no-progress"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "recommendation:" in r.stdout and "measured" in r.stdout
    assert "malloc: " in r.stdout  # --malloc keep, the default, says what it did
    return out


def test_report_folder(demo_dir):
    for f in ("report.html", "plan.json", "plan.md", "analysis.json", "trace.json"):
        assert (demo_dir / f).stat().st_size > 0, f
    a = json.loads((demo_dir / "analysis.json").read_text())
    assert a["schema"] == "parastream.demo/1" and a["measured"]
    m = a["measured"][0]
    assert m["measured_single_us"] > 0 and m["measured_multi_us"] > 0 and m["predicted_multi_us"] > 0
    assert a["plan_check"]["misplaced_count"] == 0
    if not os.environ.get("OMP_WAIT_POLICY"):  # each side again in its best OpenMP setting
        assert a["separate_processes"]["single_us"] > 0 and not a["separate_processes"]["errors"]
        assert m["separate_multi_us"] > 0 and m["separate_single_spinning_us"] > 0
        rec = a["decision"]
        assert rec["action"] in ("keep", "change", "single") and rec["evidence"]
    plan = json.loads((demo_dir / "plan.json").read_text())
    assert plan["schema"] == "parastream.plan/1" and plan["source"]["model"] == DEFAULT_MODEL
    # one recommendation in the folder, the measured one (what `emit plan.json` generates)
    assert plan["recommended"] == (a["decision"]["candidate"] or "single") == (
        a["recommended"] if a["recommended"] != "single stream" else "single")
    from parastream.mdtext import text

    # the name as Markdown prose: its * [ ] backslash-escaped, rendered as written
    assert f"Recommended: **{text(plan['recommended'])}** from the measured runs" in (
        demo_dir / "plan.md").read_text()
    page = (demo_dir / "report.html").read_text()
    dag = re.search(r'<svg class="dag".*?</svg>', page, re.S)
    assert dag and "Module DAG" in page and "Mermaid source" in page
    assert len(re.findall(r"<rect ", dag.group(0))) >= 3  # the modules, drawn
    assert "measured wall" in (demo_dir / "plan.md").read_text()
    # the measured run reads back through the verifier
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(demo_dir / "trace.json"),
                        "--format", "json"], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["captures"][0]["ops"] > 0
    # and against the plan beside it, as the candidate that ran (the plan recommends what
    # the measurement chose, often single stream, whose placement the trace never had)
    a = json.loads((demo_dir / "analysis.json").read_text())
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", str(demo_dir / "trace.json"),
                        "--plan", str(demo_dir / "plan.json"), "--format", "json"],
                       capture_output=True, text=True, check=True)
    pc = json.loads(r.stdout)["captures"][0]["plan_check"]
    assert pc["candidate"] == a["plan_check"]["candidate"] and pc["misplaced_count"] == 0


@pytest.mark.browser
def test_report_opens_offline_in_chromium(demo_dir, tmp_path):
    chromium = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
    if not chromium:
        pytest.skip("chromium is not installed")
    page = demo_dir / "report.html"
    assert "https://" not in page.read_text() and "http://" not in page.read_text()
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                        "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    m = re.search(r'<html[^>]*data-parastream="([^"]*)"', r.stdout)
    assert m and html.unescape(m.group(1)) == "ok", r.stderr[-1500:]


def test_a_model_without_real_weights_is_a_one_line_error(tmp_path):
    """The zoo's 7b scale lives on the meta device: the demo cannot time it, and says so
    instead of "measuring" meta tensors; no report folder is left behind."""
    out = tmp_path / "demo7b"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--scale", "7b", "--out",
                        str(out), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("parastream: ")
    assert "meta device" in r.stderr and not out.exists()


def test_a_given_profile_is_copied_beside_the_plan(demo_dir, tmp_path):
    # a docs audit: with --profile FILE no cpu-profile.json was written, and
    # 'parastream simulate OUT/plan.json' then could not find the plan's device
    prof = tmp_path / "mine.json"
    shutil.copy(demo_dir / "cpu-profile.json", prof)
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--scale", "tiny", "--runs", "5",
                        "--candidates", "1", "--side-by-side-only", "--profile", str(prof),
                        "--out", str(out), "--no-progress"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "cpu-profile.json").read_bytes() == prof.read_bytes()
    r = subprocess.run([sys.executable, "-m", "parastream", "simulate", str(out / "plan.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "beside the plan" in r.stderr


def test_a_bad_profile_is_a_one_line_error_and_leaves_no_folder(tmp_path):
    bad = tmp_path / "cpu.json"
    bad.write_text('{"schema": "parastream.device/1", "name": "x"')
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--scale", "tiny", "--profile",
                        str(bad), "--out", str(out), "--no-progress"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("parastream: ") and str(bad) in last
    assert not out.exists()


@pytest.mark.parametrize("n", ["0", "-1"])
def test_candidates_below_one_is_a_one_line_error(tmp_path, n):
    out = tmp_path / "d"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--scale", "tiny",
                        "--candidates", n, "--out", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--candidates must be at least 1" in r.stderr
    assert not out.exists()


def test_an_output_folder_that_is_a_file_fails_before_any_work(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--scale", "tiny", "--out",
                        str(afile), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"parastream: {afile}: cannot write: it is a file, "
                                             "not a folder"]
    assert afile.read_text() == "mine"


def test_a_folder_in_place_of_a_report_file_fails_before_any_work(tmp_path):
    out = tmp_path / "demo"
    (out / "report.html").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"parastream: {out / 'report.html'}: cannot write: it is a directory, not a file"]
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]  # nothing half-written


def test_device_cuda_without_a_gpu_is_a_one_line_error_and_leaves_no_folder(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a cuda device is here")
    out = tmp_path / "demo"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--device", "cuda", "--out",
                        str(out), "--no-progress"], capture_output=True, text=True)
    assert r.returncode == 2 and "no cuda device" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_a_scale_without_weights_is_refused_at_once_in_one_line(tmp_path):
    """--scale 7b: the zoo's models there live on the meta device; the demo says so before
    anything is imported, calibrated or printed (no malloc line, no progress step)."""
    out = tmp_path / "demo7b"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--scale", "7b", "--out",
                        str(out), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parastream: --scale 7b: ")
    assert "meta device" in lines[0] and "--scale tiny or small" in lines[0]
    assert not out.exists()


def test_a_model_file_points_to_run(tmp_path):
    """The demo runs the zoo's models; a model of one's own is planned, run and measured by
    'parastream run FILE:factory --auto', which the one-line refusal names."""
    f = tmp_path / "mine.py"
    f.write_text("import torch\n"
                 "def make():\n"
                 "    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n")
    out = tmp_path / "demo"
    spec = f"{f}:make"
    r = subprocess.run([sys.executable, "-m", "parastream", "demo", "--model", spec, "--out",
                        str(out), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"parastream: {spec}: not a built-in demo model (the demo runs the zoo's models); to "
        f"plan, run and measure your own: parastream run {spec} --auto"]
    assert not out.exists()
