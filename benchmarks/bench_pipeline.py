"""Benchmarks of ``parastream.pipeline`` (issue 7), medians over ``--runs`` runs.

    .venv/bin/python benchmarks/bench_pipeline.py [--runs 5] [--json out.json]

1. efficiency E, five stages of 1-10 ms that release the GIL (time.sleep: a stand-in for
   waiting on a device or I/O), and five stages of 0.5 ms;
2. overhead per item per stage hop with empty stages (throughput-bound);
3. stragglers: 5% of items 10x slower in a replicated stage, unordered vs straggler-free
   (and ordered, for contrast);
4. the demo workload (JPEG decode+resize, normalise, copies, CNN, softmax/top-k): serial
   loop vs pipeline vs torch DataLoader (workers preprocess, model in the main process).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from parastream.pipeline import Pipeline, Stage, run_serial


def sleeper(ms: float, straggle_every: int = 0, factor: float = 10.0):
    def stage(x: int) -> int:
        slow = straggle_every and (x * 2654435761) % 1000 < 1000 // straggle_every
        time.sleep(ms / 1e3 * (factor if slow else 1.0))
        return x

    return stage


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def bench_efficiency(runs: int, times_ms: tuple[float, ...], n: int) -> dict:
    es, thr = [], []
    for _ in range(runs):
        with Pipeline([Stage(f"s{i}", sleeper(t)) for i, t in enumerate(times_ms)]) as p:
            p.run(range(n))
            st = p.stats()
        es.append(st.efficiency)
        thr.append(st.throughput)
    return {"stage_ms": list(times_ms), "items": n, "E_median": round(med(es), 4),
            "E_min": round(min(es), 4), "throughput_median": round(med(thr), 1),
            "limit_per_s": round(1e3 / max(times_ms), 1)}


def bench_overhead(runs: int, n: int = 20_000, stages: int = 5) -> dict:
    per_hop = []
    for _ in range(runs):
        with Pipeline([Stage(f"e{i}", lambda x: x) for i in range(stages)]) as p:
            t = time.perf_counter()
            for _ in p.map(range(n)):
                pass
            dt = time.perf_counter() - t
        per_hop.append(dt / n / (stages + 1) * 1e6)  # source->s0 ... s4->caller
    return {"stages": stages, "items": n, "hops_per_item": stages + 1,
            "us_per_item_per_hop_median": round(med(per_hop), 2),
            "us_per_item_per_hop_max": round(max(per_hop), 2)}


def bench_stragglers(runs: int, n: int = 600) -> dict:
    def stages(straggle: int) -> list[Stage]:
        return [Stage("a", sleeper(1.0)), Stage("b", sleeper(2.0, straggle), replicas=4),
                Stage("c", sleeper(1.0))]

    out: dict = {}
    for label, straggle, ordered in (("clean", 0, False), ("stragglers_unordered", 20, False),
                                     ("stragglers_ordered", 20, True)):
        thr = []
        for _ in range(runs):
            with Pipeline(stages(straggle), ordered=ordered, depth=4) as p:
                p.run(range(n))
                thr.append(p.stats().throughput)
        out[label] = round(med(thr), 1)
    out["unordered_kept"] = round(out["stragglers_unordered"] / out["clean"], 4)
    out["ordered_kept"] = round(out["stragglers_ordered"] / out["clean"], 4)
    return out


class _Preprocessed:
    """A map-style dataset whose workers decode and normalise (torch DataLoader side)."""

    def __init__(self, items, side):
        self.items, self.side = items, side

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        from parastream.pipeline.workload import decode_resize, normalize

        return normalize(decode_resize(self.items[i], self.side))


def bench_demo(runs: int, n: int = 48) -> dict:
    import torch
    from torch.utils.data import DataLoader

    from parastream.pipeline.planner import plan
    from parastream.pipeline.workload import (WorkloadConfig, make_infer, make_items, make_model,
                                              make_postprocess, make_stages, same_outputs)
    from parastream.runtime.host import set_intra_op_threads

    set_intra_op_threads(1)
    cfg = WorkloadConfig()
    data = make_items(n, cfg)
    model = make_model(cfg.classes)
    base = make_stages(cfg, model=model)
    run_serial(base, data[:2])
    res: dict[str, list] = {k: [] for k in ("serial", "serial_util", "auto", "auto_E",
                                            "auto_util", "d2", "d2_E", "d2_util", "d2i2",
                                            "d2i2_E", "d2i2_util", "dl1", "dl2")}
    auto_plan = None
    identical = True
    infer, post = make_infer(model), make_postprocess(cfg.topk)
    for _ in range(runs):
        outs, st, _ = run_serial(base, data)
        res["serial"].append(st.throughput)
        res["serial_util"].append(next(s for s in st.stages if s.name == "infer").utilization)
        auto_plan = plan({s.name: s.mean_ns / 1e9 for s in st.stages}, cores=os.cpu_count())
        for key, reps in (("auto", auto_plan.replicas), ("d2", {"decode": 2}),
                          ("d2i2", {"decode": 2, "infer": 2})):
            with Pipeline(make_stages(cfg, reps, model=model),
                          depth=auto_plan.depth if key == "auto" else 2) as p:
                got = [r.value for r in p.run(data)]
                ps = p.stats()
            identical &= same_outputs(outs, got)
            res[key].append(ps.throughput)
            res[key + "_E"].append(ps.efficiency)
            res[key + "_util"].append(ps.bottleneck.utilization)
        for workers in (1, 2):
            dl = DataLoader(_Preprocessed(data, cfg.side), batch_size=None, num_workers=workers,
                            prefetch_factor=2, persistent_workers=False)
            t = time.perf_counter()
            dl_out = [post(infer(x)) for x in dl]
            res[f"dl{workers}"].append(n / (time.perf_counter() - t))
            identical &= same_outputs(outs, dl_out)
    summary = {k: round(med(v), 4 if k.endswith(("_E", "_util")) else 2) for k, v in res.items()}
    summary["auto_plan"] = auto_plan.replicas_arg() if auto_plan else None
    summary["outputs_identical"] = identical
    summary["torch"] = torch.__version__
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--demo-only", action="store_true")
    a = ap.parse_args()
    out = {"machine": f"CPU, {os.cpu_count()} cores", "runs": a.runs,
           "load_average_at_start": os.getloadavg()}
    if a.demo_only:
        out["demo"] = bench_demo(a.runs)
        print(json.dumps(out), flush=True)
        return 0
    out["E_1_to_10ms"] = bench_efficiency(a.runs, (1, 3, 10, 5, 2), 300)
    print(json.dumps(out["E_1_to_10ms"]), flush=True)
    out["E_0.5ms"] = bench_efficiency(a.runs, (0.5,) * 5, 1500)
    print(json.dumps(out["E_0.5ms"]), flush=True)
    out["overhead"] = bench_overhead(a.runs)
    print(json.dumps(out["overhead"]), flush=True)
    out["stragglers"] = bench_stragglers(a.runs)
    print(json.dumps(out["stragglers"]), flush=True)
    if not a.skip_demo:
        out["demo"] = bench_demo(a.runs)
        print(json.dumps(out["demo"]), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
