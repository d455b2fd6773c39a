"""The command line as a user types it: every output format and every kind of bad input."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
KINETO = DATA / "kineto" / "cuda_event_sync_multi_stream.json.gz"
CSV = DATA / "ascend" / "kernel_details_block_dim.csv"


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def bad(path, *extra) -> str:
    """Run analyze on bad input: exit 2, one line naming the file, no traceback."""
    r = run("analyze", str(path), *extra)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("parastream: ")
    assert str(path) in lines[0] or os.path.basename(str(path)) in lines[0]
    assert r.stdout == ""
    return lines[0]


# ----------------------------------------------------------------- outputs

def test_default_run_uses_the_shipped_trace():
    r = run("analyze", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "cuda_event_sync_multi_stream" in r.stdout
    assert "parallel points" in r.stdout


def test_json_schema_fields():
    r = run("analyze", str(KINETO), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "parastream.analysis/1"
    cap = doc["captures"][0]
    for key in ("source", "format", "wall_us", "parallelism", "streams", "overlaps",
                "parallel_points", "comm_comp_overlap_pct", "concurrency_us", "contention",
                "warnings"):
        assert key in cap
    assert cap["format"] == "kineto"
    assert {s["id"] for s in cap["streams"]} == {"20", "24", "28"}
    assert [s["role"] for s in cap["streams"]].count("main") == 1
    # this sample's side streams ran after the main one's work: both points are false
    assert [p["verdict"] for p in cap["parallel_points"]] == ["false", "false"]
    for p in cap["parallel_points"]:
        assert set(p) >= {"side_stream", "side_window_us", "dominator", "overlap_us",
                          "overlap_pct", "barrier"}
    assert sum(cap["concurrency_us"].values()) == pytest.approx(cap["wall_us"], abs=1e-3)
    assert "summary" in doc


def test_ascend_csv_text_and_md():
    r = run("analyze", str(CSV), "--cores", "24")
    assert r.returncode == 0, r.stderr
    assert "ascend_kernel_details" in r.stdout
    r = run("analyze", str(CSV), "--format", "md")
    assert r.returncode == 0, r.stderr
    assert "**(6) Measured overlap.**" in r.stdout


def test_output_files_are_written(tmp_path):
    html, perf, js = tmp_path / "r.html", tmp_path / "t.json", tmp_path / "a.json"
    r = run("analyze", str(KINETO), "--html", str(html), "--perfetto", str(perf),
            "--format", "json", "-o", str(js))
    assert r.returncode == 0, r.stderr
    assert html.read_text().lstrip().lower().startswith("<!doctype html")
    assert "traceEvents" in json.loads(perf.read_text())
    assert json.loads(js.read_text())["schema"] == "parastream.analysis/1"
    assert r.stdout == ""


def test_no_output_overwrites_an_input_or_another_output(tmp_path):
    """A report written over the trace it came from loses the capture: refused up front,
    as are two outputs of one path and a baseline that is the trace itself."""
    trace = tmp_path / "t.json.gz"
    shutil.copy(KINETO, trace)
    before = trace.read_bytes()
    line = bad(trace, "--format", "json", "-o", str(trace))
    assert "it is an input of this command" in line
    line = bad(trace, "--html", str(tmp_path / "r" / ".." / "t.json.gz"))
    assert "--html" in line
    assert trace.read_bytes() == before
    r = run("analyze", str(trace), "-o", str(tmp_path / "x"), "--html", str(tmp_path / "x"))
    assert r.returncode == 2 and "-o/--output and --html name the same file" in r.stderr
    assert not (tmp_path / "x").exists()
    line = bad(trace, "--baseline", str(trace))
    assert "--baseline is one of the traces analysed" in line


def test_a_perfetto_view_is_not_read_back_as_a_trace(tmp_path):
    """analyze --perfetto writes a view of the analysis (some event kinds only, streams as
    tracks): read back as a Kineto trace it would give other figures. Alone it is refused;
    in a folder next to its trace it is skipped, as parastream's other documents are."""
    view = tmp_path / "view.json"
    assert run("analyze", str(KINETO), "--perfetto", str(view)).returncode == 0
    line = bad(view)
    assert "a Perfetto view that parastream analyze wrote, not a profiler trace" in line
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(KINETO, folder / KINETO.name)
    shutil.copy(view, folder / "view.json")
    r = run("analyze", str(folder), "--format", "json")
    assert r.returncode == 0, r.stderr
    (cap,) = json.loads(r.stdout)["captures"]
    assert cap["source"].endswith(KINETO.name)


