"""Property tests: on random DAGs, parallel points and modules keep their contracts.

Checked against a brute-force oracle (``points_oracle``): every point's branches are
independent and its join is their nearest common descendant (``end`` when they never
meet); modules are weakly connected, convex pieces of the op DAG in topological id order.
The random graphs list their ops, and give their nodes, out of topological order, and
scatter one scope over unrelated ops: what broke the point finder that walked modules in
id order.
"""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from points_oracle import module_errors, point_errors
from parastream.device import load_profile
from parastream.graph.decompose import decompose, find_points
from parastream.graph.ir import Edge, Graph, Op, Tensor

A2 = load_profile("ascend910b")

#: (type, resource, FLOPs): matrix, element-wise, copy and view work
KINDS = (("linear", "cube", 4e9), ("conv2d", "cube", 2e9), ("add", "vector", 1e6),
         ("relu", "vector", 1e6), ("index_select", "memory", 0.0), ("reshape", "vector", 0.0))
SCOPES = ("", "a", "a.x", "b", "b.y")


@st.composite
def dags(draw, max_nodes: int = 12) -> tuple[list[str], dict[str, list[str]]]:
    """A random DAG: edges go from a lower to a higher rank; the node list is shuffled."""
    n = draw(st.integers(2, max_nodes))
    names = [f"n{i}" for i in range(n)]
    succ: dict[str, list[str]] = {x: [] for x in names}
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=3)):
            succ[names[i]].append(names[j])
    return draw(st.permutations(names)), succ


def _reach(succ: dict[str, list[str]], x: str) -> set[str]:
    seen: set[str] = set()
    stack = list(succ[x])
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(succ[n])
    return seen


@settings(max_examples=300, deadline=None)
@given(dags())
def test_find_points_branches_are_independent_and_meet_at_the_nearest_join(dag):
    nodes, succ = dag
    desc = {x: _reach(succ, x) for x in nodes}
    seen_forks = set()
    for fork, join, branches in find_points(nodes, succ):
        seen_forks.add(fork)
        assert len(branches) >= 2 and all(branches)
        for i, b in enumerate(branches):
            assert set(b) <= desc[fork], "a branch node the fork does not reach"
            reached = set().union(*(desc[x] for x in b))
            for k, other in enumerate(branches):
                assert i == k or not reached & set(other), (fork, branches)
        common = set(nodes)
        for b in branches:
            common &= set().union(*(desc[x] for x in b))
        if not common:
            assert join == "end", (fork, branches, join)
        else:
            assert join in common, (fork, branches, join)
            assert not any(join in desc[u] for u in common), (fork, branches, join)
    # no fork is missed: a node with two successors that no other successor reaches
    for x in nodes:
        outs = set(succ[x])
        heads = [a for a in outs if not any(a in desc[b] for b in outs)]
        assert (len(heads) >= 2) == (x in seen_forks), x


@st.composite
def graphs(draw) -> Graph:
    """A random op graph with scopes shared by unrelated ops and mixed work."""
    order, succ = draw(dags(max_nodes=14))
    ops = []
    for name in sorted(order, key=lambda x: int(x[1:])):
        kind, resource, flops = draw(st.sampled_from(KINDS))
        ops.append(Op(name, kind, draw(st.sampled_from(SCOPES)),
                      outputs=[Tensor([1024], "float16", 2048, f"{name}.out")],
                      flops=flops, bytes_read=0 if kind == "reshape" else 1 << 20,
                      bytes_written=0 if kind == "reshape" else 1 << 20, resource=resource))
    shared = draw(st.sets(st.sampled_from(order), max_size=3))
    for op in ops:
        if op.name in shared:  # an external input read by several ops
            op.inputs = [Tensor([1024], "float16", 2048, "x")]
    edges = [Edge(a, b, tensor=f"{a}.out") for a in order for b in succ[a]]
    return Graph(name="random", ops=ops, edges=edges)


def _graph(n: int, edges: str, views: str = "", scope: str = "b") -> Graph:
    """Ops n0..n(n-1), ``views`` (space-separated) reshapes in ``scope``, the rest linears
    at the top; ``edges`` as "a>b a>c"."""
    view = set(views.split())
    ops = [Op(f"n{i}", "reshape" if f"n{i}" in view else "linear",
              scope if f"n{i}" in view else "",
              outputs=[Tensor([1024], "float16", 2048, f"n{i}.out")],
              flops=0.0 if f"n{i}" in view else 4e9,
              bytes_read=0 if f"n{i}" in view else 1 << 20,
              bytes_written=0 if f"n{i}" in view else 1 << 20,
              resource="vector" if f"n{i}" in view else "cube") for i in range(n)]
    pairs = [e.split(">") for e in edges.split()]
    return Graph(name="random", ops=ops,
                 edges=[Edge(f"n{a}", f"n{b}", tensor=f"n{a}.out") for a, b in pairs])


#: three source modules whose results reach one module through different ops of it: the
#: join is that module, not "end" (each branch reaches it, no op is reached by all)
THREE_INTO_ONE = _graph(11, "0>2 0>4 0>5 0>7 0>8 0>9 0>10 1>2 3>5 4>5 4>8 6>8", "n4 n8")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
@example(THREE_INTO_ONE)
def test_decompose_keeps_the_point_and_module_contracts(g):
    d = decompose(g, A2)
    assert module_errors(g, d) == []
    assert point_errors(g, d) == []
