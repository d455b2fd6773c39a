"""Pipelined execution: named stages on worker threads / streams joined by bounded queues,
with per-stage accounting, a timeline of the run and a replica/depth planner.

``import parastream.pipeline`` does not import torch; only :mod:`.workload` needs it.
"""

from .accounting import PipelineStats, StageStats, efficiency
from .core import (CANCELLED, COMPLETED, FAILED, ItemResult, Pipeline, PipelineError, Stage,
                   run_serial)
from .planner import Plan, plan
from .policy import ErrorLog, ErrorPolicy, ItemError

__all__ = ["CANCELLED", "COMPLETED", "FAILED", "ErrorLog", "ErrorPolicy", "ItemError",
           "ItemResult", "Pipeline", "PipelineError", "PipelineStats", "Plan", "Stage",
           "StageStats", "efficiency", "plan", "run_serial"]
