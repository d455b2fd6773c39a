"""Requests: generated ones are seeded (same seed, same requests) with Poisson arrivals at
the rate; a JSONL workload is read line by line, and a bad line is one error naming the
file and the line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parastream.decode.workload import LENGTHS, WorkloadOptions, make_requests, read_workload
from parastream.errors import InputError


def test_generated_requests_are_seeded():
    a = make_requests(WorkloadOptions(requests=20, rate=50.0, seed=3), 512)
    assert a == make_requests(WorkloadOptions(requests=20, rate=50.0, seed=3), 512)
    assert a != make_requests(WorkloadOptions(requests=20, rate=50.0, seed=4), 512)
    assert [r.rid for r in a] == list(range(20))
    assert all(0 <= t < 512 for r in a for t in r.prompt)


def test_poisson_arrivals_at_the_rate():
    reqs = make_requests(WorkloadOptions(requests=2000, rate=100.0), 512)
    arrivals = np.array([r.arrival_s for r in reqs])
    assert arrivals[0] == 0 and (np.diff(arrivals) >= 0).all()
    assert 0.009 < np.diff(arrivals).mean() < 0.011  # 1 / rate
    assert all(r.arrival_s == 0 for r in make_requests(WorkloadOptions(requests=5), 512))


@pytest.mark.parametrize("name", sorted(LENGTHS))
def test_lengths_by_name(name):
    reqs = make_requests(WorkloadOptions(requests=200, lengths=name), 512)
    _, (plo, phi), (olo, ohi) = LENGTHS[name]
    assert all(1 <= len(r.prompt) <= phi and 1 <= r.output_tokens <= ohi for r in reqs)


def test_jsonl_workload(tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text('{"arrival_s": 0.5, "prompt_tokens": 4, "output_tokens": 2}\n\n'
                 '{"arrival_s": 0.1, "prompt": "hi!", "output_tokens": 0, '
                 '"cancel_after_tokens": 1}\n')
    reqs = read_workload(f, 100)
    assert [r.arrival_s for r in reqs] == [0.1, 0.5]
    assert reqs[0].prompt == tuple(b % 100 for b in b"hi!") and reqs[0].output_tokens == 0
    assert len(reqs[1].prompt) == 4
    assert (reqs[0].cancel_after_tokens, reqs[1].cancel_after_tokens) == (1, None)
    assert make_requests(WorkloadOptions(file=str(f)), 100) == reqs


@pytest.mark.parametrize("line, problem", [
    ('{"arrival_s": 0, "output_tokens": 2}', "exactly one of"),
    ('{"arrival_s": -1, "prompt_tokens": 3, "output_tokens": 2}', "arrival_s"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": -2}', "output_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 2}', "prompt_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "x": 1}', "x"),
    ('{"arrival_s": "soon", "prompt_tokens": 3, "output_tokens": 2}', "arrival_s"),
    ('not json', "line 2"),
    ('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "cancel_after_tokens": 0}',
     "cancel_after_tokens"),
])
def test_a_bad_line_names_the_file_and_line(tmp_path, line, problem):
    f = tmp_path / "w.jsonl"
    f.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}\n' + line + "\n")
    with pytest.raises(InputError) as e:
        read_workload(f, 100)
    msg = str(e.value)
    assert msg.startswith(f"{f}: line 2") and problem in msg and "\n" not in msg


def test_missing_or_empty_workload(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        read_workload(tmp_path / "none.jsonl", 100)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no requests"):
        read_workload(tmp_path / "e.jsonl", 100)


@pytest.mark.parametrize("opts, flag", [
    (WorkloadOptions(requests=0), "--requests"), (WorkloadOptions(rate=0.0), "--rate"),
    (WorkloadOptions(rate=math.nan), "--rate"), (WorkloadOptions(lengths="zipf"), "--lengths"),
])
def test_bad_options(opts, flag):
    with pytest.raises(InputError, match=flag):
        make_requests(opts, 100)
