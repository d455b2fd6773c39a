"""``parastream.workflow.emit.emit``: a plan file in, an :class:`EmitResult` out (the code and
what it holds); bad requests are refused before the model is built."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from parastream.errors import InputError  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402
from parastream.zoo import ZOO  # noqa: E402
from parastream.plan.assign import assign  # noqa: E402
from parastream.plan.io import PlanDoc, dumps  # noqa: E402
from parastream.workflow.emit import EmitResult, emit  # noqa: E402


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    module, inputs = ZOO["inception_block"].factory("tiny", None)
    graph = import_module(module, inputs, name="inception_block")
    plan = assign(graph, "manual", mapping={"branch2": 1, "branch3": 2})
    doc = PlanDoc(model="inception_block", device="ascend910b", recommended=plan.name,
                  candidates=[plan], source={"model": "inception_block", "scale": "tiny"})
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_bytes(dumps(doc))
    return path


def test_module_and_op_level_results(plan_file):
    mod = emit(plan_file, target="cuda")
    assert isinstance(mod, EmitResult) and mod.level == "module"
    assert mod.host == "InceptionBlock.forward" and mod.side_streams == (1, 2)
    assert "LEVEL, SIDE_STREAMS" in mod.source and mod.waits >= 2
    op = emit(str(plan_file), target="torchair", level="op", class_name="Fast")
    assert op.level == "op" and "class Fast(torch.nn.Module):" in op.source
    assert op.calls and op.records == 0 and op.record_streams == 0
    doc = op.to_dict()
    assert json.loads(json.dumps(doc)) == doc and "source" not in doc
    assert doc["level"] == "op" and doc["calls"][0] == list(op.calls[0])
    assert doc["candidate"] == op.candidate


def test_diff_level_is_the_module_patch_as_a_diff(plan_file):
    d = emit(plan_file, target="npugraph_ex", level="diff")
    assert d.level == "module" and d.source.startswith("--- a/")
    assert "+        if _PS_ENABLED:" in d.source


@pytest.mark.parametrize("kwargs,words", [
    ({"target": "rocm"}, "unknown target 'rocm'"),
    ({"target": "cuda", "level": "graph"}, "unknown level 'graph'"),
    ({"target": "cuda", "class_name": "torch"}, "uses itself"),
])
def test_bad_requests_are_refused_before_the_model_is_built(tmp_path, kwargs, words):
    # the plan file does not exist: a refusal that names it would mean it was read first
    with pytest.raises(InputError, match=words) as exc:
        emit(tmp_path / "none.json", **kwargs)
    assert exc.value.path is None
