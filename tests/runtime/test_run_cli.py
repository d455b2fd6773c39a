"""``parastream run``: --auto and --plan end to end at tiny scale, JSON and traces, errors."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from parastream.errors import InputError
from parastream.cli import run as cli
from parastream.cpu import malloc
from parastream.workflow.run import candidate_label as _candidate_label
from parastream.workflow.run import safe_label as _safe


def run(*argv: str) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    cli.add_parser(sub)
    a = p.parse_args(["run", *argv])
    return a.func(a)


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    from parastream.device.profile import dumps_profile, load_profile

    path = tmp_path_factory.mktemp("prof") / "cpu.json"
    path.write_bytes(dumps_profile(load_profile("cpu")))
    return str(path)


def test_auto_with_check_trace_and_json(tmp_path, capsys, profile, monkeypatch):
    for k in malloc.KEEP_ENV:  # what --malloc keep sets for child processes is undone after
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    rc = run("inception_block", "--auto", "--scale", "tiny", "--runs", "5", "--warmup", "1",
             "--top", "2", "--check", "--jitter", "5", "--profile", profile,
             # the JSON inside the trace folder, which does not exist yet
             "--trace", str(tmp_path / "tr"), "--json", str(tmp_path / "tr" / "r.json"))
    assert rc == 0
    out = capsys.readouterr().out
    assert "recommendation:" in out and "speedup" in out and "predicted" in out
    doc = json.loads((tmp_path / "tr" / "r.json").read_text())
    assert doc["schema"] == "parastream.run/1"
    rec = doc["recommendation"]
    assert rec["action"] in ("keep", "change", "single")  # timing decides which
    assert len(doc["candidates"]) == 2
    measured = {c["name"] for c in doc["candidates"]}
    # single stream names no candidate; keep or change names one that was measured
    assert (rec["action"] == "single") == (rec["candidate"] is None)
    assert rec["candidate"] is None or rec["candidate"] in measured
    if not os.environ.get("OMP_WAIT_POLICY"):  # each side again in its best OpenMP setting
        iso = doc["separate_processes"]
        assert iso["single_us"] > 0 and set(iso["candidates_us"]) == {c["name"] for c in doc["candidates"]}
        assert all(c["iso_multi_us"] > 0 for c in doc["candidates"])
    # the second prediction replays this model's measured single-stream op times, for every
    # candidate (the table's header may wrap "pred. from ops us" at a width its figures
    # decide, so the JSON says it)
    details = doc["details"]
    assert [d["candidate"] for d in details] == [c["name"] for c in doc["candidates"]]
    for d in details:
        assert d["predicted_from_ops_us"] > 0 and d["prediction_from_ops_error"] is not None
    assert all(c["outputs_ok"] for c in doc["candidates"])
    for c in doc["candidates"]:  # how far the speedup moved between the rounds
        lo, hi = c["speedup_quartiles"]
        assert 0 < lo <= hi
    # the table's caption, wrapped at the table's width (which its figures decide)
    assert "quartiles of the rounds' own speedups" in " ".join(out.split())
    assert doc["malloc"] == "keep" and doc["malloc_note"] in out  # the default
    if malloc._mallopt() is not None:
        assert "freed memory kept" in out
    for d in doc["details"]:  # page faults per call of each side, where the OS counts them
        faults = d["measurement"]["faults_per_call"]
        if malloc.page_faults() is not None:
            assert len(faults) == 2 and min(faults) >= 0
    for d in doc["details"]:  # late stream starts, counted over the kept multi-stream runs
        lag = d["start_lag"]
        assert lag["runs"] >= 1 and 0 <= lag["late_runs"] <= lag["runs"]
        assert lag["threshold_us"] >= 200.0 and lag["median_lag_us"] >= 0
    files = os.listdir(tmp_path / "tr")
    # the baseline, the plan, the --json and one trace per measured candidate; no other
    assert sorted(files) == sorted(["single.json", "plan.json", "r.json"]
                                   + [_safe(_candidate_label(n)) + ".json" for n in measured])
    # the trace is what 'parastream analyze' reads
    from parastream.timeline.readers import read_path

    tl = read_path(str(tmp_path / "tr" / "single.json"))[0]
    assert len(tl) > 0 and set(tl.streams) == {"0"}
    # measured on this CPU, and the trace says so (not the simulator's "simulated device")
    assert tl.device.name.startswith("CPU") and "cpu backend" in tl.device.name
    # the folder as written, plan.json next to the traces, is what analyze takes
    from parastream.cli import main

    assert main(["analyze", str(tmp_path / "tr"), "--format", "json", "-o",
                 str(tmp_path / "a.json"), "--no-progress"]) == 0
    sources = {c["source"] for c in json.loads((tmp_path / "a.json").read_text())["captures"]}
    assert not any(s.endswith(("plan.json", "r.json")) for s in sources) and len(sources) >= 2


@pytest.fixture(scope="module")
def moe_plan(tmp_path_factory):
    """A matching plan file for the tiny moe_layer."""
    from parastream.device.profile import load_profile
    from parastream.graph.models import resolve
    from parastream.workflow.plan import build
    from parastream.plan.io import dumps

    g = resolve("moe_layer", scale="tiny")
    doc = build(g, load_profile("cpu"), algorithm="matching", mapping=None, max_streams=2)
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_bytes(dumps(doc))
    return path


def test_plan_file_round_trip(moe_plan, capsys, profile, tmp_path):
    path = moe_plan
    assert run("moe_layer", "--plan", str(path), "--scale", "tiny", "--runs", "5",
               "--profile", profile, "--malloc", "system",
               "--json", str(tmp_path / "r.json")) == 0
    out = capsys.readouterr().out
    # what ran is the plan file's pick (a single-stream pick with its first multi-stream
    # candidate, "matching"), not candidates of a plan made anew
    plan = json.loads(path.read_text())
    names = [c["name"] for c in json.loads((tmp_path / "r.json").read_text())["candidates"]]
    assert names == [plan["recommended"]] + (["matching"] if plan["recommended"] == "single"
                                             else [])
    assert "recommendation:" in out and "malloc: the allocator's own settings" in out
    with pytest.raises(InputError, match="no candidate"):
        run("moe_layer", "--plan", str(path), "--candidate", "nope", "--scale", "tiny")
    # --pin: the stream workers of this run (and of processes it starts) get their own cores
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARASTREAM_PIN_STREAMS", "")  # recorded, so run's own setting is undone
        assert run("moe_layer", "--plan", str(path), "--scale", "tiny", "--runs", "5",
                   "--profile", profile, "--pin", "--side-by-side-only") == 0
        assert os.environ["PARASTREAM_PIN_STREAMS"] == "1"
    assert "recommendation:" in capsys.readouterr().out
    with pytest.raises(InputError, match="does not fit"):
        run("inception_block", "--plan", str(path), "--scale", "tiny", "--profile", profile)


def test_bad_inputs_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(InputError, match="at least 5"):
        run("moe_layer", "--auto", "--runs", "3")
    with pytest.raises(InputError, match="unknown model"):
        run("no_such_model", "--auto", "--scale", "tiny")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="invalid JSON"):
        run("moe_layer", "--plan", str(bad))
    with pytest.raises(InputError, match="meta device"):
        run("moe_layer", "--auto", "--scale", "7b")
    with pytest.raises(InputError, match="not a model") as info:  # a file, but no model
        run(str(bad), "--auto")
    assert info.value.path == str(bad)
    monkeypatch.chdir(tmp_path)  # the same file named as typed in its folder
    with pytest.raises(InputError, match="not a model") as info:
        run("bad.json", "--auto")
    assert info.value.path == "bad.json"
    with pytest.raises(SystemExit):
        run("moe_layer")  # --plan or --auto is required
    with pytest.raises(InputError, match="needs --check"):
        run("moe_layer", "--auto", "--jitter", "5")
    with pytest.raises(InputError, match="must not be negative"):
        run("moe_layer", "--auto", "--check", "--jitter", "-3")
    with pytest.raises(InputError, match="--candidate picks a candidate of --plan"):
        run("moe_layer", "--auto", "--candidate", "matching")
    for margin in ("nan", "inf", "-0.1"):
        with pytest.raises(InputError, match="--margin a finite"):
            run("moe_layer", "--auto", "--margin", margin)


def test_outputs_are_checked_before_measuring(tmp_path):
    """A --json or --trace that cannot be written fails at once: no minute of measuring
    lost, and no trace folder left behind for a run whose JSON was never written."""
    trace = tmp_path / "tr"
    with pytest.raises(InputError, match="cannot write: no directory") as info:
        run("moe_layer", "--auto", "--scale", "tiny", "--trace", str(trace),
            "--json", str(tmp_path / "missing" / "r.json"))
    assert info.value.path == str(tmp_path / "missing" / "r.json") and not trace.exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="it is a file, not a folder"):
        run("moe_layer", "--auto", "--scale", "tiny", "--trace", str(tmp_path / "afile"))
    with pytest.raises(InputError, match="it is a directory"):
        run("moe_layer", "--auto", "--scale", "tiny", "--json", str(tmp_path))
    # a run audit: a folder where a file of --trace goes failed after the whole run and
    # left the other files written
    (trace / "plan.json").mkdir(parents=True)
    with pytest.raises(InputError, match="it is a directory") as info:
        run("moe_layer", "--auto", "--scale", "tiny", "--trace", str(trace))
    assert info.value.path == str(trace / "plan.json")
    assert sorted(p.name for p in trace.iterdir()) == ["plan.json"]
    # --json as one of --trace's files: the run's summary replaced the single-stream trace
    with pytest.raises(InputError, match="--json and --trace's single timeline name the same"):
        run("moe_layer", "--auto", "--scale", "tiny", "--trace", str(tmp_path / "t2"),
            "--json", str(tmp_path / "t2" / "single.json"))
    with pytest.raises(InputError, match="--json names the --trace folder"):
        run("moe_layer", "--auto", "--scale", "tiny", "--trace", str(tmp_path / "t4"),
            "--json", str(tmp_path / "t4"))


def test_a_folder_in_the_place_of_a_candidates_trace_is_refused_before_measuring(
        tmp_path, moe_plan, profile):
    trace = tmp_path / "tr"
    (trace / (_safe("matching") + ".json")).mkdir(parents=True)
    with pytest.raises(InputError, match="it is a directory") as info:
        run("moe_layer", "--plan", str(moe_plan), "--candidate", "matching", "--scale", "tiny",
            "--runs", "5", "--profile", profile, "--trace", str(trace))
    assert info.value.path == str(trace / "matching.json")
    assert sorted(p.name for p in trace.iterdir()) == ["matching.json"]
    with pytest.raises(InputError, match="--json and --trace's matching timeline"):
        run("moe_layer", "--plan", str(moe_plan), "--candidate", "matching", "--scale", "tiny",
            "--runs", "5", "--profile", profile, "--trace", str(tmp_path / "t3"),
            "--json", str(tmp_path / "t3" / "matching.json"))


def test_untraceable_model_names_its_file(tmp_path):
    f = tmp_path / "branchy.py"
    f.write_text("import torch\n"
                 "class M(torch.nn.Module):\n"
                 "    def forward(self, x):\n"
                 "        return x.item() if x.sum() > 0 else x\n"
                 "def build():\n"
                 "    return M(), (torch.randn(3),)\n")
    with pytest.raises(InputError, match=r"model from build\(\) cannot be traced") as info:
        run(f"{f}:build", "--auto")
    assert info.value.path == str(f) and "\n" not in str(info.value)


def test_a_model_without_ops_is_refused(tmp_path):
    f = tmp_path / "ident.py"
    f.write_text("import torch\n"
                 "class M(torch.nn.Module):\n"
                 "    def forward(self, x):\n"
                 "        return x\n"
                 "def make():\n"
                 "    return M(), (torch.randn(3),)\n")
    with pytest.raises(InputError, match="the graph has no ops: nothing to run") as info:
        run(f"{f}:make", "--auto")
    assert info.value.path == f"{f}:make"


def test_frequent_late_stream_starts_suggest_pin(tmp_path, moe_plan, capsys, profile,
                                                  monkeypatch):
    from parastream.runtime import measure

    path = moe_plan
    late = {"median_lag_us": 900.0, "late_runs": 3, "late_median_us": 950.0, "runs": 3,
            "threshold_us": 200.0, "frequent": True}
    monkeypatch.setattr(measure, "late_starts", lambda m, plan: late)
    args = ("moe_layer", "--plan", str(path), "--scale", "tiny", "--runs", "5",
            "--profile", profile, "--side-by-side-only", "--json", str(tmp_path / "r.json"))
    monkeypatch.delenv("PARASTREAM_PIN_STREAMS", raising=False)
    assert run(*args) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    assert "in 3 of 3 runs a stream started its first op" in out and "--pin" in out
    assert json.loads((tmp_path / "r.json").read_text())["details"][0]["start_lag"] == late
    monkeypatch.setenv("PARASTREAM_PIN_STREAMS", "1")  # already pinned: nothing to suggest
    assert run(*args) == 0
    assert "started its first op" not in capsys.readouterr().out


def test_a_model_with_a_nested_input_runs(tmp_path, capsys, profile):
    """torch.export flattens a tuple argument into one placeholder per tensor; run binds
    the call's nested inputs the same way."""
    f = tmp_path / "nested.py"
    f.write_text("import torch\n"
                 "class M(torch.nn.Module):\n"
                 "    def __init__(self):\n"
                 "        super().__init__()\n"
                 "        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)\n"
                 "    def forward(self, pair):\n"
                 "        x, y = pair\n"
                 "        return self.a(x) + self.b(y)\n"
                 "def make(scale='tiny', phase=None):\n"
                 "    return M().eval(), ((torch.randn(2, 8), torch.randn(2, 8)),)\n"
                 "class One(torch.nn.Module):\n"
                 "    def forward(self, x, pair):\n"
                 "        return torch.relu(x) + torch.sigmoid(pair[0])\n"
                 "def one(scale='tiny', phase=None):  # as many leaves as arguments\n"
                 "    return One().eval(), (torch.ones(64), (torch.ones(64),))\n")
    for factory in ("make", "one"):
        assert run(f"{f}:{factory}", "--auto", "--check", "--runs", "5", "--warmup", "1",
                   "--profile", profile, "--side-by-side-only") == 0
        assert "recommendation:" in capsys.readouterr().out


