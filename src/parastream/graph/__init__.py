"""The model side: operator graph IR, the torch frontend, module decomposition, headroom.

The torch frontend traces a model once (``graph.trace``) into a ``Trace`` that the importer
(``graph.torch_import``), the runnable (``graph.runnable``) and the emitter all read; it and
the modules it uses (records, op costs, opaque experts, tensor helpers) import torch only
inside their functions, so everything else works from a graph JSON without it. The built-in
models are :mod:`parastream.zoo`.
"""

from .ir import EDGE_TYPES, RESOURCES, Edge, Graph, GraphError, Op, Tensor, dumps, loads, validate

__all__ = ["EDGE_TYPES", "RESOURCES", "Edge", "Graph", "GraphError", "Op", "Tensor", "dumps",
           "loads", "validate"]
