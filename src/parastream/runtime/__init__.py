"""Stream backends: one protocol (``Stream``, ``Event``, ``Backend``) with declared
:class:`Capabilities`, a cpu backend of persistent worker threads, cuda and npu backends
over torch's device streams, and a null backend that records what it would have issued.

Nothing here imports torch at import time.
"""

from .backend import (STREAM_KINDS, Backend, BackendBase, Capabilities, Event, Stream,
                      StreamError, Work, available_backends, backend_capabilities, get_backend,
                      register_backend)

__all__ = ["STREAM_KINDS", "Backend", "BackendBase", "Capabilities", "Event", "Stream",
           "StreamError", "Work", "available_backends", "backend_capabilities", "get_backend",
           "register_backend"]
