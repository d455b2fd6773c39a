"""Freed memory kept in the process (``--malloc keep``) and page faults per call."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from parastream.runtime import malloc

glibc = pytest.mark.skipif(malloc._mallopt() is None, reason="needs glibc's mallopt")

# a 64 MiB block malloc'ed, written and freed, 3 times after a first: glibc maps a block
# that size afresh each time (its mmap threshold rises with freed blocks only up to
# 32 MiB), so each round faults in every page again, unless freed memory is kept
_ROUNDS = """
import ctypes, json, os, sys
from parastream.runtime import malloc
note = malloc.apply(sys.argv[1])
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
n = 64 << 20
def once():
    p = libc.malloc(n)
    ctypes.memset(p, 1, n)
    libc.free(p)
once()
f0 = malloc.page_faults()
for _ in range(3):
    once()
print(json.dumps({"faults": (malloc.page_faults() - f0) / 3, "note": note,
                  "env": {k: os.environ.get(k) for k in malloc.KEEP_ENV}}))
"""


def _rounds(choice: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _ROUNDS, choice], capture_output=True, text=True,
                       timeout=120, env={k: v for k, v in os.environ.items()
                                         if not k.startswith("MALLOC_")})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@glibc
def test_keep_stops_a_big_block_faulting_in_on_every_call():
    system, keep = _rounds("system"), _rounds("keep")
    pages = (64 << 20) // 4096
    assert system["faults"] > 0.5 * pages  # the allocator's defaults: mapped afresh
    assert keep["faults"] < 0.05 * pages
    assert "kept" in keep["note"] and "one arena" in keep["note"]
    assert "allocator's own settings" in system["note"]
    # the child processes (separate-process baselines) get the same settings
    assert keep["env"]["MALLOC_ARENA_MAX"] == "1"
    assert int(keep["env"]["MALLOC_TRIM_THRESHOLD_"]) == malloc.TRIM_THRESHOLD
    assert all(v is None for v in system["env"].values())


def test_without_mallopt_nothing_changes(monkeypatch):
    monkeypatch.setattr(malloc, "_mallopt", lambda: None)
    for k in malloc.KEEP_ENV:
        monkeypatch.delenv(k, raising=False)
    assert "left as it is" in malloc.apply("keep")
    assert not any(k in os.environ for k in malloc.KEEP_ENV)


def test_page_faults_count_touched_pages():
    import mmap

    f0 = malloc.page_faults()
    if f0 is None:
        pytest.skip("the OS does not count page faults here")
    m = mmap.mmap(-1, 256 * 4096)
    for i in range(0, len(m), 4096):
        m[i] = 1
    assert malloc.page_faults() - f0 >= 200
    m.close()
