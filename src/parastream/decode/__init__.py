"""Concurrent decode of independent requests: the built-in decoder LM with a paged KV
cache (:mod:`.model`), the requests (:mod:`.workload`), the fair scheduler
(:mod:`.scheduler`), the four modes on worker threads (:mod:`.modes`, :mod:`.device`) and
their figures (:mod:`.metrics`). ``parastream decode`` and
:func:`parastream.workflow.decode.decode` drive it."""
