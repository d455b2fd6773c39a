"""Pausing Python's cycle collector around bulk work.

Readers, the simulator and the Perfetto writer create millions of small acyclic objects
(row tuples, dicts, floats); generational collections over them would dominate the run
and find nothing to free.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC inside the block; restore its previous state afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
