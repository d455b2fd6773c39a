"""``resolve``: zoo names and ``path/to/file.py:factory``, with one clear error per mistake;
and the ``parastream zoo`` command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from parastream.errors import InputError  # noqa: E402
from parastream.graph.ir import validate  # noqa: E402
from parastream.graph.models import resolve  # noqa: E402


def write(tmp_path, body: str, name: str = "model.py") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


GOOD = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = nn.Linear(width, width)
        def forward(self, x):
            return torch.relu(self.fc(x))

    def plain():
        return Net(16), (torch.randn(2, 16),)

    def scaled(scale="small"):
        width = {"tiny": 8, "small": 32, "7b": 4096}[scale]
        device = "meta" if scale == "7b" else "cpu"
        with torch.device(device):
            return Net(width), (torch.randn(4, width),)

    def with_phase(scale="small", phase=None):
        return Net(8), (torch.randn(1 if phase == "decode" else 4, 8),)

    def single_tensor():
        return Net(8), torch.randn(2, 8)

    def wrong_shape():
        return Net(8)

    def not_module():
        return "net", (torch.randn(2, 8),)

    def bad_inputs():
        return Net(8), 3

    def raises():
        raise RuntimeError("weights not found\\nmore detail")

    def needs_args(path):
        return Net(8), (torch.randn(2, 8),)

    class Dyn(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    def untraceable():
        return Dyn(), (torch.randn(3),)

    class Quits(nn.Module):
        def forward(self, x):
            raise SystemExit(3)

    def quits():
        return Quits(), (torch.randn(3),)

    class Chatty(nn.Module):
        def forward(self, x):
            print("hello from forward")
            return x * 2

    def chatty():
        print("hello from the factory")
        return Chatty(), (torch.randn(3),)

    NOT_CALLABLE = 3
"""


def test_zoo_name_resolves():
    g = resolve("moe_layer", "tiny")
    validate(g)
    assert g.name == "moe_layer"
    assert g.meta["scale"] == "tiny" and g.meta["phase"] == "prefill" and g.meta["zoo"] == "moe_layer"


def test_zoo_phase_and_device():
    g = resolve("llama_layer", "tiny", phase="decode", device="cpu")
    assert g.meta["phase"] == "decode" and g.meta["device"] == "cpu"
    assert any(o.type == "index_copy_" for o in g.ops)


@pytest.mark.parametrize("kwargs,match", [
    ({"spec": "no_such_model"}, "unknown model 'no_such_model'.*llama_layer"),
    ({"spec": "llama_layer", "scale": "70b"}, "unknown scale '70b'"),
    ({"spec": "inception_block", "phase": "decode"}, "has no phase 'decode'.*infer"),
    ({"spec": "llama_layer", "device": "no_such_device"}, "unknown device"),
])
def test_zoo_errors(kwargs, match):
    with pytest.raises(InputError, match=match):
        resolve(**kwargs)


def test_factory_without_arguments(tmp_path):
    path = write(tmp_path, GOOD)
    g = resolve(f"{path}:plain")
    validate(g)
    assert [o.type for o in g.ops] == ["linear", "relu"]
    assert g.name == "model:plain" and g.meta["file"] == path


def test_factory_gets_scale_and_phase(tmp_path):
    path = write(tmp_path, GOOD)
    g = resolve(f"{path}:scaled", scale="7b")
    assert g.ops[0].flops == 2 * 4 * 4096 * 4096 + 4 * 4096
    g = resolve(f"{path}:with_phase", scale="tiny", phase="decode")
    assert g.ops[0].inputs[0].shape == [1, 8]
    g = resolve(f"{path}:single_tensor")
    assert g.ops[0].inputs[0].shape == [2, 8]


@pytest.mark.parametrize("factory,match", [
    ("missing", r"no factory named 'missing' \(callables defined there: Chatty, Dyn, Net"),
    ("NOT_CALLABLE", "'NOT_CALLABLE' is a int, not a callable factory"),
    ("wrong_shape", r"must return \(module, example_inputs\), got a Net"),
    ("not_module", "returned a str as the module; expected a torch.nn.Module"),
    ("bad_inputs", "returned a int as example inputs; expected a tuple of tensors"),
    ("raises", r"factory raises\(\) failed: RuntimeError: weights not found$"),
    ("needs_args", r"needs arguments \(path\)"),
    ("untraceable", r"model from untraceable\(\) cannot be traced \(torch.export: .*torch.fx: "),
    # a sys.exit() in forward ended the process with exit code 3 and no word
    ("quits", r"model from quits\(\) cannot be traced \(torch.export: SystemExit: 3"),
])
def test_factory_errors(tmp_path, factory, match):
    path = write(tmp_path, GOOD)
    with pytest.raises(InputError, match=match) as info:
        resolve(f"{path}:{factory}")
    assert info.value.path == path and "\n" not in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(InputError, match="no such file") as info:
        resolve(f"{tmp_path}/nope.py:make")
    assert info.value.path == f"{tmp_path}/nope.py"
    with pytest.raises(InputError, match="path/to/file.py:factory"):
        resolve(str(tmp_path / "model.py"))
    with pytest.raises(InputError, match="no such file"):  # a graph file that is not there
        resolve(str(tmp_path / "graph.json"))
    with pytest.raises(InputError, match="syntax error on line 2"):
        resolve(write(tmp_path, "x = 1\ndef f(:\n", "syn.py") + ":f")
    with pytest.raises(InputError, match=r"null bytes"):  # no "line None" (SyntaxError, 3.11)
        resolve(write(tmp_path, "x = 1\x00\n", "nul.py") + ":f")
    with pytest.raises(InputError, match="failed to import: ModuleNotFoundError: No module named "
                                         "'not_a_real_package'"):
        resolve(write(tmp_path, "import not_a_real_package\n", "imp.py") + ":f")
    with pytest.raises(InputError, match="not a Python name"):
        resolve(write(tmp_path, GOOD) + ":1abc")
    with pytest.raises(InputError, match="failed to import: SystemExit: 3"):
        resolve(write(tmp_path, "import sys\nsys.exit(3)\n", "ex.py") + ":f")
    with pytest.raises(InputError, match=r"factory f\(\) failed: SystemExit: 4"):
        resolve(write(tmp_path, "import sys\ndef f():\n    sys.exit(4)\n", "ex2.py") + ":f")


