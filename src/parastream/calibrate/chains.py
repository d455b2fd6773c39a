"""The chains of tiny ops a calibration times through the executor, for every device: a
module that applies one step ``n`` times (:func:`chain_module`), the varied chain of a
model's op types (:func:`varied_chain`) whose slope between two lengths is the executor's
cost per op, and rounds that time several walls within a second of each other
(:func:`per_round`). The cpu backend's calibration (:mod:`parastream.cpu.overhead`) and a
device's (:mod:`parastream.calibrate.device`) both build on them.
"""

from __future__ import annotations

from typing import Any, Callable


def chain_module(n: int, step: Callable[[Any, Any], Any], **params: Any) -> Any:
    """A module applying ``step(module, x)`` ``n`` times, with ``params`` (tensors) as its
    parameters; built when called, so importing this module needs no torch."""
    import torch

    class Chain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for key, value in params.items():
                setattr(self, key, torch.nn.Parameter(value))

        def forward(self, x):
            for _ in range(n):
                x = step(self, x)
            return x

    return Chain().eval()


#: rounds of the varied chain at its two lengths (nine ops a round)
VARIED_SHORT, VARIED_LONG = 1, 8


def varied_chain(n: int) -> Any:
    """``n`` rounds of nine tiny ops of seven types, two of them reading folded views, on
    a (1, 16) input: the executor's work per op as in a model's layers (calibrate's chain
    for the per-op cost)."""
    import torch
    import torch.nn.functional as F

    def step(m: Any, x: Any) -> Any:
        a, b = x[..., :8], x[..., 8:]
        x = x * 0.5 + torch.cat([-b, a], dim=-1)
        x = F.layer_norm(F.silu(F.linear(x, m.w)), (16,), m.g)
        return torch.softmax(x, dim=-1) + x

    return chain_module(n, step, w=torch.randn(16, 16) / 4, g=torch.ones(16))


def per_round(timers: dict[Any, Callable[[], float]], rounds: int) -> list[dict[Any, float]]:
    """``rounds`` rounds, each timing every one of ``timers`` once, in turn. Figures
    derived within one round (a slope between two chain lengths, the difference between
    two plans) compare walls timed within a second of each other, and their median over
    the rounds is the estimate: a shared machine's speed can move by 2x within seconds,
    and a slope from two lengths timed seconds apart takes such a move for the
    executor's cost."""
    return [{key: timer() for key, timer in timers.items()} for _ in range(rounds)]
