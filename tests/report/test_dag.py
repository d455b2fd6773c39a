"""The report's inline DAG drawing: layers follow the edges, every node is drawn once."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from parastream.report.dag import dag_svg, layers, order


@st.composite
def dags(draw):
    n = draw(st.integers(min_value=1, max_value=25))
    ids = [f"M{i}" for i in range(n)]
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))
    edges = sorted({(ids[a], ids[b]) for a, b in pairs if a < b})  # a < b: acyclic
    return ids, edges


@given(dags())
def test_every_edge_goes_to_a_later_layer_and_every_node_is_placed_once(dag):
    ids, edges = dag
    layer = layers(ids, edges)
    assert all(layer[b] > layer[a] for a, b in edges)
    # longest path: a node's layer is one past its deepest predecessor's
    for n in ids:
        preds = [layer[a] for a, b in edges if b == n]
        assert layer[n] == (max(preds) + 1 if preds else 0)
    rows = order(layer, edges)
    placed = [n for row in rows for n in row]
    assert sorted(placed) == sorted(ids)
    assert all(layer[n] == k for k, row in enumerate(rows) for n in row)


@given(dags())
def test_the_svg_draws_one_box_per_node_and_one_curve_per_edge(dag):
    ids, edges = dag
    nodes = [{"id": n, "lines": [f"{n} <name>", "compute"], "kind": "module"} for n in ids]
    svg = dag_svg(nodes, [{"src": a, "dst": b, "type": "data"} for a, b in edges])
    assert len(re.findall(r"<rect ", svg)) == len(ids)
    assert len(re.findall(r"<path d=\"M[0-9.]+,[0-9.]+ C", svg)) == len(edges)
    assert "<name>" not in svg and "&lt;name&gt;" in svg  # text is escaped
    assert "http" not in svg  # nothing a browser would fetch, not even a namespace URL


def test_a_crossing_is_undone_by_the_sweeps():
    """a->y and b->x drawn in the given order cross; the barycentre order puts x first."""
    ids = ["a", "b", "y", "x"]
    edges = [("a", "x"), ("b", "y")]
    rows = order(layers(ids, edges), edges)
    assert rows == [["a", "b"], ["x", "y"]]


def test_an_input_named_twice_in_the_decomposition_is_drawn_once():
    """forward(self, input) with constant-fed submodules: the decomposition lists the
    shared input twice; the drawing has one node for it."""
    torch = __import__("pytest").importorskip("torch")
    from torch import nn

    from parastream.device.profile import load_profile
    from parastream.graph.headroom import analyze_graph
    from parastream.report.graph import module_dag
    from parastream.graph.torch_import import import_module

    class Gen(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, n):
            return self.lin(torch.ones(4, 8) * n)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.g1, self.g2 = nn.Linear(8, 8), nn.Linear(8, 8), Gen(), Gen()

        def forward(self, input):
            return self.a(input) + self.b(input) + self.g1(2.0) + self.g2(3.0)

    g = import_module(M().eval(), (torch.randn(4, 8),), name="m")
    dag = module_dag(analyze_graph(g, load_profile("cpu")).decomposition)
    ids = [n["id"] for n in dag["nodes"]]
    assert len(ids) == len(set(ids))
    svg = dag_svg(dag["nodes"], dag["edges"])
    boxes = re.findall(r'<rect x="([0-9.]+)" y="([0-9.]+)"', svg)
    assert len(boxes) == len(set(boxes)) == len(ids)
