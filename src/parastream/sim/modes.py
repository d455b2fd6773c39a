"""How the runtime issues a plan's tasks, as the simulator models it (kept apart from
:mod:`parastream.sim.run` so the command line can name the modes without its imports)."""

from __future__ import annotations

#: ``eager``: the host launches each op, one ``launch_overhead_us`` apart; ``graph``: the
#: tasks run from a captured graph (GE / aclgraph on Ascend, CUDA graphs): no host launch
#: per op, a device-side dispatch of the profile's ``graph_dispatch_us`` per task instead
MODES = ("eager", "graph")


def mode_label(mode: str, ge: bool = False) -> str:
    """How a run's mode is said in the text output: ``eager mode``, ``graph mode`` or
    ``graph mode, GE reorder emulated``."""
    return f"{mode} mode" + (", GE reorder emulated" if ge else "")
