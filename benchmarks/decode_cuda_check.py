"""The decode modes on a cuda device: the four modes over the same requests on the
built-in decoder placed on cuda (each worker issuing on its own torch.cuda.Stream), with
and without chunked prefill and with two-micro-batch overlap calibrated; every mode's
greedy tokens against the cuda sequential run's and against the cpu sequential run's
(identical, or differing only at a numerical tie: the two top logits within 1e-4).

    .venv/bin/python benchmarks/decode_cuda_check.py [--model small] [--requests 64]
        [--concurrency 16] [--chunk 32]

Prints one line per run (mode, settings, tokens/s, agreement, TBO's calibration, the
interpreter-free share) and exits 1 when a token differs beyond a tie or a request
ends early, 2 when there is no cuda device.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch

from parastream.decode.metrics import agreement, measure
from parastream.decode.model import blocks_for, build_model
from parastream.decode.modes import MODES, ModeSettings, run_mode
from parastream.decode.workload import WorkloadOptions, make_requests


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="small")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--chunk", type=int, default=32)
    return p.parse_args()


def _runs(model, reqs, base: ModeSettings, chunk: int) -> list[tuple[str, object]]:
    """(label, run) of the four modes, then the batch modes chunked, then TBO."""
    out = [(m, run_mode(model, m, reqs, base)) for m in MODES]
    chunked = replace(base, prefill_chunk=chunk)
    out += [(f"{m} chunk={chunk}", run_mode(model, m, reqs, chunked))
            for m in ("batch", "batch+overlap")]
    tbo = replace(base, tbo="auto", probe=True)
    out.append(("batch+overlap tbo=auto", run_mode(model, "batch+overlap", reqs, tbo)))
    out.append(("batch+overlap tbo=2", run_mode(model, "batch+overlap", reqs,
                                                replace(base, tbo=2))))
    return out


def _line(label: str, run, refs: dict) -> tuple[str, bool]:
    m = measure(run)
    ok = m.finished == m.requests
    parts = [f"{label:28s} {m.tokens_per_s:9.1f} tok/s  finished {m.finished}/{m.requests}"]
    for name, ref in refs.items():
        a = agreement(ref, run)
        ok &= not a.mismatches and a.compared == m.requests
        parts.append(f"vs {name}: {a.identical} identical, {len(a.ties)} ties, "
                     f"{len(a.mismatches)} mismatches")
    if run.calibration is not None:
        c = run.calibration
        parts.append(f"tbo sizes {c.sizes} whole {[round(t, 3) for t in c.whole_ms]} ms "
                     f"split {[round(t, 3) for t in c.split_ms]} ms threshold {c.threshold}")
    if run.probe is not None:
        parts.append(f"interpreter free {run.probe.free_share:.0%} of a "
                     f"{run.probe.step_ms:.2f} ms step")
    parts.append(f"host share of a step {m.host_step_share:.0%}")
    return "  |  ".join(parts), ok


def main() -> int:
    args = _args()
    if not torch.cuda.is_available():
        print("decode_cuda_check: no cuda device available to torch here", file=sys.stderr)
        return 2
    model = build_model(args.model)
    reqs = make_requests(WorkloadOptions(requests=args.requests), model.config.vocab)
    ctx = model.config.context
    base = ModeSettings(concurrency=args.concurrency, context=ctx,
                        kv_blocks=args.concurrency * blocks_for(ctx), device="cuda")
    cpu_ref = run_mode(model, "sequential", reqs, replace(base, device="cpu"))
    runs = _runs(model, reqs, base, args.chunk)
    refs = {"cuda sequential": runs[0][1], "cpu sequential": cpu_ref}
    print(f"device {torch.cuda.get_device_name()}  model {args.model}  "
          f"requests {len(reqs)}  concurrency {args.concurrency}")
    failed = False
    for label, run in runs:
        text, ok = _line(label, run, refs)
        failed |= not ok
        print(("ok   " if ok else "FAIL ") + text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
