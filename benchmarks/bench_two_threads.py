"""Two Python threads calling tiny torch ops at once, against one thread (CPU; see
docs/benchmarks-run.md section 15): what two cpu-backend streams of such ops pay for the
interpreter lock before any executor is involved.

Each case calls one op in a loop (intra-op threads 1): ``--calls`` calls on one thread
alone (median per call), then the same loop on two threads at once, each with its own
inputs (the wall per pair of calls, one on each thread).

    python benchmarks/bench_two_threads.py [--calls 400]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

CASES = [("add", 1 << 10), ("add", 1 << 12), ("add", 1 << 16), ("add", 1 << 18),
         ("add", 1 << 20), ("matmul", 32), ("matmul", 64), ("matmul", 128), ("matmul", 256)]


def make(kind: str, n: int):
    if kind == "add":
        a, b = torch.randn(n), torch.randn(n)
        return lambda: torch.add(a, b)
    a, b = torch.randn(n, n), torch.randn(n, n)
    return lambda: a @ b


def loop(fn, calls: int, out: list) -> None:
    # as a cpu-backend worker does when it starts: a thread's intra-op (OpenMP / MKL)
    # thread count is its own, and a new thread's is all cores
    torch.set_num_threads(1)
    times = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t)
    out.append(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warm = args.calls // 8
    print("CPU; one thread per call (median) | two threads, wall per pair of calls | "
          "serial would be", flush=True)
    for kind, n in CASES:
        f1, f2 = make(kind, n), make(kind, n)
        for _ in range(warm):
            f1(), f2()
        one: list = []
        loop(f1, args.calls, one)
        alone = statistics.median(one[0][warm:]) / 1e3
        both: list = []
        threads = [threading.Thread(target=loop, args=(f, args.calls, both)) for f in (f1, f2)]
        t = time.perf_counter_ns()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        pair = (time.perf_counter_ns() - t) / args.calls / 1e3
        size = f"{n} floats" if kind == "add" else f"{n}x{n}"
        print(f"{kind:6s} {size:>14s}: one {alone:8.1f} us | two {pair:8.1f} us per pair | "
              f"serial {2 * alone:8.1f} us", flush=True)


if __name__ == "__main__":
    main()
