"""The one-line input error (:mod:`parastream.errors`)."""

from __future__ import annotations

import pickle

from parastream.errors import InputError


def test_an_input_error_crosses_a_process_boundary_whole():
    """A worker process's InputError is pickled to the caller: path and reason survive."""
    e = pickle.loads(pickle.dumps(InputError("/data/rank3.json", "truncated JSON")))
    assert (e.path, e.reason, str(e)) == ("/data/rank3.json", "truncated JSON",
                                          "/data/rank3.json: truncated JSON")
    bare = pickle.loads(pickle.dumps(InputError(None, "no path")))
    assert (bare.path, str(bare)) == (None, "no path")
