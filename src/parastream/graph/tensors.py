"""What the torch frontend reads off traced values: example tensors of fx nodes, their
shapes, sizes and bytes, and the leaves of nested call arguments.

Shared by the tracer (:mod:`.trace`), the importer (:mod:`.torch_import`), the opaque
experts (:mod:`.opaque`) and the runnable (:mod:`.runnable`); torch is imported inside the
functions that need it.
"""

from __future__ import annotations

import math
from typing import Any, Callable


def node_value(a: Any) -> Any:
    """The example value of an fx node argument (a fake tensor), or the constant itself."""
    meta = getattr(a, "meta", None)
    if isinstance(meta, dict) and hasattr(a, "name"):  # an fx node or a parameter stand-in
        return meta.get("val")
    return a


def is_tensor(v: Any) -> bool:
    """Whether ``v`` is a ``torch.Tensor`` (a fake or meta one included)."""
    import torch

    return isinstance(v, torch.Tensor)


def dtype_name(dt: Any) -> str:
    """``float32`` for ``torch.float32``."""
    return str(dt).replace("torch.", "")


def size_of(s: Any) -> int:
    """One dimension's size as an int; an unbacked symbolic size gives its hint, else 1."""
    try:
        return int(s)
    except Exception:  # an unbacked symbolic size: use its hint when there is one
        hint = getattr(getattr(s, "node", None), "hint", None)
        return int(hint) if hint is not None else 1


def shape_of(t: Any) -> list[int]:
    """A tensor's shape as ints (:func:`size_of` of each dimension)."""
    return [size_of(s) for s in t.shape]


def nbytes_of(t: Any) -> int:
    """Bytes a tensor really occupies: broadcast (stride-0) dimensions count once."""
    try:
        dims = [(size_of(s), size_of(st)) for s, st in zip(t.shape, t.stride())]
        n = math.prod(s for s, st in dims if st != 0 or s == 0)
    except Exception:
        n = math.prod(shape_of(t))
    return int(n) * t.element_size()


def numel_of(t: Any) -> int:
    """A tensor's element count."""
    return int(math.prod(shape_of(t)))


def flat_tensors(v: Any) -> list[Any]:
    """The tensors of a value, through tuples and lists (an op's outputs), in order."""
    if is_tensor(v):
        return [v]
    if isinstance(v, (tuple, list)):
        return [x for item in v for x in flat_tensors(item)]
    return []


def flat_leaves(a: Any, is_leaf: Callable[[Any], bool]) -> list[Any]:
    """The leaves of a nested call argument that ``is_leaf`` accepts, in order: it is one,
    or it is inside tuples, lists and dict values; anything else is left out."""
    if is_leaf(a):
        return [a]
    if isinstance(a, (tuple, list)):
        return [x for item in a for x in flat_leaves(item, is_leaf)]
    if isinstance(a, dict):
        return [x for item in a.values() for x in flat_leaves(item, is_leaf)]
    return []


def is_node(a: Any) -> bool:
    """An fx node or a parameter stand-in (anything with ``meta`` and ``name``)."""
    return hasattr(a, "meta") and hasattr(a, "name")


def flat_nodes(a: Any) -> list[Any]:
    """fx nodes (and pseudo nodes) inside an argument, in order."""
    return flat_leaves(a, is_node)
