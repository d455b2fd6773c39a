"""Why a calibrated CPU profile under-predicts small ops inside a model: an op costs more
the longer it is since its code last ran. Results go to docs/benchmarks-run.md ("Cold ops").

Each of calibrate's op cases (``parastream.calibrate.op_rates._op_cases``, the same inputs
``parastream calibrate`` times) is timed where the cpu backend runs it (one thread: on a
worker thread; all cores: on the calling thread):

- ``burst``: back to back, the median of a short burst (what calibrate measures);
- ``rotation``: once per pass over all cases (both sizes), the median over the passes: a
  model runs each op between different ones;
- ``after X ms``: one small case (default rms_norm) right after a pure-Python spin of X ms,
  which touches almost no memory: any extra cost is time, not what the spin evicted.

Medians of each; CPU only. Usage:
    .venv/bin/python benchmarks/bench_cold_ops.py [--passes 30] [--target rms_norm]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore")


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=30)
    ap.add_argument("--target", default="rms_norm", help="the case timed after the spins")
    args = ap.parse_args()
    import torch

    from parastream.cpu.op_rates import _op_cases, rotation_times
    from parastream.cpu.timing import _median_time, _on_executor_thread
    from parastream.runtime.host import cpu_count

    torch.add(torch.ones(1 << 16), 1)  # the main thread's team, as in parastream run
    calls = {(name, big): case(big)[0] for name, (_, case) in _op_cases().items()
             for big in (False, True)}
    target = calls[args.target, False]
    spins_ms = (0.1, 1.0, 4.0, 8.0)

    def one_thread_count() -> dict:
        burst = {k: _median_time(fn, 0.05, 5, 2000) * 1e6 for k, fn in calls.items()}
        rot = rotation_times(list(calls.items()), args.passes)
        after = {ms: statistics.median(_after(ms)) for ms in spins_ms}
        return {"burst": burst, "rotation": rot, "after": after}

    def _after(ms: float) -> list[float]:
        out = []
        for _ in range(args.passes):
            spin(ms / 1e3)
            out.append(timed(target))
        return out

    print(f"CPU ({cpu_count()} cores), torch {torch.__version__}; medians in us")
    for threads in sorted({1, cpu_count()}):
        r = _on_executor_thread(one_thread_count, threads, "bench-cold-ops")
        print(f"\n{threads} intra-op thread(s)")
        print("| case | size | burst | rotation | rotation / burst |\n| --- | --- | ---: | ---: | ---: |")
        for (name, big) in calls:
            b, ro = r["burst"][name, big], r["rotation"][name, big]
            print(f"| {name} | {'large' if big else 'small'} | {b:,.1f} | {ro:,.1f} | {ro / b:.1f} |")
        print(f"{args.target} (small) right after a Python spin of: " + ", ".join(
            f"{ms:g} ms {t:,.1f}" for ms, t in r["after"].items())
            + f" (back to back {r['burst'][args.target, False]:,.1f})")


if __name__ == "__main__":
    main()