def test_a_shape_mismatch_is_one_line_on_stderr(tmp_path):
    """The export and the fx fallback both fail; torch's fake tensors would log a 40-line
    traceback on the way, which stays out of the user's terminal."""
    f = write(tmp_path, textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(4, 4)
            def forward(self, x):
                return self.a(x)
        def make():
            return M(), (torch.randn(2, 5),)
        """), "shape.py")
    r = subprocess.run([sys.executable, "-m", "parastream", "graph", f"{f}:make"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"parastream: {f}: model from make() cannot be traced")


def test_file_may_import_its_siblings(tmp_path):
    write(tmp_path, "import torch\nWIDTH = 8\n", "helper_mod.py")
    path = write(tmp_path, """
        import torch
        from helper_mod import WIDTH
        def make():
            return torch.nn.Linear(WIDTH, WIDTH), (torch.randn(1, WIDTH),)
    """)
    assert resolve(f"{path}:make").ops[0].type == "linear"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parastream", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_zoo_lists_every_model():
    from parastream.zoo import ZOO

    r = run_cli("zoo")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(ZOO)
    r = run_cli("zoo", "--format", "json")
    doc = json.loads(r.stdout)
    assert [d["name"] for d in doc] == list(ZOO)
    assert all(d["scales"] == ["tiny", "small", "7b"] and d["description"] for d in doc)


def test_cli_zoo_does_not_import_torch_for_other_commands():
    code = ("import sys; from parastream.cli import _parser; _parser(); "
            "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


def test_a_folder_named_like_a_zoo_model_does_not_hide_it(tmp_path, monkeypatch):
    # `run two_chains --trace two_chains` leaves such a folder; the zoo name still works
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two_chains").mkdir()
    assert resolve("two_chains", scale="tiny").name == "two_chains"
    with pytest.raises(InputError, match="a folder, not a model"):
        resolve(str(tmp_path / "two_chains"))
    with pytest.raises(InputError, match="a folder, not a model"):
        resolve("./two_chains")
    (tmp_path / "out.json").mkdir()  # a folder, not a missing file
    with pytest.raises(InputError, match="a folder, not a model"):
        resolve("out.json")
    # a file of a zoo model's name (`analyze -o two_chains`) does not hide the model either
    from parastream.graph.models import load_graph

    (tmp_path / "moe_layer").write_text('{"schema": "parastream.run/1"}')
    assert load_graph("moe_layer", scale="tiny").name == "moe_layer"
    from parastream.graph.models import is_graph_file

    # graph and simulate ask the same question before --scale/--batch (they refused them)
    assert not is_graph_file("moe_layer") and is_graph_file("./moe_layer")
    # both read past any run of leading blanks (a 64-byte head once said "not a graph")
    (tmp_path / "padded.json").write_text(" \n" * 40_000 + '{"schema": "parastream.run/1"}')
    assert is_graph_file("./padded.json")
    with pytest.raises(InputError, match="not a parastream graph"):
        load_graph("./padded.json")
    (tmp_path / "blank.json").write_text(" \n" * 40_000)
    assert not is_graph_file("./blank.json")
    # and a plan records the zoo model it was made for, not the file beside it
    from parastream.graph.models import model_source

    assert model_source("moe_layer") == "moe_layer"
    assert model_source("./moe_layer") == str(tmp_path / "moe_layer")
    with pytest.raises(InputError, match="not a parastream graph"):
        load_graph("./moe_layer")


def test_a_phase_for_a_factory_that_takes_none_is_refused(tmp_path):
    # it was built at its own shapes and labelled with the phase asked for
    path = write(tmp_path, GOOD)
    for factory in ("plain", "scaled"):
        with pytest.raises(InputError, match=rf"factory {factory}\(\) takes no phase: drop "
                                             "--phase decode"):
            resolve(f"{path}:{factory}", phase="decode")
    assert resolve(f"{path}:scaled", scale="tiny").meta["phase"] is None


def test_what_the_model_prints_goes_to_stderr(tmp_path):
    path = write(tmp_path, GOOD)
    r = subprocess.run([sys.executable, "-m", "parastream", "graph", f"{path}:chatty",
                        "--format", "json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "parastream.graph-analysis/1"
    assert "hello from the factory" in r.stderr
    # emit prints the generated module on stdout: the model's prints stay out of it
    plan = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "-m", "parastream", "plan", f"{path}:chatty",
                        "--device", "h100", "-o", str(plan)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "parastream", "emit", str(plan), "--target",
                        "cuda"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    compile(r.stdout, "generated.py", "exec")
    assert "hello from forward" in r.stderr
