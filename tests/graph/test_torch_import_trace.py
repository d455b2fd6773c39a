"""The torch frontend traces once: the Trace holds the graph module, the flattened call and
the export signature parsed into plain fields, and the importer, the runnable and the code
generator all read that one trace."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from parastream.errors import InputError  # noqa: E402
from parastream.graph.trace import Trace, flatten_call, trace  # noqa: E402
from parastream.graph.torch_import import (import_module, import_program,  # noqa: E402
                                           import_trace, import_traced)


class Stateful(nn.Module):
    """A parameter, a buffer, a constant made in forward, and nested inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 2.0))

    def forward(self, x, pair):
        y, z = pair
        bias = torch.tensor([0.5])
        return self.fc(x) * self.scale + y - z + bias


class LoweredWrites(nn.Module):
    """An autocast block (the program is lowered to functional form) and in-place writes
    of a buffer and of the input: the signature names both."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.register_buffer("count", torch.zeros(8))

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.a(x)
        self.count.add_(1.0)
        x.mul_(2.0)
        return y.float() + x


def _inputs():
    torch.manual_seed(0)
    return torch.randn(2, 8), (torch.randn(2, 8), torch.randn(2, 8))


def test_an_exported_trace_names_every_placeholder_once():
    x, pair = _inputs()
    tr = trace(Stateful().eval(), (x, pair), name="stateful")
    assert tr.source == "torch.export" and tr.program is not None
    kinds = [b.kind for b in tr.bindings]
    assert kinds.count("param") == 2 and kinds.count("buffer") == 1
    assert kinds.count("constant") == 1 and kinds.count("input") == 3
    placeholders = [n.name for n in tr.graph.nodes if n.op == "placeholder"]
    assert [b.name for b in tr.bindings] == placeholders
    assert tr.state("param") == {b.name: b.target for b in tr.bindings if b.kind == "param"}
    assert set(tr.state("param").values()) == {"fc.weight", "fc.bias"}
    assert list(tr.state("buffer").values()) == ["scale"]
    # the call flattened once: one leaf per input placeholder, with its path and spec
    assert len(tr.flat_inputs) == len(tr.user_inputs) == 3
    assert tr.flat_inputs[0] is x and tr.flat_inputs[2] is pair[1]
    leaves, paths, spec = flatten_call((x, pair))
    assert len(paths) == 3 and spec == tr.input_spec
    assert [o.kind for o in tr.outputs] == ["user"]
    assert tr.outputs[0].value.op != "placeholder" and tr.out_spec is not None


def test_a_lowered_trace_names_its_buffer_and_input_writes():
    tr = trace(LoweredWrites().eval(), (torch.randn(2, 8),), name="lowered")
    assert list(tr.mutated("buffer_mutation").values()) == ["count"]
    (written,) = tr.mutated("input_mutation").values()
    assert written == tr.user_inputs[0]
    assert [o.kind for o in tr.outputs].count("user") == 1
    g = import_traced(tr, LoweredWrites(), name="lowered")
    assert any("writes:count" in o.side_effects for o in g.ops)


def test_the_fx_fallback_is_a_trace_too(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("export is broken here")

    monkeypatch.setattr(torch.export, "export", broken)
    module = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    tr = trace(module, (torch.randn(2, 8),), name="seq")
    assert tr.source == "torch.fx" and tr.program is None and tr.outputs == []
    assert tr.export_error == "torch.export: RuntimeError: export is broken here"
    assert [b.kind for b in tr.bindings] == ["input"]
    assert all("val" in n.meta for n in tr.graph.nodes if n.op == "call_module")
    g, program = import_program(module, (torch.randn(2, 8),), name="seq")
    assert program is None and g.meta["source"] == "torch.fx"
    g, again = import_trace(module, (torch.randn(2, 8),), name="seq")
    assert isinstance(again, Trace) and again.source == "torch.fx"


def test_the_trace_keeps_the_one_line_errors():
    with pytest.raises(InputError) as info:
        trace(nn.Linear(4, 4), (torch.randn(3, 5),), method="export", name="bad")
    assert str(info.value).startswith("bad: cannot be traced by torch.export: ")
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="expected a torch.nn.Module"):
        trace(lambda x: x, (torch.randn(3),), name="fn")
    with pytest.raises(ValueError, match="method must be"):
        trace(nn.Linear(4, 4), (torch.randn(3, 4),), method="jit")


def test_importer_runnable_and_emitter_share_one_trace(monkeypatch):
    """One torch.export call serves the graph, the runnable and the emitted code, and all
    three name the same nodes."""
    from parastream.emit.codegen import trace as emit_trace
    from parastream.graph.runnable import runnable

    calls = []
    real = torch.export.export

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(torch.export, "export", counting)
    module = Stateful().eval()
    x, pair = _inputs()
    g, tr = import_trace(module, (x, pair), name="stateful")
    rn = runnable(tr, module, g)
    traced = emit_trace(module, (x, pair), program=tr)
    assert len(calls) == 1
    assert rn.graph_module is tr.graph_module
    nodes = {n.name for n in traced.nodes()}
    assert {o.name for o in g.ops} <= nodes
    with torch.no_grad():
        want = module(x, pair)
        got = rn.outputs(rn.graph_module(*rn.bind((x, pair))))
    assert torch.equal(got, want)


def test_import_module_is_the_trace_imported():
    x, pair = _inputs()
    module = Stateful().eval()
    g, tr = import_trace(module, (x, pair), name="stateful")
    again = import_module(module, (x, pair), name="stateful")
    assert [o.name for o in g.ops] == [o.name for o in again.ops]
    assert g.meta["inputs"] == again.meta["inputs"] and len(g.meta["inputs"]) == 3
