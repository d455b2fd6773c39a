"""The importer's op tables: which aten (and fx) op names are views, copies, matrix
products, collectives, random draws, reductions, gathers and index writes.

Keyed by an op's short name (``linear``, ``copy_``, ``all_reduce``); read by the record
extraction (:mod:`.records`), the costs (:mod:`.op_costs`), the importer's classification
(:mod:`.torch_import`) and the code generator.
"""

from __future__ import annotations

#: short op names that move no data (their consumers are wired to the producer)
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "view_as", "transpose", "t", "permute", "expand",
    "expand_as", "unsqueeze", "squeeze", "select", "slice", "narrow", "alias", "detach",
    "unflatten", "split", "split_with_sizes", "chunk", "unbind", "as_strided", "movedim",
    "swapaxes", "swapdims", "diagonal", "getitem", "wait_tensor", "lift_fresh_copy",
    "real", "view_as_real", "view_as_complex", "size", "dim",
})
#: in-place ops that change a tensor's shape or strides, not its data
LAYOUT_INPLACE_OPS = frozenset({
    "t_", "transpose_", "unsqueeze_", "squeeze_", "as_strided_", "swapdims_", "swapaxes_",
    "resize_", "resize_as_", "set_",
})
#: ops that may or may not copy: folded only when their input is already contiguous
MAYBE_VIEW_OPS = frozenset({"reshape", "contiguous", "flatten"})
CUBE_OPS = frozenset({
    "linear", "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "einsum", "mv", "addmv",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention",
    "multi_head_attention_forward", "_native_multi_head_attention",
    # grouped GEMMs of MoE experts (transformers' grouped_mm experts implementation)
    "grouped_mm", "_grouped_mm", "grouped_mm_fallback",
})
MEMORY_OPS = frozenset({
    "copy_", "copy", "_to_copy", "to", "clone", "contiguous", "reshape", "flatten", "cat",
    "concat", "stack", "index_copy", "index_copy_", "index_put", "index_put_", "slice_scatter",
    "select_scatter", "embedding", "index_select", "gather", "take", "fill_", "zero_", "zeros",
    "zeros_like", "ones", "ones_like", "empty", "empty_like", "full", "full_like", "new_zeros",
    "new_ones", "new_empty", "new_full", "repeat", "repeat_interleave", "pad",
    "constant_pad_nd", "roll", "flip", "tile", "_pin_memory", "pin_memory",
})
#: collective name -> kind used in ``collective:<kind>``
COLLECTIVES = {
    "all_reduce": "all_reduce", "all_reduce_": "all_reduce", "allreduce_": "all_reduce",
    "all_gather_into_tensor": "all_gather", "all_gather": "all_gather",
    "allgather_": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter", "all_to_all_single": "all_to_all",
    "all_to_all": "all_to_all", "alltoall_": "all_to_all", "alltoall_base_": "all_to_all",
    "broadcast": "broadcast", "broadcast_": "broadcast", "send": "send", "recv": "recv",
    "send_": "send", "recv_": "recv", "all_reduce_coalesced": "all_reduce",
}
#: ops that draw from a random generator (besides those torch tags nondeterministic_seeded;
#: a dropout that reaches the op list is a training-mode one)
RANDOM_OPS = frozenset({
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm",
    "bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "multinomial", "exponential_",
    "geometric_", "cauchy_", "log_normal_", "random_", "native_dropout", "dropout",
    "feature_dropout", "alpha_dropout", "rrelu_with_noise",
})
COMM_NAMESPACES = frozenset({"_c10d_functional", "c10d", "_c10d_functional_autograd",
                             "c10d_functional", "_dtensor", "parastream"})
#: approximate FLOPs per element for vector ops (default 1 per output element)
VECTOR_FLOPS_PER_ELEM = {
    "softmax": 5, "_softmax": 5, "log_softmax": 5, "_log_softmax": 5, "layer_norm": 8,
    "native_layer_norm": 8, "rms_norm": 4, "_fused_rms_norm": 4, "group_norm": 8,
    "batch_norm": 4, "_native_batch_norm_legit_no_training": 4, "instance_norm": 8,
    "gelu": 8, "silu": 4, "sigmoid": 4, "tanh": 4, "softplus": 4, "erf": 4, "rsqrt": 2,
    "pow": 2, "exp": 1, "log": 1, "relu": 1, "relu_": 1, "hardtanh": 1, "neg": 1,
}
#: reductions: FLOPs from the input's elements (the output is small)
REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin",
                        "norm", "var", "std", "var_mean", "prod", "logsumexp", "topk",
                        "sort", "argsort", "cumsum", "all", "any"})
#: gathers read only the rows they return from their (large) table argument
GATHERS = frozenset({"embedding", "index_select", "gather", "take"})
#: index writes touch only the rows of their source, not the whole destination
INDEX_WRITES = {"index_copy": 3, "index_copy_": 3, "index_put": 2, "index_put_": 2,
                "slice_scatter": 1, "select_scatter": 1}
