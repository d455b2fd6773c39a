"""Stream backends: one protocol (``Stream``, ``Event``, ``Backend``) with declared
:class:`Capabilities`, a registry that loads each backend by name on first use (the cpu
backend of worker threads is :mod:`parastream.cpu.backend`), cuda and npu backends over
torch's device streams, and a null backend that records what it would have issued; the
executor that runs a plan on them, and the measurement of its calls.

:mod:`.host` holds what every backend shares of the host process (its cores, torch's
intra-op thread team, page faults), :mod:`.lanes` the per-stream interval records merged
into a timeline.

Nothing here imports torch at import time.
"""

from .backend import (STREAM_KINDS, Backend, BackendBase, Capabilities, Event, Stream,
                      StreamError, Work, available_backends, backend_capabilities, get_backend,
                      register_backend)

__all__ = ["STREAM_KINDS", "Backend", "BackendBase", "Capabilities", "Event", "Stream",
           "StreamError", "Work", "available_backends", "backend_capabilities", "get_backend",
           "register_backend"]
