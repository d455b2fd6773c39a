"""``parastream decode --simulate``: the decode modes predicted on a device profile (the
same scheduler and requests on the discrete-event device model). Invariants, not
figures: batch never below sequential from concurrency 4, the winner column is the
argmax, the same seed gives the same document, every request ends once, the
two-micro-batch gate never costs batch+overlap more than 1% against batch, and two
micro-batches cross over (a loss at small forwards, a gain at large) on some profile."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.cli.decode import add_parser
from parastream.decode.config import SIZES
from parastream.decode.config import MODES
from parastream.decode.predict import HostCost, calibrate_two_micro, figures, serve
from parastream.decode.predict_cost import StepCosts, decode_work, prefill_work, split_two
from parastream.decode.predict_sweep import SweepSettings, at_rate, winner
from parastream.decode.scheduler import SchedulerSettings
from parastream.decode.workload import Request, WorkloadOptions, make_requests
from parastream.device.profile import list_profiles, load_profile
from parastream.errors import InputError
from parastream.workflow.decode import predict

ROOT = Path(__file__).parents[2]
#: a small sweep: enough points for every invariant, seconds to run
SMALL = SweepSettings(concurrency=(1, 4, 16), rates=(math.inf, 40.0))


def _run(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers())
    args = p.parse_args(["decode", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def docs():
    """The small sweep on two profiles, 24 requests each."""
    wl = WorkloadOptions(requests=24, seed=3)
    return {d: predict("7b", d, "all", workload=wl, settings=SMALL).to_dict()
            for d in ("ascend910b", "h100")}


def test_batch_never_below_sequential_from_concurrency_4(docs):
    for doc in docs.values():
        for row in doc["sweep"]:
            m = row["modes"]
            if row["concurrency"] >= 4:
                assert m["batch"]["tokens_per_s"] >= m["sequential"]["tokens_per_s"], row


def test_the_winner_is_the_argmax(docs):
    for doc in docs.values():
        for row in doc["sweep"]:
            best = max(f["tokens_per_s"] for f in row["modes"].values())
            assert row["modes"][row["winner"]]["tokens_per_s"] == best
            assert row["winner"] == winner(row["modes"])


def test_every_request_ends_once(docs):
    for doc in docs.values():
        for row in doc["sweep"]:
            for f in row["modes"].values():
                assert f["requests"] == f["finished"] + f["failed"] == 24


def test_the_gate_never_costs_batch_overlap_over_one_percent(docs):
    for doc in docs.values():
        for row in doc["sweep"]:
            m = row["modes"]
            assert m["batch+overlap"]["tokens_per_s"] >= 0.99 * m["batch"]["tokens_per_s"], row


def test_the_document_is_labelled_and_complete(docs):
    doc = docs["ascend910b"]
    assert doc["schema"] == "parastream.decode-predict/1"
    assert doc["label"] == "simulated on ascend910b" and doc["model"]["layers"] == 32
    assert "stated constant" in doc["host"]["said"]
    assert doc["rates"] == ["inf", 40.0]
    assert [(r["concurrency"], r["rate"]) for r in doc["sweep"]] == [
        (c, r) for r in ("inf", 40.0) for c in (1, 4, 16)]
    assert all(list(r["modes"]) == list(MODES) for r in doc["sweep"])


def test_the_same_seed_gives_the_same_document(docs):
    again = predict("7b", "ascend910b", "all", workload=WorkloadOptions(requests=24, seed=3),
                    settings=SMALL).to_dict()
    assert json.dumps(again, sort_keys=True) == json.dumps(docs["ascend910b"], sort_keys=True)


def test_two_micro_batches_cross_over_on_some_profile():
    """A loss at small forwards (each half reads the weights), a gain at large ones, on
    at least one shipped accelerator profile; where there is a gain the gate opens at a
    size where every larger calibrated forward wins."""
    crossed = []
    for name in (p for p in list_profiles() if p != "cpu"):
        gate = calibrate_two_micro(StepCosts(SIZES["7b"], load_profile(name)), 64, 96, 64)
        ratios = [r for _, _, r in gate.curve]
        assert ratios[0] < 1.0, name  # the smallest forward loses everywhere
        if gate.threshold is not None:
            assert all(r > 1.0 for _, t, r in gate.curve if t >= gate.threshold)
            assert any(r < 1.0 for _, t, r in gate.curve if t < gate.threshold)
            crossed.append(name)
    assert crossed


def test_every_mode_at_concurrency_one_is_sequential():
    """The sweep takes sequential's figures for streams and batch at concurrency 1: the
    same schedule and forwards, checked here by running them."""
    costs = StepCosts(SIZES["7b"], load_profile("ascend910b"))
    reqs = make_requests(WorkloadOptions(requests=6, rate=30.0, seed=1), 32000)
    one = SchedulerSettings(max_running=1, kv_blocks=4096, context=4096)
    seq = figures(serve("sequential", reqs, one, costs, HostCost()))
    for mode in ("streams", "batch"):
        assert figures(serve(mode, reqs, one, costs, HostCost())) == seq
    # chunked prefills make batch another schedule: the sweep runs it then
    chunked = SweepSettings(concurrency=(1,), rates=(math.inf,), prefill_chunk=16)
    doc = predict("7b", "ascend910b", "all", workload=WorkloadOptions(requests=4, seed=1),
                  settings=chunked).to_dict()
    m = doc["sweep"][0]["modes"]
    assert m["batch"]["passes"] > m["sequential"]["passes"] == m["streams"]["passes"]


def test_overlap_hides_the_host_and_streams_read_weights_per_request():
    costs = StepCosts(SIZES["7b"], load_profile("h100"))
    reqs = make_requests(WorkloadOptions(requests=16, seed=2), 32000)
    s = SchedulerSettings(max_running=16, kv_blocks=4096, context=4096)
    host = HostCost(2000.0, 50.0)  # a heavy host: overlap must show
    tps = {m: figures(serve(m, reqs, s, costs, host))["tokens_per_s"] for m in MODES}
    assert tps["batch+overlap"] > 1.05 * tps["batch"]
    assert tps["streams"] < tps["batch"]
    # one request per stream reads the weights per request: a step of 16 on streams
    # costs far more than one batched step of 16
    work = [decode_work([100])] * 16
    assert costs.streams(work).wall_us > 8 * costs.batched(work).wall_us


def test_split_two_keeps_the_work():
    work = [prefill_work([p]) for p in (5, 40, 17, 3)]
    a, b = split_two(work)
    assert a + b == sum(work[1:], work[0])
    a, b = split_two([prefill_work([9])])
    assert (a.tokens, b.tokens, a.pairs + b.pairs) == (4, 5, 45) and a.rows + b.rows == 1
    assert split_two([decode_work([7])]) is None


def test_at_rate_keeps_the_requests_and_orders_arrivals():
    reqs = make_requests(WorkloadOptions(requests=20, seed=4), 512)
    timed = at_rate(reqs, 50.0, 0)
    assert [r.prompt for r in timed] == [r.prompt for r in reqs]
    arrivals = [r.arrival_s for r in timed]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals) and arrivals[-1] > 0


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 300), st.integers(0, 40),
                                  st.floats(0, 0.2)), min_size=1, max_size=12),
       running=st.integers(1, 6), blocks=st.integers(2, 40), chunk=st.sampled_from([None, 8]),
       mode=st.sampled_from(MODES))
def test_nothing_lost_and_no_token_before_its_arrival(lengths, running, blocks, chunk, mode):
    """Any workload on the tiny model's shapes: every request ends once (too large for
    the budget or the context: failed with a reason), tokens never exceed what was asked,
    and none comes before its request arrived."""
    costs = _tiny_costs()
    reqs = [Request(i, a, (1,) * p, o) for i, (p, o, a) in
            enumerate(sorted(lengths, key=lambda x: x[2]))]
    s = SchedulerSettings(max_running=running, kv_blocks=blocks, context=256,
                          prefill_chunk=chunk)
    served = serve(mode, reqs, s, costs, HostCost())
    f = figures(served)
    assert f["finished"] + f["failed"] == len(reqs)
    for r, times, outcome in zip(reqs, served.times_us, served.outcomes):
        assert len(times) <= r.output_tokens
        assert all(t >= r.arrival_s * 1e6 for t in times)
        assert times == sorted(times)
        if outcome == "finished":
            assert len(times) == r.output_tokens or len(r.prompt) + len(times) >= 256


_TINY: list = []


def _tiny_costs() -> StepCosts:
    if not _TINY:
        _TINY.append(StepCosts(SIZES["tiny"], load_profile("ascend910b")))
    return _TINY[0]


def test_the_cli_prints_the_sweep_and_writes_json(tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = _run(["--simulate", "--device", "h100", "--sweep", "1,4", "--rates", "inf",
               "--requests", "8", "--host-us", "150,4", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    for word in ("SIMULATED on h100", "7b model", "winner", "TTFT p50", "ITL p50",
                 "150 us per step + 4 us per request per step (a stated constant)",
                 "two-micro-batch gate of batch+overlap"):
        assert word in text, word
    doc = json.loads(out.read_text())
    assert doc["device"] == "h100" and doc["host"]["step_us"] == 150.0
    assert len(doc["sweep"]) == 2


def test_a_workload_file_keeps_its_arrivals_and_its_faults(tmp_path):
    w = tmp_path / "w.jsonl"
    w.write_text('{"arrival_s": 0, "prompt_tokens": 5000, "output_tokens": 3}\n'
                 '{"arrival_s": 0.01, "prompt_tokens": 50, "output_tokens": 0}\n'
                 '{"arrival_s": 0.02, "prompt_tokens": 50, "output_tokens": 9, '
                 '"cancel_after_tokens": 4}\n'
                 '{"arrival_s": 0.03, "prompt_tokens": 70, "output_tokens": 12}\n')
    doc = predict("7b", "ascend910b", "all", workload=WorkloadOptions(file=str(w)),
                  settings=SweepSettings(concurrency=(1, 4))).to_dict()
    assert doc["rates"] == ["file"]
    for row in doc["sweep"]:
        for f in row["modes"].values():
            assert f["requests"] == 4 and f["finished"] == 2 and f["failed"] == 2
            assert f["tokens"] == 4 + 12


@pytest.mark.parametrize("argv, words", [
    (["--simulate", "--threads", "2"], "--threads"),
    (["--simulate", "--streams", "4"], "--streams"),
    (["--simulate", "--rate", "5"], "--rates"),
    (["--simulate", "--concurrency", "8"], "--sweep"),
    (["--simulate", "--html", "r.html"], "--html"),
    (["--simulate", "--device", "tpu9"], "shipped profiles: ascend910, ascend910b"),
    (["--simulate", "--model", "m.py:make"], "built-in size"),
    (["--simulate", "--sweep", "0,4"], "--sweep"),
    (["--simulate", "--sweep", "x"], "--sweep"),
    (["--simulate", "--rates", "0"], "--rates"),
    (["--simulate", "--host-us", "5"], "--host-us"),
    (["--simulate", "--host-us=-1,2"], "--host-us"),
    (["--simulate", "--prefill-chunk", "0"], "--prefill-chunk"),
    (["--simulate", "--device", "cpu", "--launch", "graph"], "graph_dispatch_us"),
    (["--device", "h100"], "a device profile is for --simulate"),
    (["--sweep", "1,2"], "only with --simulate"),
])
def test_bad_options_are_one_line(argv, words):
    with pytest.raises(InputError) as e:
        _run(["--requests", "2", *argv])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_prompt_text_needs_a_tokenizer(tmp_path):
    w = tmp_path / "w.jsonl"
    w.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3}\n\n'
                 '{"arrival_s": 0, "prompt": "hello", "output_tokens": 3}\n')
    with pytest.raises(InputError, match=r"w\.jsonl: line 3: prompt text needs the model's "
                                         "tokenizer"):
        _run(["--simulate", "--workload", str(w)])


NO_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # any 'import torch' now fails
    from parastream.cli import main
    rc = main(["decode", "--simulate", "--device", "ascend910b", "--sweep", "1,4",
               "--rates", "inf", "--requests", "6"])
    assert rc == 0, rc
    assert "torch" not in {k for k, v in sys.modules.items() if v is not None}
    print("NO-TORCH-OK")
""")


def test_the_prediction_runs_without_torch():
    r = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "NO-TORCH-OK" in r.stdout
