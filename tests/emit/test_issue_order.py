"""The op-level forward's issue order against the plan's happens-before order: every data
edge's producer is written before its consumer, every event's record before its wait, side
work before the main path's ops it does not wait for (also when the side branch comes after
them in program order), and the file still matches the original model bitwise on the
stand-ins."""

from __future__ import annotations

import ast
import copy

import pytest

torch = pytest.importorskip("torch")

from parastream.emit import standins  # noqa: E402
from parastream.emit.codegen import EmitError, emit, trace  # noqa: E402
from parastream.emit.order import OrderError, Unit, issue_order, storage_order  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402
from parastream.plan.assign import assign  # noqa: E402
from parastream.plan.model import Event  # noqa: E402

from emit_case import ZooCase  # noqa: E402

TARGETS = ("torchair", "npugraph_ex", "cuda")
#: plans whose side branch comes after the main path's work in program order
LATE_SIDE = {
    "attention_prolog": {"kv_path": 1},        # q_path is written first, kv_path on the side
    "moe_layer": {"mlp.routed": 1},            # shared experts first, routed on the side
    "inception_block": {"branch4": 1},         # the last branch on the side
}


class Case(ZooCase):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.plan = assign(self.graph, "manual", mapping=LATE_SIDE[name])


class Forward:
    """The generated forward's statements, in the order they are written: the line each
    variable is bound on, each event's record and wait lines, each npu_wait_tensor's
    dependency."""

    def __init__(self, source: str) -> None:
        tree = ast.parse(source)
        fn = next(f for f in ast.walk(tree)
                  if isinstance(f, ast.FunctionDef) and f.name == "forward")
        self.bound: dict[str, int] = {}
        self.records: dict[str, int] = {}
        self.waits: list[tuple[str, int]] = []
        self.wait_tensors: list[tuple[str, int]] = []   # (dependency variable, line)
        for st in _statements(fn.body):
            self._read(st)

    def _read(self, st: ast.stmt) -> None:
        if isinstance(st, ast.Assign):
            for t in st.targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        self.bound.setdefault(name.id, st.lineno)
            call = st.value
            if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("npu_wait_tensor"):
                self.wait_tensors.append((ast.unparse(call.args[1]).split("[")[0],
                                          st.lineno))
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            func = st.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if func.attr == "record":
                    self.records.setdefault(func.value.id, st.lineno)
                elif func.attr == "wait":
                    self.waits.append((func.value.id, st.lineno))


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body`` in source order, those inside ``with`` blocks included."""
    out: list[ast.stmt] = []
    for st in body:
        if isinstance(st, ast.With):
            out += _statements(st.body)
        else:
            out.append(st)
    return out


def _ancestors(graph, op: str) -> set[str]:
    """Every op ``op`` follows through the graph's edges (data, state, collective)."""
    preds = graph.predecessor_names()
    seen: set[str] = set()
    todo = [op]
    while todo:
        for p in preds.get(todo.pop(), []):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def _program_order(c: Case) -> list[str]:
    return [n.name for n in c.traced.graph.nodes]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", sorted(LATE_SIDE))
def test_issue_order_follows_happens_before_and_starts_side_work_first(cases, model, target):
    c = cases(model)
    plan = c.plan
    e = emit(c.traced, plan, target)
    fwd = Forward(e.source)
    line = fwd.bound
    ops = set(plan.assignment)
    assert ops <= set(line), sorted(ops - set(line))[:5]
    # (a) every data edge: the producer is written before its consumer
    for edge in c.graph.edges:
        if edge.type == "data" and edge.src in ops and edge.dst in ops:
            assert line[edge.src] < line[edge.dst], (edge.src, edge.dst)
    # (b) every event: recorded after its op and before its wait, waited before its op
    if target == "torchair":
        assert len(fwd.wait_tensors) == len(plan.events)
        for dep, at in fwd.wait_tensors:
            assert line[dep] < at, dep
    else:
        assert fwd.waits and all(fwd.records[ev] < at for ev, at in fwd.waits)
        for ev in plan.events:
            rec = fwd.records[f"ev_{ev.record_after}"]
            assert line[ev.record_after] < rec
            if ev.wait_before is not None:
                assert rec < line[ev.wait_before]
    for ev in plan.events:
        if ev.wait_before is not None:
            assert line[ev.record_after] < line[ev.wait_before]
    # (c) the side stream's first op is written before every main-stream op it does not
    # wait for, although the side branch comes after them in program order
    order = _program_order(c)
    side = [op for op in order if plan.assignment.get(op, 0) == 1]
    first = side[0]
    before = _ancestors(c.graph, first)
    main = [op for op in order if plan.assignment.get(op) == 0 and op not in before]
    late = [op for op in main if order.index(op) < order.index(first)]
    assert late, "the side branch must come after main-path work in program order"
    assert all(line[first] < line[op] for op in main), (
        first, [op for op in main if line[op] < line[first]][:5])
    # and the file still runs on the stand-ins, bitwise equal, every stream call checked
    model_ = copy.deepcopy(c.module)
    r = standins.run(load(e.source), model_, c.inputs)
    assert standins.outputs_equal(c.expected, r.outputs)
    for k, v in model_.named_buffers():
        assert torch.equal(v, c.expected_buffers[k]), k
    assert standins.check(r, load(e.source), c.graph) == []