def test_a_plan_none_of_whose_ops_ran_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "parastream.plan/1", "model": "other", "device": "cpu",
                                "recommended": "p", "candidates": [{
                                    "name": "p", "algorithm": "manual",
                                    "assignment": {"nope_a": 0, "nope_b": 1},
                                    "events": [{"record_after": "nope_b",
                                                "wait_before": None}]}]}))
    r = run("analyze", str(KINETO), "--plan", str(plan))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"parastream: {plan}: none of the 2 ops of candidate 'p' is in the trace: the plan is "
        "for another model, or the trace names ops otherwise"]


def test_several_captures_drop_cold_and_report_medians(tmp_path):
    raw = json.loads(gzip.decompress(KINETO.read_bytes()))
    t0 = min(e["ts"] for e in raw["traceEvents"] if "ts" in e)
    files = []
    for i in range(4):
        f = tmp_path / f"run{i}.json.gz"
        if i < 2:  # the cold captures: everything 3x slower, so a median with them differs
            slow = json.loads(json.dumps(raw))
            for e in slow["traceEvents"]:
                if "ts" in e:
                    e["ts"] = t0 + 3 * (e["ts"] - t0)
                if "dur" in e:
                    e["dur"] *= 3
            f.write_bytes(gzip.compress(json.dumps(slow).encode()))
        else:
            shutil.copy(KINETO, f)
        files.append(str(f))
    r = run("analyze", *files, "--format", "json", "--cold", "2")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["captures"]) == 4
    assert doc["summary"]["dropped_cold"] == 2
    cold, warm = doc["captures"][0]["wall_us"], doc["captures"][2]["wall_us"]
    assert cold > warm and doc["captures"][3]["wall_us"] == warm
    assert doc["summary"]["median_wall_us"] == warm


def test_baseline_triage(tmp_path):
    r = run("analyze", str(DATA / "kineto" / "simple_add.json.gz"), "--baseline", str(KINETO),
            "--format", "json")
    assert r.returncode == 0, r.stderr
    tri = json.loads(r.stdout)["triage"]
    assert tri["verdict"] == "3b"  # fixed inputs: the multi capture's streams ran in turn
    assert tri["evidence"]
    # an add kernel against a multi-stream CUDA sample: not the same workload, and the
    # "baseline" is no single-stream capture; the triage says both before its verdict
    assert tri["evidence"][0].startswith("the baseline and this capture share 0% of their op")
    assert tri["evidence"][1].startswith("the baseline has 3 compute streams")
    copy = tmp_path / "copy.json.gz"  # the same workload: no doubt about the model
    shutil.copy(KINETO, copy)
    same = run("analyze", str(KINETO), "--baseline", str(copy), "--format", "json")
    ev = json.loads(same.stdout)["triage"]["evidence"]
    assert not any("same model" in e for e in ev) and "compute streams" in ev[0]


def test_python_dash_m_and_console_script_agree():
    exe = shutil.which("parastream", path=os.path.dirname(sys.executable))
    assert exe, "console script not installed"
    a = subprocess.run([exe, "analyze", str(KINETO), "--format", "json"], capture_output=True,
                       text=True, check=True).stdout
    b = run("analyze", str(KINETO), "--format", "json").stdout
    assert json.loads(a)["captures"][0]["wall_us"] == json.loads(b)["captures"][0]["wall_us"]


# ----------------------------------------------------------------- bad input

def test_missing_file(tmp_path):
    bad(tmp_path / "nope.json")


