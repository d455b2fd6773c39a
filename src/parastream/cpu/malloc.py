"""Freed memory kept in the process (``--malloc keep|system``), for the cpu backend's
measurements; the page faults each call took are counted by
:func:`parastream.runtime.host.page_faults`.

Why: glibc's malloc gives big freed blocks back to the OS (blocks over its mmap threshold
are unmapped on free, and a heap whose free top grows past the trim threshold is shrunk),
so the next call of a model maps the same memory again and touches every page of it
afresh: one page fault per 4 KiB, each zeroing its page, a cost a model with large
intermediates pays on every call. Which calls fault depends on the allocator's history
(glibc raises its mmap threshold as blocks are freed, so the same model can fault on
every call in one process and never in another), so no profile
can predict it, and a side-by-side comparison pays it on whichever side it falls. CPU
inference deployments avoid it the same way (a tuned allocator, or these settings);
``parastream run``, ``demo`` and ``calibrate`` keep freed memory by default (``--malloc
keep``: a larger mmap threshold, a larger trim threshold, one arena) and say so, and count
the faults each measured call took either way. Blocks over the mmap threshold still fault.

The settings go to this process through glibc's ``mallopt`` and to the child processes it
starts (the separate-process baselines) through glibc's environment variables. Elsewhere
(another C library, an allocator preloaded in glibc's place, macOS, Windows) nothing is
changed and :func:`keep_freed_memory` says why. One arena puts the stream workers behind
one allocator lock; side by side that costs nothing measurable
(benchmarks/bench_malloc.py compares the two settings).
"""

from __future__ import annotations

import ctypes
import os
import sys

from ..runtime.host import page_faults

__all__ = ["ARENA_MAX", "KEEP_ENV", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "add_argument", "apply",
           "keep_freed_memory", "page_faults"]

#: blocks up to this size come from the heap, not a mapping of their own (glibc's default
#: is 128 KiB, raised as it sees big blocks freed, at most 32 MiB on its own)
MMAP_THRESHOLD = 256 << 20
#: free memory at the heap's top kept before it is given back (glibc's default: 128 KiB,
#: twice the mmap threshold once that is raised)
TRIM_THRESHOLD = 1 << 30
#: one arena for all threads: a stream worker's own arena is a heap of at most 64 MiB,
#: and a thread needing more than that maps another heap and unmaps it once it is free
#: again (inference_pipeline's resource-split plan, 12.8 MB images on a side stream:
#: 4,300-4,700 faults a call with the two thresholds alone, none with one arena)
ARENA_MAX = 1

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: each mallopt parameter's variable in a child process's environment (read at its start)
_ENV_NAME = {_M_MMAP_THRESHOLD: "MALLOC_MMAP_THRESHOLD_",
             _M_TRIM_THRESHOLD: "MALLOC_TRIM_THRESHOLD_", _M_ARENA_MAX: "MALLOC_ARENA_MAX"}
#: the same settings for a child process's glibc
KEEP_ENV = {_ENV_NAME[param]: str(value) for param, value in (
    (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    (_M_ARENA_MAX, ARENA_MAX))}


def _mallopt():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


def _preloaded() -> str | None:
    """An allocator preloaded in place of glibc's (its mallopt then changes nothing)."""
    for lib in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        base = os.path.basename(lib)
        if any(name in base for name in ("jemalloc", "tcmalloc", "mimalloc")):
            return base
    return None


def keep_freed_memory() -> str:
    """Make glibc keep freed memory in this process and in the processes it starts (see
    the module's docstring); returns a one-line note of what was done, or why not. The
    mmap threshold goes first: without it the other two would only switch off glibc's own
    raising of it, worse than its defaults."""
    mallopt = _mallopt()
    if mallopt is None:
        return "malloc: left as it is (glibc only, and there is no glibc mallopt here)"
    preloaded = _preloaded()
    if preloaded:
        return f"malloc: left as it is ({preloaded} is preloaded in place of glibc's malloc)"
    applied: list[str] = []
    env: dict[str, str] = {}

    def setting(param: int, value: int, what: str) -> bool:
        if not mallopt(param, value):
            return False
        applied.append(what)
        env[_ENV_NAME[param]] = str(value)
        return True

    # glibc before 2.34 caps the mmap threshold at 32 MiB
    if not any(setting(_M_MMAP_THRESHOLD, mmap, f"mmap threshold {mmap >> 20} MiB")
               for mmap in (MMAP_THRESHOLD, 32 << 20)):
        return "malloc: left as it is (glibc refused the settings)"
    setting(_M_TRIM_THRESHOLD, TRIM_THRESHOLD, f"trim threshold {TRIM_THRESHOLD >> 20} MiB")
    # threads that have an arena already keep it: called before the stream workers start
    setting(_M_ARENA_MAX, ARENA_MAX, "one arena for the threads started from now")
    os.environ.update(env)  # and the processes started from here
    return (f"malloc: freed memory kept in the process (glibc: {', '.join(applied)}), so calls "
            "do not fault their buffers in again; --malloc system measures with the "
            "allocator's own settings")


def add_argument(parser) -> None:
    """The ``--malloc keep|system`` option of the commands that measure."""
    parser.add_argument("--malloc", choices=("keep", "system"), default="keep",
                        help="keep: glibc keeps freed memory in the process, so calls do not "
                             "page-fault their buffers in again (default); system: the "
                             "allocator's own settings")


def apply(choice: str) -> str:
    """Carry out ``--malloc``; returns the note to print."""
    if choice == "system":
        given = sorted(k for k in os.environ if k.startswith("MALLOC_"))
        return ("malloc: the allocator's own settings (--malloc system)"
                + (f", with {', '.join(given)} from the environment" if given else ""))
    return keep_freed_memory()
