"""Generated multi-stream code for the three targets: it compiles, runs on the recording
stand-ins with the stream calls the plan asks for, and matches the original model bitwise."""

from __future__ import annotations

import copy
import importlib.util
import types

import pytest

torch = pytest.importorskip("torch")

from parastream.emit import standins  # noqa: E402
from parastream.emit.codegen import EmitError, emit, trace  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402
from parastream.zoo import ZOO  # noqa: E402
from parastream.plan.assign import assign  # noqa: E402
from parastream.plan.model import Event, Plan  # noqa: E402

from emit_case import ZooCase  # noqa: E402

MODELS = ("moe_layer", "attention_prolog", "inception_block")
TARGETS = ("torchair", "npugraph_ex", "cuda")
#: the hand-made plans: a named branch on a side stream
MANUAL = {
    "moe_layer": {"mlp.shared_experts": 1},
    "attention_prolog": {"kv_path": 1},
    "inception_block": {"branch2": 1, "branch3": 2},
}
SWITCH = "PARASTREAM_MULTI_STREAM"


class Case(ZooCase):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.plans = {
            "matching": assign(self.graph, "matching", max_streams=3),
            "manual": assign(self.graph, "manual", mapping=MANUAL[name]),
        }



def load(source: str, name: str = "generated") -> types.ModuleType:
    code = compile(source, f"<{name}>", "exec")
    mod = types.ModuleType(name)
    exec(code, mod.__dict__)
    return mod


def run_and_check(c: Case, mod: types.ModuleType):
    model = copy.deepcopy(c.module)
    r = standins.run(mod, model, c.inputs)
    assert standins.outputs_equal(c.expected, r.outputs), "outputs differ from the original"
    for k, v in model.named_buffers():  # cache writes land as in the original forward
        assert torch.equal(v, c.expected_buffers[k]), k
    return r, standins.check(r, mod, c.graph)


def cross_stream_data_edges(c: Case, plan: Plan) -> int:
    a = plan.assignment
    return sum(1 for e in c.graph.edges
               if e.type == "data" and a.get(e.src, 0) != a.get(e.dst, 0))


