"""A brute-force oracle for the decomposition's contracts (importable as ``points_oracle``).

Reachability here is plain depth-first search over the op edges, nothing shared with the
code under test. ``point_errors`` checks every parallel point: its branches are disjoint and
independent (no path from an op of one branch to an op of another), and its join is a
nearest common descendant of all branches (``end`` when they have none). ``module_errors``
checks the module table: a partition of the ops into weakly connected, convex pieces whose
ids follow a topological order of the module DAG.
"""

from __future__ import annotations


def descendants(g) -> dict[str, set[str]]:
    """Every op's descendants (not itself), by depth-first search from each op."""
    succ: dict[str, list[str]] = {o.name: [] for o in g.ops}
    for e in g.edges:
        succ[e.src].append(e.dst)
    out = {}
    for start in succ:
        seen: set[str] = set()
        stack = list(succ[start])
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(succ[n])
        out[start] = seen
    return out


def point_errors(g, d, desc: dict[str, set[str]] | None = None) -> list[str]:
    """What breaks the parallel-point contract in decomposition ``d`` of graph ``g``."""
    desc = desc if desc is not None else descendants(g)
    modules = {m.module_id: list(m.ops) for m in d.modules}
    ops_units = {o.name: [o.name] for o in g.ops}
    errors = []
    for p in d.parallel_points:
        units = modules if p.level == "module" else ops_units
        branches = [[o for n in b.nodes for o in units[n]] for b in p.branches]
        errors += [f"{p.id}: {e}" for e in _one_point(branches, p.join, units, desc)]
    return errors


def _one_point(branches, join, units, desc) -> list[str]:
    if len(branches) < 2 or not all(branches):
        return ["fewer than two non-empty branches"]
    flat = [o for b in branches for o in b]
    if len(flat) != len(set(flat)):
        return ["branches overlap"]
    reached = [set().union(*(desc[o] for o in b)) for b in branches]
    errors = []
    for i, r in enumerate(reached):
        for k, b in enumerate(branches):
            if i != k and r.intersection(b):
                errors.append(f"a path from branch {i} into branch {k}")
    common = [u for u, ops in units.items() if all(r.intersection(ops) for r in reached)]
    if not common:
        if join != "end":
            errors.append(f"join {join} but the branches never meet")
        return errors
    if join not in common:
        errors.append(f"join {join} is not reached from every branch")
        return errors
    earlier = [u for u in common if u != join and
               set(units[join]) & set().union(*(desc[o] for o in units[u]))]
    if earlier:
        errors.append(f"join {join} is not the nearest: {earlier[0]} comes first")
    return errors


def module_errors(g, d, desc: dict[str, set[str]] | None = None) -> list[str]:
    """What breaks the module contract: partition, connected, convex, ids topological."""
    desc = desc if desc is not None else descendants(g)
    owner: dict[str, str] = {}
    errors = []
    for m in d.modules:
        for o in m.ops:
            if o in owner:
                errors.append(f"{o} in {owner[o]} and {m.module_id}")
            owner[o] = m.module_id
    if set(owner) != {o.name for o in g.ops}:
        errors.append("the modules do not cover the ops")
        return errors
    rank = {m.module_id: i for i, m in enumerate(d.modules)}
    for e in g.edges:
        a, b = owner[e.src], owner[e.dst]
        if a != b and rank[a] >= rank[b]:
            errors.append(f"edge {a} -> {b} goes back in id order")
    for m in d.modules:
        inside = set(m.ops)
        if not _connected(inside, g):
            errors.append(f"{m.module_id} is not weakly connected")
        below = set().union(*(desc[o] for o in inside)) - inside
        if any(desc[x] & inside for x in below):
            errors.append(f"{m.module_id} is not convex")
    return errors


def _connected(inside: set[str], g) -> bool:
    adj: dict[str, set[str]] = {n: set() for n in inside}
    for e in g.edges:
        if e.src in inside and e.dst in inside:
            adj[e.src].add(e.dst)
            adj[e.dst].add(e.src)
    start = next(iter(inside))
    seen, stack = {start}, [start]
    while stack:
        for v in adj[stack.pop()] - seen:
            seen.add(v)
            stack.append(v)
    return seen == inside
