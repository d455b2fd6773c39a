"""Freed memory kept in the process (``--malloc keep``) and page faults per call."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from parastream.cpu import malloc
from parastream.cli.run import faults_line

glibc = pytest.mark.skipif(malloc._mallopt() is None, reason="needs glibc's mallopt")

# a 64 MiB block malloc'ed, written and freed, 3 times after a first: glibc maps a block
# that size afresh each time (its mmap threshold rises with freed blocks only up to
# 32 MiB), so each round faults in every page again, unless freed memory is kept
_ROUNDS = """
import ctypes, json, os, sys
from parastream.cpu import malloc
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "LD_PRELOAD"}
    r = subprocess.run([sys.executable, "-c", _ROUNDS, choice], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@glibc
def test_keep_stops_a_big_block_faulting_in_on_every_call():
    system, keep = _rounds("system"), _rounds("keep")
    if "mmap threshold 32 MiB" in keep["note"]:
        pytest.skip("this glibc caps the mmap threshold at 32 MiB, below the 64 MiB block")
    pages = (64 << 20) // 4096
    # the allocator's defaults: mapped afresh (fewer faults where huge pages back it)
    assert system["faults"] >= 30 and system["faults"] > 20 * keep["faults"]
    assert keep["faults"] < 0.05 * pages
    assert "kept" in keep["note"] and "one arena" in keep["note"]
    assert "allocator's own settings" in system["note"]
    # the child processes (separate-process baselines) get the same settings
    assert keep["env"] == {"MALLOC_MMAP_THRESHOLD_": str(malloc.MMAP_THRESHOLD),
                           "MALLOC_TRIM_THRESHOLD_": str(malloc.TRIM_THRESHOLD),
                           "MALLOC_ARENA_MAX": "1"}
    assert all(v is None for v in system["env"].values())


class _FakeMallopt:
    def __init__(self, refuse: set[int]) -> None:
        self.refuse, self.calls = refuse, []

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 0 if param in self.refuse else 1


@pytest.fixture
def clean_env(monkeypatch):
    for k in (*malloc.KEEP_ENV, "LD_PRELOAD"):
        monkeypatch.setenv(k, "")  # recorded, so whatever apply() sets is undone
        monkeypatch.delenv(k)
    return monkeypatch


def test_without_mallopt_nothing_changes(clean_env):
    clean_env.setattr(malloc, "_mallopt", lambda: None)
    assert "left as it is" in malloc.apply("keep")
    assert not any(k in os.environ for k in malloc.KEEP_ENV)


def test_a_refused_mmap_threshold_changes_nothing_else(clean_env):
    fake = _FakeMallopt(refuse={-3})
    clean_env.setattr(malloc, "_mallopt", lambda: fake)
    assert "refused" in malloc.apply("keep")
    assert {p for p, _ in fake.calls} == {-3}  # tried 256 MiB, then 32 MiB, nothing more
    assert [v for _, v in fake.calls] == [malloc.MMAP_THRESHOLD, 32 << 20]
    assert not any(k in os.environ for k in malloc.KEEP_ENV)


def test_the_note_says_what_was_applied(clean_env):
    fake = _FakeMallopt(refuse={-8})  # no arena limit: the two thresholds only
    clean_env.setattr(malloc, "_mallopt", lambda: fake)
    note = malloc.apply("keep")
    assert "mmap threshold 256 MiB" in note and "trim threshold 1024 MiB" in note
    assert "arena" not in note and "MALLOC_ARENA_MAX" not in os.environ
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(malloc.TRIM_THRESHOLD)


def test_a_preloaded_allocator_is_left_alone(clean_env):
    fake = _FakeMallopt(refuse=set())
    clean_env.setattr(malloc, "_mallopt", lambda: fake)
    clean_env.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    assert "libjemalloc.so.2 is preloaded" in malloc.apply("keep") and not fake.calls


def test_system_names_the_settings_the_environment_gives(clean_env):
    assert malloc.apply("system") == "malloc: the allocator's own settings (--malloc system)"
    clean_env.setenv("MALLOC_ARENA_MAX", "2")
    assert "with MALLOC_ARENA_MAX from the environment" in malloc.apply("system")


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


def test_the_faults_line_of_run():
    assert faults_line("c", None, "cpu", "keep") is None
    assert faults_line("c", [0, 0], "cpu", "keep") is None
    assert faults_line("c", [10, 20], "cuda", "keep") is None  # the driver's faults too
    line = faults_line("c", [1000, 4313], "cpu", "system")
    assert "plain module 1,000, multi-stream 4,313" in line and "--malloc keep" in line
    assert "--malloc keep" not in faults_line("c", [0, 5], "cpu", "keep")
