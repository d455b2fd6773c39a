"""Latency percentiles of decode runs, measured or predicted (no torch: the prediction
uses them too)."""

from __future__ import annotations

import numpy as np


def percentiles(values: list[float], ndigits: int | None = None) -> dict:
    """``{"p50": .., "p99": ..}`` of ``values`` (None when there are none), rounded to
    ``ndigits`` decimals when given."""
    if not values:
        return {"p50": None, "p99": None}
    a = np.asarray(values, dtype=float)
    p50, p99 = float(np.percentile(a, 50)), float(np.percentile(a, 99))
    if ndigits is not None:
        p50, p99 = round(p50, ndigits), round(p99, ndigits)
    return {"p50": p50, "p99": p99}