def test_trace_labels_keep_candidates_off_the_baseline_and_the_plan_files():
    from parastream.workflow.run import torch_label as _torch_label
    from parastream.workflow.run import trace_file as _trace_file

    names = {_trace_file("d", x) for x in
             ("single", "plan", _candidate_label("single"), _candidate_label("plan"),
              _candidate_label("matching"), "single-torch", _torch_label("single"),
              _torch_label("matching"))}
    assert len(names) == 8  # a plan's own "single" candidate overwrote the baseline


def test_a_model_that_fails_on_its_inputs_is_a_one_line_error(tmp_path):
    """An embedding index out of range traces on fake tensors and raises only on the real
    data; a buffer rebound with another shape runs eagerly and fails in the exported
    program's write-back. Both are the model's problem, named before any measuring."""
    f = tmp_path / "bad.py"
    f.write_text("import torch\n"
                 "class Emb(torch.nn.Module):\n"
                 "    def __init__(self):\n"
                 "        super().__init__()\n"
                 "        self.emb = torch.nn.Embedding(50, 16)\n"
                 "        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)\n"
                 "    def forward(self, ids):\n"
                 "        e = self.emb(ids)\n"
                 "        return self.a(e) + self.b(e)\n"
                 "def emb():\n"
                 "    return Emb().eval(), (torch.tensor([[1, 2, 60]]),)\n"
                 "class Cache(torch.nn.Module):\n"
                 "    def __init__(self):\n"
                 "        super().__init__()\n"
                 "        self.k, self.v = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)\n"
                 "        self.register_buffer('cache', torch.zeros(1, 8))\n"
                 "    def forward(self, x):\n"
                 "        self.cache = torch.cat([self.cache, self.k(x)], 0)[-4:]\n"
                 "        return self.cache.sum(0) + self.v(x).sum(0)\n"
                 "def cache():\n"
                 "    return Cache().eval(), (torch.randn(2, 8),)\n")
    with pytest.raises(InputError, match="the model raises on its example inputs: "
                                         "IndexError: index out of range") as info:
        run(f"{f}:emb", "--auto")
    assert info.value.path == f"{f}:emb" and "\n" not in str(info.value)
    with pytest.raises(InputError, match="the traced program fails at op 'copy_.*RuntimeError"
                                         ".*the module itself ran") as info:
        run(f"{f}:cache", "--auto")
    assert "\n" not in str(info.value)


