"""Every runtime test runs under the suite's watchdog (tests/conftest.py): these tests start
threads, and a hang must end the process rather than block the suite."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _watchdog(watchdog):
    yield


@pytest.fixture
def writes_input_later():
    """A model that, eager, writes its input once its Python flag ``later`` is set (after
    it was traced: the trace never writes it). Returns (module, input)."""
    import torch

    class WritesItsInputLater(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.later = False

        def forward(self, x):
            if self.later:
                x.add_(1)
            return self.lin(x)

    return WritesItsInputLater(), torch.randn(4, 8)
