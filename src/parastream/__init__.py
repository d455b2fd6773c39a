"""parastream: plan, run and verify multi-stream inference on NPUs and GPUs.

The library API (:mod:`parastream.api`) is re-exported here: ``parastream.analyze``,
``graph``, ``plan``, ``simulate`` and their result types. ``import parastream`` never
imports torch.

``parastream.graph`` and ``parastream.plan`` are the API's functions; the subpackages of
those names are reached by import (``from parastream.plan.io import loads``), not as
attributes of the package.
"""

__version__ = "0.1.0"

# bound after the subpackages that share their names (graph, plan) are imported
from .api import (Analysis, AnalyzeOptions, GraphResult, InputError, PlanResult,  # noqa: E402
                  ShapeSweep, SimulateOptions, Simulation, analyze, graph, plan, simulate)

__all__ = ["Analysis", "AnalyzeOptions", "GraphResult", "InputError", "PlanResult",
           "ShapeSweep", "SimulateOptions", "Simulation", "__version__", "analyze", "graph",
           "plan", "simulate"]
