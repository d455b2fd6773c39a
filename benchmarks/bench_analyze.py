#!/usr/bin/env python3
"""Side-by-side benchmark: HTA 0.5.0 vs ``parastream analyze`` vs a raw JSON-decode floor.

Kineto mode (default): for R repetitions, alternately run as child processes
  (a) HTA: ``benchmarks/.venv-hta/bin/python benchmarks/hta_overlap.py TRACE``
      (TraceAnalysis load + get_comm_comp_overlap),
  (b) parastream: ``.venv/bin/parastream analyze TRACE --format json``,
  (c) floor: read (+ gunzip) the file and ``msgspec.json.decode`` it, nothing else.
Each child's wall time (perf_counter around spawn..exit) and peak RSS (``ru_maxrss`` from
``os.wait4`` on that child) are recorded; the table shows medians and ratios. The peak
PSS of each tool's process tree comes from one more run per tool, sampled every 20 ms and
not timed.

CSV mode (``--csv-rows FILE``): times ``parastream analyze FILE --format json`` on a big
Ascend kernel_details.csv against a floor of ``pyarrow.csv.read_csv`` (HTA cannot read it).

Usage:
  python benchmarks/bench_analyze.py benchmarks/work/kineto_1250k.json --reps 3
  python benchmarks/bench_analyze.py --csv-rows benchmarks/work/big_kernel_details.csv --reps 3
Options: --skip-hta, --skip-parastream, --warmup N (uncounted runs of each tool first,
default 1), --json-out FILE (raw measurements). Children run with bytecode caching on
(PYTHONDONTWRITEBYTECODE cleared), as a user's Python runs.
Run it from the repository root.  Children run one at a time (2-core machine).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HTA_PY = os.path.join(ROOT, "benchmarks", ".venv-hta", "bin", "python")
MAIN_PY = os.path.join(ROOT, ".venv", "bin", "python")
PARASTREAM = os.path.join(ROOT, ".venv", "bin", "parastream")

# the fastest plain decode of the whole document we know: msgspec into Python objects with
# the cyclic GC off (with it on, collections over millions of new dicts triple the time)
FLOOR_JSON = (
    "import gc,gzip,sys,msgspec\n"
    "gc.disable()\n"
    "p=sys.argv[1]\n"
    "b=open(p,'rb').read()\n"
    "b=gzip.decompress(b) if p.endswith('.gz') else b\n"
    "d=msgspec.json.decode(b)\n"
    "print(len(d['traceEvents']) if isinstance(d,dict) else len(d))\n"
)
FLOOR_CSV = (
    "import sys\n"
    "import pyarrow.csv as pc\n"
    "t=pc.read_csv(sys.argv[1])\n"
    "print(t.num_rows)\n"
)


# the children cache their bytecode as a user's Python does (HTA's site-packages were
# compiled when pip installed them; parastream's source is compiled on its first run)
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _uptime() -> str:
    """The machine's load, as ``uptime`` prints it (the runs share the machine)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _children(pid: int) -> list[int] | None:
    """pid's children from /proc/PID/task/*/children (one small file per thread); None
    where the kernel does not provide them."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{t}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return out


def _tree_by_scan(pid: int) -> list[int]:
    """pid and all its descendants, from every process's parent link in /proc/*/stat."""
    parent: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                parent.setdefault(int(fields[1]), []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parent.get(p, []))
    return out


def _tree(pid: int) -> list[int]:
    """pid and all its descendants. Read from the children lists of the tree's own
    processes: scanning all of /proc every 20 ms would take a good share of a core from
    the program measured."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = _children(p)
        if kids is None:
            return _tree_by_scan(pid)
        out.append(p)
        todo.extend(kids)
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeMemory:
    """Samples the summed PSS of a process tree every 20 ms (worker processes included;
    pages shared copy-on-write are split between the processes that map them, so the sum
    is the real memory of the tree, unlike the largest single ru_maxrss)."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid, self.peak_kb = pid, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, sum(_pss_kb(p) for p in _tree(self.pid)))
            self._stop.wait(0.02)

    def stop(self) -> float:
        self._stop.set()
        self._t.join()
        return self.peak_kb / 1024.0


def run_child(argv: list[str], timeout: float, sample: bool = False) -> dict:
    """Run one child; return wall seconds, peak RSS MB of that child, rc, stdout, stderr
    tail, and with ``sample`` the peak PSS of its process tree (the sampling takes CPU
    from the child on a small machine, so timed runs do not sample)."""
    load1 = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, env=CHILD_ENV)
        mem = TreeMemory(proc.pid) if sample else None
        try:
            deadline = t0 + timeout
            while True:
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    proc.kill()
                    pid, status, ru = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.005)
        finally:
            proc.returncode = -1  # reaped by wait4 ourselves
            pss = mem.stop() if mem is not None else None
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    # CPU seconds of the child and of the workers it reaped: on a shared machine this moves
    # far less with the load than the wall time does
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
            "rss_mb": ru.ru_maxrss / 1024.0, "pss_tree_mb": pss, "rc": rc,
            "load1_before": load1,
            "stdout": stdout, "stderr_tail": stderr[-2000:]}