def test_a_model_that_fails_on_a_later_call_is_a_one_line_error(tmp_path, profile):
    """A step counter indexing a 3-row table: the first call runs (require_runs), the
    third raises while measured, in the plain module or in the traced program."""
    f = tmp_path / "later.py"
    f.write_text("import torch\n"
                 "class M(torch.nn.Module):\n"
                 "    def __init__(self):\n"
                 "        super().__init__()\n"
                 "        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)\n"
                 "        self.register_buffer('step', torch.zeros((), dtype=torch.long))\n"
                 "        self.register_buffer('table', torch.randn(3, 8))\n"
                 "    def forward(self, x):\n"
                 "        self.step.add_(1)\n"
                 "        return self.a(x) + self.table[self.step], self.b(x)\n"
                 "def make():\n"
                 "    return M(), (torch.randn(4, 8),)\n")
    with pytest.raises(InputError, match=r"on a later call: .*IndexError.*index 3 is out "
                                         r"of bounds .*the first call ran") as info:
        run(f"{f}:make", "--auto", "--profile", profile, "--runs", "5")
    assert info.value.path == f"{f}:make" and "\n" not in str(info.value)



@pytest.mark.parametrize("single_too", [False, True])
def test_differing_outputs_say_whether_the_single_stream_program_differs_too(
        tmp_path, profile, monkeypatch, single_too):
    """A candidate whose outputs differ: a missing wait, or (when the one-stream program
    differs as well) a traced program that is not the module's."""
    from parastream.runtime.executor import Comparison, MultiStreamExecutor

    def check(self, *inputs, runs=1, **kw):
        streams = len(set(self.plan.assignment.values()) | {0})
        return Comparison(streams == 1 and not single_too, True,
                          error=None if streams == 1 and not single_too else "output 0 differs")

    monkeypatch.setattr(MultiStreamExecutor, "check", check)
    out = tmp_path / "r.json"
    # (exit 1: a candidate's outputs differ)
    assert run("two_chains", "--auto", "--scale", "tiny", "--runs", "5", "--top", "1", "--check",
               "--profile", profile, "--side-by-side-only", "--json", str(out)) == 1
    note = json.loads(out.read_text())["details"][0]["check"]
    assert note.startswith("output 0 differs")
    assert ("the single-stream program differs too" in note) == single_too


