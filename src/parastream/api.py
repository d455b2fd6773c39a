"""The library API: each command of the ``parastream`` CLI as a function that takes plain
arguments and returns a typed result, whose ``to_dict()`` is the document the command's
``--json`` writes.

    from parastream import api as ps

    a = ps.analyze("trace.json.gz")              # Analysis: a.summary["verdict_counts"]
    g = ps.graph("llama_layer", scale="tiny")    # GraphResult: g.analysis.bound_speedup ...
    p = ps.plan("llama_layer", scale="tiny")     # PlanResult: p.recommended, p.to_json()
    s = ps.simulate("llama_layer", scale="tiny", streams=[1, 2])   # Simulation: s.rows
    r = ps.run("llama_layer", device="cpu")      # RunResult: measured, needs torch
    e = ps.emit("plan.json", target="torchair")  # EmitResult: the generated source

``demo`` runs the whole loop into a report folder, ``pipeline`` the CPU pipeline
demonstration, ``decode`` serves requests in the four decode modes and
``predict_decode`` predicts them on a device profile (``decode --simulate``). Importing
this module imports no torch: only building a zoo model or a ``file.py:factory``, and
running one, does. Bad input raises :class:`parastream.errors.InputError` (one line: the
file and the problem).
"""

from __future__ import annotations

from .decode.predict import HostCost
from .decode.predict_sweep import SweepSettings
from .decode.workload import WorkloadOptions
from .errors import InputError
from .workflow.analyze import Analysis, AnalyzeOptions, analyze
from .workflow.decode import DecodeResult, DecodeSettings, PredictResult, decode
from .workflow.decode import predict as predict_decode
from .workflow.demo import DemoResult, DemoSettings, demo
from .workflow.emit import EmitResult, emit
from .workflow.graph import GraphResult, graph
from .workflow.pipeline import PipelineResult, pipeline
from .workflow.plan import PlanResult, plan
from .workflow.run import RunResult, RunSettings, run
from .workflow.simulate import ShapeSweep, SimulateOptions, Simulation, simulate

__all__ = ["Analysis", "AnalyzeOptions", "DecodeResult", "DecodeSettings", "DemoResult",
           "DemoSettings", "EmitResult", "GraphResult", "HostCost", "InputError",
           "PipelineResult", "PlanResult", "PredictResult", "RunResult", "RunSettings",
           "ShapeSweep", "SimulateOptions", "Simulation", "SweepSettings", "WorkloadOptions",
           "analyze", "decode", "demo", "emit", "graph", "pipeline", "plan", "predict_decode",
           "run", "simulate"]
