#!/usr/bin/env python3
"""The cluster-scale analysis: a generated folder of ranks (benchmarks/gen_cluster.py, a
planted slow rank) analysed by ``parastream analyze`` twice, side by side:

  A. the default: a Dask local cluster started by the command (one worker per core);
  B. ``--scheduler``: a scheduler and two workers started here as separate processes on
     localhost (``dask scheduler``, ``dask worker --nworkers 2 --nthreads 1``).

Reported: each run's wall time, the peak resident memory (VmHWM) of every worker process
and of the analysing command, polled from /proc every 0.2 s while it runs; whether the
planted straggler is ranked first; and whether A and B wrote the same JSON document.

With ``--local-only``, run A alone and report its memory (a folder of a few full-size
ranks: the peak of a worker depends on the rank it reads, not on how many there are).

Usage:
  python benchmarks/bench_cluster.py benchmarks/work/cluster64 --ranks 64 --events 1250000 \
      --slow-rank 17 [--generate] [--delete] [--local-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def vm_hwm_mb(pid: int) -> float | None:
    """The process's peak resident set so far (VmHWM), in MB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class PeakWatch(threading.Thread):
    """Polls the peak memory of a process tree (its root and every descendant)."""

    def __init__(self, root: int, every_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.every_s = root, every_s
        self.peaks: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.stop = threading.Event()

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def run(self) -> None:
        while not self.stop.is_set():
            for p in self._tree():
                mb = vm_hwm_mb(p.pid)
                if mb is None:
                    continue
                self.peaks[p.pid] = max(mb, self.peaks.get(p.pid, 0.0))
                if p.pid not in self.names:
                    try:
                        self.names[p.pid] = " ".join(p.cmdline())[:90]
                    except psutil.Error:
                        self.names[p.pid] = "?"
            self.stop.wait(self.every_s)

    def workers(self) -> dict[int, float]:
        """Peaks of the Dask worker processes (spawned children running a worker)."""
        return {pid: mb for pid, mb in self.peaks.items()
                if pid != self.root and "multiprocessing" in self.names.get(pid, "")
                and "resource_tracker" not in self.names.get(pid, "")}


def analyse(folder: Path, out: Path, *extra: str) -> tuple[float, float, dict[int, float]]:
    """Run the command; (wall s, its own peak MB, worker peaks MB by pid)."""
    cmd = [str(BIN / "parastream"), "analyze", str(folder), "--format", "json", "-o", str(out),
           "--no-progress", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    watch = PeakWatch(proc.pid)
    watch.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    watch.stop.set()
    watch.join()
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with {rc}")
    return wall, watch.peaks.get(proc.pid, 0.0), watch.workers()


def start_cluster(home: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and two single-threaded workers as processes of their own."""
    info = home / "scheduler.json"
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                               "0", "--no-dashboard", "--scheduler-file", str(info)],
                              stdout=subprocess.DEVNULL, stderr=open(home / "scheduler.log", "w"))]
    while not info.exists():
        time.sleep(0.2)
    address = json.loads(info.read_text())["address"]
    procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--host", "127.0.0.1",
                                   "--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
                                  stdout=subprocess.DEVNULL,
                                  stderr=open(home / "workers.log", "w")))
    from distributed import Client

    with Client(address, timeout=120) as c:
        c.wait_for_workers(2, timeout=300)
    return address, procs


def run_b(folder: Path, out: Path, home: Path) -> tuple[float, float, dict[int, float]]:
    """Run B against a scheduler and two workers; their worker processes are watched."""
    address, procs = start_cluster(home)
    watch = PeakWatch(procs[1].pid)
    watch.start()
    try:
        wall, own, _ = analyse(folder, out, "--scheduler", address)
    finally:
        watch.stop.set()
        watch.join()
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=60)
    return wall, own, watch.workers()


def generate(args: argparse.Namespace) -> None:
    subprocess.run([sys.executable, str(HERE / "gen_cluster.py"), str(args.folder), "--ranks",
                    str(args.ranks), "--events", str(args.events), "--slow-rank",
                    str(args.slow_rank), "--slow-factor", "1.5", "--gzip", "--compresslevel", "1",
                    "--jobs", "2", "--seed", str(args.seed)], check=True)


def report(name: str, wall: float, own: float, workers: dict[int, float]) -> None:
    peaks = sorted(workers.values(), reverse=True)
    print(f"{name}: wall {wall:.1f} s; analysing command peak {own:.0f} MB; "
          f"{len(peaks)} worker processes, peak RSS each (MB): "
          + ", ".join(f"{mb:.0f}" for mb in peaks) + f"; max {max(peaks, default=0):.0f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=1_250_000)
    ap.add_argument("--slow-rank", type=int, default=17)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--generate", action="store_true", help="generate the folder first")
    ap.add_argument("--delete", action="store_true", help="delete the folder at the end")
    ap.add_argument("--local-only", action="store_true", help="run A alone: its memory")
    args = ap.parse_args()
    if args.generate or not args.folder.exists():
        generate(args)
    print(f"{len(list(args.folder.iterdir()))} ranks in {args.folder}, "
          f"{sum(f.stat().st_size for f in args.folder.iterdir()) / 1e6:.0f} MB; "
          f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
          f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        a = analyse(args.folder, home / "a.json")
        report("A, local cluster", *a)
        if args.local_only:
            return 0
        b = run_b(args.folder, home / "b.json", home)
        report("B, scheduler + 2 workers", *b)
        doc_a, doc_b = (json.loads((home / f).read_text()) for f in ("a.json", "b.json"))
    first = doc_a["cluster"]["ranking"][0]
    print(f"ranked first: rank {first['rank']} ({first['reason']}); planted: rank "
          f"{args.slow_rank}: {'found' if first['rank'] == args.slow_rank else 'MISSED'}")
    print(f"units analysed {doc_a['summary']['units_analysed']} of {doc_a['summary']['units']}; "
          f"A and B documents identical: {doc_a == doc_b}")
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    if args.delete:
        for f in args.folder.iterdir():
            f.unlink()
        args.folder.rmdir()
    return 0 if first["rank"] == args.slow_rank and doc_a == doc_b else 1


if __name__ == "__main__":
    sys.exit(main())
