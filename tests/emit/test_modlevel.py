"""Module-level patches: the plan written as a change to the user's own module (its forward
calling its own submodules inside the target's stream blocks), issued side-first, checked on
the recording stand-ins, bitwise against the original model, as a diff that ``patch -p1``
applies, and under ``torch.compile(fullgraph=True)`` for TorchAir."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import shutil
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from parastream.emit import modlevel, standins  # noqa: E402
from parastream.emit.codegen import emit, node_streams, trace  # noqa: E402
from parastream.graph.ir import validate  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402
from parastream.zoo import ZOO  # noqa: E402
from parastream.plan import hb  # noqa: E402
from parastream.plan.assign import assign  # noqa: E402

TARGETS = ("torchair", "npugraph_ex", "cuda")
#: a plan per model whose branches are whole submodule calls
MAPS = {
    "moe_layer": {"mlp.shared_experts": 1},                              # shared || routed
    "medusa_heads": {"medusa.0": 1, "medusa.1": 2},                      # heads || lm_head
    "llama_layer": {"self_attn.k_proj": 1, "self_attn.v_proj": 2},       # q/k/v projections
    "inception_block": {"branch2": 1, "branch3": 2},                     # conv branches
}
HOSTS = {"moe_layer": "MoE", "medusa_heads": "MedusaHeads", "llama_layer": "LlamaAttention",
         "inception_block": "InceptionBlock"}
SWITCH = "PARASTREAM_MULTI_STREAM"


class Case:
    def __init__(self, name: str, mapping: dict | None = None) -> None:
        self.name = name
        self.module, self.inputs = ZOO[name].factory("tiny", None)
        self.graph = import_module(self.module, self.inputs, name=name)
        self.plan = assign(self.graph, "manual", mapping=mapping or MAPS[name])
        self.traced = trace(self.module, self.inputs)
        stream_of, real = node_streams(self.traced, self.plan)
        self.site = modlevel.analyse(self.traced, self.plan, self.module, self.inputs,
                                     self.graph, stream_of, real)
        with torch.no_grad():
            self.expected = copy.deepcopy(self.module)(*copy.deepcopy(self.inputs))

    def patch(self, target: str, device: str | None = "ascend910b") -> modlevel.Patch:
        return modlevel.render(self.site, target, plan=self.plan,
                               source={"model": self.name, "scale": "tiny"},
                               model_name=self.name, device_name=device,
                               switch=self.plan.switch)

    def expected_streams(self) -> dict[str, int]:
        return {c: st.stream for st in self.site.stmts for c in st.calls
                if st.stream is not None}



def load(source: str, name: str = "gen") -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


@pytest.fixture
def registered(monkeypatch):
    """A generated module importable by name (torch.compile looks its globals up)."""
    def make(source: str) -> types.ModuleType:
        mod = load(source, "ps_generated")
        monkeypatch.setitem(sys.modules, "ps_generated", mod)
        return mod
    return make


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("model", list(MAPS))
def test_a_module_level_patch_runs_on_the_standins_bitwise(cases, model, target):
    c = cases(model)
    p = c.patch(target)
    src = p.source
    assert src.count("\n") < modlevel.MAX_LINES, src
    assert f"from parastream.zoo import {HOSTS[model]}" in src
    assert f"class MultiStream{HOSTS[model]}({HOSTS[model]}):" in src
    gen = load(src)
    assert gen.LEVEL == "module" and gen.TARGET == target and gen.ENABLED is False
    r = standins.run_patch(gen, copy.deepcopy(c.module), copy.deepcopy(c.inputs))
    assert standins.outputs_equal(c.expected, r.outputs)
    assert standins.check_patch(r, gen, c.expected_streams()) == []
    rec = r.recorder
    sides = c.site.side
    if target == "torchair":
        assert {x.stream for x in rec.calls if x.kind == "switch_enter"} == \
            {f"s{s}" for s in sides}
        assert rec.count("wait_tensor") >= 1
        for word in ("Event", "record_stream", "torch.cuda", ".stream(S["):
            assert word not in src, word
    else:
        assert rec.count("stream_create") == len(sides)
        assert rec.count("event_wait") >= 2 * len(sides)   # the fork and the join
        for word in ("torchair", "npu_stream_switch", "npu_wait_tensor"):
            assert word not in src, word


def test_the_patch_is_a_few_lines_around_the_users_calls(cases):
    """The MoE patch: the shared expert inside the side-stream block, issued before the
    routed experts, a wait before the add, the add as written."""
    c = cases("moe_layer")
    body = c.patch("cuda").source.split("def forward", 1)[1]
    lines = [ln.strip() for ln in body.splitlines()]
    at = {k: next(i for i, ln in enumerate(lines) if ln.startswith(k))
          for k in ("with api.stream(S[1])", "shared_experts = self.shared_experts(x)",
                    "routed = self.routed(x)", "e0.wait(S[0])",
                    "return shared_experts + routed")}
    assert list(at.values()) == sorted(at.values()), at
    tb = c.patch("torchair").source
    assert 'with tng.scope.npu_stream_switch("s1", 0):' in tb
    assert "tng.scope.npu_wait_tensor(shared_experts, shared_experts)" in tb


@pytest.mark.parametrize("model", list(MAPS))
def test_side_work_is_issued_first_and_the_order_keeps_the_plans_happens_before(cases, model):
    c = cases(model)
    program = validate(c.graph)
    idx = {n: i for i, n in enumerate(program)}
    stmt_pos = {op: k for k, i in enumerate(c.site.order) for op in c.site.stmts[i].ops}
    first = min(idx[o] for o in stmt_pos)

    def key(op: str) -> tuple:
        return (first, stmt_pos[op], idx[op]) if op in stmt_pos else (idx[op], -1, 0)

    order = sorted(program, key=key)
    hb.check(c.graph, c.plan, order)  # raises when an event no longer orders an edge
    pos = {op: i for i, op in enumerate(order)}
    preds = c.graph.predecessor_names()

    def ancestors(op: str) -> set[str]:
        out, todo = set(), [op]
        while todo:
            for p in preds.get(todo.pop(), []):
                if p not in out:
                    out.add(p)
                    todo.append(p)
        return out

    a = c.plan.assignment
    for s in c.site.side:
        first_side = min((op for op in stmt_pos if a.get(op) == s), key=pos.get)
        before = [op for op in stmt_pos if a.get(op, 0) == 0 and pos[op] < pos[first_side]
                  and op not in ancestors(first_side)]
        assert before == [], f"stream 0 work {before} is issued before side stream {s}"


def test_medusa_heads_start_before_the_base_head(cases):
    # program order issues lm_head first; the patch issues the side heads first
    src = cases("medusa_heads").patch("cuda").source
    assert src.index("self.medusa[0](h)") < src.index("self.lm_head(h)")
    assert src.index("self.medusa[1](h)") < src.index("self.lm_head(h)")
    assert "torch.stack([base] + [medusa_0, medusa_1], dim=1)" in src


@pytest.mark.parametrize("target", ["torchair", "cuda"])
def test_switch_off_runs_the_original_forward(cases, target, monkeypatch):
    c = cases("inception_block")
    monkeypatch.delenv(SWITCH, raising=False)
    gen = load(c.patch(target).source)
    model = gen.patch(copy.deepcopy(c.module))   # no api, switch off: the original path
    assert type(model).__name__ == "MultiStreamInceptionBlock"
    with torch.no_grad():
        assert standins.outputs_equal(c.expected, model(*c.inputs))


def test_streams_are_made_lazily_one_set_per_device(cases):
    c = cases("medusa_heads")
    gen = load(c.patch("npugraph_ex").source)
    api = standins.standin("npugraph_ex")
    model = gen.patch(copy.deepcopy(c.module), api)
    assert api.recorder.count("stream_create") == 0   # not when the model is patched
    with torch.no_grad():
        model(*c.inputs)
        model(*c.inputs)
    assert api.recorder.count("stream_create") == 2   # one set, on the first call
    devices = [x.info["device"] for x in api.recorder.calls if x.kind == "device_enter"]
    assert devices == [str(c.inputs[0].device)]


def test_a_plan_that_cuts_inside_a_call_falls_back_to_the_op_level_forward(tmp_path):
    from parastream.workflow.emit import emit as emit_plan
    from parastream.errors import InputError
    from parastream.plan.io import PlanDoc, dumps

    module, inputs = ZOO["moe_layer"].factory("tiny", None)
    graph = import_module(module, inputs, name="moe_layer")
    # the shared experts' gate projection and the router on a side stream: the shared
    # experts' call is split between two streams
    plan = assign(graph, "manual", mapping={"mlp.shared_experts.gate_proj": 1,
                                            "mlp.routed.gate": 1})
    with pytest.raises(modlevel.NotModuleLevel, match="cuts inside the call of "
                                                      "mlp.shared_experts"):
        t = trace(module, inputs)
        so, real = node_streams(t, plan)
        modlevel.analyse(t, plan, module, inputs, graph, so, real)
    doc = PlanDoc(model="moe_layer", device="ascend910b", recommended=plan.name,
                  candidates=[plan], source={"model": "moe_layer", "scale": "tiny"})
    path = tmp_path / "plan.json"
    path.write_bytes(dumps(doc))
    e = emit_plan(str(path), target="cuda")
    assert e.level == "op" and "LEVEL = 'op'" in e.source
    assert "no module-level patch, because the plan cuts inside the call of " \
           "mlp.shared_experts" in " ".join(e.source.split())
    with pytest.raises(InputError, match="no module-level patch: the plan cuts inside"):
        emit_plan(str(path), target="cuda", level="module")


def test_the_diff_applies_with_patch_p1_and_runs_bitwise(cases, tmp_path):
    c = cases("moe_layer")
    p = c.patch("cuda")
    diff = modlevel.render_diff(c.site, p, "cuda", c.plan.switch)
    rel = os.path.relpath(c.site.file)
    assert diff.startswith(f"--- a/{rel}\n+++ b/{rel}\n")
    copy_of = tmp_path / rel
    copy_of.parent.mkdir(parents=True)
    shutil.copy(c.site.file, copy_of)
    (tmp_path / "change.diff").write_text(diff)
    r = subprocess.run(["patch", "-p1", "-i", "change.diff"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "if _PS_ENABLED:" in copy_of.read_text()
    spec = importlib.util.spec_from_file_location("patched_zoo", copy_of)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["patched_zoo"] = mod
    try:
        spec.loader.exec_module(mod)
        model, _ = mod.moe_layer("tiny")
        model.load_state_dict(c.module.state_dict())
        inputs = copy.deepcopy(c.inputs)
        with torch.no_grad():
            assert standins.outputs_equal(c.expected, model(*inputs))  # switch off
            mod._PS_ENABLED, mod._PS_API = True, standins.standin("cuda")
            out = model(*inputs)
        assert standins.outputs_equal(c.expected, out)
        assert mod._PS_API.recorder.count("stream_enter") == 1
    finally:
        sys.modules.pop("patched_zoo", None)


def test_a_missing_api_is_one_line_naming_the_release(cases, monkeypatch):
    c = cases("moe_layer")
    plan = copy.deepcopy(c.plan)
    plan.core_limits = {"1": {"aicore_num": 8}}

    def patch(device: str) -> str:
        return modlevel.render(copy.deepcopy(c.site), "torchair", plan=plan, source={},
                               model_name="moe_layer", device_name=device,
                               switch=SWITCH).source

    src = patch("ascend910b")
    assert "tng.scope.limit_core_num(8, 16)" in src   # Atlas A2 (910B) documents it
    assert "limit_core_num" not in patch("ascend910")  # the first 910: not listed
    old = SimpleNamespace(scope=SimpleNamespace(npu_stream_switch=object(),
                                                npu_wait_tensor=object()))
    monkeypatch.setitem(sys.modules, "torch_npu", types.ModuleType("torch_npu"))
    monkeypatch.setitem(sys.modules, "torchair", old)
    monkeypatch.setenv(SWITCH, "1")
    with pytest.raises(ImportError, match=r"^torchair.scope.limit_core_num is missing: needs "
                                          r"Ascend Extension for PyTorch 7.1.0 \(torchair\) "
                                          rf"\(or unset {SWITCH}\)$"):
        load(src)
    old.scope.limit_core_num = object()
    assert load(src).API is old


def _compile_once(fn, *args):
    from torch._dynamo.testing import EagerAndRecordGraphs

    torch._dynamo.reset()
    backend = EagerAndRecordGraphs()
    out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    return out, backend.graphs


@pytest.mark.parametrize("model", ["moe_layer", "inception_block"])
def test_torchair_patches_trace_as_one_graph(cases, model, registered):
    c = cases(model)
    gen = registered(c.patch("torchair").source)
    api = standins.torchair_graph_standin()
    patched = gen.patch(copy.deepcopy(c.module), api)
    with torch.no_grad():
        out, graphs = _compile_once(patched, *c.inputs)
    assert len(graphs) == 1
    code = graphs[0].code
    assert code.count("parastream_air.scope_enter") == len(c.site.side)
    assert "parastream_air.wait_tensor" in code
    assert standins.outputs_equal(c.expected, out)


def test_torchair_op_level_code_traces_as_one_graph(registered):
    module, inputs = ZOO["moe_layer"].factory("tiny", None)
    graph = import_module(module, inputs, name="moe_layer")
    plan = assign(graph, "manual", mapping=MAPS["moe_layer"])
    plan.core_limits = {"1": {"aicore_num": 8}}
    gen = registered(emit(trace(module, inputs), plan, "torchair",
                          device_name="ascend910b").source)
    wrapper = gen.MultiStreamForward(module, api=standins.torchair_graph_standin(),
                                     enabled=True)
    with torch.no_grad():
        expected = copy.deepcopy(module)(*inputs)
        out, graphs = _compile_once(wrapper, *inputs)
    assert len(graphs) == 1 and "parastream_air.scope_enter" in graphs[0].code
    assert standins.outputs_equal(expected, out)


def test_a_returned_tensor_written_in_place_on_a_side_stream_is_not_a_false_failure():
    """Allocated on stream 0, only written in place on stream 1, returned: the allocator
    knows it by stream 0, so it needs no record_stream onto stream 0. The check kept the
    last producing stream and said it was 'not record_stream-ed onto the origin stream'."""
    rec = standins.Recorder()
    t = torch.zeros(4)
    one = torch.ones(4)
    rec.log("op", 0, func=torch.ops.aten.zeros.default, args=[], result=t)
    fork = standins.StandinEvent(rec)
    fork.record(standins.StandinStream(rec, 0))
    fork.wait(standins.StandinStream(rec, 1))
    rec.log("op", 1, func=torch.ops.aten.add_.Tensor, args=[t, one], result=t)
    done = standins.StandinEvent(rec)
    done.record(standins.StandinStream(rec, 1))
    done.wait(standins.StandinStream(rec, 0))
    gen = SimpleNamespace(TARGET="cuda", TRACE="torch.export", SIDE_STREAMS=(1,),
                          CALLS=(("zeros", "aten.zeros.default"), ("add_", "aten.add_.Tensor")),
                          ASSIGNMENT={"add_": 1}, CORE_LIMITS={}, EVENTS=(("add_", None),))
    r = standins.Run(t, rec, {0: 0, 1: 1}, {standins._storage(one)})
    assert standins.check(r, gen) == []
    # a tensor that the side stream did allocate still needs it
    rec.calls[4] = standins.Call("op", 1, {"func": torch.ops.aten.add.Tensor, "args": [t, one],
                                           "result": (u := torch.zeros(4))})
    gen.CALLS = (("zeros", "aten.zeros.default"), ("add", "aten.add.Tensor"))
    gen.ASSIGNMENT, gen.EVENTS = {"add": 1}, (("add", None),)
    r = standins.Run(u, rec, {0: 0, 1: 1}, {standins._storage(one)})
    assert any("not record_stream-ed onto the origin stream" in p
               for p in standins.check(r, gen))


def test_op_level_streams_are_made_on_first_use_on_the_inputs_device():
    module, inputs = ZOO["inception_block"].factory("tiny", None)
    graph = import_module(module, inputs, name="inception_block")
    plan = assign(graph, "manual", mapping=MAPS["inception_block"])
    gen = load(emit(trace(module, inputs), plan, "npugraph_ex").source)
    api = standins.standin("npugraph_ex")
    wrapper = gen.MultiStreamForward(module, api=api, enabled=True)
    assert api.recorder.count("stream_create") == 0   # not in __init__
    with torch.no_grad():
        wrapper(*inputs)
        wrapper(*inputs)
    assert api.recorder.count("stream_create") == 2
    assert [x.info["device"] for x in api.recorder.calls if x.kind == "device_enter"] == \
        [str(inputs[0].device)]


HF = os.path.join(os.path.dirname(__file__), "..", "graph", "hf_models.py")


@pytest.mark.parametrize("factory,mapping", [
    ("qwen2_moe_block", {"shared_expert": 1, "shared_expert_gate": 1}),
    ("deepseek_v3_layer", {"layer.mlp.shared_experts": 1}),
])
def test_real_transformers_moe_blocks(factory, mapping):
    """transformers' own MoE blocks (tests/graph/hf_models.py): the shared expert on a side
    stream is a patch on Qwen2MoeSparseMoeBlock / DeepseekV3MoE, bitwise on the stand-ins."""
    pytest.importorskip("transformers")
    if not os.path.exists(HF):
        pytest.skip("tests/graph/hf_models.py is not there")
    from parastream.graph.torch_import import import_program

    spec = importlib.util.spec_from_file_location("ps_hf_models", HF)
    hf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf)
    module, inputs = getattr(hf, factory)()
    graph, program = import_program(module, inputs, name=factory)
    plan = assign(graph, "manual", mapping=mapping)
    traced = trace(module, inputs, program=program)
    so, real = node_streams(traced, plan)
    site = modlevel.analyse(traced, plan, module, inputs, graph, so, real)
    with torch.no_grad():
        expected = copy.deepcopy(module)(*copy.deepcopy(inputs))
    for target in TARGETS:
        p = modlevel.render(site, target, plan=plan, source={}, model_name=factory,
                            device_name="ascend910b", switch=SWITCH)
        assert p.source.count("\n") < modlevel.MAX_LINES
        assert f"import {site.cls.__name__}" in p.source   # transformers' class, imported
        gen = load(p.source)
        r = standins.run_patch(gen, copy.deepcopy(module), copy.deepcopy(inputs))
        assert standins.outputs_equal(expected, r.outputs)
        want = {c: st.stream for st in site.stmts for c in st.calls if st.stream is not None}
        assert standins.check_patch(r, gen, want) == []


def test_emit_diff_on_the_command_line(tmp_path, capsys):
    from parastream.cli import main
    from parastream.plan.io import PlanDoc, dumps

    c = Case("inception_block")
    doc = PlanDoc(model="inception_block", device="ascend910b", recommended=c.plan.name,
                  candidates=[c.plan], source={"model": "inception_block", "scale": "tiny"})
    path = tmp_path / "plan.json"
    path.write_bytes(dumps(doc))
    assert main(["emit", str(path), "--target", "npugraph_ex", "--diff"]) == 0
    out = capsys.readouterr().out
    rel = os.path.relpath(c.site.file)
    assert out.startswith(f"--- a/{rel}")
    assert "+    def _forward_multi_stream(self, x: torch.Tensor) -> torch.Tensor:" in out
    assert "+        if _PS_ENABLED:" in out


@pytest.mark.parametrize("streams", [2, 3])
def test_a_plan_whose_side_stream_makes_the_output_and_cuts_a_call_is_refused(streams):
    """The matching plan of the MoE layer puts the final add (the forward's output) and part
    of mlp's ops on a side stream. The output has no module-call stack of its own: taken as
    the root call, the host is the layer, and the cut inside ``mlp`` is refused. (Given a
    root entry of another key than the trace's, the host matched no op at all and the patch
    came out with no stream call.)"""
    module, inputs = ZOO["moe_layer"].factory("tiny", None)
    graph = import_module(module, inputs, name="moe_layer")
    plan = assign(graph, "matching", max_streams=streams)
    assert plan.assignment[graph.ops[-1].name] != 0   # the output is made on a side stream
    traced = trace(module, inputs)
    so, real = node_streams(traced, plan)
    with pytest.raises(modlevel.NotModuleLevel, match="cuts inside the call of mlp "):
        modlevel.analyse(traced, plan, module, inputs, graph, so, real)


PAIR_MODEL = '''import torch


class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x), self.b(x)


class PairSide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pair, self.main = Pair(), torch.nn.Linear(8, 8)

    def forward(self, x):
        ab = self.pair(x)
        return self.main(x) + ab[0] * ab[1]


def make():
    torch.manual_seed(0)
    return PairSide().eval(), (torch.randn(4, 8),)
'''


@contextlib.contextmanager
def _pair_site(tmp_path, name: str):
    """PAIR_MODEL written to ``tmp_path`` and imported as module ``name`` (removed after):
    its module, inputs, the plan with ``pair`` on stream 1, and the module-level site."""
    (tmp_path / "pair_model.py").write_text(PAIR_MODEL)
    spec = importlib.util.spec_from_file_location(name, tmp_path / "pair_model.py")
    user = importlib.util.module_from_spec(spec)
    sys.modules[name] = user
    try:
        spec.loader.exec_module(user)
        module, inputs = user.make()
        graph = import_module(module, inputs, name="pair")
        plan = assign(graph, "manual", mapping={"pair": 1})
        traced = trace(module, inputs)
        so, real = node_streams(traced, plan)
        yield module, inputs, plan, modlevel.analyse(traced, plan, module, inputs, graph, so,
                                                     real)
    finally:
        sys.modules.pop(name, None)


def test_the_diff_of_a_tuple_made_on_a_side_stream_applies(tmp_path):
    """A side call returning a tuple, read on stream 0: the patch record_streams each of its
    tensors in a two-line loop, which the diff writes as two lines."""
    with _pair_site(tmp_path, "ps_pair_model") as (module, inputs, plan, site):
        p = modlevel.render(site, "cuda", plan=plan, source={}, model_name="pair",
                            device_name=None, switch=SWITCH)
        assert "for t in ab:" in p.source
        diff = modlevel.render_diff(site, p, "cuda", SWITCH)
        assert all(ln[:1] in ("-", "+", " ", "@") for ln in diff.splitlines()), diff
        work = tmp_path / "work"
        work.mkdir()
        shutil.copy(tmp_path / "pair_model.py", work / "pair_model.py")
        r = subprocess.run(["patch", "-p1"], input=diff, cwd=work, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        spec = importlib.util.spec_from_file_location("ps_pair_patched", work / "pair_model.py")
        patched = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(patched)
        model, _ = patched.make()
        patched._PS_ENABLED, patched._PS_API = True, standins.standin("cuda")
        with torch.no_grad():
            assert standins.outputs_equal(module(*inputs), model(*inputs))
        assert patched._PS_API.recorder.count("record_stream") == 2


def test_a_patch_of_a_model_file_converts_the_users_own_imported_class(tmp_path, monkeypatch):
    """For a model given as ``file.py:factory`` the patch takes the class from the module
    the user imported from that file (by whatever name), so ``patch(model)`` converts the
    user's instances; had it loaded a second copy of the file, no instance would match and
    the check says nothing was patched."""
    from parastream.graph import models

    (tmp_path / "pair_model.py").write_text(PAIR_MODEL)
    module, inputs, _, _ = models.load_model(f"{tmp_path / 'pair_model.py'}:make", "tiny", None)
    graph = import_module(module, inputs, name="pair")
    plan = assign(graph, "manual", mapping={"pair": 1})
    traced = trace(module, inputs)
    so, real = node_streams(traced, plan)
    site = modlevel.analyse(traced, plan, module, inputs, graph, so, real)
    src = modlevel.render(site, "npugraph_ex", plan=plan, source={}, model_name="pair",
                          device_name=None, switch=SWITCH).source
    assert src.count("\n") < modlevel.MAX_LINES
    for name in [n for n, m in sys.modules.items() if n.startswith("_parastream_user_")
                 and getattr(m, "__file__", "") == str(tmp_path / "pair_model.py")]:
        monkeypatch.delitem(sys.modules, name)   # the user's process: parastream never ran
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pair_model", raising=False)
    import pair_model   # the user imports the model, then the patch

    user_model, _ = pair_model.make()
    gen = load(src)
    assert gen.PairSide is pair_model.PairSide
    r = standins.run_patch(gen, user_model, inputs)
    assert type(user_model).__name__ == "MultiStreamPairSide"
    with torch.no_grad():
        assert standins.outputs_equal(pair_model.make()[0](*inputs), r.outputs)
    assert standins.check_patch(r, gen, {"pair": 1, "main": 0}) == []
    # a model of another copy of the class is not converted, and the check says so
    spec = importlib.util.spec_from_file_location("pair_copy", tmp_path / "pair_model.py")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    r = standins.run_patch(gen, other.make()[0], inputs)
    assert any("no module of the model ran the patched forward" in p
               for p in standins.check_patch(r, gen))


def test_a_torchair_wait_on_a_tuple_waits_each_of_its_tensors(tmp_path, registered):
    """The side call returns a tuple that stream 0 reads: npu_wait_tensor takes tensors, so
    the tuple is rebound tensor by tensor (on its first tensor's dependency), and the file
    still traces as one graph."""
    with _pair_site(tmp_path, "ps_pair_ta") as (module, inputs, plan, site):
        src = modlevel.render(site, "torchair", plan=plan, source={}, model_name="pair",
                              device_name=None, switch=SWITCH).source
        assert "ab = type(ab)(tng.scope.npu_wait_tensor(t, ab[0]) for t in ab)" in src
        with torch.no_grad():
            expected = module(*inputs)
        gen = registered(src)
        r = standins.run_patch(gen, copy.deepcopy(module), inputs)
        assert standins.outputs_equal(expected, r.outputs)
        assert standins.check_patch(r, gen, {"pair": 1, "main": 0}) == []
        assert r.recorder.count("wait_tensor") == 2
        patched = gen.patch(copy.deepcopy(module), standins.torchair_graph_standin())
        with torch.no_grad():
            out, graphs = _compile_once(patched, *inputs)
        assert len(graphs) == 1 and standins.outputs_equal(expected, out)