def test_truncated_json(tmp_path):
    raw = gzip.decompress(KINETO.read_bytes())
    f = tmp_path / "trunc.json"
    f.write_bytes(raw[: len(raw) // 2])
    assert "JSON" in bad(f)


def test_truncated_gzip(tmp_path):
    raw = KINETO.read_bytes()
    f = tmp_path / "trunc.json.gz"
    f.write_bytes(raw[: len(raw) // 2])
    bad(f)


def test_invalid_json(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"traceEvents": [ {"ph": "X", } ]}')
    bad(f)


def test_empty_file(tmp_path):
    f = tmp_path / "empty.json"
    f.write_text("")
    assert "empty" in bad(f)


def test_empty_trace(tmp_path):
    f = tmp_path / "t.json"
    f.write_text('{"traceEvents": []}')
    bad(f)


def test_metadata_only_trace(tmp_path):
    f = tmp_path / "meta.json"
    f.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}))
    assert "device" in bad(f)


def test_csv_without_needed_columns(tmp_path):
    f = tmp_path / "kernel_details.csv"
    # a start-time column, so the file is sniffed as kernel_details and not refused earlier
    f.write_text("Name,Type,Stream ID,Start Time(us)\nfoo,MatMul,2,1.0\n")
    assert "missing column(s): Duration(us)" in bad(f)


def test_non_utf8_bytes(tmp_path):
    f = tmp_path / "k.csv"
    # in a kernel name of a full-width row: a short row is refused for its column count first
    raw = CSV.read_bytes()
    name = b"aclnnMatmul_MatMulCommon_MatMulV2"
    assert name in raw.split(b"\n")[1]
    f.write_bytes(raw.replace(name, b"aclnnMatmul_\xff\xfe\xfa", 1))
    assert "not UTF-8" in bad(f)


def test_a_duration_past_int64_nanoseconds_is_skipped_quietly(tmp_path):
    raw = json.loads(gzip.decompress(KINETO.read_bytes()))
    kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["dur"] = 1e300
    f = tmp_path / "huge.json"
    f.write_text(json.dumps(raw))
    r = run("analyze", str(f), "--format", "json")
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr, r.stderr
    warnings = json.loads(r.stdout)["captures"][0]["warnings"]
    assert "skipped 1 device op(s) without a usable ts/dur" in warnings


def test_negative_and_nan_durations_partly_usable(tmp_path):
    raw = json.loads(gzip.decompress(KINETO.read_bytes()))
    kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["dur"] = -5
    f = tmp_path / "neg.json"
    f.write_text(json.dumps(raw))
    r = run("analyze", str(f), "--format", "json")
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["captures"][0]["warnings"]
    assert any("negative" in w for w in warnings)


def test_all_durations_negative(tmp_path):
    lines = CSV.read_text().splitlines()
    header, rows = lines[0], lines[1:]
    cols = header.split(",")
    i = cols.index("Duration(us)")
    import csv
    import io
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(cols)
    for k, row in enumerate(csv.reader(io.StringIO("\n".join(rows)))):
        row[i] = "NaN" if k % 2 else "-3.5"  # by row index: every row has the same width
        w.writerow(row)
    f = tmp_path / "kernel_details.csv"
    f.write_text(out.getvalue())
    assert "no usable rows" in bad(f)


def test_kineto_trace_without_one_usable_op(tmp_path):
    """A trace whose device ops all lack a usable time is bad input, not an empty report."""
    for name, op in (("neg.json", {"ts": 0, "dur": -5}), ("text.json", {"ts": "abc", "dur": 3})):
        f = tmp_path / name
        f.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel",
                                                  **op, "args": {"stream": 7}}]}))
        line = bad(f)
        assert "negative duration" in line or "usable ts and dur" in line


def test_the_device_with_usable_ops_is_the_one_analysed(tmp_path):
    """Two devices: the one with more ops has none with a usable time; the other is read."""
    ev = [{"ph": "X", "name": "bad", "cat": "kernel", "ts": "abc", "dur": 3,
           "args": {"stream": 7, "device": 0}} for _ in range(2)]
    ev.append({"ph": "X", "name": "good", "cat": "kernel", "ts": 10, "dur": 3,
               "args": {"stream": 9, "device": 1}})
    f = tmp_path / "two.json"
    f.write_text(json.dumps({"traceEvents": ev}))
    r = run("analyze", str(f), "--format", "json")
    assert r.returncode == 0, r.stderr
    cap = json.loads(r.stdout)["captures"][0]
    assert [s["id"] for s in cap["streams"]] == ["9"]


