"""Real Hugging Face ``transformers`` blocks through ``graph``, ``plan``, ``simulate`` and
``run --auto --check``, named as a user types them (``tests/graph/hf_models.py:factory``).

The MoE blocks' default experts implementation loops over the experts the router picked
(data-dependent control flow): the importer keeps each experts module as one
``parastream::module_call`` op that runs the module itself, so a shared expert beside the
routed experts is still its own branch, and a multi-stream run is bitwise equal to the
module. Tiny configurations, random weights, nothing downloaded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

pytest.importorskip("transformers", reason="the Hugging Face tests need transformers "
                                           "(pip install -e '.[test]')")

import hf_models  # noqa: E402  (after the skip: it imports transformers lazily, torch now)
import torch  # noqa: E402

from parastream.cli import main  # noqa: E402
from parastream.graph.opaque import eager_experts, opaque_experts  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MOE = ("qwen2_moe_block", "mixtral_block", "mixtral_layer", "deepseek_v3_layer")
#: models whose experts have a shared expert beside them, and that shared module's name
SHARED = {"qwen2_moe_block": "shared_expert", "deepseek_v3_layer": "shared_experts"}
ALL = ("llama_layer", "llama_causal_lm", *MOE)


def spec(factory: str) -> str:
    return f"{os.path.join(HERE, 'hf_models.py')}:{factory}"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The shipped cpu profile as a file: run --auto then skips its calibration."""
    from parastream.device.profile import dumps_profile, load_profile

    path = tmp_path_factory.mktemp("prof") / "cpu.json"
    path.write_bytes(dumps_profile(load_profile("cpu")))
    return str(path)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """``graph MODEL --format json`` of every model, once: (document, stderr) by factory."""
    out, folder = {}, tmp_path_factory.mktemp("graphs")
    for name in ALL:
        path = folder / f"{name}.json"
        # (capsys is per test; these documents are made once for the module)
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert main(["graph", spec(name), "--device", "cpu", "--format", "json",
                         "-o", str(path)]) == 0
        out[name] = (json.loads(path.read_text()), err.getvalue())
    return out


def _modules(doc: dict) -> dict[str, dict]:
    return {m["module_id"]: m for m in doc["modules"]}


def _module_calls(doc: dict) -> list[dict]:
    return [o for o in doc["ops"] if o["type"] == "module_call"]


@pytest.mark.parametrize("name", ALL)
def test_graph_imports_and_finds_points(graphs, name):
    doc, err = graphs[name]
    assert doc["ops"] and doc["modules"]
    if name != "mixtral_block":  # a router feeding its experts: one chain, nothing beside it
        assert doc["parallel_points"], name
    calls = _module_calls(doc)
    notes = [line for line in err.splitlines() if line.startswith("parastream: note:")]
    if name in MOE:
        # exactly one opaque op per experts module, a cube op with a cost, and one line
        # that says what was done and why
        assert len(calls) == 1 and calls[0]["module"].endswith("experts")
        assert calls[0]["resource"] == "cube" and calls[0]["flops"] > 0
        assert len(notes) == 1 and "opaque op" in notes[0] and "data-dependent" in notes[0]
    else:
        assert not calls and not notes


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_expert_parallel_to_routed_experts(graphs, name):
    """A point whose branches hold the routed experts' op in one and the shared expert in
    another: the multi-stream case vLLM's Ascend backend switches on."""
    doc, _ = graphs[name]
    mods = _modules(doc)
    experts_op = _module_calls(doc)[0]["name"]
    shared = SHARED[name]

    def holds_experts(branch: dict) -> bool:
        return any(experts_op in mods[m]["ops"] for m in branch["nodes"] if m in mods)

    def is_shared(branch: dict) -> bool:
        paths = [mods[m]["path"] for m in branch["nodes"] if m in mods]
        return bool(paths) and all(shared in p.split(".") for p in paths)

    found = [p for p in doc["parallel_points"] if p["level"] == "module"
             and any(holds_experts(b) for b in p["branches"])
             and any(is_shared(b) for b in p["branches"])]
    assert found, [[b["nodes"] for b in p["branches"]] for p in doc["parallel_points"]]


