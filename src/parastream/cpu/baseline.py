"""Both sides in their best OpenMP setting, each in a process of its own.

Why: with OpenMP's default wait policy, torch's intra-op threads go to sleep between ops, and on a small CPU waking them costs about as much as a
small op; the plain module with all cores then runs slower than with the threads
spinning (``OMP_WAIT_POLICY=ACTIVE``). Streams with one thread each never wake a thread
team, so against the default baseline they look faster for a reason that has nothing to
do with overlap. Spinning threads are in turn the worst setting for streams: a team that
spins keeps a core from the streams' workers, and a side-by-side run pays for the single-stream team's spinning too.

The policy is fixed when OpenMP starts, once per process, so each side is measured again in
a child process (the model rebuilt from its spec): single stream with
``OMP_WAIT_POLICY=ACTIVE``, the candidates with ``PASSIVE``. The results are reported next
to the side-by-side measurement, labelled as separate processes, and a recommendation
compares the faster single-stream figure with the faster multi-stream one. When the user
set ``OMP_WAIT_POLICY`` themselves, every measurement already runs under their choice and
nothing is added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any


def wanted() -> bool:
    """Whether the separate-process measurements add information (no policy chosen)."""
    return not os.environ.get("OMP_WAIT_POLICY")


@dataclass(frozen=True)
class ChildTiming:
    """How a child process times each side: ``runs`` timed calls after ``warmup`` untimed
    ones, the first ``drop`` left out, on ``threads`` cores (default: all)."""

    runs: int
    warmup: int
    drop: int
    threads: int | None = None


@dataclass(frozen=True)
class ChildRun(ChildTiming):
    """What one child measures: the plain module when ``single``, and each of
    ``candidates`` of the plan document at ``plan_path``; refused after ``timeout_s``."""

    single: bool = False
    plan_path: str | None = None
    candidates: tuple[str, ...] = ()
    timeout_s: float = 300.0


def isolated(model: str, scale: str, phase: str | None, policy: str, **run: Any) -> dict:
    """Median walls in a child process with ``OMP_WAIT_POLICY=policy`` (``run``: the fields
    of :class:`ChildRun`): the plain module on ``threads`` cores when ``single``
    (``single_us``), and each named candidate of the plan document at ``plan_path``
    (``candidates_us``); ``{"error": ...}`` when the child could not measure (the caller
    reports that and keeps its side-by-side numbers)."""
    what = ChildRun(**run)
    spec = {"model": model, "scale": scale, "phase": phase, "runs": what.runs,
            "warmup": what.warmup, "drop": what.drop, "threads": what.threads,
            "single": what.single, "plan": what.plan_path,
            "candidates": list(what.candidates or ())}
    env = dict(os.environ, OMP_WAIT_POLICY=policy)
    try:
        r = subprocess.run([sys.executable, "-m", "parastream.cpu.baseline", json.dumps(spec)],
                           env=env, capture_output=True, text=True, timeout=what.timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the child process took over {what.timeout_s:.0f} s"}
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"the child process failed: {tail}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"the child process printed no result: {lines[-1][:200]}"}


def best_settings(model: str, scale: str, phase: str | None, doc: Any, candidates: list[str],
                  **timing: Any) -> dict:
    """Single stream with spinning threads, and the named candidates of plan document
    ``doc`` with sleeping ones, each in its own child (``timing``: the fields of
    :class:`ChildTiming`; ``threads`` default all cores):
    ``{"single_us", "candidates_us", "threads", "errors"}``."""
    import tempfile

    from ..plan.io import dumps
    from ..runtime.executor import _cores

    t = ChildTiming(**timing)
    threads = t.threads or _cores()
    kw = dict(runs=t.runs, warmup=t.warmup, drop=t.drop, threads=threads)
    spin = isolated(model, scale, phase, "ACTIVE", single=True, **kw)
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        with open(plan_path, "wb") as f:
            f.write(dumps(doc))
        calm = isolated(model, scale, phase, "PASSIVE", plan_path=plan_path,
                        candidates=tuple(candidates), **kw)
    return {"single_us": spin.get("single_us"), "candidates_us": calm.get("candidates_us", {}),
            "threads": threads, "errors": [e["error"] for e in (spin, calm) if "error" in e]}


def attach(results: list, iso: dict | None) -> None:
    """Put :func:`best_settings`' figures on the candidates' results (``CandidateResult``
    s), which the recommendation then takes each side's faster figure from."""
    for r in results:
        r.iso_single_us = iso["single_us"] if iso else None
        r.iso_multi_us = iso["candidates_us"].get(r.name) if iso else None


def _measure(spec: dict) -> dict:
    import torch

    from ..graph.models import load_model
    from ..runtime.host import set_intra_op_threads
    from ..runtime.executor import MultiStreamExecutor, default_threads, keep_inputs
    from ..runtime.measure import median_wall_us

    module, inputs, name, _ = load_model(spec["model"], spec["scale"], spec["phase"])
    w, r, d, threads = spec["warmup"], spec["runs"], spec["drop"], spec["threads"]
    out: dict = {"policy": os.environ.get("OMP_WAIT_POLICY", ""), "threads": threads,
                 "candidates_us": {}}
    if spec["plan"] and spec["candidates"]:
        from ..graph.torch_import import import_runnable
        from ..plan.io import load_doc

        runnable = import_runnable(module, inputs, name=name)
        doc, _ = load_doc(spec["plan"])
        for cand in spec["candidates"]:
            plan = doc.candidate(cand)
            streams = len(set(plan.assignment.values()) | {0})  # stream 0 always runs
            with MultiStreamExecutor(module, inputs, plan, runnable=runnable,
                                     intra_op_threads=default_threads(streams, threads)) as ex:
                # every timed call from the inputs as given, as in measure()
                fresh = keep_inputs(inputs, lambda: ex(*inputs))
                out["candidates_us"][cand] = median_wall_us(lambda: ex(*inputs), r, w, d,
                                                            before=fresh)
                fresh()
    if spec["single"]:
        set_intra_op_threads(threads)
        with torch.no_grad():
            fresh = keep_inputs(inputs, lambda: module(*inputs))
            out["single_us"] = median_wall_us(lambda: module(*inputs), r, w, d, before=fresh)
    return out


if __name__ == "__main__":
    print(json.dumps(_measure(json.loads(sys.argv[1]))))
