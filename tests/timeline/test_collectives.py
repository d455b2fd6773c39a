"""The collective table's spellings and construction (timeline.collectives)."""

import numpy as np
import pytest

from parastream.timeline.collectives import dtype_bytes, make_collectives, normalize_op


@pytest.mark.parametrize("name, op", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "allreduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "allreduce"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "reducescatter"),
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "sendrecv"),
    ("_allgather_base", "allgather"), ("all_gather_into_tensor_coalesced", "allgather"),
    ("reduce_scatter_tensor_coalesced", "reducescatter"), ("all_to_all", "alltoall"),
    ("hcom_allReduce__606_0_1", "allreduce"), ("hcom_alltoallv_", "alltoall"),
    ("hcom_receive_", "recv"), ("hcom_send_", "send"), ("hcom_broadcast_", "broadcast"),
    ("aten::mm", ""), ("MatMul", ""),
])
def test_normalize_op_reads_nccl_torch_and_hccl_spellings(name, op):
    assert normalize_op(name) == op


def test_dtype_bytes():
    assert [dtype_bytes(d) for d in ("c10::Half", "Float", "torch.bfloat16", "Long", "int8")] \
        == [2, 4, 2, 8, 1]
    assert [dtype_bytes(d) for d in ("fp16", "bfp16", "fp32")] == [2, 2, 4]
    assert dtype_bytes("complex-thing") == -1


def test_make_collectives_sorts_by_start_and_fills_unknown_columns():
    c = make_collectives(["hcom_allReduce__1_0_1", "ncclDevKernel_SendRecv(x)", "aten::weird(y)"],
                         ["g", "g", ""], [50, 10, 30], [60, 20, 40], peer=[-1, 3, -1],
                         group_ranks={"g": (0, 1)})
    assert list(c.op) == ["sendrecv", "aten::weird", "allreduce"]
    assert list(c.start_ns) == [10, 30, 50] and list(c.peer) == [3, -1, -1]
    assert list(c.seq) == [-1, -1, -1] and list(c.key) == ["", "", ""]
    assert c.nbytes.dtype == np.int64 and len(c) == 3 and c.group_ranks == {"g": (0, 1)}


def test_make_collectives_refuses_ragged_or_unknown_columns():
    with pytest.raises(ValueError):
        make_collectives(["allreduce"], ["g"], [0], [1], seq=[1, 2])
    with pytest.raises(TypeError):
        make_collectives(["allreduce"], ["g"], [0], [1], sequence=[1])
