"""Profile-only predictions of several cost-model / profile variants against the same
measured walls (CPU; docs/benchmarks-run.md section 9).

Each variant is a device profile (a JSON file from ``parastream calibrate``, possibly made
by another commit's code, or with fields taken out), with ``--grain`` also without the rule
that element-wise ops under torch's intra-op grain run on one thread
(``parastream.device.cost.runs_serial``). Every zoo
model's single-stream plan and best multi-stream candidate are measured once per pass, and
every variant's simulated wall is compared with the same measurement, so the variants
differ only in what they predict, not in the machine's state.

    python benchmarks/bench_predict_ab.py A=old.json B=new.json [--passes 2] [--runs 9] [--grain]
        [--lock-wake] [--data-share] [--malloc keep|system]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from unittest import mock


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profiles", nargs="+", metavar="LABEL=FILE")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--models", default="")
    ap.add_argument("--grain", action="store_true",
                    help="also each profile without the serial-under-grain rule ('-grain')")
    ap.add_argument("--data-share", action="store_true",
                    help="also each profile with the data part of the cold cost due as the "
                         "code part is, not by the share of input bytes gone cold "
                         "('-nodatashare')")
    ap.add_argument("--lock-wake", action="store_true",
                    help="also each profile without the simulator's wake-up of a worker "
                         "sleeping on the interpreter lock ('-nolockwake')")
    from parastream.cpu import malloc

    malloc.add_argument(ap)
    args = ap.parse_args()
    print(malloc.apply(args.malloc), flush=True)  # as parastream run does, before measuring

    from parastream.cpu import cost
    from parastream.device.profile import load_profile
    from parastream.graph.ir import validate
    from parastream.zoo import ZOO
    from parastream.plan.model import Plan
    from parastream.runtime.measure import measure
    from parastream.sim import run as sim_run
    from parastream.sim.run import simulate_plan

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_run import candidates_of

    profiles = {}
    for spec in args.profiles:
        label, _, path = spec.partition("=")
        profiles[label] = load_profile(path)
    plan_profile = profiles[list(profiles)[-1]]
    names = [n for n in (args.models.split(",") if args.models else ZOO) if n]
    setups = []
    for scale in ("tiny", "small"):
        for name in names:
            module, inputs = ZOO[name].factory(scale, ZOO[name].phases[0])
            rn, _, multi = candidates_of(module, inputs, f"{name}/{scale}", plan_profile, top=1)
            order = validate(rn.graph)
            for plan in [Plan.single(o.name for o in rn.graph.ops)] + multi:
                preds = {}
                for label, prof in profiles.items():
                    for rule in ((True, False) if args.grain else (True,)):
                        patch = mock.patch.object(cost, "runs_serial", cost.runs_serial if rule
                                                  else (lambda op, key: cost.is_matrix_vector(op)))
                        with patch:
                            preds[f"{label}{'' if rule else '-grain'}"] = simulate_plan(
                                rn.graph, plan, prof, order=order).result.wall_us
                    if args.data_share:
                        with mock.patch.object(cost, "cold_data_shares",
                                               lambda *a, **k: {}):
                            preds[f"{label}-nodatashare"] = simulate_plan(
                                rn.graph, plan, prof, order=order).result.wall_us
                    if args.lock_wake:
                        def no_lock_wake(p, _of=sim_run.device_of):
                            return dataclasses.replace(_of(p), lock_wake_us=0.0)

                        with mock.patch.object(sim_run, "device_of", no_lock_wake):
                            preds[f"{label}-nolockwake"] = simulate_plan(
                                rn.graph, plan, prof, order=order).result.wall_us
                setups.append((f"{name}/{scale}", plan.name, module, inputs, rn, plan, preds))
    walls: list[list[float]] = [[] for _ in setups]
    for _ in range(args.passes):
        for i, (_, _, module, inputs, rn, plan, _) in enumerate(setups):
            walls[i].append(measure(module, inputs, plan, runs=args.runs, drop=2, runnable=rn,
                                    single_executor=False).multi_median_us)
    variants = list(setups[0][6])
    errors: dict[str, list[float]] = {v: [] for v in variants}
    for (model, plan_name, *_, preds), w in zip(setups, walls):
        meas = statistics.median(w)
        errs = {v: (p - meas) / meas for v, p in preds.items()}
        for v, e in errs.items():
            errors[v].append(e)
        print(f"{model:30s} {plan_name[:28]:28s} measured {meas:9.0f} us  " +
              "  ".join(f"{v} {e:+.0%}" for v, e in errs.items()), flush=True)
    for v, es in errors.items():
        small = [e for (m, *_), e in zip(setups, es) if m.endswith("/small")]
        print(f"{v:12s}: within 20% {sum(abs(e) <= 0.2 for e in es)}/{len(es)} "
              f"(small {sum(abs(e) <= 0.2 for e in small)}/{len(small)}), median |error| "
              f"{statistics.median(abs(e) for e in es):.1%}, median signed error "
              f"{statistics.median(es):+.1%}", flush=True)


if __name__ == "__main__":
    main()
