"""A decoder of the user's own from ``file.py:factory``: served like the built-in one;
each way the file can be wrong is one error naming it."""

from __future__ import annotations

import pytest

from parastream.decode.protocol import is_factory_spec, load_factory
from parastream.decode.workload import WorkloadOptions
from parastream.errors import InputError
from parastream.workflow.decode import DecodeSettings, decode

GOOD = """
from parastream.decode.model import build_model

def make():
    return build_model("tiny", seed=1)

def broken():
    raise ValueError("no weights\\nat all")

def wrong():
    return 42
"""


@pytest.fixture
def factory_file(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(GOOD)
    return f


def test_a_factory_decoder_is_served(factory_file):
    r = decode(f"{factory_file}:make", "batch", workload=WorkloadOptions(requests=3),
               settings=DecodeSettings(concurrency=2))
    doc = r.to_dict()
    assert doc["model"]["name"] == "tiny" and doc["modes"][0]["finished"] == 3


@pytest.mark.parametrize("attr, words", [
    ("nothing", "no factory named 'nothing'"),
    ("broken", "factory broken() failed: ValueError: no weights"),
    ("wrong", "returned a int without config, new_pool"),
])
def test_a_bad_factory_is_one_line(factory_file, attr, words):
    with pytest.raises(InputError) as e:
        load_factory(f"{factory_file}:{attr}")
    assert e.value.path == str(factory_file)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_missing_or_broken_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_factory(f"{tmp_path / 'none.py'}:make")
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(InputError, match="failed to import: SyntaxError"):
        load_factory(f"{bad}:make")


def test_is_factory_spec():
    assert is_factory_spec("a/b.py:make")
    assert not is_factory_spec("small") and not is_factory_spec("b.py:")
