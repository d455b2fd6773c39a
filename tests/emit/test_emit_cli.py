"""``parastream emit PLAN --target ...``: plan.json in, a runnable module out; bad input is
one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from parastream.cli import main  # noqa: E402
from parastream.workflow.emit import emit as emit_plan  # noqa: E402
from parastream.errors import InputError  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402
from parastream.zoo import ZOO  # noqa: E402
from parastream.plan.assign import assign  # noqa: E402
from parastream.plan.io import PlanDoc, dumps  # noqa: E402

SOURCE = {"model": "inception_block", "scale": "tiny", "phase": None}


def _registered() -> bool:
    r = subprocess.run([sys.executable, "-m", "parastream", "--help"], capture_output=True,
                       text=True, timeout=120)
    return r.returncode == 0 and "emit" in r.stdout


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    module, inputs = ZOO["inception_block"].factory("tiny", None)
    graph = import_module(module, inputs, name="inception_block")
    plans = [assign(graph, "matching", max_streams=3),
             assign(graph, "manual", mapping={"branch2": 1, "branch3": 2})]
    plans[1].name = "branches/side-each"
    doc = PlanDoc(model="inception_block", device="ascend910b", recommended="matching",
                  candidates=plans, source=dict(SOURCE))
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_bytes(dumps(doc))
    return path


def _load(path) -> types.ModuleType:
    mod = types.ModuleType("gen")
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("target", ["torchair", "npugraph_ex", "cuda"])
def test_emit_writes_a_module(plan_file, tmp_path, target, capsys):
    out = tmp_path / f"gen_{target}.py"
    assert main(["emit", str(plan_file), "--target", target, "-o", str(out), "--level", "op"]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out}" in err and target in err
    mod = _load(out)
    assert mod.TARGET == target and mod.PLAN == "matching"
    assert mod.SOURCE == SOURCE and mod.EVENTS


def test_emit_to_stdout_and_candidate_by_suffix(plan_file, capsys):
    assert main(["emit", str(plan_file), "--target", "cuda", "--candidate", "side-each",
                 "--level", "op"]) == 0
    text = capsys.readouterr().out
    assert "class MultiStreamForward(torch.nn.Module)" in text
    assert "PLAN = 'branches/side-each'" in text
    compile(text, "stdout", "exec")


def test_c2_vector_cores_follow_the_plan_device(plan_file, tmp_path):
    doc = json.loads(plan_file.read_text())
    doc["candidates"][0]["core_limits"] = {"1": {"aicore_num": 6}}
    doc["device"] = "ascend910b"
    p = tmp_path / "ascend910b.json"
    p.write_text(json.dumps(doc))
    assert "limit_core_num(6, 12)" in emit_plan(str(p), target="torchair", level="op").source
    # the first Ascend 910 is not among the products TorchAir documents limit_core_num for:
    # the limit is not emitted, and the file and a warning say why
    doc["device"] = "ascend910"
    p = tmp_path / "ascend910.json"
    p.write_text(json.dumps(doc))
    e = emit_plan(str(p), target="torchair", level="op")
    assert "limit_core_num(" not in e.source and "are not applied" in e.source
    assert any("not emitted for ascend910" in w for w in e.warnings)


def _fails(argv, capsys, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("parastream: ") and "\n" not in err and "Traceback" not in err
    for w in words:
        assert w in err, err
    return err


def test_bad_inputs_are_one_line(plan_file, tmp_path, capsys):
    _fails(["emit", str(tmp_path / "none.json"), "--target", "cuda"], capsys, "none.json",
           "cannot read")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _fails(["emit", str(bad), "--target", "cuda"], capsys, "bad.json", "invalid JSON")
    _fails(["emit", str(plan_file), "--target", "cuda", "--candidate", "nope"], capsys,
           "no candidate named 'nope'", "matching")
    doc = json.loads(plan_file.read_text())
    doc["source"] = {}
    p = tmp_path / "nosource.json"
    p.write_text(json.dumps(doc))
    _fails(["emit", str(p), "--target", "cuda"], capsys, "--model")
    doc["source"] = {"model": "graph.json", "scale": "tiny"}
    p.write_text(json.dumps(doc))
    _fails(["emit", str(p), "--target", "cuda"], capsys, "graph file")
    # the plan's ops are not the model's
    _fails(["emit", str(plan_file), "--target", "cuda", "--model", "moe_layer"], capsys,
           "does not fit")
    # a plan whose events do not order a cross-stream dependency is refused
    doc = json.loads(plan_file.read_text())
    doc["candidates"][0]["events"] = doc["candidates"][0]["events"][:-1]
    p.write_text(json.dumps(doc))
    _fails(["emit", str(p), "--target", "torchair"], capsys, "does not fit")
    _fails(["emit", str(plan_file), "--target", "cuda", "-o", str(tmp_path / "no" / "x.py")],
           capsys, "cannot write")
    for keyword in ("class", "None"):  # names, but no class can have them
        _fails(["emit", str(plan_file), "--target", "cuda", "--class-name", keyword], capsys,
               "is not a Python name a class can have")
    with pytest.raises(SystemExit) as exc:
        main(["emit", str(plan_file), "--target", "rocm"])
    assert exc.value.code == 2
    with pytest.raises(InputError):
        emit_plan(str(plan_file), target="cuda", candidate="nope")


def test_command_line_end_to_end(tmp_path, capsys):
    """parastream plan -> python -m parastream emit -> python generated.py (the self-check
    on the stand-ins)."""
    if not _registered():
        pytest.skip("'emit' is not registered in parastream.cli yet")
    plan = tmp_path / "plan.json"
    assert main(["plan", "moe_layer", "--scale", "tiny", "--out", str(plan),
                 "--format", "json"]) == 0
    capsys.readouterr()
    gen = tmp_path / "gen.py"
    r = subprocess.run([sys.executable, "-m", "parastream", "emit", str(plan), "--target",
                        "npugraph_ex", "-o", str(gen)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bitwise equal" in r.stdout and "consistent with the plan" in r.stdout


def test_self_check_runs_with_a_custom_class_name(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["plan", "inception_block", "--scale", "tiny", "--out", str(plan),
                 "--format", "json"]) == 0
    capsys.readouterr()
    gen = tmp_path / "foo.py"
    r = subprocess.run([sys.executable, "-m", "parastream", "emit", str(plan), "--target", "cuda",
                        "--class-name", "Foo", "-o", str(gen)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "class Foo" in gen.read_text()
    r = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bitwise equal" in r.stdout


def test_a_user_model_plan_emits_from_another_folder(tmp_path, capsys, monkeypatch):
    """The plan records a model file by its absolute path: emit, and the generated module's
    self-check, find it from any folder."""
    (tmp_path / "um").mkdir()
    (tmp_path / "um" / "my_model.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)\n"
        "    def forward(self, x):\n"
        "        return self.a(x) + self.b(x)\n"
        "def make(scale='tiny', phase=None):\n"
        "    return M().eval(), (torch.randn(4, 16),)\n")
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "um/my_model.py:make", "--scale", "tiny", "--out", "plan.json",
                 "--format", "json"]) == 0
    capsys.readouterr()
    src = json.loads((tmp_path / "plan.json").read_text())["source"]["model"]
    assert src == f"{tmp_path / 'um' / 'my_model.py'}:make"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    gen = elsewhere / "gen.py"
    assert main(["emit", str(tmp_path / "plan.json"), "--target", "cuda", "-o", str(gen)]) == 0
    r = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=300,
                       cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bitwise equal" in r.stdout


def test_self_check_of_a_model_that_writes_its_input_and_a_buffer(tmp_path, capsys):
    """The generated module's self-check gives each forward its own copy of the inputs and
    the model, without autograd (an ``out=`` op refuses it): a model that writes its input
    in place compares equal to itself."""
    (tmp_path / "w.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)\n"
        "        self.register_buffer('acc', torch.zeros(4, 16))\n"
        "    def forward(self, x):\n"
        "        y = self.a(x)\n"
        "        x.mul_(2.0)\n"
        "        torch.mul(y, 3.0, out=self.acc)\n"
        "        return self.acc + self.b(x)\n"
        "def make(scale='tiny', phase=None):\n"
        "    torch.manual_seed(0)\n"
        "    return M().eval(), (torch.randn(4, 16),)\n")
    plan, gen = tmp_path / "plan.json", tmp_path / "gen.py"
    assert main(["plan", f"{tmp_path / 'w.py'}:make", "--out", str(plan), "--format", "json"]) == 0
    assert main(["emit", str(plan), "--target", "npugraph_ex", "-o", str(gen)]) == 0
    capsys.readouterr()
    r = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bitwise equal" in r.stdout


def test_a_class_name_the_module_uses_itself_is_refused(tmp_path):
    # --class-name ENABLED would shadow the switch (on whatever the environment says),
    # torch/pytree/functools would break the module at call time
    import ast

    from parastream.emit.codegen import RESERVED_NAMES, EmitError, emit, trace
    from parastream.graph.torch_import import import_module
    from parastream.zoo import ZOO
    from parastream.plan.assign import assign

    module, inputs = ZOO["moe_layer"].factory("tiny", None)
    graph = import_module(module, inputs, name="moe_layer")
    plan = assign(graph, "matching", max_streams=2)
    traced = trace(module, inputs)
    for target in ("torchair", "npugraph_ex", "cuda"):
        tree = ast.parse(emit(traced, plan, target).source)
        top = set()
        for node in tree.body:  # every name the module binds at its top level
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                top.add(node.name)
            elif isinstance(node, ast.Assign):
                top |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                top |= {(a.asname or a.name).split(".")[0] for a in node.names}
        assert top - RESERVED_NAMES == {"MultiStreamForward"}, target
    for name in ("ENABLED", "torch", "pytree", "load_model", "_streams_api"):
        with pytest.raises(EmitError, match="uses itself"):
            emit(traced, plan, "cuda", class_name=name)


def test_self_check_of_a_model_on_the_meta_device(tmp_path, capsys):
    # at 7b (built on the meta device) the outputs cannot be compared (NotImplementedError):
    # the calls are checked, the values are not
    plan = tmp_path / "plan.json"
    assert main(["plan", "moe_layer", "--scale", "7b", "--device", "ascend910b", "--out",
                 str(plan), "--format", "json"]) == 0
    capsys.readouterr()
    gen = tmp_path / "gen7b.py"
    r = subprocess.run([sys.executable, "-m", "parastream", "emit", str(plan), "--target",
                        "torchair", "-o", str(gen), "--level", "op"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "outputs: not compared (the model is on the meta device" in r.stdout
    assert "consistent with the plan" in r.stdout and "Traceback" not in r.stderr


def test_a_bad_source_in_a_plan_names_the_plan_file(tmp_path, capsys):
    # the message names the plan file, not only "unknown scale 'huge'"
    plan = tmp_path / "plan.json"
    assert main(["plan", "moe_layer", "--scale", "tiny", "--out", str(plan),
                 "--format", "json"]) == 0
    capsys.readouterr()
    doc = json.loads(plan.read_text())
    doc["source"]["scale"] = "huge"
    plan.write_text(json.dumps(doc))
    for cmd in (["emit", str(plan), "--target", "cuda", "-o", str(tmp_path / "g.py")],
                ["simulate", str(plan)]):
        r = subprocess.run([sys.executable, "-m", "parastream", *cmd], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"{plan}: its source model: unknown scale 'huge'" in r.stderr


def test_self_check_of_a_transformer_layer_compares_without_the_fused_fast_path(
        tmp_path, capsys, encoder_model):
    """Eager inference of a TransformerEncoderLayer takes a fused kernel the generated
    forward (the traced, unfused ops) cannot, and rounds apart: the self-check compared
    them and said DIFFER for every plan."""
    model = encoder_model
    plan = tmp_path / "plan.json"
    assert main(["plan", f"{model}:make", "--out", str(plan), "--format", "json"]) == 0
    capsys.readouterr()
    gen = tmp_path / "gen.py"
    r = subprocess.run([sys.executable, "-m", "parastream", "emit", str(plan), "--target", "cuda",
                        "--candidate", "matching", "-o", str(gen), "--level", "op"],
                       capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(gen)], capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bitwise equal" in r.stdout
