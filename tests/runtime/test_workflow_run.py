"""``parastream.workflow.run.run``: ``parastream run`` as a library call, its typed result."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from parastream.errors import InputError  # noqa: E402
from parastream.workflow.run import RunResult, RunSettings, run  # noqa: E402


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    from parastream.device.profile import dumps_profile, load_profile

    path = tmp_path_factory.mktemp("prof") / "cpu.json"
    path.write_bytes(dumps_profile(load_profile("cpu")))
    return str(path)


def test_run_returns_a_typed_result_whose_dict_is_the_json_document(profile, tmp_path):
    notes: list[str] = []
    r = run("two_chains", RunSettings(scale="tiny", runs=5, warmup=1, top=1, profile=profile,
                                      best_settings=False, on_note=notes.append),
            trace=str(tmp_path / "tr"))
    assert isinstance(r, RunResult)
    assert notes[0].startswith("model two_chains (scale tiny)") and any(
        n.startswith("--auto: ") for n in notes)
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["schema"] == "parastream.run/1" and doc["model"] == r.model
    assert not any(k.startswith("_") for k in doc)  # no private keys
    assert "separate_processes" not in doc  # not measured: not in the document
    assert [c["name"] for c in doc["candidates"]] == [d["candidate"] for d in doc["details"]]
    assert doc["recommendation"]["action"] in ("keep", "change", "single")
    # what the report writers take, as fields of the result and not of its document
    (name, (m, analysis)), = r.measurements.items()
    assert name == doc["candidates"][0]["name"] and m.multi_timeline is not None
    assert "plan_check" in analysis and r.torch_traces == {}
    assert r.written and r.written[0].startswith("timelines written to ")
    assert (tmp_path / "tr" / "single.json").exists() and (tmp_path / "tr" / "plan.json").exists()


def test_settings_are_checked_before_any_work():
    with pytest.raises(InputError, match="at least 5"):
        run("two_chains", runs=3)
    with pytest.raises(InputError, match="--candidate picks a candidate of --plan"):
        run("two_chains", candidate="matching")
    with pytest.raises(TypeError):
        run("two_chains", no_such_setting=1)
