"""Moved to :mod:`parastream.calibrate` (``cpu``, ``op_rates``, ``profile``, ``host``,
``timing``); the names stay importable from here until every importer uses the new
modules."""

from ..calibrate.cpu import (DRAM_CORES, PARALLEL_GEMV_AT, calibrate, measure_bandwidth,  # noqa: F401
                             measure_call_overhead, measure_dram, measure_gemv_threads,
                             measure_intra_op_efficiency, measure_matmul, measure_sweep,
                             measure_task_overhead, measure_vector)
from ..calibrate.host import BusyWatch, _others_running, busy_note, cpu_count  # noqa: F401
from ..calibrate.op_rates import (COLD_TARGETS, IDLE_MS, ROTATION_PASSES,  # noqa: F401
                                  SHORT_IDLE_MS, _fit, _op_cases, _third_cases, cold_line,
                                  cold_ramp_us, measure_cold, measure_op_rates,
                                  rotation_passes, rotation_times)
from ..calibrate.profile import dumps, median_profile, repeat_spread, sig  # noqa: F401
from ..calibrate.timing import _median_time, _on_executor_thread  # noqa: F401
