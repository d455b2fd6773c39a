"""``parastream decode`` through its own parser (parastream.cli.decode.add_parser): the
table, the JSON document, one trace per mode, and bad input as one line with exit 2."""

from __future__ import annotations

import argparse
import json

import pytest

from parastream.cli.decode import add_parser, trace_paths
from parastream.errors import InputError


def _run(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers())
    args = p.parse_args(["decode", *argv])
    return args.func(args)


def test_the_table_json_and_traces(tmp_path, capsys):
    out = tmp_path / "d.json"
    html = tmp_path / "r.html"
    rc = _run(["--model", "tiny", "--requests", "6", "--concurrency", "3", "--json", str(out),
               "-o", str(tmp_path / "t.json.gz"), "--html", str(html)])
    assert rc == 0
    text = capsys.readouterr().out
    for word in ("measured on CPU", "tokens/s", "TTFT p99", "Jain", "x sequential",
                 "batch+overlap", "0 differ otherwise", "scheduling pass p50",
                 "idle between steps", "of a step (probed before the run)",
                 "two micro-batches, whole/split step by rows"):
        assert word in text, word
    doc = json.loads(out.read_text())
    assert doc["schema"] == "parastream.decode/1" and doc["device"] == "CPU"
    assert [m["mode"] for m in doc["modes"]] == ["sequential", "streams", "batch",
                                                 "batch+overlap"]
    assert doc["modes"][0]["vs_sequential"] == 1.0
    assert all(a["mismatches"] == [] for a in doc["agreement"])
    assert doc["settings"]["tbo"] == "auto" and doc["settings"]["probe"] is True
    overlap = doc["modes"][3]
    assert overlap["tbo_calibration"]["sizes"] and overlap["interpreter_probe"]["batch"] == 3
    assert overlap["one_step_ahead"] == (overlap["interpreter_free_share"] >= 0.2)
    for mode in ("sequential", "streams", "batch", "batch+overlap"):
        assert (tmp_path / f"t.{mode}.json.gz").stat().st_size > 0
    page = html.read_text()
    assert "batch+overlap: requests" in page and "request-5" in page


def test_one_mode_from_a_workload_file(tmp_path, capsys):
    w = tmp_path / "w.jsonl"
    w.write_text('{"arrival_s": 0, "prompt": "hello", "output_tokens": 3}\n'
                 '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 0}\n')
    trace = tmp_path / "t.json"
    assert _run(["--model", "tiny", "--modes", "batch", "--workload", str(w), "-o",
                 str(trace)]) == 0
    text = capsys.readouterr().out
    assert "zero output tokens asked" in text
    assert trace.stat().st_size > 0


@pytest.mark.parametrize("argv, words", [
    (["--modes", "batch,warp"], "--modes: warp"),
    (["--model", "7b"], "prediction only"),
    (["--model", "huge"], "not a built-in size"),
    (["--concurrency", "0"], "--concurrency"),
    (["--streams", "0"], "--streams"),
    (["--kv-blocks", "0"], "--kv-blocks"),
    (["--kv-blocks", "100000000"], "GiB of KV memory"),
    (["--requests", "100000001"], "--requests"),
    (["--max-skip", "-1"], "--max-skip"),
    (["--rate", "0"], "--rate"),
    (["--lengths", "zipf"], "--lengths"),
    (["--tbo", "sometimes"], "--tbo must be off, auto or a number"),
    (["--tbo", "1"], "--tbo must be off, auto or a number"),
    (["--device", "npu"], "a measured run executes on cpu or cuda"),
])
def test_bad_options_are_one_line(argv, words):
    with pytest.raises(InputError) as e:
        _run(["--model", "tiny", "--requests", "2", *argv])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_bad_workload_line_and_an_unwritable_output(tmp_path):
    w = tmp_path / "w.jsonl"
    w.write_text('{"arrival_s": 0, "prompt_tokens": 5}\n')
    with pytest.raises(InputError, match=r"w\.jsonl: line 1"):
        _run(["--model", "tiny", "--workload", str(w)])
    with pytest.raises(InputError, match="no directory"):
        _run(["--model", "tiny", "--json", str(tmp_path / "no" / "d.json")])


def test_trace_paths():
    assert trace_paths(None, ("batch",)) == {}
    assert trace_paths("a/t.json", ("batch",)) == {"batch": "a/t.json"}
    assert trace_paths("a/t.json.gz", ("batch", "streams")) == {
        "batch": "a/t.batch.json.gz", "streams": "a/t.streams.json.gz"}
