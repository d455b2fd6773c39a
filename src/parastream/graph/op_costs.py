"""An op record's FLOPs and bytes from its argument and output shapes.

``2*M*K*N`` for matmuls (``linear``: ``2*tokens*in*out`` + bias), ``2 * out elements *
Cin/groups * kernel`` for convolutions, ``4*B*H*L*S*E`` for attention (full, not halved for
causal masks, as ``torch.utils.flop_counter`` counts), one comparison or add per window
element for pools, a small per-element factor for vector ops, 0 for copies and
collectives; bytes read and written whole, except gathers, index writes, in-place ops and
factories, which touch less. An opaque experts op costs what :mod:`.opaque` says.
"""

from __future__ import annotations

import math
from typing import Any

from .op_tables import (COLLECTIVES, COMM_NAMESPACES, CUBE_OPS, GATHERS, INDEX_WRITES,
                        MEMORY_OPS, REDUCTIONS, VECTOR_FLOPS_PER_ELEM)
from .opaque import is_module_call, opaque_entry
from .records import Record
from .tensors import is_tensor, nbytes_of, node_value, numel_of, shape_of, size_of


def op_costs(rec: Record, arg_refs: list, outs: list) -> tuple[float, int, int]:
    """FLOPs, bytes read, bytes written for one op from its shapes."""
    vals = [node_value(a) for a in rec.args]
    tensors = [v for _, _, v in arg_refs]
    bytes_read = sum(nbytes_of(v) for v in tensors)
    bytes_written = sum(nbytes_of(t) for t in outs)
    flops = 0.0
    try:
        if is_module_call(rec.node):
            entry = opaque_entry(vals[0])
            if entry is not None:
                return entry.cost([node_value(a) for a in rec.args[1]],
                                  [node_value(a) for a in rec.args[2]], outs)
        else:
            flops = _flops(rec, vals, tensors, outs)
        bytes_read, bytes_written = _bytes_moved(rec, vals, arg_refs, bytes_read,
                                                 bytes_written)
    except (IndexError, AttributeError, TypeError):
        pass  # odd argument forms: keep the byte counts, FLOPs stay an estimate
    return flops, max(0, int(bytes_read)), max(0, int(bytes_written))


#: matrix products: 2 FLOPs per output element per reduced element (a grouped GEMM: every
#: row of its input [S, K] meets one expert's [K, N])
_MATMULS = frozenset({"mm", "bmm", "matmul", "mv", "dot", "grouped_mm", "_grouped_mm",
                      "grouped_mm_fallback"})
#: matrix products plus an added input: one more FLOP per output element
_ADD_MATMULS = frozenset({"addmm", "baddbmm", "addbmm", "addmv"})
_CONVS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution"})
#: ops that create a tensor: they read nothing (the empty ones write nothing either)
_FACTORIES = frozenset({"zeros", "ones", "empty", "full", "zeros_like", "ones_like",
                        "empty_like", "full_like", "new_zeros", "new_ones", "new_empty",
                        "new_full"})


def _flops(rec: Record, vals: list, tensors: list, outs: list) -> float:
    """An op's FLOPs from its argument and output shapes (see the module docstring)."""
    short = rec.short
    out_elems = sum(numel_of(t) for t in outs)
    if short == "linear":
        return _linear_flops(rec, vals)
    if short in _MATMULS:
        return 2.0 * out_elems * size_of(vals[0].shape[-1])
    if short in _ADD_MATMULS:
        return 2.0 * out_elems * size_of(vals[1].shape[-1]) + out_elems
    if short == "einsum":
        return _einsum_flops(vals[0], vals[1])
    if short in _CONVS:
        return _conv_flops(short, vals, out_elems)
    if short.startswith("conv_transpose"):
        return 2.0 * numel_of(vals[0]) * math.prod(shape_of(vals[1])[1:])
    if "attention" in short and short in CUBE_OPS and len(vals) >= 3 \
            and all(is_tensor(v) for v in vals[:3]):
        return _attention_flops(vals[0], vals[1], vals[2])
    if short in COLLECTIVES or rec.namespace in COMM_NAMESPACES or short in MEMORY_OPS:
        return 0.0
    if "pool" in short and "unpool" not in short:
        return _pool_flops(rec, vals, tensors, outs)
    if short in REDUCTIONS:
        return float(sum(numel_of(v) for v in tensors[:1]))
    if short in VECTOR_FLOPS_PER_ELEM:
        return float(VECTOR_FLOPS_PER_ELEM[short] * out_elems)
    return float(out_elems)


def _linear_flops(rec: Record, vals: list) -> float:
    """``2*tokens*in*out``, plus one add per output element with a bias."""
    x, w = vals[0], vals[1]
    inf, outf = size_of(w.shape[-1]), size_of(w.shape[0])
    tokens = numel_of(x) // max(inf, 1)
    flops = 2.0 * tokens * inf * outf
    b = vals[2] if len(vals) > 2 else rec.kwargs.get("bias")
    if is_tensor(b):
        flops += tokens * outf
    return flops