def test_outputs_that_cannot_be_written(tmp_path):
    """Every output is checked before the trace is read: one line, exit 2, nothing written."""
    for flag in ("-o", "--html", "--perfetto"):
        for target in (tmp_path / "missing" / "x", tmp_path):
            r = run("analyze", str(KINETO), flag, str(target), "--no-progress")
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert r.stderr.count("\n") == 1 and "cannot write" in r.stderr
    r = run("analyze", str(KINETO), "--cold", "-1")
    assert r.returncode == 2 and "--cold must not be negative" in r.stderr
    for gap in ("inf", "1e400", "nan", "-1"):
        r = run("analyze", str(KINETO), "--window-gap", gap)
        assert r.returncode == 2 and "--window-gap must be a finite" in r.stderr, r.stderr
    r = run("analyze", str(KINETO), "--candidate", "matching")
    assert r.returncode == 2 and "--candidate picks the candidate of --plan" in r.stderr
    assert os.listdir(tmp_path) == []


def test_directory_without_profiler_data(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    bad(tmp_path)


def test_unknown_file_format(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(b"\x00\x01\x02hello")
    bad(f)


def test_bad_regex_and_unknown_main_stream():
    r = run("analyze", str(KINETO), "--side", "(")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--side" in r.stderr
    r = run("analyze", str(KINETO), "--main-stream", "99")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "99" in r.stderr


def test_failed_run_leaves_no_output_file(tmp_path):
    out = tmp_path / "r.html"
    f = tmp_path / "bad.json"
    f.write_text("{")
    r = run("analyze", str(f), "--html", str(out))
    assert r.returncode == 2
    assert not out.exists()
    assert os.listdir(tmp_path) == ["bad.json"]


def _with_rank(src: Path, dst: Path, rank: int, shift_us: int) -> None:
    raw = json.loads(gzip.decompress(src.read_bytes()))
    raw["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 3}
    for e in raw["traceEvents"]:  # rank 2 runs slower: its kernels take longer
        if e.get("cat") == "kernel" and rank == 2:
            e["dur"] = e["dur"] + shift_us
    dst.write_bytes(gzip.compress(json.dumps(raw).encode()))


def test_folder_of_ranks_in_parallel_workers(tmp_path):
    src = DATA / "kineto" / "synthetic_comm_partial.json.gz"
    for r in range(3):
        _with_rank(src, tmp_path / f"rank{r}.json.gz", r, 40)
    r = run("analyze", str(tmp_path), "--format", "json", "-j", "2")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [row["rank"] for row in doc["ranks"]] == [0, 1, 2]
    assert doc["summary"]["ranks"] == 3
    assert doc["summary"]["slowest_rank"] == 2
    assert doc["summary"]["wall_spread_pct"] > 0
    serial = json.loads(run("analyze", str(tmp_path), "--format", "json", "-j", "1").stdout)
    assert serial["ranks"] == doc["ranks"]
    # the HTML page has the per-rank rows too (it had the medians across ranks only)
    page = tmp_path.parent / f"{tmp_path.name}-ranks.html"
    r = run("analyze", str(tmp_path), "-j", "2", "--html", str(page))
    assert r.returncode == 0, r.stderr
    assert "per rank" in r.stdout
    html = page.read_text()
    assert "<dt>per_rank</dt>" in html and html.count("<th>median_wall_us</th>") == 1


@pytest.mark.parametrize("argv, words", [
    (["run", "moe_layer", "--runs", "abc"], "argument --runs: invalid int value: 'abc'"),
    (["emit", "plan.json"], "the following arguments are required: --target"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_a_flag_argparse_refuses_is_one_line_too(argv, words):
    # a run audit: argparse printed its usage block first (eight lines for --runs abc)
    r = subprocess.run([sys.executable, "-m", "parastream", *argv], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and words in r.stderr and "--help" in r.stderr


def _stepped_rank(path: Path, rank, overlapping_steps: list[bool]) -> None:
    """A Kineto trace of one step per entry: a 200 us kernel on stream 7 and a 100 us one on
    stream 20 that either runs beside it or after it."""
    ev, corr, t = [], 1, 1000.0
    for k, together in enumerate(overlapping_steps):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1,
                   "tid": 1, "ts": t, "dur": 1000})
        for stream, ts, dur in ((7, t + 100, 200), (20, t + 100 + (0 if together else 300), 100)):
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": ts - 50, "dur": 5, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": f"k{stream}", "pid": 0, "tid": stream,
                       "ts": ts, "dur": dur,
                       "args": {"stream": stream, "correlation": corr, "device": 0}})
            corr += 1
        t += 1000
    doc = {"traceEvents": ev}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 3}
    path.write_text(json.dumps(doc))


def test_baseline_triage_over_ranks_takes_each_ranks_warm_steps(tmp_path):
    # the cold steps are each rank's first two; the triage took the document's first six
    # captures as cold (the ranks' total), which left rank 2's three captures, cold included
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    _stepped_rank(ranks / "rank0.json", 0, [False, False, True])
    _stepped_rank(ranks / "rank1.json", 1, [False, False, True])
    _stepped_rank(ranks / "rank2.json", 2, [False, False, False])
    _stepped_rank(tmp_path / "base.json", None, [False, False, False])
    r = run("analyze", str(ranks), "-j", "1", "--baseline", str(tmp_path / "base.json"),
            "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["summary"]["dropped_cold"] == 6
    assert doc["summary"]["median_overlap_pct"] == 1.0
    assert doc["triage"]["median_overlap_pct"] == 1.0


@pytest.mark.parametrize("rank, ok", [("1", True), ([0], False), (True, False), ("one", False)])
def test_a_rank_that_is_no_whole_number(tmp_path, rank, ok):
    # a string rank next to an int one could not be sorted, a list not hashed: tracebacks
    _stepped_rank(tmp_path / "rank0.json", 0, [True])
    _stepped_rank(tmp_path / "rank1.json", rank, [True])
    r = run("analyze", str(tmp_path), "-j", "1", "--format", "json")
    if ok:
        assert r.returncode == 0, r.stderr
        assert [row["rank"] for row in json.loads(r.stdout)["ranks"]] == [0, 1]
    else:  # that rank is named and skipped; --strict makes it the command's error
        assert r.returncode == 0 and "Traceback" not in r.stderr
        assert [row.get("rank") for row in json.loads(r.stdout)["sources"]] == [0]
        assert "rank1.json" in r.stderr and "distributedInfo.rank" in r.stderr
        assert "1 of 2 analysed" in r.stderr
        r = run("analyze", str(tmp_path), "-j", "1", "--strict")
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "rank1.json" in r.stderr and "distributedInfo.rank" in r.stderr


def test_ops_outside_every_step_are_named_in_a_warning(tmp_path):
    csv = tmp_path / "kernel_details.csv"
    csv.write_text("Step Id,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
                   "Block Dim\n1,2,A,MatMul,AI_CORE,1000000,100,20\n"
                   "2,2,B,MatMul,AI_CORE,1001000,100,20\n,2,C,MatMul,AI_CORE,1002000,5000,20\n")
    r = run("analyze", str(csv), "--format", "json")
    assert r.returncode == 0, r.stderr
    caps = json.loads(r.stdout)["captures"]
    assert len(caps) == 2
    assert any("skipped 1 op(s) outside every step (5,000.000 us" in w
               for w in caps[0]["warnings"])
    whole = json.loads(run("analyze", str(csv), "--no-steps", "--format", "json").stdout)
    assert whole["captures"][0]["ops"] == 3


def test_an_unreadable_folder_is_one_line(tmp_path, monkeypatch):
    # root reads any folder, so the refusal is simulated where the folder is listed
    from parastream.errors import InputError
    from parastream.timeline import ranks

    folder = tmp_path / "locked"
    folder.mkdir()

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(ranks.os, "listdir", refuse)
    with pytest.raises(InputError, match="cannot list the folder: permission denied"):
        ranks.expand(str(folder))