def find_overlap(obj):
    """HTA-compatible overlap figure from parastream's JSON.

    Prefers a ``hta_comm_comp_overlap_pct`` key at any depth; then a top-level
    ``comm_comp_overlap_pct``; otherwise reports the per-capture values (not comparable with HTA's
    single pooled number per rank)."""

    def search(o, key):
        if isinstance(o, dict):
            if key in o and isinstance(o[key], (int, float)):
                return o[key]
            for v in o.values():
                r = search(v, key)
                if r is not None:
                    return r
        elif isinstance(o, list):
            for v in o:
                r = search(v, key)
                if r is not None:
                    return r
        return None

    r = search(obj, "hta_comm_comp_overlap_pct")
    if r is not None:
        return r
    if isinstance(obj, dict) and isinstance(obj.get("comm_comp_overlap_pct"), (int, float)):
        return obj["comm_comp_overlap_pct"]
    caps = obj.get("captures") if isinstance(obj, dict) else None
    if isinstance(caps, list):
        vals = [c.get("comm_comp_overlap_pct") for c in caps if isinstance(c, dict)]
        vals = [v for v in vals if isinstance(v, (int, float))]
        if vals:
            return f"per-capture only ({len(vals)} captures, first {vals[0]})"
    return None


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["rc"] == 0]
    if not ok:
        return {"ok": False, "n": 0, "rc": runs[-1]["rc"] if runs else None,
                "stderr_tail": runs[-1]["stderr_tail"][-600:] if runs else ""}
    w = [r["wall_s"] for r in ok]
    cpu = [r["cpu_s"] for r in ok]
    ld = [r["load1_before"] for r in ok]
    m = [r["rss_mb"] for r in ok]
    return {"ok": True, "n": len(ok), "pss_mb": None,
            "wall_median_s": statistics.median(w), "wall_min_s": min(w),
            "cpu_median_s": statistics.median(cpu),
            "wall_max_s": max(w), "rss_median_mb": statistics.median(m), "rss_max_mb": max(m),
            "load1_median": statistics.median(ld)}


