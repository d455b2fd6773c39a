"""Decode tests run under the suite's watchdog (tests/conftest.py): the modes start worker
threads, and a hang must end the process rather than block the suite. Helpers shared by
the decode tests: a tiny decoder, requests, and a decoder that raises on one request."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _watchdog(watchdog):
    yield


@pytest.fixture(scope="session")
def tiny():
    """The tiny built-in decoder (one intra-op thread, as the decode workflow sets)."""
    import torch

    from parastream.decode.model import build_model

    torch.set_num_threads(1)
    return build_model("tiny")
