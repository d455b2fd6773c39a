"""A ``torchair`` stand-in for ``torch.compile(fullgraph=True)`` on a CPU.

Its scope API has the real signatures and the real shape: ``npu_stream_switch(stream_tag,
stream_priority=0)`` and ``limit_core_num(op_aicore_num, op_vectorcore_num)`` return a
context-manager object whose ``__enter__`` / ``__exit__`` call the ops ``scope_enter(keys,
values)`` / ``scope_exit()`` (TorchAir's ``_npu_scope_enter`` / ``_npu_scope_exit`` do the
same with its ``air`` ops), and ``npu_wait_tensor(self, dependency)`` calls an op returning a
tensor (TorchAir's ``air::wait_tensor``). Here the ops are ``parastream_air::*`` custom ops
that run as no-ops and a copy, so a traced graph shows where each scope and wait lands.
Imports torch: load it only through :func:`parastream.emit.standins.torchair_graph_standin`.
"""

from __future__ import annotations

import types

import torch

_LIB = "parastream_air"


def _define() -> None:
    if hasattr(torch.ops, _LIB) and hasattr(getattr(torch.ops, _LIB), "wait_tensor"):
        return

    @torch.library.custom_op(f"{_LIB}::scope_enter", mutates_args=(),
                             schema="(str[] keys, str[] values) -> ()")
    def scope_enter(keys, values):  # type: ignore[no-untyped-def]
        return None

    @scope_enter.register_fake
    def _(keys, values):  # type: ignore[no-untyped-def]
        return None

    @torch.library.custom_op(f"{_LIB}::scope_exit", mutates_args=(), schema="() -> ()")
    def scope_exit():  # type: ignore[no-untyped-def]
        return None

    @scope_exit.register_fake
    def _():  # type: ignore[no-untyped-def]
        return None

    @torch.library.custom_op(f"{_LIB}::wait_tensor", mutates_args=(),
                             schema="(Tensor self, Tensor dependency) -> Tensor")
    def wait_tensor(self, dependency):  # type: ignore[no-untyped-def]
        return self.clone()

    @wait_tensor.register_fake
    def _(self, dependency):  # type: ignore[no-untyped-def]
        return torch.empty_like(self)


class _Scope:
    def __init__(self, keys: list[str], values: list[str]) -> None:
        self.keys = keys
        self.values = values

    def __enter__(self) -> None:
        torch.ops.parastream_air.scope_enter.default(self.keys, self.values)

    def __exit__(self, *args: object) -> None:
        torch.ops.parastream_air.scope_exit.default()


def npu_stream_switch(stream_tag: str, stream_priority: int = 0) -> _Scope:
    return _Scope(["_user_stream_label", "_user_stream_priority"],
                  [stream_tag, str(stream_priority)])


def limit_core_num(op_aicore_num: int, op_vectorcore_num: int) -> _Scope:
    return _Scope(["_op_aicore_num", "_op_vectorcore_num"],
                  [str(op_aicore_num), str(op_vectorcore_num)])


def npu_wait_tensor(self: torch.Tensor, dependency: torch.Tensor) -> torch.Tensor:
    return torch.ops.parastream_air.wait_tensor.default(self, dependency)


def make() -> types.ModuleType:
    """A fresh ``torchair``-shaped module object with ``scope``."""
    _define()
    api = types.ModuleType("torchair_graph_standin")
    scope = types.ModuleType("torchair_graph_standin.scope")
    scope.npu_stream_switch = npu_stream_switch
    scope.limit_core_num = limit_core_num
    scope.npu_wait_tensor = npu_wait_tensor
    api.scope = scope
    api.TARGET = "torchair"
    return api