def load(source: str):
    import types

    mod = types.ModuleType("generated")
    exec(compile(source, "<generated>", "exec"), mod.__dict__)
    return mod


def test_the_switch_off_runs_the_original_forward(cases):
    c = cases("attention_prolog")
    mod = load(emit(c.traced, c.plan, "cuda").source)
    model_ = copy.deepcopy(c.module)
    out = mod.MultiStreamForward(model_, enabled=False)(*c.inputs)
    assert standins.outputs_equal(c.expected, out)


def test_storage_order_keeps_readers_and_writers_of_one_storage_in_program_order():
    after = storage_order([
        ("a", set(), {"x"}),          # writes x
        ("r1", {"x"}, set()),         # reads x after a
        ("r2", {"x", "y"}, set()),    # reads x after a
        ("w", {"x"}, {"x"}),          # in place on x: after both readers
        ("v", {"x"}, set()),          # reads x after w
        ("u", {"y"}, set()),          # another storage: free of all of them
    ])
    assert after["r1"] == {"a"} and after["r2"] == {"a"}
    assert after["w"] == {"a", "r1", "r2"}
    assert after["v"] == {"w"} and after["u"] == set()


def test_side_heads_go_first_and_free_nodes_right_before_their_reader():
    units = [
        Unit("norm", 0),
        Unit("big", 0, {"norm"}),             # the main path's dominator
        Unit("view", None, {"norm"}),         # free: a view, needed on the side only
        Unit("side", 1, {"view"}),
        Unit("merge", 0, {"big", "side"}),
    ]
    assert issue_order(units) == [("norm", 0), ("view", 1), ("side", 1), ("big", 0),
                                  ("merge", 0)]


def test_a_wait_on_a_later_op_has_no_issue_order():
    units = [Unit("a", 0, {"b"}), Unit("b", 1)]
    assert issue_order(units)[0] == ("b", 1)  # b is free to go first on its own stream
    with pytest.raises(OrderError, match="later in program order"):
        issue_order([Unit("a", 0), Unit("b", 0, {"c"}), Unit("c", 1, {"b"})])


def test_an_event_against_program_order_is_refused(cases):
    c = cases("attention_prolog")
    plan = copy.deepcopy(c.plan)
    order = _program_order(c)
    main = [op for op in order if plan.assignment.get(op) == 0]
    side = [op for op in order if plan.assignment.get(op) == 1]
    # the side's first op waits for the main path's last op, which reads the side's output
    plan.events = [Event(main[-1], side[0])]
    with pytest.raises(EmitError, match="later in program order"):
        emit(c.traced, plan, "cuda")


class LateSide(torch.nn.Module):
    """The side branch comes last, after the main path's matmul and a host-only line it
    needs (``n``): the patch must still issue it first."""

    def __init__(self) -> None:
        super().__init__()
        self.main = torch.nn.Linear(8, 8)
        self.side = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.main(x)
        n = x.shape[-1] // 2
        z = self.side(x).narrow(-1, 0, n)
        return y.narrow(-1, 0, n) + z


@pytest.mark.parametrize("target", TARGETS)
def test_module_level_patch_issues_the_side_block_before_the_main_dominator(target):
    from parastream.emit import modlevel
    from parastream.emit.codegen import node_streams

    torch.manual_seed(0)
    module, inputs = LateSide().eval(), (torch.randn(4, 8),)
    graph = import_module(module, inputs, name="late_side")
    plan = assign(graph, "manual", mapping={"side": 1})
    traced = trace(module, inputs)
    stream_of, real = node_streams(traced, plan)
    site = modlevel.analyse(traced, plan, module, inputs, graph, stream_of, real)
    patch = modlevel.render(site, target, plan=plan, source={}, model_name="late_side",
                            device_name=None, switch=plan.switch)
    src = patch.source
    assert src.index("self.side(x)") < src.index("self.main(x)")
    assert src.index("n = x.shape[-1] // 2") < src.index("self.side(x)")
    gen = load(src)
    r = standins.run_patch(gen, copy.deepcopy(module), inputs)
    with torch.no_grad():
        assert standins.outputs_equal(module(*inputs), r.outputs)
    assert standins.check_patch(r, gen, {"main": 0, "side": 1}) == []