def test_experts_cost_is_the_routed_experts_at_top_k(graphs):
    """Qwen2-MoE block: 8 tokens x top-2 picks, each through gate_up [2*16, 32] and down
    [32, 16]; plus one multiply per output element for the routing weight."""
    doc, _ = graphs["qwen2_moe_block"]
    op = _module_calls(doc)[0]
    picks, hidden, inter = hf_models.TOKENS * 2, hf_models.HIDDEN, 16
    assert op["flops"] == 2 * picks * (2 * inter * hidden + hidden * inter) + picks * hidden
    expert_weights = 8 * (2 * inter * hidden + hidden * inter) * 4
    # inputs: hidden states (f32), top-k indices (i64) and weights (f32); of the experts'
    # weights only those of the experts hit: 16 uniform picks hit 8*(1-(7/8)^16) = 7.1
    inputs = hf_models.TOKENS * (hidden * 4 + 2 * 8 + 2 * 4)
    assert op["bytes_read"] == int(inputs + expert_weights * (1 - (7 / 8) ** picks))
    assert op["bytes_written"] == hf_models.TOKENS * hidden * 4


def test_import_leaves_the_module_as_it_was():
    """The opaque forward lives only while tracing: afterwards the module runs its own
    eager loop again, with the same result as before the import."""
    module, inputs = hf_models.qwen2_moe_block()
    before = module(*inputs)
    g = import_module(module, inputs, name="qwen2")
    assert "forward" not in vars(module.experts)
    assert torch.equal(module(*inputs), before)
    assert g.meta["notes"] and len(g.meta["notes"]) == 1


def test_experts_with_a_traceable_implementation_stay_op_level():
    """transformers' batched_mm experts implementation has no data-dependent control flow:
    it is traced op by op, not kept opaque."""
    module, inputs = hf_models.qwen2_moe_block()
    assert [p for p, _ in eager_experts(module)] == ["experts"]
    module.experts.config._experts_implementation = "batched_mm"
    assert eager_experts(module) == []
    with opaque_experts(module) as notes:
        assert notes == []
    g = import_module(module, inputs, name="qwen2")
    assert not [o for o in g.ops if o.type == "module_call"] and "notes" not in g.meta
    assert any(o.type == "bmm" and o.module == "experts" for o in g.ops)


@pytest.mark.parametrize("name", ["qwen2_moe_block", "deepseek_v3_layer", "llama_causal_lm"])
def test_plan_and_simulate(name, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["plan", spec(name), "-o", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    assert any(c["streams"] >= 2 for c in doc["candidates"])
    assert main(["simulate", str(plan)]) == 0
    # plan and simulate share their default device, and simulate takes the plan's
    assert "simulated on ascend910b" in capsys.readouterr().out


@pytest.fixture
def one_core():
    """This process on one CPU while inside: one intra-op thread per stream. The experts'
    eager loop calls index_add_ on a few rows per expert, and with two OpenMP threads on a
    busy machine each call waited tens of milliseconds for a descheduled thread (29 ms
    against 6 us on one thread here), which made a five-run measurement take 13 s."""
    try:
        mask = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # no affinity to set here: run as it is
        yield
        return
    os.sched_setaffinity(0, {min(mask)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mask)


@pytest.mark.parametrize("name", ["qwen2_moe_block", "mixtral_layer", "deepseek_v3_layer",
                                  "llama_layer", "llama_causal_lm"])
def test_run_auto_check_is_bitwise(name, tmp_path, profile, one_core, capsys):
    """The multi-stream program (with the opaque experts op calling the real module) gives
    the module's own outputs, bit for bit; run says how the import got round the experts
    loop, as graph does."""
    out = tmp_path / "run.json"
    assert main(["run", spec(name), "--auto", "--check", "--runs", "5", "--warmup", "0",
                 "--drop", "0", "--top", "1", "--side-by-side-only", "--profile", profile,
                 "--json", str(out)]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "parastream: note:" in ln]
    assert len(notes) == (0 if name.startswith("llama") else 1)
    doc = json.loads(out.read_text())
    checks = [d["check"] for d in doc["details"]]
    assert checks and all(c.startswith("outputs identical (bitwise)") for c in checks), checks
    assert all(d["streams"] >= 2 for d in doc["details"])


@pytest.mark.parametrize("name", ALL)
def test_points_and_modules_keep_their_contracts(name):
    """On real model code too: every parallel point's branches are independent and meet
    first at the join; modules are connected, convex and in topological id order."""
    from points_oracle import descendants, module_errors, point_errors

    from parastream.device.profile import load_profile
    from parastream.graph.decompose import decompose
    from parastream.graph.models import resolve

    g = resolve(spec(name))
    d = decompose(g, load_profile("ascend910b"))
    desc = descendants(g)
    assert module_errors(g, d, desc) == []
    assert point_errors(g, d, desc) == []
    # a Mixtral block alone is one chain: router -> experts (the layer around it has points)
    assert bool(d.parallel_points) is (name != "mixtral_block")