def fmt(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="HTA vs parastream analyze vs JSON-decode floor")
    p.add_argument("trace", nargs="?", help="Kineto trace .json/.json.gz")
    p.add_argument("--csv-rows", metavar="CSV", help="time parastream analyze on a kernel_details.csv")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="uncounted runs of each tool first "
                   "(page cache, bytecode cache)")
    p.add_argument("--timeout", type=float, default=900.0, help="per child, seconds")
    p.add_argument("--skip-hta", action="store_true")
    p.add_argument("--skip-parastream", action="store_true")
    p.add_argument("--skip-floor", action="store_true")
    p.add_argument("--hta-python", default=HTA_PY)
    p.add_argument("--parastream", default=PARASTREAM)
    p.add_argument("--floor-python", default=MAIN_PY)
    p.add_argument("--json-out", help="write all raw measurements here")
    a = p.parse_args(argv)
    if not a.trace and not a.csv_rows:
        p.error("give a trace file or --csv-rows CSV")

    target = a.csv_rows or a.trace
    tools: dict[str, list[str]] = {}
    if a.csv_rows:
        if not a.skip_parastream:
            tools["parastream"] = [a.parastream, "analyze", target, "--format", "json"]
        if not a.skip_floor:
            tools["floor (pyarrow.csv.read_csv)"] = [a.floor_python, "-c", FLOOR_CSV, target]
    else:
        if not a.skip_hta:
            tools["HTA 0.5.0"] = [a.hta_python, os.path.join(ROOT, "benchmarks", "hta_overlap.py"), target]
        if not a.skip_parastream:
            tools["parastream"] = [a.parastream, "analyze", target, "--format", "json"]
            tools["parastream, 1 process"] = ["/usr/bin/env", "PARASTREAM_WORKERS=1", a.parastream,
                                              "analyze", target, "--format", "json"]
        if not a.skip_floor:
            tools["floor (msgspec decode, GC off)"] = [a.floor_python, "-c", FLOOR_JSON, target]

    size_mb = os.path.getsize(target) / 1e6
    print(f"# bench_analyze: {os.path.relpath(target, ROOT)} ({size_mb:.1f} MB), reps={a.reps}, "
          f"cpus={os.cpu_count()}; uptime: {_uptime()}", file=sys.stderr)
    runs: dict[str, list[dict]] = {k: [] for k in tools}
    results: dict[str, object] = {}
    for _ in range(a.warmup):
        for name, argv_ in tools.items():
            r = run_child(argv_, a.timeout)
            print(f"  warm-up {name}: rc={r['rc']} wall={r['wall_s']:.2f}s (not counted)",
                  file=sys.stderr)
    for rep in range(a.reps):
        for name, argv_ in tools.items():
            r = run_child(argv_, a.timeout)
            runs[name].append(r)
            print(f"  rep {rep + 1} {name}: rc={r['rc']} wall={r['wall_s']:.2f}s "
                  f"cpu={r['cpu_s']:.2f}s rss={r['rss_mb']:.0f}MB "
                  f"load1={r['load1_before']:.1f}",
                  file=sys.stderr)
            if r["rc"] == 0 and name not in results:
                try:
                    j = json.loads(r["stdout"])
                except ValueError:
                    j = None
                if name.startswith("HTA") and isinstance(j, dict):
                    results[name] = {k: v.get("comp_comm_overlap_pctg") for k, v in j.get("ranks", {}).items()}
                elif name.startswith("parastream") and j is not None:
                    results[name] = find_overlap(j)
            elif r["rc"] != 0 and rep == 0:
                print(f"    {name} failed: {r['stderr_tail'][-400:]}", file=sys.stderr)

    summ = {k: summarize(v) for k, v in runs.items()}
    for name, argv_ in tools.items():  # one more run each, sampling the PSS, not timed
        r = run_child(argv_, a.timeout, sample=True)
        print(f"  memory run {name}: rc={r['rc']} peak tree PSS={r['pss_tree_mb']:.0f}MB",
              file=sys.stderr)
        if summ[name]["ok"] and r["rc"] == 0:
            summ[name]["pss_mb"] = r["pss_tree_mb"]
    print(f"# uptime after: {_uptime()}", file=sys.stderr)
    print(f"\nInput: `{os.path.relpath(target, ROOT)}` ({size_mb:.1f} MB), {a.reps} repetitions, "
          f"alternating; wall = spawn to exit; RSS = child's ru_maxrss\n")
    print("| tool | command | wall median (s) | min..max (s) | CPU median (s) "
          "| peak RSS median (MB) | peak tree PSS (MB, one sampled run) | load1 before | overlap result |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for name, s in summ.items():
        # paths inside the repository relative to it; others (/usr/bin/env) as they are
        cmd = " ".join(shlex.quote(os.path.relpath(x, ROOT)
                                   if os.path.isabs(x) and x.startswith(ROOT + os.sep) else x)
                       for x in tools[name] if "\n" not in x)
        if "-c" in tools[name]:
            cmd = cmd.replace(" -c ", " -c <snippet> ")
        res = results.get(name, "")
        if s["ok"]:
            print(f"| {name} | `{cmd}` | {fmt(s['wall_median_s'])} | {fmt(s['wall_min_s'])}..{fmt(s['wall_max_s'])} "
                  f"| {fmt(s['cpu_median_s'])} | {fmt(s['rss_median_mb'], 0)} | {fmt(s['pss_mb'], 0)} "
                  f"| {fmt(s['load1_median'], 1)} | {res} |")
        else:
            print(f"| {name} | `{cmd}` | pending/failed (rc={s['rc']}) | - | - | - | - | - | - |")

    def w(k):
        s = summ.get(k)
        return s["wall_median_s"] if s and s["ok"] else None

    def c(k):
        s = summ.get(k)
        return s["cpu_median_s"] if s and s["ok"] else None

    def m(k):
        s = summ.get(k)
        return s["rss_median_mb"] if s and s["ok"] else None

    def pm(k):
        s = summ.get(k)
        return s["pss_mb"] if s and s["ok"] else None

    floor = next((k for k in summ if k.startswith("floor")), None)
    ratios = []
    if "HTA 0.5.0" in summ and "parastream" in summ:
        h, ps = w("HTA 0.5.0"), w("parastream")
        ratios.append(("HTA / parastream wall (speed-up)", h / ps if h and ps else None))
        h, ps = c("HTA 0.5.0"), c("parastream")
        ratios.append(("HTA / parastream CPU time", h / ps if h and ps else None))
        h, ps = m("HTA 0.5.0"), m("parastream")
        ratios.append(("HTA / parastream peak RSS (largest process)", h / ps if h and ps else None))
        h, ps = pm("HTA 0.5.0"), pm("parastream")
        ratios.append(("HTA / parastream peak tree PSS (all processes)", h / ps if h and ps else None))
        if "parastream, 1 process" in summ:
            h, ps = w("HTA 0.5.0"), w("parastream, 1 process")
            ratios.append(("HTA / parastream 1-process wall", h / ps if h and ps else None))
            h, ps = m("HTA 0.5.0"), m("parastream, 1 process")
            ratios.append(("HTA / parastream 1-process peak RSS", h / ps if h and ps else None))
    if floor and "parastream" in summ:
        ps, f = w("parastream"), w(floor)
        ratios.append(("parastream / floor wall", ps / f if ps and f else None))
        ps, f = m("parastream"), m(floor)
        ratios.append(("parastream / floor peak RSS", ps / f if ps and f else None))
    if floor and "HTA 0.5.0" in summ:
        h, f = w("HTA 0.5.0"), w(floor)
        ratios.append(("HTA / floor wall", h / f if h and f else None))
    if ratios:
        print("\n| ratio | value |\n|---|---:|")
        for k, v in ratios:
            print(f"| {k} | {'pending' if v is None else f'{v:.2f}x'} |")
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump({"target": target, "reps": a.reps, "summary": summ, "results": results,
                       "runs": {k: [{kk: vv for kk, vv in r.items() if kk != "stdout"} for r in v]
                                for k, v in runs.items()}}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
