"""The library call behind ``parastream decode``: a frozen result whose document has one
row per mode, the reference agreement, and the torch thread count restored."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from parastream.decode.workload import WorkloadOptions
from parastream.workflow.decode import DecodeResult, DecodeSettings, decode

from .helpers import Faulty, requests


def test_decode_returns_a_frozen_result(tiny):
    before = torch.get_num_threads()
    r = decode("tiny", "batch,sequential", workload=WorkloadOptions(requests=4),
               settings=DecodeSettings(concurrency=2, threads=1))
    assert torch.get_num_threads() == before
    assert isinstance(r, DecodeResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.device = "x"  # type: ignore[misc]
    doc = r.to_dict()
    assert "runs" not in doc
    assert [m["mode"] for m in doc["modes"]] == ["sequential", "batch"]
    assert doc["agreement"][0]["reference"] == "sequential"
    assert doc["settings"]["kv_blocks"] == 2 * 16  # two requests at the full context
    assert len(r.timeline("batch")) > 0


def test_a_decoder_object_and_requests_given(tiny):
    reqs = requests(4)
    r = decode(Faulty(tiny, rid=1, at=0), ["streams"], requests=reqs,
               settings=DecodeSettings(concurrency=2))
    (early,) = r.to_dict()["ended_early"]
    assert early["request"] == 1 and early["outcome"] == "failed"
    assert r.to_dict()["modes"][0]["vs_sequential"] is None


def test_full_concurrency_is_allowed_and_streams_stay_capped():
    """A thousand requests may run at once (the agreement target's full concurrency); the
    streams of ``streams`` mode (worker threads) default to one per request up to 256."""
    from parastream.errors import InputError
    from parastream.workflow.decode import MAX_STREAMS, DecodeSettings

    DecodeSettings(concurrency=1000).check()
    assert DecodeSettings(concurrency=1000).stream_count == MAX_STREAMS == 256
    assert DecodeSettings(concurrency=8).stream_count == 8
    assert DecodeSettings(concurrency=1000, streams=32).stream_count == 32
    with pytest.raises(InputError, match="--streams"):
        DecodeSettings(streams=MAX_STREAMS + 1).check()


def test_a_bad_tbo_is_refused_with_the_other_settings_before_any_model_is_built():
    from parastream.errors import InputError

    with pytest.raises(InputError, match="--tbo must be off, auto or a number of rows"):
        DecodeSettings(tbo="sometimes").check()
    DecodeSettings(tbo="off").check()
    DecodeSettings(tbo=2).check()