def test_check_undoes_in_place_view_ops_and_compares_mha_without_its_fast_path(
        tmp_path, capsys, profile, encoder_model):
    """x.unsqueeze_(0) on the input (torch.fx: export refuses it) grew the input by a
    dimension each call, and the eager TransformerEncoderLayer's fused fast path rounds
    apart from the traced ops: both read as streams that broke the outputs."""
    f = tmp_path / "m.py"
    f.write_text("import torch\n"
                 "class Grow(torch.nn.Module):\n"
                 "    def __init__(self):\n"
                 "        super().__init__()\n"
                 "        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)\n"
                 "    def forward(self, x):\n"
                 "        x.unsqueeze_(0)\n"
                 "        return self.a(x) + self.b(x)\n"
                 "def grow():\n"
                 "    torch.manual_seed(0)\n"
                 "    return Grow().eval(), (torch.randn(4, 8),)\n")
    for spec in (f"{f}:grow", f"{encoder_model}:make"):
        assert run(spec, "--auto", "--check", "--runs", "5", "--warmup", "1",
                   "--profile", profile, "--side-by-side-only") == 0, spec
        out = capsys.readouterr().out
        assert "check: outputs identical (bitwise)" in out and "differ" not in out, spec


def test_a_shape_mismatch_does_not_claim_a_zero_difference():
    import torch

    from parastream.runtime.executor import compare

    c = compare((torch.zeros(4),), (torch.zeros(8),))
    assert not c and "output 0: (8,)" in c.describe() and "max |diff|" not in c.describe()
    c = compare((torch.zeros(4),), (torch.ones(4),))
    assert "max |diff| 1" in c.describe()
