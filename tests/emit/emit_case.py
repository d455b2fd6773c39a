"""One zoo model's emit test case: the module and inputs, its graph, the fx trace the
emitters read, and the original model's outputs and buffers after one forward (the
reference the generated code must match bitwise). Test modules subclass it to add plans."""

from __future__ import annotations

import copy

from parastream.emit.codegen import trace
from parastream.graph.torch_import import import_module
from parastream.zoo import ZOO


class ZooCase:
    def __init__(self, name: str) -> None:
        self.name = name
        self.module, self.inputs = ZOO[name].factory("tiny", None)
        self.graph = import_module(self.module, self.inputs, name=name)
        self.traced = trace(self.module, self.inputs)
        ref = copy.deepcopy(self.module)
        self.expected = ref(*self.inputs)
        self.expected_buffers = {k: v.clone() for k, v in ref.named_buffers()}
