"""Stream backends: one protocol (``Stream``, ``Event``, ``Backend``), a cpu backend of
persistent worker threads and a null backend that records what it would have issued.

Nothing here imports torch at import time.
"""

from .backend import (STREAM_KINDS, Backend, Event, Stream, StreamError, Work,
                      available_backends, get_backend, register_backend)

__all__ = ["STREAM_KINDS", "Backend", "Event", "Stream", "StreamError", "Work",
           "available_backends", "get_backend", "register_backend"]
