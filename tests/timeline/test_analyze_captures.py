"""The analyses of a unit's captures spread over forked processes
(:func:`parastream.timeline.analyze.analyze_captures`) are those made in one process."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from parastream.timeline import analyze as an
from parastream.timeline.readers import read_path

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
@pytest.mark.parametrize("trace", ["inductor_rank0.json.gz", "synthetic_comm_two_streams.json.gz"])
def test_forked_analyses_are_the_serial_ones(monkeypatch, trace):
    caps = an.captures_of(read_path(str(DATA / trace)))
    assert len(caps) >= 4
    opts = an.Options(max_points=0)
    monkeypatch.setattr(an, "PARALLEL_OPS", 10 ** 12)
    serial = an.analyze_captures(caps, opts)
    monkeypatch.setattr(an, "PARALLEL_OPS", 0)
    monkeypatch.setenv("PARASTREAM_WORKERS", "3")
    forked = an.analyze_captures(caps, opts)
    assert forked == serial
    assert [r["label"] for r in forked] == [r["label"] for r in serial]
    assert an._SHARED is None  # the captures are not held after the pool is gone


def test_small_units_or_one_worker_stay_in_process(monkeypatch):
    """Under PARALLEL_OPS, or with one worker asked for, no pool is started."""
    caps = an.captures_of(read_path(str(DATA / "synthetic_comm_two_streams.json.gz")))

    def no_pool(n):
        raise AssertionError("pool started")

    monkeypatch.setattr(an, "fork_pool", no_pool)
    assert len(an.analyze_captures(caps, an.Options())) == len(caps)
    monkeypatch.setattr(an, "PARALLEL_OPS", 0)
    monkeypatch.setenv("PARASTREAM_WORKERS", "1")
    assert len(an.analyze_captures(caps, an.Options())) == len(caps)