def _conv_flops(short: str, vals: list, out_elems: int) -> float:
    """``2 * output elements * Cin/groups * kernel`` (a transposed ``convolution``: per
    input element), plus one add per output element with a bias."""
    w = vals[1]
    transposed = short in ("convolution", "_convolution") and len(vals) > 6 and vals[6]
    if transposed:
        flops = 2.0 * numel_of(vals[0]) * math.prod(shape_of(w)[1:])
    else:
        flops = 2.0 * out_elems * math.prod(shape_of(w)[1:])
    if len(vals) > 2 and is_tensor(vals[2]):
        flops += out_elems
    return flops


def _attention_flops(q: Any, k: Any, v: Any) -> float:
    """``Q @ K^T`` and ``P @ V`` in full (not halved for a causal mask)."""
    batch = math.prod(shape_of(q)[:-2])
    L, E = size_of(q.shape[-2]), size_of(q.shape[-1])
    S, Ev = size_of(k.shape[-2]), size_of(v.shape[-1])
    return 2.0 * batch * L * S * E + 2.0 * batch * L * S * Ev


def _pool_flops(rec: Record, vals: list, tensors: list, outs: list) -> float:
    """One comparison / add per window element: a stride-1 3x3 pool does 9 per output,
    which its bytes do not show; an adaptive pool reads every input once."""
    short = rec.short
    out_elems = sum(numel_of(t) for t in outs)
    if short.startswith("adaptive"):
        return float(numel_of(tensors[0])) if tensors else float(out_elems)
    window = _pool_window(rec, vals, 1 if "1d" in short else 3 if "3d" in short else 2)
    return float(numel_of(outs[0]) * window) if outs and window else float(out_elems)


def _bytes_moved(rec: Record, vals: list, arg_refs: list, bytes_read: int,
                 bytes_written: int) -> tuple[int, int]:
    """Bytes read and written, from every input and output read and written whole, for
    the ops that touch less: a gather reads only the rows it returns, an index write
    only its source's rows, an in-place op writes its target, a factory reads nothing."""
    short = rec.short
    if short in GATHERS and arg_refs:
        # only the gathered rows of the table (the first argument of all four) are read
        table = vals[0]
        if is_tensor(table):
            bytes_read = bytes_read - nbytes_of(table) + bytes_written
    if short in INDEX_WRITES:
        bytes_read, bytes_written = _index_write_bytes(rec, vals, bytes_read, bytes_written)
    elif rec.mutates and arg_refs:
        # an in-place op writes its target (the returned alias is the same bytes)
        written = [v for pos, _, v in arg_refs if pos in rec.mutates]
        bytes_written = sum(nbytes_of(v) for v in written)
        if short in ("copy_", "fill_", "zero_"):
            bytes_read -= sum(nbytes_of(v) for v in written)
    if short in _FACTORIES:
        bytes_read = 0
        if "empty" in short:
            bytes_written = 0
    return bytes_read, bytes_written


def _index_write_bytes(rec: Record, vals: list, bytes_read: int,
                       bytes_written: int) -> tuple[int, int]:
    """An index write reads its source, not the destination, and writes the source's
    bytes into it."""
    at = INDEX_WRITES[rec.short]
    srcv = node_value(rec.args[at] if len(rec.args) > at else None)
    if is_tensor(srcv):
        dst = vals[0]
        bytes_read = bytes_read - (nbytes_of(dst) if is_tensor(dst) else 0)
        bytes_written = nbytes_of(srcv)
    return bytes_read, bytes_written


def _pool_window(rec: Record, vals: list, dims: int) -> int:
    """Elements in a pool's window: from its kernel_size argument (positional or keyword),
    or from the pooling module an fx trace calls; 0 when none is readable."""
    k = vals[1] if len(vals) > 1 else rec.kwargs.get("kernel_size")
    if k is None and getattr(rec.node, "op", "") == "call_module":
        try:
            k = rec.node.graph.owning_module.get_submodule(rec.node.target).kernel_size
        except (AttributeError, KeyError):
            k = None
    if isinstance(k, int) and not isinstance(k, bool):
        return k ** dims
    if isinstance(k, (list, tuple)) and k and all(isinstance(x, int) for x in k):
        return math.prod(k) if len(k) > 1 else k[0] ** dims
    return 0


def _einsum_flops(eq: Any, operands: Any) -> float:
    try:
        lhs = str(eq).replace(" ", "").split("->")[0].split(",")
        sizes: dict[str, int] = {}
        for spec, t in zip(lhs, operands):
            for ch, s in zip(spec.replace("...", ""), shape_of(t)[-len(spec.replace("...", "")):]):
                sizes[ch] = size_of(s)
        return 2.0 * math.prod(sizes.values())
    except Exception:
        return 0.0
