"""Benchmarks of issue 6 (parastream run), CPU backend. Results go to docs/benchmarks-run.md.

1. Executor overhead per operator over plain ``torch.fx.Interpreter``: a chain of tiny ops
   (``x + 1`` on 16 floats), all on one stream; (executor wall - interpreter wall) / ops.
2. Best plan vs the best single-stream setting (plain module, intra-op threads = all
   cores) for the zoo models at small scale and for a two-chain model (two independent
   chains of relu(x @ w), ~1 ms per op: the shape on which two CPU streams measured 1.5x on 2 cores).
3. Predicted (simulator, calibrated profile) vs measured wall, zoo models at tiny/small;
   also predicted from the model's op times in a separate single-stream capture.

Medians of >= 5 kept runs (first 2 dropped), same process, alternating. Usage:
    .venv/bin/python benchmarks/bench_run.py [--runs 9] [--models a,b] [--skip-predict]
        [--skip-speedup] [--repeat 3] [--fresh-profile [quick|full]] [--calibrations N]
        [--malloc keep|system]
"""

from __future__ import annotations

import argparse
from functools import partial
import statistics
import time
import warnings

import torch

warnings.filterwarnings("ignore")


class Chain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        for _ in range(self.n):
            x = x + 1
        return x


class TwoChains(torch.nn.Module):
    """Two independent chains of relu(x @ w) meeting at an add."""

    def __init__(self, width: int = 512, depth: int = 6) -> None:
        super().__init__()
        self.a = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(width, width) / width ** 0.5)
                                         for _ in range(depth)])
        self.b = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(width, width) / width ** 0.5)
                                         for _ in range(depth)])

    def forward(self, x):
        ya, yb = x, x
        for w in self.a:
            ya = torch.relu(ya @ w)
        for w in self.b:
            yb = torch.relu(yb @ w)
        return ya + yb


def overhead(ops: int = 200, runs: int = 9, device: str = "cpu") -> dict:
    """Executor wall minus ``torch.fx.Interpreter`` wall per op, one stream. On a device
    each call is followed by a synchronize (both sides), and the executor is timed with its
    per-op timing events (as ``run`` measures) and without them."""
    from parastream.graph.torch_import import import_runnable
    from parastream.plan.model import Plan
    from parastream.runtime.backend import backend_capabilities, untimed
    from parastream.runtime.executor import MultiStreamExecutor

    caps = backend_capabilities(device)
    m, x = Chain(ops).eval(), torch.randn(16)
    if caps.torch_device:  # a device beside the host: the model and its input go there
        m, x = m.to(caps.torch_device), x.to(caps.torch_device)
    sync = getattr(torch, caps.torch_device).synchronize if caps.torch_device else (lambda: None)
    rn = import_runnable(m, (x,))
    plan = Plan.single(o.name for o in rn.graph.ops)
    interp = torch.fx.Interpreter(rn.graph_module)
    timers = {"interpreter_us": lambda: interp.run(*rn.bind((x,))),
              "module_us": lambda: m(x)}
    executors = {"executor_us": MultiStreamExecutor(m, (x,), plan, runnable=rn, backend=device)}
    if caps.timing_events:
        executors["executor_no_timing_us"] = MultiStreamExecutor(m, (x,), plan, runnable=rn,
                                                                 backend=untimed(device))
    timers.update({key: partial(ex, x) for key, ex in executors.items()})
    times: dict[str, list[float]] = {k: [] for k in timers}
    with torch.no_grad():
        for k in range(runs + 2):  # alternating; the first two of each are dropped
            for key, fn in timers.items():
                t = time.perf_counter_ns()
                fn()
                sync()
                if k >= 2:
                    times[key].append((time.perf_counter_ns() - t) / 1e3)
    for ex in executors.values():
        ex.close()
    n = len(rn.graph.ops)
    med = {key: statistics.median(v) for key, v in times.items()}
    ia = med["interpreter_us"]
    out = {"device": device, "ops": n, **med, "per_op_us": (med["executor_us"] - ia) / n,
           "interpreter_per_op_us": ia / n}
    if "executor_no_timing_us" in med:
        out["per_op_no_timing_us"] = (med["executor_no_timing_us"] - ia) / n
    return out


def candidates_of(module, inputs, name, profile, top=3):
    from parastream.graph.torch_import import import_runnable
    from parastream.workflow.plan import build

    rn = import_runnable(module, inputs, name=name)
    doc = build(rn.graph, profile, algorithm=None, mapping=None, max_streams=None)
    multi = [c for c in doc.candidates if c.stream_count() > 1][:top]
    return rn, doc, multi


