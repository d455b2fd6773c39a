"""Moved to :mod:`parastream.calibrate.device`; the names stay importable from here until
every importer uses the new module."""

from ..calibrate.device import (FALLBACK, calibrate_device, calibrate_repeated,  # noqa: F401
                                calibrated_device_profile, calibrated_name,
                                measure_host_costs, measure_rates, profile_stem,
                                shipped_base)
