"""Names of the host process and the lane records, importable from here for the modules
that import them by this path. They live in :mod:`parastream.runtime.host` and
:mod:`parastream.runtime.lanes`; the cpu backend itself is :mod:`parastream.cpu.backend`.
"""

from .host import cpu_count, cpu_name, set_intra_op_threads, team_spin_s
from .lanes import LaneRecorder, build_timeline

__all__ = ["LaneRecorder", "build_timeline", "cpu_count", "cpu_name", "set_intra_op_threads",
           "team_spin_s"]
