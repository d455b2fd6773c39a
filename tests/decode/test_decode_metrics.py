"""The figures' arithmetic: Jain's index, percentiles, and the token agreement rule (a
difference only at a numerical tie)."""

from __future__ import annotations

import pytest

from parastream.decode.device import Live
from parastream.decode.metrics import agreement, first_difference, jain, percentiles
from parastream.decode.modes import ModeRun
from parastream.decode.scheduler import FINISHED
from parastream.decode.workload import Request
from parastream.timeline.model import TimelineBuilder


def test_jain():
    assert jain([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) == 1.0


def test_percentiles():
    assert percentiles([]) == {"p50": None, "p99": None}
    p = percentiles(list(range(101)))
    assert p["p50"] == 50 and p["p99"] == 99


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def _run(mode, rows):
    lives = []
    for rid, (tokens, gaps) in enumerate(rows):
        lv = Live(Request(rid, 0.0, (1,), len(tokens)), None, tokens=tokens, gaps=gaps)
        lv.outcome = FINISHED
        lives.append(lv)
    return ModeRun(mode, lives, [], 0, 1, TimelineBuilder("x", "x").build())


def test_agreement_allows_a_difference_only_at_a_tie():
    ref = _run("sequential", [([1, 2, 3], [1.0, 1.0, 1.0])] * 3)
    other = _run("batch", [([1, 2, 3], [1.0, 1.0, 1.0]), ([1, 9, 9], [1.0, 5e-5, 1.0]),
                           ([1, 2, 8], [1.0, 1.0, 0.5])])
    a = agreement(ref, other)
    assert (a.compared, a.identical, a.ties, a.mismatches) == (3, 1, [1], [2])
