"""Opaque experts: modules traced as one ``parastream::module_call`` op.

A Hugging Face experts module (the ``experts(hidden_states, top_k_index, top_k_weights)``
contract of transformers' MoE blocks) running its default ``eager`` implementation loops
over the experts the router picked: data-dependent control flow no tracer can follow.
Inside :func:`opaque_experts` its forward is ONE op that calls the module itself (so a run
computes what the module computes, bit for bit), and the importer costs it at the block's
top-k (:func:`_experts_cost`).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .tensors import nbytes_of, numel_of, shape_of, size_of

#: the leading forward arguments of transformers' experts modules (``use_experts_implementation``)
EXPERTS_ARGS = ("hidden_states", "top_k_index", "top_k_weights")
#: paths named in the one-line note before "and N more"
NOTE_PATHS = 2


@dataclass
class _Opaque:
    """A module the importer traces as one ``parastream::module_call`` op."""

    module: Any                    # weakref.ref to the module the op calls
    cls: str                       # its class name
    cost: Callable[[list, list, list], tuple[float, int, int]]
    path: str = ""                 # its path under the traced model (get_submodule)


#: key (the op's first argument) -> the module it calls; weak, so a traced model goes
#: when its owner drops it, and a run later in the process still finds a live one
_OPAQUE: dict[str, _Opaque] = {}
_MODULE_CALL: Any = None


def opaque_module_path(key: str) -> str | None:
    """The submodule path (under the traced model) that a ``module_call`` op's ``key``
    stands for; None when this process did not trace it. Generated code calls the
    submodule by this path: the key means nothing in another process."""
    entry = _OPAQUE.get(key)
    return entry.path if entry is not None else None


def module_call_op() -> Any:
    """``parastream::module_call(key, inputs, weights) -> Tensor``, registered on first
    use: calls the module registered under ``key`` on ``inputs``, so a traced program runs
    the module's own code. ``weights`` (its parameters and buffers) are arguments only so
    that the graph orders the op after their writers; the module reads its own. The output
    is shaped like the first input (the experts contract)."""
    global _MODULE_CALL
    if _MODULE_CALL is not None:
        return _MODULE_CALL
    import torch

    # the schema spelled out: this file's annotations are strings (from __future__)
    @torch.library.custom_op("parastream::module_call", mutates_args=(),
                             schema="(str key, Tensor[] inputs, Tensor[] weights) -> Tensor")
    def module_call(key, inputs, weights):  # type: ignore[no-untyped-def]
        entry = _OPAQUE.get(key)
        module = entry.module() if entry is not None else None
        if module is None:
            raise RuntimeError(f"parastream::module_call: no live module {key!r}: the model "
                               "this program was traced from is gone")
        return module(*inputs)

    @module_call.register_fake
    def _(key, inputs, weights):  # type: ignore[no-untyped-def]
        return torch.empty_like(inputs[0])

    _MODULE_CALL = torch.ops.parastream.module_call.default
    return _MODULE_CALL


def is_module_call(node: Any) -> bool:
    """Whether an fx node calls ``parastream::module_call``."""
    return _MODULE_CALL is not None and getattr(node, "target", None) is _MODULE_CALL


def opaque_entry(key: Any) -> _Opaque | None:
    """The opaque module a ``module_call`` op's key stands for, None when unknown."""
    return _OPAQUE.get(key)


def eager_experts(module: Any) -> list[tuple[str, Any]]:
    """Submodules of ``module`` (path, module) that follow transformers' experts contract,
    ``forward(hidden_states, top_k_index, top_k_weights)`` with 3-d expert weights, and run
    the ``eager`` implementation (none chosen: a block built outside a PreTrainedModel), a
    loop over the experts the router hit, which depends on the router's values."""
    out = []
    for path, sub in module.named_modules():
        try:
            names = tuple(inspect.signature(sub.forward).parameters)
        except (TypeError, ValueError):  # a builtin forward without a signature
            continue
        impl = getattr(getattr(sub, "config", None), "_experts_implementation", None)
        if (names[:3] == EXPERTS_ARGS and impl in (None, "eager")
                and any(p.dim() == 3 for p in sub.parameters(recurse=False))):
            out.append((path, sub))
    return out


