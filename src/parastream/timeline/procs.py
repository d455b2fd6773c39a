"""Forked worker processes for work on one machine that splits into independent parts
(the pieces of a big trace, the captures of a big unit)."""

from __future__ import annotations

import multiprocessing as mp
import os


def fork_workers(limit: int = 4) -> int:
    """Processes to fork: one per core, at most ``limit``, or ``PARASTREAM_WORKERS``;
    1 (work in this process) where fork is missing, or in a daemonic process (a pool's
    or an engine's worker, which may not have children)."""
    if "fork" not in mp.get_all_start_methods() or mp.current_process().daemon:
        return 1
    env = os.environ.get("PARASTREAM_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(limit, os.cpu_count() or 1))


def fork_pool(n: int):
    """A pool of ``n`` forked processes: they inherit this process's memory, so a task
    may name data by a module-level reference instead of sending it."""
    return mp.get_context("fork").Pool(n)
