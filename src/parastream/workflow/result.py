"""What the workflows' typed results share: which of their fields make up the document
the command's ``--json`` writes, in the document's own key order."""

from __future__ import annotations

import dataclasses
from typing import Any


def extra(**kwargs: Any) -> Any:
    """A result field that is not part of the document (timelines, simulated runs, notes
    said on stderr): left out of :func:`document`, of equality and of the repr."""
    return dataclasses.field(compare=False, repr=False, metadata={"document": False}, **kwargs)


def document(result: Any, *, optional: tuple[str, ...] = ()) -> dict:
    """The document fields of dataclass ``result`` as a dict in field order; a field named
    in ``optional`` is left out while it is None (the command writes no such key then)."""
    out = {}
    for f in dataclasses.fields(result):
        value = getattr(result, f.name)
        if f.metadata.get("document", True) and not (f.name in optional and value is None):
            out[f.name] = value
    return out


__all__ = ["document", "extra"]
