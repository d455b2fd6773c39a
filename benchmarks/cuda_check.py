"""The executor and the emitted code on a real device (issue 6's cuda acceptance).

Run on a machine with a GPU (``benchmarks/cuda_check.sh`` runs it with the CLI checks):

    python benchmarks/cuda_check.py --out cuda_check.json

1. every zoo model (tiny) and every planner algorithm on the cuda backend: outputs
   within tolerance of the single-stream model, then 50 runs each with jitter (random
   delays queued on the op's own stream, random issue interleavings): 200 per model;
2. a plan with one wait removed, run with the validator off: is the race caught (jitter
   runs) or not (plain runs)? Printed either way, as measured;
3. ``emit --target cuda`` code for three models, run on the device with the switch on
   and off, against the original model's outputs;
4. the executor's overhead per op over ``torch.fx.Interpreter`` (benchmarks/bench_run.py's
   chain of 200 tiny ops), and the host cost of each stream call the backend makes.

``--device cpu`` runs the same on the cpu backend (a dry run of this script; bitwise).
Every section is guarded: a failure is printed with its traceback and the next runs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import msgspec  # noqa: E402
import torch  # noqa: E402

from parastream.graph.torch_import import import_runnable  # noqa: E402
from parastream.zoo import ZOO  # noqa: E402
from parastream.plan.assign import assign  # noqa: E402
from parastream.plan.hb import check as hb_check  # noqa: E402
from parastream.plan.model import PlanError  # noqa: E402
from parastream.workflow.run import to_device  # noqa: E402
from parastream.runtime.executor import Jitter, MultiStreamExecutor, compare  # noqa: E402

ALGOS = ("single", "matching", "critical-path", "resource-split")
EMIT_MODELS = ("moe_layer", "attention_prolog", "inception_block")


def section(name, fn, report):
    t0 = time.perf_counter()
    print(f"== {name}", flush=True)
    try:
        report[name] = fn()
    except Exception:  # the next section still runs: the device time is short
        report[name] = {"error": traceback.format_exc()}
        print(report[name]["error"], flush=True)
    report[name + "_s"] = round(time.perf_counter() - t0, 1)


def zoo_check(device):
    rows = []
    for name, zm in ZOO.items():
        module, inputs = to_device(*zm.factory("tiny", zm.phases[0]), device)
        rn = import_runnable(module, inputs, name=name)
        for k, algo in enumerate(ALGOS):
            row = {"model": name, "algorithm": algo}
            try:
                plan = assign(rn.graph, algo, max_streams=2)
                row["streams"] = plan.stream_count()
                with MultiStreamExecutor(module, inputs, plan, backend=device, runnable=rn) as ex:
                    c = ex.check(*inputs, runs=2)
                row.update(ok=c.ok, exact=c.exact, max_abs_diff=c.max_abs_diff,
                           note=c.describe())
                jit = Jitter(seed=k, prob=0.5, max_delay_us=60)
                with MultiStreamExecutor(module, inputs, plan, backend=device, runnable=rn,
                                         jitter=jit) as ex:
                    cj = ex.check(*inputs, runs=50)
                row.update(jitter_ok=cj.ok, jitter_note=cj.describe(),
                           jitter_max_abs_diff=cj.max_abs_diff)
            except Exception as exc:
                row.update(ok=False, note=f"{type(exc).__name__}: {exc}")
            rows.append(row)
            print(f"{name:18s} {algo:15s} streams {row.get('streams')}  {row['note']}"
                  f"  | jitter x50: {row.get('jitter_note')}", flush=True)
    bad = [r for r in rows if not (r.get("ok") and r.get("jitter_ok"))]
    return {"rows": rows, "passed": len(rows) - len(bad), "total": len(rows)}


def removed_wait(device):
    name = "llama_layer"
    module, inputs = to_device(*ZOO[name].factory("tiny", ZOO[name].phases[0]), device)
    rn = import_runnable(module, inputs, name=name)
    plan = assign(rn.graph, "matching", max_streams=2)
    waits = [i for i, e in enumerate(plan.events) if e.wait_before is not None]
    out = {"events": len(plan.events), "tried": []}
    for k in waits:  # every wait in turn: which removals does each mode catch?
        broken = msgspec.structs.replace(
            plan, events=[e for i, e in enumerate(plan.events) if i != k])
        row = {"removed": k, "event": str(plan.events[k])}
        try:
            hb_check(rn.graph, broken)
            row["validator"] = "accepted"
        except PlanError as exc:
            row["validator"] = f"refused: {str(exc)[:120]}"
        with MultiStreamExecutor(module, inputs, broken, backend=device, runnable=rn,
                                 validate=False) as ex:
            plain = ex.check(*inputs, runs=100)
        with MultiStreamExecutor(module, inputs, broken, backend=device, runnable=rn,
                                 validate=False,
                                 jitter=Jitter(seed=3, prob=0.7, max_delay_us=300)) as ex:
            jit = ex.check(*inputs, runs=100)
        row.update(plain_caught=not plain.ok, plain=plain.describe(),
                   jitter_caught=not jit.ok, jitter=jit.describe())
        if device == "cuda":  # the comparison: the same jitter with host sleeps only
            from parastream.runtime.cuda import CudaBackend

            host = CudaBackend()
            host.delay = None  # the executor then sleeps on the host, as on cpu
            with MultiStreamExecutor(module, inputs, broken, backend=host, runnable=rn,
                                     validate=False,
                                     jitter=Jitter(seed=3, prob=0.7, max_delay_us=300)) as ex:
                hj = ex.check(*inputs, runs=100)
            row.update(host_jitter_caught=not hj.ok, host_jitter=hj.describe())
        out["tried"].append(row)
        print(f"wait {k} removed: validator {row['validator'][:40]}; 100 plain runs "
              f"{'CAUGHT' if row['plain_caught'] else 'not caught'}; 100 jittered runs "
              f"{'CAUGHT' if row['jitter_caught'] else 'not caught'}; with host sleeps "
              f"{row.get('host_jitter_caught')}", flush=True)
    for mode in ("jitter", "plain", "host_jitter"):
        out[f"{mode}_caught"] = sum(bool(r.get(f"{mode}_caught")) for r in out["tried"])
    return out


def overhead(device):
    from bench_run import overhead as bench_overhead  # (this folder: the script's own)

    r = bench_overhead(ops=200, runs=15, device=device)
    print(r, flush=True)
    return r


def micro_costs(device):
    """Host cost per call of what the cuda backend does around an op (us, median of 5
    batches of 2000 calls, synchronized after each batch)."""
    if device != "cuda":
        return {}
    import statistics

    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.randn(16, device="cuda")
    ev = torch.cuda.Event(enable_timing=True)
    ev.record(s1)
    origin = torch.cuda.current_stream()
    flip = [s1, s2]

    def ctx():
        with torch.cuda.stream(s1):
            pass

    def set_stream():
        flip.reverse()
        torch.cuda.set_stream(flip[0])

    calls = {"tiny kernel launch (x + 1)": lambda: x + 1,
             "with torch.cuda.stream(s)": ctx,
             "torch.cuda.set_stream (changing)": set_stream,
             "new timing Event + record": lambda: torch.cuda.Event(enable_timing=True).record(s1),
             "reused Event record": lambda: ev.record(s1),
             "stream.wait_event": lambda: s2.wait_event(ev),
             "tensor.record_stream": lambda: x.record_stream(s1),
             "torch.cuda._sleep(2000)": lambda: torch.cuda._sleep(2000)}
    out = {}
    for name, fn in calls.items():
        batches = []
        for _ in range(6):
            t = time.perf_counter_ns()
            for _ in range(2000):
                fn()
            torch.cuda.synchronize()
            batches.append((time.perf_counter_ns() - t) / 2000 / 1e3)
        torch.cuda.set_stream(origin)
        out[name] = round(statistics.median(batches[1:]), 3)
        print(f"{name:36s} {out[name]:8.3f} us", flush=True)
    return out


def load_source(source, name):
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def emit_check(device):
    from parastream.emit.codegen import emit, trace
    from parastream.graph.torch_import import import_module

    rows = []
    for name in EMIT_MODELS:
        row = {"model": name}
        try:
            module, inputs = to_device(*ZOO[name].factory("tiny", None), device)
            graph = import_module(module, inputs, name=name)
            plan = assign(graph, "matching", max_streams=3)
            emitted = emit(trace(module, inputs), plan, "cuda")
            row.update(streams=plan.stream_count(), waits=emitted.waits,
                       records=emitted.records, record_streams=emitted.record_streams)
            gen = load_source(emitted.source, f"gen_{name}")
            ref_model = copy.deepcopy(module)
            with torch.no_grad():
                expected = ref_model(*inputs)
                off = gen.MultiStreamForward(copy.deepcopy(module), enabled=False)(*inputs)
                if device == "cpu":  # cpu dry run: the stand-in stream api
                    from parastream.emit import standins

                    on = standins.run(gen, copy.deepcopy(module), inputs).outputs
                else:
                    wrapper = gen.MultiStreamForward(copy.deepcopy(module), enabled=True)
                    row["side_streams"] = len(wrapper.streams)
                    outs = [wrapper(*inputs) for _ in range(20)]
                    torch.cuda.synchronize()
                    on = outs[-1]
                    row["all_20_runs_match"] = all(compare(expected, o, exact=False).ok
                                                   for o in outs)
            c_on = compare(expected, on, exact=False)
            c_off = compare(expected, off, exact=True)
            row.update(switch_on=c_on.describe(), on_ok=c_on.ok, switch_off=c_off.describe(),
                       off_ok=c_off.ok)
        except Exception as exc:
            row.update(on_ok=False, error=f"{type(exc).__name__}: {exc}",
                       trace=traceback.format_exc())
        rows.append(row)
        print(f"emit cuda {name:16s} {row}", flush=True)
    return {"rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", default="cuda_check.json")
    ap.add_argument("--skip", nargs="*", default=(), choices=("zoo", "removed_wait", "emit", "overhead",
                                                         "micro_costs"))
    args = ap.parse_args()
    report = {"torch": torch.__version__, "python": sys.version.split()[0],
              "device": (torch.cuda.get_device_name() if args.device == "cuda" else "cpu")}
    print(report, flush=True)
    for name, fn in (("zoo", zoo_check), ("removed_wait", removed_wait), ("emit", emit_check),
                     ("overhead", overhead), ("micro_costs", micro_costs)):
        if name not in args.skip:
            section(name, lambda f=fn: f(args.device), report)
            with open(args.out, "w") as f:  # after each section: a timeout keeps the rest
                json.dump(report, f, indent=1, default=str)
    z = report.get("zoo", {})
    rw = report.get("removed_wait", {})
    print(f"SUMMARY zoo {z.get('passed')}/{z.get('total')} model x algorithm pass (2 runs + 50 "
          f"jittered); removed waits caught by jitter {rw.get('jitter_caught')}/"
          f"{len(rw.get('tried', []))}, by plain runs {rw.get('plain_caught')}, by host-sleep "
          f"jitter {rw.get('host_jitter_caught')}; emit "
          f"{[(r['model'], r.get('on_ok'), r.get('off_ok')) for r in report.get('emit', {}).get('rows', [])]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