@contextlib.contextmanager
def opaque_experts(module: Any) -> Iterator[list[str]]:
    """Inside, every :func:`eager_experts` module's forward calls ``parastream::module_call``
    (one op, the module's own code at run time) instead of its data-dependent loop; after,
    the module is as it was. Yields the graph's notes: one line naming what was kept
    opaque and why, or none."""
    found = eager_experts(module)
    for key in [k for k, e in _OPAQUE.items() if e.module() is None]:
        del _OPAQUE[key]
    patched: list[tuple[Any, Any]] = []
    try:
        for path, sub in found:
            key = f"{type(sub).__name__}@{id(sub):x}"
            _OPAQUE[key] = _Opaque(weakref.ref(sub), type(sub).__name__, _experts_cost, path)
            forward = _opaque_forward(sub, key)
            patched.append((sub, vars(sub).get("forward")))
            sub.forward = forward
        yield [_opaque_note(found)] if found else []
    finally:
        for sub, own in patched:
            if own is None:
                del sub.forward
            else:
                sub.forward = own


def _opaque_forward(sub: Any, key: str) -> Callable[..., Any]:
    """A forward for ``sub`` that is one ``module_call`` op on its experts arguments (any
    other argument: the module's own forward, traced as it is)."""
    op = module_call_op()
    original = sub.forward
    sig = inspect.signature(original)

    def forward(*args: Any, **kwargs: Any) -> Any:
        given = sig.bind(*args, **kwargs).arguments
        if set(given) != set(EXPERTS_ARGS):
            return original(*args, **kwargs)
        return op(key, [given[n] for n in EXPERTS_ARGS], [*sub.parameters(), *sub.buffers()])

    return forward


def _opaque_note(found: list[tuple[str, Any]]) -> str:
    paths = [p or "(the model)" for p, _ in found]
    named = ", ".join(paths[:NOTE_PATHS]) + (f" and {len(paths) - NOTE_PATHS} more"
                                             if len(paths) > NOTE_PATHS else "")
    classes = ", ".join(dict.fromkeys(type(m).__name__ for _, m in found))
    return (f"experts kept as one opaque op each ({named}: {classes}): their default eager "
            "implementation loops over the experts the router picked, data-dependent "
            "control flow torch.export cannot trace; the op runs the module itself and its "
            "cost is the routed experts' GEMMs at the traced top-k")


def _experts_cost(inputs: list, weights: list, outs: list) -> tuple[float, int, int]:
    """FLOPs and bytes of the routed experts on ``inputs`` = (hidden_states [tokens, H],
    top_k_index [tokens, k], top_k_weights): each of the tokens*k picks runs every 3-d
    weight (``[experts, out, in]``) once, 2*out*in FLOPs, plus one multiply per output
    element for its routing weight. Bytes: the inputs, the output, and the weights of the
    experts expected to be hit, E*(1-(1-1/E)^(tokens*k)) of E under uniform routing."""
    hidden, index = inputs[0], inputs[1]
    tokens = numel_of(hidden) // max(size_of(hidden.shape[-1]), 1)
    picks = tokens * (size_of(index.shape[-1]) if index.dim() else 1)
    mats = [w for w in weights if w.dim() == 3]
    experts = max(size_of(mats[0].shape[0]), 1) if mats else 1
    flops = 2.0 * picks * sum(math.prod(shape_of(w)[1:]) for w in mats)
    flops += picks * size_of(hidden.shape[-1])
    hit = experts * (1.0 - (1.0 - 1.0 / experts) ** picks)
    weight_bytes = sum(nbytes_of(w) for w in weights) * hit / experts
    bytes_read = sum(nbytes_of(t) for t in inputs) + weight_bytes
    return flops, int(bytes_read), sum(nbytes_of(t) for t in outs)
