"""One command-line grammar across the commands: the same device default for graph, plan
and simulate (said in the first output line), ``-o/--output`` wherever a command writes
its output, ``--candidate`` resolved one way (ambiguous suffixes list their matches), a
plan's scale enforced by every command that takes a plan, and the labels explained in
``--help``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from parastream.cli import _parser
from parastream.workflow.analyze import default_trace
from parastream.cli.args import DEFAULT_DEVICE

pytest.importorskip("torch")


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def one_line_refusal(r: subprocess.CompletedProcess) -> str:
    """The stderr of a command refused as bad input: exit 2, nothing on stdout, one line."""
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("parastream: "), r.stderr
    return r.stderr


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    """The tiny moe_layer of the zoo as a graph file (shared expert || routed experts)."""
    from parastream.graph.ir import dumps
    from parastream.graph.models import resolve

    path = tmp_path_factory.mktemp("g") / "moe.json"
    path.write_bytes(dumps(resolve("moe_layer", scale="tiny")))
    return path


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory):
    """A plan of the zoo's moe_layer made at scale small, on the cpu profile."""
    path = tmp_path_factory.mktemp("p") / "plan-small.json"
    r = cli("plan", "moe_layer", "--scale", "small", "--device", "cpu", "-o", str(path))
    assert r.returncode == 0, r.stderr
    return path


def test_graph_plan_simulate_share_the_device_default_and_say_it_first(graph_file):
    """graph and simulate defaulted to ascend910b and plan to cpu; each now says the device
    in its first line."""
    p = _parser()
    sub = p._subparsers._group_actions[0].choices
    assert sub["graph"].get_default("device") == sub["plan"].get_default("device") \
        == DEFAULT_DEVICE
    for cmd, said in (("graph", f"device {DEFAULT_DEVICE}"),
                      ("plan", f"on {DEFAULT_DEVICE}"),
                      ("simulate", f"simulated on {DEFAULT_DEVICE}")):
        r = cli(cmd, str(graph_file))
        assert r.returncode == 0, r.stderr
        first = r.stdout.splitlines()[0]
        assert said in first, (cmd, first)


@pytest.mark.parametrize("argv", [
    ["analyze", "t.json"], ["graph", "m"], ["plan", "m"], ["simulate", "m"],
    ["emit", "p.json", "--target", "cuda"], ["calibrate"], ["pipeline"],
])
def test_every_command_that_writes_takes_o_and_output(argv):
    for flag in ("-o", "--output"):
        args = _parser().parse_args([*argv, flag, "out.x"])
        assert args.output == "out.x", (argv, flag)


def test_plan_keeps_out_as_a_hidden_alias():
    p = _parser()
    assert p.parse_args(["plan", "m", "--out", "x.json"]).output == "x.json"
    plan_help = p._subparsers._group_actions[0].choices["plan"].format_help()
    assert "--output" in plan_help and "--out " not in plan_help


def test_simulate_writes_its_report_to_output(graph_file, tmp_path):
    out, js = tmp_path / "sim.txt", tmp_path / "sim.json"
    r = cli("simulate", str(graph_file), "--streams", "1,2", "-o", str(out), "--json", str(js))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and f"wrote {out}" in r.stderr
    assert out.read_text().splitlines()[0].endswith("eager mode")
    assert json.loads(js.read_text())["device"] == DEFAULT_DEVICE


@pytest.fixture(scope="module")
def two_point_plan(tmp_path_factory, graph_file):
    """A plan whose side-serial suffix names two candidates: the moe_layer's plan with
    its point's side-serial candidate copied under a second point's name."""
    path = tmp_path_factory.mktemp("amb") / "plan.json"
    assert cli("plan", str(graph_file), "--device", "cpu", "-o", str(path)).returncode == 0
    doc = json.loads(path.read_text())
    first = next(c for c in doc["candidates"] if c["name"].endswith("/side-serial"))
    doc["candidates"].append(dict(first, name="another point/side-serial"))
    path.write_text(json.dumps(doc))
    return path, first["name"]


@pytest.mark.parametrize("cmd", ["analyze", "emit", "simulate", "run"])
def test_an_ambiguous_candidate_lists_its_matches(cmd, two_point_plan):
    plan, name = two_point_plan
    argv = {"analyze": ["analyze", default_trace(), "--plan", str(plan)],
            "emit": ["emit", str(plan), "--target", "cuda"],
            "simulate": ["simulate", str(plan)],
            "run": ["run", "moe_layer", "--plan", str(plan)]}[cmd]
    err = one_line_refusal(cli(*argv, "--candidate", "side-serial"))
    assert str(plan) in err and "ambiguous" in err
    assert name in err and "another point/side-serial" in err
    # the full name still picks one: the resolver is the same everywhere
    from parastream.plan.io import load_doc

    assert load_doc(str(plan), name)[1].name == name


def test_run_refuses_a_plan_made_at_another_scale(small_plan):
    """run at scale tiny with a plan made at small ran without a word (the op names are the
    same at every scale)."""
    err = one_line_refusal(cli("run", "moe_layer", "--scale", "tiny", "--plan", str(small_plan),
                               "--runs", "5"))
    assert str(small_plan) in err and "--scale tiny" in err and "scale small" in err


def test_emit_refuses_a_scale_other_than_the_plans(small_plan):
    err = one_line_refusal(cli("emit", str(small_plan), "--target", "cuda", "--scale", "tiny"))
    assert str(small_plan) in err and "--scale tiny" in err and "scale small" in err


def test_run_takes_the_plans_scale_when_none_is_given(small_plan):
    """Without --scale, run builds the model at the plan's scale (it was small by default
    anyway; with the plan's shapes it is never another)."""
    from parastream.plan.io import loads, plan_shapes

    doc = loads(small_plan.read_bytes())
    assert plan_shapes(doc, str(small_plan)) == ("small", None)
    assert plan_shapes(doc, str(small_plan), "small") == ("small", None)


@pytest.mark.parametrize("cmd, labels", [
    ("analyze", ("3a", "3b", "3c", "envelope-only", "side-serial")),
    ("plan", ("side-serial", "dominant-on-side", "early-join", "cross-stage", "C1", "C2",
              "C3")),
    ("simulate", ("side-serial", "dominant-on-side", "early-join", "cross-stage", "C3",
                  "envelope-only")),
])
def test_help_explains_the_labels(cmd, labels):
    text = _parser()._subparsers._group_actions[0].choices[cmd].format_help()
    tail = text[text.index("glossary"):]
    for label in labels:
        assert f"\n  {label}:" in tail, (cmd, label)
