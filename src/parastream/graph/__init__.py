"""The model side: operator graph IR, torch import, zoo models, module decomposition.

Only ``graph.torch_import`` and ``graph.zoo`` import torch (lazily); everything else works
from a graph JSON without it.
"""

from .ir import EDGE_TYPES, RESOURCES, Edge, Graph, GraphError, Op, Tensor, dumps, loads, validate

__all__ = ["EDGE_TYPES", "RESOURCES", "Edge", "Graph", "GraphError", "Op", "Tensor", "dumps",
           "loads", "validate"]
