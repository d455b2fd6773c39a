"""Per-ns boolean grids: the brute-force reference the timeline property tests compare with
(importable as ``grid`` from tests in this folder)."""

from __future__ import annotations

import numpy as np


def grid_of(ivs, n: int) -> np.ndarray:
    """A length-``n`` grid with ``[s, e)`` set for every interval."""
    g = np.zeros(n, bool)
    for s, e in ivs:
        g[s:e] = True
    return g


def runs(g: np.ndarray) -> tuple[list[int], list[int]]:
    """Starts and ends of the grid's runs of True."""
    d = np.diff(np.concatenate([[0], g.astype(np.int8), [0]]))
    return np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()