def speedups(models, profile, runs: int) -> list[dict]:
    """Side by side in this process, and (zoo models) each side again in a process of its
    own in its best OpenMP setting: single stream with threads spinning, streams with them
    sleeping (parastream.runtime.baseline)."""
    from parastream.zoo import ZOO
    from parastream.cpu import baseline
    from parastream.workflow.run import CandidateSettings, Loaded, measure_candidates

    rows = []
    for name, (module, inputs) in models.items():
        rn, doc, multi = candidates_of(module, inputs, name, profile)
        if not multi:
            rows.append({"model": name, "candidate": "-", "note": "no multi-stream candidate"})
            continue
        # the planner simulated the candidates on the calibrated profile: its estimates stand
        result = vars(measure_candidates(Loaded(module, inputs, rn), doc, multi, profile,
                                         CandidateSettings(runs=runs, drop=2,
                                                           reuse_estimates=True)))
        iso = None
        if name in ZOO and baseline.wanted():
            iso = baseline.best_settings(name, "small", None, doc, [c.name for c in multi],
                                         runs=runs, warmup=2, drop=2)
            baseline.attach(result["candidates"], iso)
        for r, d in zip(result["candidates"], result["details"]):
            row = {"model": name, "candidate": r.name, "single_us": r.single_median_us,
                   "single_exec_us": d["measurement"]["single_executor_median_us"],
                   "multi_us": r.multi_median_us, "speedup": r.speedup,
                   "overlap_pct": r.overlap_pcts, "triage": r.triage,
                   "predicted_multi_us": r.predicted_wall_us,
                   "predicted_single_us": r.predicted_single_us}
            if iso is not None:
                row.update(sep_single_spinning_us=r.iso_single_us, sep_multi_us=r.iso_multi_us,
                           best_setting_speedup=r.best_speedup)
            rows.append(row)
            print(rows[-1], flush=True)
    return rows


def predictions(models, profile, runs: int, repeat: int = 2,
                fresh: str | None = None) -> list[dict]:
    """Two predictions per plan: from the profile alone, and from this model's op times in
    a separate single-stream capture (the calibration runs are not the measured runs).
    With ``fresh`` ("quick" or "full") a third: from a profile calibrated right before
    the model's capture, as ``parastream run`` without ``--profile`` does with a quick one
    (the run's own profile is calibrated once, minutes before most rows are measured).

    Each plan is measured ``repeat`` times, in passes over all the models (minutes apart;
    the first right after the model's capture):
    the row's measured wall is the median of the passes' medians, and ``spread`` (max - min
    over their mean) is how much this machine's own measurement of the same plan moved,
    the floor under any prediction error."""
    from parastream.plan.model import Plan
    from parastream.workflow.run import capture_op_costs
    from parastream.runtime.measure import measure
    from parastream.graph.ir import validate
    from parastream.sim.run import simulate_plan

    from parastream.cpu.overhead import calibrated_profile

    def wall(module, inputs, rn, plan) -> float:
        return measure(module, inputs, plan, runs=runs, drop=2, runnable=rn,
                       single_executor=False).multi_median_us

    # the op-time capture right before the model's first measurement, as an engineer
    # would run them: this machine's speed drifts by up to 2x over tens of minutes
    setups, walls = [], []
    for name, (module, inputs) in models.items():
        rn, doc, multi = candidates_of(module, inputs, name, profile, top=1)
        single = Plan.single(o.name for o in rn.graph.ops)
        quick = calibrated_profile(quick=fresh == "quick") if fresh else None
        costs = capture_op_costs(module, inputs, rn, profile, runs=runs)
        order = validate(rn.graph)
        for plan in [single] + multi:
            pred = simulate_plan(rn.graph, plan, profile, order=order).result.wall_us
            from_ops = simulate_plan(rn.graph, plan, profile, costs=costs,
                                     order=order).result.wall_us
            now = simulate_plan(rn.graph, plan, quick, order=order).result.wall_us \
                if quick is not None else None
            setups.append((name, module, inputs, rn, plan, pred, from_ops, now))
            walls.append([wall(module, inputs, rn, plan)])
    for _ in range(repeat - 1):
        for i, (name, module, inputs, rn, plan, *_) in enumerate(setups):
            walls[i].append(wall(module, inputs, rn, plan))
    rows = []
    for (name, _, _, _, plan, pred, from_ops, now), w in zip(setups, walls):
        meas = statistics.median(w)
        rows.append({"model": name, "plan": plan.name, "predicted_us": pred,
                     "from_ops_us": from_ops, "measured_us": meas, "passes_us": w,
                     "spread": (max(w) - min(w)) / statistics.fmean(w),
                     "error": (pred - meas) / meas, "from_ops_error": (from_ops - meas) / meas})
        if now is not None:
            # against the pass measured right after that calibration
            rows[-1].update(fresh_us=now, fresh_error=(now - meas) / meas,
                            fresh_first_error=(now - w[0]) / w[0])
        print(rows[-1], flush=True)
    return rows


