"""The per-rank analysis on Dask distributed, against a real cluster: a scheduler and two
workers started as separate processes on localhost (the ``dask`` command of the
environment), the same folder of ranks analysed there and on the embedded local cluster,
a worker killed mid-run, and the faults of ``--scheduler`` (no answer, a bad address)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ranks import _rank

DASK = Path(sys.executable).with_name("dask")
pytestmark = pytest.mark.skipif(not DASK.exists(), reason="the dask command is not installed")

#: on the workers started here, every trace is read as a big one (the reader's decode pool,
#: inside a daemonic worker process), and each task sleeps before it reads its rank: long
#: enough that a worker can be killed while it holds one (dask imports a preload file more
#: than once in a worker: the original is kept aside, or the wrapper would wrap itself)
SLOW_PRELOAD = '''
import time
import parastream.timeline.ranks as ranks
import parastream.timeline.readers.kineto as kineto

kineto.PARALLEL_BYTES = 0  # every trace is "big": the decode pool of a daemonic worker

_analyze_unit = ranks.__dict__.setdefault("_unslowed_analyze_unit", ranks.analyze_unit)


def analyze_unit(path, task):
    time.sleep(0.6)
    return _analyze_unit(path, task)


ranks.analyze_unit = analyze_unit
'''


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def _start(*args: str, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:  # (the child keeps its own copy of the descriptor)
        return subprocess.Popen([str(DASK), *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(address, client)`` of a scheduler and two workers (one thread each, slowed by
    SLOW_PRELOAD) started as processes of their own, stopped at the end."""
    from distributed import Client

    home = tmp_path_factory.mktemp("cluster")
    (home / "slow.py").write_text(SLOW_PRELOAD)
    info = home / "scheduler.json"
    procs = [_start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                    "--scheduler-file", str(info), log=home / "scheduler.log")]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        procs.append(_start("worker", "--scheduler-file", str(info), "--host", "127.0.0.1",
                            "--nworkers", "2", "--nthreads", "1", "--no-dashboard",
                            "--preload", str(home / "slow.py"), log=home / "workers.log"))
        with Client(scheduler_file=str(info), timeout=60, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=90)
            yield client.scheduler.address, client
    finally:
        for p in reversed(procs):
            _stop(p)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Path:
    """Eight ranks; rank 5 is slow."""
    folder = tmp_path_factory.mktemp("ranks")
    for r in range(8):
        _rank(folder / f"rank{r}.json.gz", r, 40 if r == 5 else 0)
    return folder


@pytest.fixture(scope="module")
def embedded(ranks) -> dict:
    """The JSON document of the embedded local cluster (two workers)."""
    r = run("analyze", ranks.name, "--format", "json", "-j", "2", "--no-progress",
            cwd=ranks.parent)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_running_cluster_gives_the_embedded_result(cluster, ranks, embedded):
    address, _ = cluster
    # relative paths: the workers run in another folder and are sent absolute ones
    r = run("analyze", ranks.name, "--format", "json", "--scheduler", address,
            "--no-progress", cwd=ranks.parent)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert json.loads(r.stdout) == embedded
    assert [row["rank"] for row in embedded["ranks"]] == list(range(8))
    assert embedded["summary"]["slowest_rank"] == 5
    assert embedded["sources"][0]["source"] == f"{ranks.name}/rank0.json.gz"
    serial = run("analyze", ranks.name, "--format", "json", "-j", "1", "--no-progress",
                 cwd=ranks.parent)
    assert json.loads(serial.stdout) == embedded


def _kill_a_busy_worker(client, deadline_s: float = 60) -> int:
    """SIGKILL the worker process that holds a task of the analysis; its pid."""
    pids = client.run(os.getpid)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        busy = [w for w, tasks in client.processing().items() if tasks]
        if busy:
            os.kill(pids[busy[0]], signal.SIGKILL)
            return pids[busy[0]]
        time.sleep(0.02)
    raise AssertionError("no task of the analysis reached a worker")


def test_a_worker_killed_mid_run_leaves_the_result_complete(cluster, ranks, embedded):
    address, client = cluster
    client.wait_for_workers(2, timeout=60)
    proc = subprocess.Popen([sys.executable, "-m", "parastream", "analyze", ranks.name,
                             "--format", "json", "--scheduler", address, "--no-progress"],
                            cwd=ranks.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        killed = _kill_a_busy_worker(client)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert killed not in client.run(os.getpid).values()
    doc = json.loads(out)
    assert "broken" not in doc and doc["summary"]["units_analysed"] == 8
    assert doc == embedded


def test_a_truncated_rank_on_a_running_cluster_is_named(cluster, tmp_path):
    address, _ = cluster
    for r in range(3):
        _rank(tmp_path / f"rank{r}.json.gz", r)
    whole = (tmp_path / "rank2.json.gz").read_bytes()
    (tmp_path / "rank2.json.gz").write_bytes(whole[: len(whole) // 2])
    r = run("analyze", str(tmp_path), "--format", "json", "--scheduler", address,
            "--no-progress")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [b["source"] for b in doc["broken"]] == [str(tmp_path / "rank2.json.gz")]
    assert any("2 of 3 analysed" in ln for ln in r.stderr.splitlines())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _main(capsys, *args: str) -> tuple[int, str, str]:
    from parastream.cli import main

    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_scheduler_that_does_not_answer_is_one_line(ranks, capsys):
    address = f"tcp://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    rc, out, err = _main(capsys, "analyze", str(ranks), "--scheduler", address,
                         "--scheduler-timeout", "1", "--no-progress")
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"parastream: {address}: ") and "within 1 s" in line
    assert time.monotonic() - t0 < 60  # a hang detector, not a timing


@pytest.mark.parametrize("address", ["tcp://127.0.0.1", "127.0.0.1:99999", "tcp://a b:1",
                                     "http://127.0.0.1:8786"])
def test_a_bad_scheduler_address_is_one_line(ranks, address, capsys):
    rc, out, err = _main(capsys, "analyze", str(ranks), "--scheduler", address, "--no-progress")
    assert rc == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"parastream: {address}: not a Dask scheduler address")


def test_the_command_line_does_not_import_dask():
    code = ("import sys, parastream.cli, parastream.workflow.analyze, parastream.timeline.ranks; "
            "parastream.cli._parser(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
