"""Planner speed: `matching` (and the other algorithms) on a 2,000-op random model-like DAG.

    python benchmarks/bench_plan.py [--ops 2000] [--reps 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "plan"))
from test_assign import random_dag  # noqa: E402

from parastream.plan import assign, check  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    g = random_dag(random.Random(1), a.ops)
    print(f"{a.ops} ops, {len(g.edges)} edges; median of {a.reps} runs (CPU, 2 cores)\n")
    print("| algorithm | cap | median (s) | streams | waits |\n|---|---:|---:|---:|---:|")
    for algo, cap in (("matching", None), ("matching", 4), ("critical-path", 4), ("resource-split", None)):
        ts = []
        for _ in range(a.reps):
            t = time.perf_counter()
            p = assign(g, algo, max_streams=cap)
            ts.append(time.perf_counter() - t)
        check(g, p)
        print(f"| {algo} | {cap or '-'} | {statistics.median(ts):.3f} | {p.streams} | {len(p.events)} |")


if __name__ == "__main__":
    main()
