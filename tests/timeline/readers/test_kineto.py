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


def test_a_trace_through_a_pipe_is_read_once_and_named_as_given(tmp_path):
    """`analyze <(zcat t.json.gz)` or `... | analyze /dev/stdin`: a pipe gives its bytes
    once, and the readers sniff a file's head before they read it (both failed: "empty
    file", "trailing characters")."""
    import os
    import subprocess
    import sys
    import threading

    from parastream.errors import InputError
    from parastream.timeline.readers import read_path

    def read(path: str) -> list:
        """read_path in a thread: a reader that opens the pipe again waits for a writer
        forever, which must fail the test, not hang it."""
        got: list = []

        def go() -> None:
            try:
                got.append(read_path(path))
            except BaseException as exc:  # noqa: BLE001 - any failure is the test's answer
                got.append(exc)

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(60)
        assert got, "read_path still waits on the pipe"
        return got[0]

    fifo = tmp_path / "trace.pipe"
    for payload, ok in ((SAMPLE.read_bytes(), True), (b"garbage", False)):
        os.mkfifo(fifo)
        writer = threading.Thread(target=fifo.write_bytes, args=(payload,), daemon=True)
        writer.start()
        got = read(str(fifo))
        if ok:
            [tl] = got
            assert tl.source == str(fifo) and len(tl) == len(kineto.read(str(SAMPLE)))
        else:
            assert isinstance(got, InputError) and "not a recognised profiler file" in str(got)
            assert got.path == str(fifo)  # not the temporary copy
        writer.join(5)
        fifo.unlink()
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", "/dev/stdin",
                        "--format", "json"], input=SAMPLE.read_bytes(), capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["captures"][0]["source"] == "/dev/stdin"
    # junk on a pipe is refused from its start, not copied whole first
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", "/dev/stdin"],
                       input=b"x" * (64 << 20), capture_output=True, timeout=120)
    assert r.returncode == 2 and b"not a recognised profiler file" in r.stderr
    # a cut gzip on a pipe is said as for a file, not as an empty one
    r = subprocess.run([sys.executable, "-m", "parastream", "analyze", "/dev/stdin"],
                       input=SAMPLE.read_bytes()[:100], capture_output=True, timeout=120)
    assert r.returncode == 2 and b"/dev/stdin: cannot read: Compressed file ended" in r.stderr


def test_several_pipes_with_worker_processes(tmp_path):
    """A pipe is this process's: with -j 2 the captures are read here, not in workers
    (which said "/dev/fd/63: no such file or directory")."""
    import shutil
    import subprocess
    import sys

    if shutil.which("bash") is None:
        pytest.skip("needs bash for <(...)")
    cmd = (f"'{sys.executable}' -m parastream analyze <(cat '{SAMPLE}') "
           f"<(gzip -dc '{SAMPLE}') -j 2 --format json")
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sources = [c["source"] for c in json.loads(r.stdout)["captures"]]
    assert len(sources) == 2 and all(s.startswith("/dev/fd/") for s in sources)
