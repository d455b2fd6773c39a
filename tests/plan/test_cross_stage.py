"""Cross-stage candidates on the zoo's layer stack, and the acceptance run: a C3 candidate
and a cross-stage candidate validated and run bitwise equal to the module."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from parastream.device.profile import dumps_profile, load_profile  # noqa: E402
from parastream.graph.ir import validate  # noqa: E402
from parastream.graph.models import resolve  # noqa: E402
from parastream.plan import check  # noqa: E402
from parastream.workflow.plan import build  # noqa: E402
from parastream.plan.io import dumps  # noqa: E402
from parastream.plan.lints import reach_sets  # noqa: E402

CPU = load_profile("cpu")


def cross_stage(doc):
    return [c for c in doc.candidates if c.parallel_point and "cross-stage" in c.name]


@pytest.fixture(scope="module")
def stack():
    g = resolve("llama_stack", scale="tiny", phase="decode")
    return g, build(g, CPU, algorithm=None, mapping=None, max_streams=None, simulate=False,
                    source={"model": "llama_stack", "scale": "tiny", "phase": "decode"})


def test_the_next_layers_independent_prologue_runs_beside_the_current_layer(stack):
    g, doc = stack
    ops = g.index()
    order = validate(g)
    idx = {n: i for i, n in enumerate(order)}
    reach = reach_sets(g, order)
    layer0 = [n for n in order if ops[n].module.startswith("layers.0.")]
    from0 = 0
    for n in layer0:
        from0 |= reach[n]
    found = cross_stage(doc)
    assert len({c.parallel_point for c in found}) == 1 and len(found) >= 2
    point = next(p for p in doc.parallel_points if p["name"] == found[0].parallel_point)
    assert point["instances"] == 1  # two layers: one layer boundary
    for c in found:
        check(g, c)
        side = [n for n, s in c.assignment.items() if s != 0]
        assert side and all(ops[n].module.startswith("layers.1.") for n in side)
        if not c.name.endswith("/pinned"):  # pinned also moves main's cheap consumers over
            assert not any((from0 >> idx[n]) & 1 for n in side)  # nothing of layer 0 reaches
    # the rotary tables' gathers of layer 1 read only the positions
    serial = next(c for c in found if c.name.endswith("/side-serial"))
    assert {ops[n].type for n, s in serial.assignment.items() if s} == {"index_select"}
    assert serial.strength == "C3" and serial.meta["ladder"]["placed"]


def test_one_point_per_layer_pair_is_shared_by_every_pair():
    from parastream.graph.torch_import import import_module
    from parastream.zoo import llama_stack

    m, inputs = llama_stack("tiny", "prefill", layers=4)
    g = import_module(m, inputs, name="llama_stack4")
    doc = build(g, CPU, algorithm=None, mapping=None, max_streams=None, simulate=False)
    found = cross_stage(doc)
    assert found and all(c.meta["instances"] == 3 for c in found)  # layers 0-1, 1-2, 2-3
    for c in found:
        check(g, c)
        assert c.streams == 2


def test_a_single_layer_has_no_cross_stage_point():
    g = resolve("llama_layer", scale="tiny", phase="decode")
    doc = build(g, CPU, algorithm=None, mapping=None, max_streams=None, simulate=False)
    assert not cross_stage(doc)
    assert not any("cross-stage" in p["name"] for p in doc.parallel_points)


def _run(*argv: str) -> int:
    """``parastream run ARGV`` as a user types it."""
    from parastream.cli import main

    return main(["run", *argv])


def test_a_c3_and_a_cross_stage_candidate_run_bitwise_equal(stack, tmp_path):
    profile = tmp_path / "cpu.json"
    profile.write_bytes(dumps_profile(CPU))
    g, doc = stack
    xs = next(c for c in cross_stage(doc) if c.name.endswith("/side-serial"))
    # a C3 point inside a layer: the MLP's up projection starts on the side stream right
    # after the norm, while main has already been handed the gate projection and its silu
    c3 = next(c for c in doc.candidates if c.strength == "C3" and c.parallel_point
              and "cross-stage" not in c.name and c.name.endswith("/side-serial"))
    assert any(p["c1_record_after"] != p["record_after"] for p in c3.meta["ladder"]["placed"])
    path = tmp_path / "plan.json"
    path.write_bytes(dumps(doc))
    for name, cand in (("cross-stage", xs), ("c3", c3)):
        out = tmp_path / f"{name}-run.json"
        assert _run("llama_stack", "--plan", str(path), "--candidate", cand.name, "--scale",
                    "tiny", "--phase", "decode", "--check", "--runs", "5", "--warmup", "1",
                    "--side-by-side-only", "--profile", str(profile), "--json", str(out)) == 0
        ran = json.loads(out.read_text())["candidates"]
        assert [(r["name"], r["outputs_ok"]) for r in ran] == [(cand.name, True)]
