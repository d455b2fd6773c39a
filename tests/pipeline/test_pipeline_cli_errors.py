"""``parastream pipeline`` as a user meets a failing stage, a bad item, a busy machine:
one line and exit 1 when a stage stops the run (no traceback, nothing written), the error
policy's items named in the report, the measurement's warnings in text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from parastream.cli import main

pytest.importorskip("torch")
pytest.importorskip("PIL")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", "pipeline", *args],
                          capture_output=True, text=True, timeout=180)


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("parastream: ")
    return lines[0]


def test_a_stage_out_of_memory_is_one_line_exit_1_and_nothing_written(monkeypatch, capsys,
                                                                      tmp_path):
    """The decode stage runs out of memory on one item (as at a large --batch): not a
    traceback, but the one line of every other command, naming the run, stage and item;
    no output file, HTML report or trace is left behind."""
    import parastream.pipeline.workload as workload

    real, calls = workload.decode_resize, []

    def decode(jpegs, side=112):
        calls.append(1)
        if len(calls) == 5:  # two untimed warm-up items, then items 0, 1, 2 of the serial run
            raise MemoryError("cannot allocate 1.2 GiB for the batch\nmore detail")
        return real(jpegs, side)

    monkeypatch.setattr(workload, "decode_resize", decode)
    out, html, trace = tmp_path / "p.txt", tmp_path / "p.html", tmp_path / "p.json"
    rc = main(["pipeline", "--items", "6", "--batch", "1", "--no-progress", "-o", str(out),
               "--html", str(html), "--trace", str(trace)])
    err = capsys.readouterr()
    assert rc == 1
    line = one_line(err.err)
    assert line.startswith("parastream: pipeline: the serial run stopped: stage 'decode' "
                           "failed on item 2: MemoryError: cannot allocate 1.2 GiB")
    assert "--on-error" in line
    assert err.out == "" and list(tmp_path.iterdir()) == []


def test_a_corrupt_item_stops_the_run_under_fail():
    r = run_cli("--items", "6", "--batch", "1", "--no-progress", "--corrupt", "4")
    assert r.returncode == 1, r.stderr
    line = one_line(r.stderr)
    assert "stage 'decode' failed on item 4: OSError" in line and r.stdout == ""


def test_skip_goes_on_and_names_the_items_in_json_and_text(tmp_path):
    r = run_cli("--items", "8", "--batch", "1", "--no-progress", "--corrupt", "2,6",
                "--on-error", "skip", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["on_error"] == "skip" and doc["outputs_identical"] and doc["in_order"]
    for run in (doc["serial"], doc["pipelined"]):
        assert run["counts"] == {"completed": 6, "failed": 2, "cancelled": 0}
        assert run["submitted"] == 8
        assert [(e["item"], e["stage"]) for e in run["skipped"]] == [(2, "decode"), (6, "decode")]
        assert all(e["error"].startswith("OSError") for e in run["skipped"])
    text = run_cli("--items", "6", "--batch", "1", "--no-progress", "--corrupt", "1",
                   "--on-error", "retry:2")
    assert text.returncode == 0, text.stderr
    assert "errors (--on-error retry:2): 6 items in = 5 out + 1 failed" in text.stdout
    assert "skipped 1: item 1 at decode (OSError" in text.stdout
    assert "3 calls" in text.stdout


@pytest.mark.parametrize("args, needle", [
    (("--on-error", "retry:x"), "--on-error: 'retry:x'"),
    (("--on-error", "retry:0"), "--on-error: retry:N needs N from 1"),
    (("--on-error", "foo"), "--on-error: 'foo' is not one of fail, skip, retry:N"),
    (("--on-error", "skip:3"), "--on-error"),
    (("--corrupt", "7"), "--corrupt: item 7 is not one of the 2 items"),
    (("--corrupt", "x"), "--corrupt: 'x' is not an item id"),
])
def test_bad_policy_and_corrupt_values_are_one_line_exit_2(args, needle, tmp_path):
    r = run_cli("--items", "2", "-o", str(tmp_path / "o.txt"), *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in one_line(r.stderr)
    assert r.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_busy_machine_is_flagged_in_json_and_text(monkeypatch, capsys):
    """Other tasks hold every core while it measures (as when it reported 3.92x on 2
    cores): the document says so, and the text report warns."""
    import parastream.cpu.busy as busy

    monkeypatch.setattr(busy, "_others_running", lambda: 64)
    assert main(["pipeline", "--items", "12", "--batch", "2", "--no-progress",
                 "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["busy"].startswith("other tasks took at least half")
    assert doc["busy_share"] == 1.0
    from parastream.runtime.host import cpu_count

    assert doc["speedup_limit"] == max(1, min(sum(doc["replicas"].values()), cpu_count()))
    from parastream.cli.pipeline import render_text

    text = render_text(doc | {"implausible": "implausible speedup 3.92x: above 2x"})
    assert "warning: other tasks took at least half" in text
    assert "warning: implausible speedup 3.92x" in text
