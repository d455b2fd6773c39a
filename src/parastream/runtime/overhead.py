"""Moved to :mod:`parastream.calibrate.overhead`; the names stay importable from here
until every importer uses the new module."""

from ..calibrate.overhead import (LONG, SHORT, VARIED_LONG, VARIED_SHORT, VIEWS,  # noqa: F401
                                  calibrate_cpu, calibrated_profile,
                                  measure_executor_overhead, per_op_cost, per_round,
                                  varied_chain)
