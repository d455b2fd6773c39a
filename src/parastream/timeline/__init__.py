"""Timelines: one columnar interval model for every trace source, and its analysis.

This layer imports no other parastream layer (and never torch).
"""

from .model import DeviceInfo, Timeline, TimelineBuilder

__all__ = ["DeviceInfo", "Timeline", "TimelineBuilder"]
