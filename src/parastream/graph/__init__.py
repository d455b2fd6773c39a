"""The model side: operator graph IR, torch import, module decomposition, headroom.

Only ``graph.torch_import`` imports torch, inside its functions; everything else works
from a graph JSON without it. The built-in models are :mod:`parastream.zoo`.
"""

from .ir import EDGE_TYPES, RESOURCES, Edge, Graph, GraphError, Op, Tensor, dumps, loads, validate

__all__ = ["EDGE_TYPES", "RESOURCES", "Edge", "Graph", "GraphError", "Op", "Tensor", "dumps",
           "loads", "validate"]