def summary(rows: list[dict], label: str) -> None:
    """Rows within 20% for each prediction, median |error|, and how many rows this
    machine's own repeated measurement moved by more than 20%; then the same over the
    rows whose passes held (spread <= 20%: a row whose own measurement moved more than the
    target is no test of a prediction), and by single- and multi-stream rows with their
    median signed error (a bias shows there, not in |error|)."""
    if not rows:
        return
    held = [r for r in rows if r["spread"] <= 0.2]
    groups = [("", rows), (" (passes held)", held),
              (" single stream", [r for r in rows if r["plan"] == "single"]),
              (" multi-stream", [r for r in rows if r["plan"] != "single"])]
    for key in ("error", "from_ops_error", "fresh_error", "fresh_first_error"):
        if key not in rows[0]:
            continue
        for tag, group in groups:
            if not group:
                continue
            n = len(group)
            within = sum(abs(r[key]) <= 0.2 for r in group)
            med = statistics.median(abs(r[key]) for r in group)
            signed = statistics.median(r[key] for r in group)
            print(f"{label}{tag}: {key}: {within}/{n} within 20%, median |error| {med:.1%}, "
                  f"median signed {signed:+.1%}", flush=True)
    noisy = len(rows) - len(held)
    print(f"{label}: measurement spread > 20% on {noisy}/{len(rows)} rows (median spread "
          f"{statistics.median(r['spread'] for r in rows):.1%})", flush=True)
    # the machine as its own predictor: each row's other passes taken as predictions of
    # its wall (the passes' median). What they miss by more than 20% no prediction can be
    # held to
    hits = [[abs(p / r["measured_us"] - 1) <= 0.2 for p in _other_passes(r["passes_us"])]
            for r in rows]
    if any(hits):
        print(f"{label}: the machine against itself: another pass within 20% of the row's "
              f"wall for {sum(map(sum, hits))}/{sum(map(len, hits))} passes; every other pass "
              f"within 20% on {sum(all(h) for h in hits if h)}/{sum(1 for h in hits if h)} rows",
              flush=True)


def _other_passes(passes: list[float]) -> list[float]:
    """The passes but the one that is the row's wall (an odd count's middle one; for an
    even count ``statistics.median`` averages two, and every pass is another one)."""
    if len(passes) % 2 == 0:
        return list(passes)
    rest = list(passes)
    rest.remove(statistics.median(passes))
    return rest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--models", default="")
    ap.add_argument("--skip-predict", action="store_true")
    ap.add_argument("--skip-speedup", action="store_true")
    ap.add_argument("--repeat", type=int, default=3,
                    help="measurement passes per prediction row, minutes apart; the row's "
                         "wall is their median (default 3: one pass caught in a slow spell "
                         "does not move it)")
    ap.add_argument("--fresh-profile", nargs="?", const="quick", choices=("quick", "full"),
                    help="also predict from a profile calibrated right before each model: "
                         "quick (the default), as 'parastream run' without --profile does, "
                         "or full, as 'parastream calibrate' (about 35 s a model)")
    ap.add_argument("--calibrations", type=int, default=1, metavar="N",
                    help="the run's profile: the median of N calibrations, one after another "
                         "(parastream calibrate --repeat N; default 1)")
    from parastream.cpu import malloc

    malloc.add_argument(ap)
    args = ap.parse_args()
    print(malloc.apply(args.malloc), flush=True)  # as parastream run does, before measuring
    from parastream.cpu.overhead import calibrated_profile
    from parastream.zoo import ZOO

    print("CPU, 2 cores; torch", torch.__version__, flush=True)
    print("overhead", overhead(runs=args.runs), flush=True)
    profile = calibrated_profile(quick=False, repeat=max(1, args.calibrations))
    print("profile", profile.description, flush=True)
    if "repeat" in profile.sources:
        print("calibrations", profile.sources["repeat"], flush=True)
    names = [n for n in (args.models.split(",") if args.models else ZOO) if n]
    if not args.skip_speedup:
        models = {n: ZOO[n].factory("small", ZOO[n].phases[0]) for n in names}
        torch.manual_seed(0)
        models["two_chains (512x512, depth 6, batch 256)"] = (TwoChains().eval(), (torch.randn(256, 512),))
        speedups(models, profile, args.runs)
    if not args.skip_predict:
        every = []
        for scale in ("tiny", "small"):
            models = {f"{n}/{scale}": ZOO[n].factory(scale, ZOO[n].phases[0]) for n in names}
            rows = predictions(models, profile, args.runs, max(1, args.repeat),
                               fresh=args.fresh_profile)
            summary(rows, scale)
            every += rows
        summary(every, "all")


if __name__ == "__main__":
    main()