@pytest.mark.parametrize("plan_kind", ["matching", "manual"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", MODELS)
def test_emitted_code_runs_on_standins(cases, model, target, plan_kind):
    c = cases(model)
    plan = c.plans[plan_kind]
    assert plan.events, "every test plan has events"
    e = emit(c.traced, plan, target, source={"model": model, "scale": "tiny", "phase": None})
    mod = load(e.source)
    assert mod.TARGET == target and mod.ENABLED is False  # off unless the switch says so
    r, problems = run_and_check(c, mod)
    assert problems == []
    rec = r.recorder
    sides = sorted({s for s in plan.assignment.values() if s})
    src = e.source
    if target == "torchair":
        # one npu_wait_tensor per plan event, one stream tag per side stream
        assert rec.count("wait_tensor") == len(plan.events) == e.waits
        tags = {c_.stream for c_ in rec.calls if c_.kind == "switch_enter"}
        assert tags == {f"s{s}" for s in sides}
        for word in ("Event(", "record_stream", "torch.npu", "torch.cuda", ".stream(S["):
            assert word not in src, word
    else:
        api = "npu" if target == "npugraph_ex" else "cuda"
        assert f"with {api}.stream(S[" in src and f"{api}.Event()" in src
        # one record after each recorded op (+ the fork), one wait per event (+ the fork's)
        assert rec.count("event_record") == len({ev.record_after for ev in plan.events}) + 1
        assert rec.count("event_wait") == len(plan.events) + len(sides)
        first_record = {}
        for i, c_ in enumerate(rec.calls):  # Event.record before its Event.wait
            if c_.kind == "event_record":
                first_record.setdefault(c_.info["event"], i)
            if c_.kind == "event_wait":
                assert first_record.get(c_.info["event"], len(rec.calls)) < i
        if cross_stream_data_edges(c, plan):
            assert rec.count("record_stream") >= 1
        for word in ("torchair", "npu_stream_switch", "npu_wait_tensor"):
            assert word not in src, word
        other = "torch.cuda" if target == "npugraph_ex" else "torch.npu"
        assert other not in src
        if target == "cuda":
            assert "npugraph_ex" not in src


@pytest.mark.parametrize("target", TARGETS)
def test_core_limits(cases, target):
    c = cases("moe_layer")
    plan = copy.deepcopy(c.plans["manual"])
    plan.core_limits = {"1": {"aicore_num": 8, "reason": "test"}}
    plan.strength = "C2"
    e = emit(c.traced, plan, target, device_name="ascend910b")
    mod = load(e.source)
    r, problems = run_and_check(c, mod)
    assert problems == []
    if target == "torchair":
        assert "torchair.scope.limit_core_num(8, 16)" in e.source
        assert r.recorder.count("limit_enter") >= 1
    elif target == "npugraph_ex":
        assert "npu.npugraph_ex.scope.limit_core_num(8, 16)" in e.source
        assert r.recorder.count("limit_enter") >= 1
    else:  # CUDA has no per-stream core limit: said, not applied
        assert "no torch.cuda equivalent" in e.source
        assert r.recorder.count("limit_enter") == 0
    # vectorcore_num given by the plan wins over the default ratio
    plan.core_limits = {"1": {"aicore_num": 8, "vectorcore_num": 5}}
    gen = load(emit(c.traced, plan, target, device_name="ascend910b").source)
    assert (8, 5) in gen.CORE_LIMITS.values()
    if target != "cuda":  # the file checks at import that the API it calls is there
        assert any(k.endswith("limit_core_num") for k in gen.NEEDS)
    # a device whose documentation does not list core limits gets none
    e = emit(c.traced, plan, target, device_name="ascend910")
    assert "limit_core_num(" not in e.source.split('"""', 2)[2]
    if target != "cuda":
        assert e.warnings and "not emitted" in e.warnings[0]


def _drop_line(source: str, needle: str) -> str:
    lines = source.splitlines()
    i = next(i for i, ln in enumerate(lines) if needle in ln)
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = indent + "pass  # removed"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("target", ["npugraph_ex", "cuda"])
def test_check_catches_a_missing_wait_record_stream_or_fork(cases, target):
    c = cases("moe_layer")
    plan = c.plans["matching"]
    src = emit(c.traced, plan, target).source
    first = next(i for i, ev in enumerate(plan.events) if ev.wait_before)
    _, problems = run_and_check(c, load(_drop_line(src, f"# e{first}: ")))
    assert any("without an event ordering it" in p for p in problems), problems
    _, problems = run_and_check(c, load(_drop_line(src, "record_stream(view")))
    assert any("not record_stream-ed" in p for p in problems), problems
    _, problems = run_and_check(c, load(_drop_line(src, "fork.wait(S[1])")))
    assert any("no fork" in p for p in problems), problems
    joins = [i for i, ev in enumerate(plan.events) if ev.wait_before is None]
    _, problems = run_and_check(c, load(_drop_line(src, f"# e{joins[0]}: ")))
    assert any("not joined" in p for p in problems), problems


def test_check_catches_an_unread_npu_wait_tensor(cases):
    c = cases("inception_block")
    plan = c.plans["manual"]
    src = emit(c.traced, plan, "torchair").source
    lines = src.splitlines()
    i = next(i for i, ln in enumerate(lines) if "torchair.scope.npu_wait_tensor(" in ln
             and "join" not in ln)
    new, rest = lines[i].strip().split(" = torchair.scope.npu_wait_tensor(")
    old = rest.split(",")[0]
    j = next(j for j in range(i + 1, len(lines)) if new in lines[j])
    lines[j] = lines[j].replace(new, old)  # the op reads the tensor, not the waited one
    _, problems = run_and_check(c, load("\n".join(lines) + "\n"))
    assert any("no npu_wait_tensor" in p for p in problems), problems


@pytest.mark.parametrize("target", TARGETS)
def test_switch_off_runs_the_original_path(cases, target, monkeypatch):
    c = cases("attention_prolog")
    src = emit(c.traced, c.plans["manual"], target).source
    monkeypatch.delenv(SWITCH, raising=False)
    mod = load(src)
    assert mod.ENABLED is False
    api = standins.standin(target)
    model = copy.deepcopy(c.module)
    wrapper = mod.MultiStreamForward(model, api=api)  # switch off: the api is not even used
    assert wrapper.original is model
    out = wrapper(*c.inputs)
    assert standins.outputs_equal(c.expected, out)
    assert api.recorder.calls == []
    monkeypatch.setenv(SWITCH, "1")
    mod = load(src)
    assert mod.ENABLED is True
    wrapper = mod.MultiStreamForward(copy.deepcopy(c.module), api=api)
    assert standins.outputs_equal(c.expected, wrapper(*c.inputs))
    assert api.recorder.calls


def test_switch_on_without_the_hardware_says_so(cases, monkeypatch):
    c = cases("inception_block")
    monkeypatch.setenv(SWITCH, "on")
    for target, module in (("torchair", "torchair"), ("npugraph_ex", "torch_npu")):
        if importlib.util.find_spec(module) is not None:
            continue
        mod = load(emit(c.traced, c.plans["manual"], target).source)
        with pytest.raises(ImportError, match=f"unset {SWITCH}"):
            mod.MultiStreamForward(copy.deepcopy(c.module))
    if not torch.cuda.is_available():
        mod = load(emit(c.traced, c.plans["manual"], "cuda").source)
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            mod.MultiStreamForward(copy.deepcopy(c.module))


def test_views_go_with_their_producer(cases):
    """A folded view of a side-stream output is taken inside that stream's block."""
    c = cases("moe_layer")
    plan = c.plans["matching"]
    src = emit(c.traced, plan, "cuda").source
    body = src[src.index("def forward"):].splitlines()
    # rms_norm is planned on a side stream; its view runs in the same block, right after it
    s = plan.assignment["rms_norm"]
    assert s != 0
    i = next(i for i, ln in enumerate(body) if ln.strip().startswith("rms_norm ="))
    j = next(i for i, ln in enumerate(body) if ln.strip().startswith("view ="))
    block = [ln for ln in body[:j] if ln.strip().startswith("with cuda.stream(")][-1]
    assert f"S[{s}]" in block and i < j


def test_plan_for_another_model_is_refused(cases):
    c = cases("inception_block")
    bad = Plan(name="x", algorithm="manual", assignment={"linear_99": 1},
               events=[Event("linear_99", None)])
    with pytest.raises(EmitError, match="does not have"):
        emit(c.traced, bad, "cuda")
    with pytest.raises(EmitError, match="unknown target"):
        emit(c.traced, c.plans["manual"], "rocm")


@pytest.mark.parametrize("target", ["cuda", "torchair"])
def test_fx_fallback_trace(target):
    """A model traced by torch.fx (the importer's fallback): call_module nodes run the
    original submodules."""
    module, inputs = ZOO["inception_block"].factory("tiny", None)
    graph = import_module(module, inputs, method="fx")
    plan = assign(graph, "manual", mapping=MANUAL["inception_block"])
    e = emit(trace(module, inputs, method="fx"), plan, target)
    mod = load(e.source)
    assert mod.TRACE == "torch.fx" and "_get(m, 'branch2.0.0')" in e.source
    expected = copy.deepcopy(module)(*inputs)
    r = standins.run(mod, copy.deepcopy(module), inputs)
    assert standins.outputs_equal(expected, r.outputs)
    assert standins.check(r, mod, graph) == []


@pytest.mark.parametrize("model", ["kv_offload", "inference_pipeline"])
def test_other_output_structures(model):
    """kv_offload returns None (its work is cache writes); inference_pipeline returns
    torch.return_types.topk: both come back as the original forward gives them."""
    module, inputs = ZOO[model].factory("tiny", None)
    graph = import_module(module, inputs, name=model)
    plan = assign(graph, "matching", max_streams=3)
    ref = copy.deepcopy(module)
    expected = ref(*inputs)
    for target in ("torchair", "cuda"):
        mod = load(emit(trace(module, inputs), plan, target).source)
        model_copy = copy.deepcopy(module)
        r = standins.run(mod, model_copy, inputs)
        assert type(r.outputs) is type(expected)
        assert standins.outputs_equal(expected, r.outputs)
        for a, b in zip(ref.buffers(), model_copy.buffers()):
            assert torch.equal(a, b)
        assert standins.check(r, mod, graph) == []


def test_outputs_equal_is_bitwise_with_nan_in_the_same_place():
    import torch

    from parastream.emit.standins import outputs_equal

    a = torch.tensor([1.0, float("nan"), 3.0])
    assert outputs_equal((a, {"k": a}), (a.clone(), {"k": a.clone()}))
    assert not outputs_equal(a, torch.tensor([1.0, 2.0, 3.0]))
    assert not outputs_equal(a, a.double())


class Scaled(torch.nn.Module):
    """Non-tensor arguments, which the trace builds into the graph as constants."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x, k: int, flag: bool, *, bias=None):
        y = self.a(x) * k
        return y + self.b(x) if flag else y


@pytest.mark.parametrize("target", TARGETS)
def test_a_call_unlike_the_traced_one_is_refused_not_computed_with_old_constants(target):
    module, inputs = Scaled().eval(), (torch.randn(2, 4), 3, True)
    graph = import_module(module, inputs, name="scaled")
    plan = assign(graph, "matching", max_streams=2)
    mod = load(emit(trace(module, inputs), plan, target).source)
    assert mod.TRACED_CALL[:2] == (3, ()) and mod.TRACED_CALL[3] == {
        1: ("argument 1", 3), 2: ("argument 2", True)}
    wrapper = getattr(mod, mod.CLASS_NAME)(module, api=standins.standin(target), enabled=True)
    x = inputs[0]
    with torch.no_grad():
        assert torch.equal(wrapper(x, 3, True), module(x, 3, True))
        with pytest.raises(ValueError, match="argument 1 is 5, but MultiStreamForward was "
                                             "generated with 3 built into its graph"):
            wrapper(x, 5, True)
        with pytest.raises(ValueError, match="argument 2 is False"):
            wrapper(x, 3, False)
        with pytest.raises(ValueError, match=r"argument 1 is a tensor of shape \(2,\)"):
            wrapper(x, torch.ones(2), True)
        with pytest.raises(TypeError, match=r"a call with 3 positional argument\(s\) and "
                                            r"keywords \[\]; this call has 3 and \['bias'\]"):
            wrapper(x, 3, True, bias=torch.ones(4))
        # a tensor of another shape would run the traced graph's slices and give a wrong
        # result with no error
        assert mod.TRACED_CALL[4] == {0: ("argument 0", (2, 4), "torch.float32")}
        with pytest.raises(ValueError, match=r"argument 0 is \(3, 4\) torch.float32, but "
                                             r"MultiStreamForward was traced with \(2, 4\)"):
            wrapper(torch.randn(3, 4), 3, True)
        with pytest.raises(ValueError, match=r"argument 0 is \(2, 4\) torch.float64"):
            wrapper(x.double(), 3, True)
        off = getattr(mod, mod.CLASS_NAME)(module, enabled=False)  # the original path
        assert torch.equal(off(x, 5, False), module(x, 5, False))


class _ConstantInForward(torch.nn.Module):
    """A constant tensor made in forward: export lifts it and copies it
    (``lift_fresh_copy``), a real kernel the importer folds into its reader."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a1, self.b1, self.b2 = (torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        b = self.b2(torch.relu(self.b1(x)))
        w = torch.tensor([1.0, -2.0, 3.0, 0.5] * 8)
        return self.a1(x) * w + b


@pytest.mark.parametrize("target", ["npugraph_ex", "cuda"])
def test_a_constant_made_in_forward_is_copied_before_the_fork(target):
    # left where it stands, the copy would run inside the open side-stream block after
    # its last record and be read on stream 0 with no event; the check must catch that
    module = _ConstantInForward().eval()
    inputs = (torch.randn(6, 32),)
    graph = import_module(module, inputs, name="constant")
    side = [o.name for o in graph.ops if o.name in ("linear", "relu", "linear_1")]
    plan = assign(graph, "manual", mapping={n: 1 for n in side})
    src = emit(trace(module, inputs), plan, target).source
    lines = src.splitlines()
    copy_at = next(i for i, ln in enumerate(lines) if "lift_fresh_copy.default(" in ln)
    assert copy_at < next(i for i, ln in enumerate(lines) if "fork.record(S[0])" in ln)
    expected = copy.deepcopy(module)(*inputs)
    r = standins.run(load(src), copy.deepcopy(module), inputs)
    assert standins.outputs_equal(expected, r.outputs)
    assert standins.check(r, load(src), graph) == []
    # the check now sees an unordered read by any op, not only along the graph's edges:
    # the copy moved back into the side stream's block is caught
    body = [ln for ln in lines if "lift_fresh_copy.default(" not in ln]
    at = next(i for i, ln in enumerate(body) if "with cuda.stream(S[1])" in ln
              or "with npu.stream(S[1])" in ln)
    indent = body[at + 1][: len(body[at + 1]) - len(body[at + 1].lstrip())]
    var = lines[copy_at].strip().split(" = ")[0]
    moved = "\n".join(body[:at + 1] + [f"{indent}{lines[copy_at].strip()}"] + body[at + 1:])
    assert var in moved
    r = standins.run(load(moved + "\n"), copy.deepcopy(module), inputs)
    problems = standins.check(r, load(moved + "\n"), graph)
    assert any("lift_fresh_copy" in p and "with no event after it" in p for p in problems), \
        problems


class _BufferUpdate(torch.nn.Module):
    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.register_buffer("running", torch.full((32,), start))

    def forward(self, x):
        b = self.b(torch.relu(x))
        self.running.mul_(0.9).add_(b.mean(0) * 0.1)
        return self.a(x) + self.running


def test_torchair_waits_through_an_input_an_in_place_op_does_not_write():
    # add_(wait_tensor(mul_, dep), ...) would write the value wait_tensor returns; TorchAir
    # declares no alias for it, so the buffer update might not reach the buffer
    import re

    module = _BufferUpdate().eval()
    inputs = (torch.randn(6, 32),)
    graph = import_module(module, inputs, name="buffer_update")
    # the buffer's mul_ on stream 1, its add_ on stream 0: add_ waits for mul_
    plan = assign(graph, "manual", mapping={"mul_": 1})
    src = emit(trace(module, inputs), plan, "torchair").source
    waited = set(re.findall(r"(\w+_w\d+) = torchair\.scope\.npu_wait_tensor", src))
    assert waited, src
    for var in waited:
        assert not re.search(rf"aten\.\w+_\.\w+\({var}\b", src), var
    expected_module = copy.deepcopy(module)
    expected = expected_module(*inputs)
    model = copy.deepcopy(module)
    r = standins.run(load(src), model, inputs)
    assert standins.outputs_equal(expected, r.outputs)
    assert torch.equal(model.running, expected_module.running)
    assert standins.check(r, load(src), graph) == []


class _ReadThenWrite(_BufferUpdate):
    def __init__(self) -> None:
        super().__init__(start=1.0)

    def forward(self, x):
        y = self.b(x) * self.running  # reads the buffer
        self.running.mul_(0.9)  # then writes it: its only tensor input
        return self.a(x) + y


def test_torchair_warns_when_the_only_input_is_the_written_one():
    # a review: with no other input the wait goes through the written tensor, silently
    module = _ReadThenWrite().eval()
    inputs = (torch.randn(6, 32),)
    graph = import_module(module, inputs, name="read_then_write")
    plan = Plan(name="p", algorithm="manual", streams=2,
                assignment={"linear": 1, "mul": 1, "mul_": 0, "linear_1": 0, "add": 0},
                events=[Event("mul", "mul_"), Event("mul", "add")])
    e = emit(trace(module, inputs), plan, "torchair")
    assert len(e.warnings) == 1 and "mul_ writes its only tensor input" in e.warnings[0]
    assert "# note: e0: mul (stream 1) -> mul_ (stream 0): mul_ writes" in e.source
    r = standins.run(load(e.source), copy.deepcopy(module), inputs)
    assert standins.outputs_equal(copy.deepcopy(module)(*inputs), r.outputs)
    assert standins.check(r, load(e.source), graph) == []
    assert emit(trace(module, inputs), plan, "cuda").warnings == []
