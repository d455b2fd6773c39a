"""Plans: op -> stream assignments with minimal events, their validation, candidates, lints.

Needs only the graph IR (no torch).
"""

from .assign import ALGORITHMS, assign
from .hb import check
from .model import SCHEMA, Estimate, Event, Lint, Plan, PlanError
from .sync import minimal_events

__all__ = ["ALGORITHMS", "SCHEMA", "Estimate", "Event", "Lint", "Plan", "PlanError", "assign",
           "check", "minimal_events"]
