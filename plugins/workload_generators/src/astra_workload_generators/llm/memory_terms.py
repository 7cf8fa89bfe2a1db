"""The framework-specific terms of the memory estimate (:mod:`.memory`): how Megatron-LM/NeMo, FSDP2 (torchtitan)
and DeepSpeed keep a rank's weights, gradients and optimizer states, which buffers they add, how their loss
computes the logits, torchtitan's op-level selective recomputation, and the caching allocator's reserve. Each
number names its source here and in docs/memory.md."""

from __future__ import annotations

from .config import DTYPES

#: outside PyTorch's allocator: the CUDA context (cuBLAS/cuDNN handles, loaded kernels) and one NCCL communicator's
#: collective buffers. Source: NVIDIA/nccl#1685 (8 x H100, one node): 1.06 GB of GPU memory outside PyTorch's
#: before the first all_to_all_single; NCCL's buffers grow linearly with its channels, and a ring keeps 2 connections
#: whatever the scale (sjeaugey in NVIDIA/nccl#864/#986). 1 GiB (1.07 GB) is kept as that measurement.
WORKSPACE_BYTES = 1 << 30
#: NCCL's point-to-point buffers an all-to-all adds, per peer on the same node: NVIDIA/nccl#1685 measured 1.06 ->
#: 4.34 GB outside PyTorch on 8 x H100 after the first all_to_all_single (7 peers, 32 channels per pair over
#: P2P/CUMEM), i.e. 3.28 GB / 7. Across nodes NCCL's send/receive share one buffer (NVIDIA/nccl#1450), not counted.
ALL_TO_ALL_PEER_BYTES = 3_280_000_000 // 7
#: the node size the peer count assumes (8-GPU HGX nodes, where the measurement was taken): the generator does not
#: know the platform, so an expert-parallel group's peers on the same node are at most 7 -- an assumption
ALL_TO_ALL_NODE_GPUS = 8


def context_bytes(cfg) -> int:
    """Memory outside the allocator: the CUDA context and NCCL's collective buffers, plus, in training with expert
    parallelism, the all-to-all dispatcher's point-to-point buffers to the EP peers on the rank's node."""
    peers = 0 if cfg.inference else min(cfg.ep, ALL_TO_ALL_NODE_GPUS) - 1
    return WORKSPACE_BYTES + peers * ALL_TO_ALL_PEER_BYTES
#: one cuBLAS workspace, which the caching allocator holds for the whole run (so max_memory_allocated counts it):
#: PyTorch's per (cuBLAS handle, stream), 32 MiB on Hopper and later (aten/src/ATen/cuda/CublasHandlePool.cpp,
#: parseChosenWorkspaceSize: ":4096:8"; 8.125 MiB before Hopper), and Transformer Engine's GEMM workspace
#: (transformer_engine/pytorch/module/base.py get_cublas_workspace_size_bytes: 32 MiB from Hopper, 4 MiB before).
#: The larger, Hopper sizes are used: the estimate does not know the GPU.
CUBLAS_WORKSPACE_BYTES = 32 << 20
#: --cuda-graphs (per-layer graphs in training): the graphs' private pools keep the temporaries of the captured
#: forward that eager PyTorch frees at once, "about 20 %" more activation memory, "10-20 GB" end to end (the CUDA-graph
#: page proposed for NeMo's docs, github.com/NVIDIA-NeMo/Speech pull request #10500, formerly NVIDIA/NeMo, closed
#: unmerged: docs/source/performance/cudagraphs.md) -- one statement, not a measurement
CUDA_GRAPH_ACTIVATION_FRACTION = 0.20
#: the caching allocator's reserve beyond the allocated bytes in training (max_memory_reserved /
#: max_memory_allocated - 1): fitted by tools/fit_memory_reserve.py on torchtitan's published pair of Llama 3.1 8B
#: FSDP runs on 8 and 128 H100 (docs/performance.md, Tables 1 and 3), whose difference is the sharded model states
RESERVE_FRACTION = 0.098
#: bytes per element of tokens x vocabulary/TP alive at the loss's peak (docs/memory.md, "Logits and loss"):
#: Megatron-LM: vocab_parallel_cross_entropy(logits.float()) works in place on the fp32 copy (4) beside the bf16
#: logits or their gradient (2); torchtitan and Hugging Face models: cross_entropy(logits.float()) keeps the fp32
#: log-softmax (4), and its backward holds the incoming gradient (4) and the logits' fp32 gradient (4)
LOGITS_BYTES = {"megatron": 6, "fsdp2": 12, "deepspeed": 12}
#: DeepSpeed's zero_optimization.reduce_bucket_size default (elements; DeepSpeed configuration docs): the gradient
#: bucket reduced at a time, allocated in the training dtype
DS_REDUCE_BUCKET = 500_000_000
#: DeepSpeed ZeRO-3's stage3_prefetch_bucket_size default (elements; DeepSpeed configuration docs): parameters
#: fetched ahead of their use
DS_PREFETCH_BUCKET = 50_000_000
#: Megatron-LM's distributed-optimizer table (docs: distrib_optimizer): bytes per parameter of (gradients,
#: optimizer states) by --dtype: bf16 params with fp32 main gradients, 18 = 2 + 4 + 12; fp16: 20 = 2 + 2 + 16
#: (fp32 main weights and gradients and two moments); fp32: 16 = 4 + 4 + 8. The distributed optimizer shards
#: the optimizer part (``6 + 12/d``, ``4 + 16/d``, ``8 + 8/d``); the gradient buffer stays whole.
MEGATRON_BYTES = {"bf16": (4, 12), "fp16": (2, 16), "fp32": (4, 8)}


#: NeMo's optimizer `distributed_fused_adam` (Apex DistributedFusedAdam) keeps its contiguous gradient buffer in
#: `grad_sync_dtype`, bf16 in MLPerf GPT-3's NeMo configs (mlcommons/training_results_v3.0 and v4.0, NVIDIA
#: benchmarks/gpt3 conf: `grad_sync_dtype: bf16`, `contiguous_grad_buffer: True`): ``--grad-buffer same`` (the fp32
#: master weights and Adam's moments stay 12 bytes, sharded). Apex's bf16 parameter remainders (10 instead of 12
#: bytes) are not modelled.


#: --loss-dtype same: elements of tokens x vocabulary/TP alive at the loss's peak, each in --dtype: the logits,
#: the copy the loss works on (a shifted or upcast one) and its log-softmax (or, in the backward, two gradients)
LOSS_SAME_ELEMENTS = 3


def logits_bytes(framework: str, cfg, tokens: int, vocab_per_rank: int) -> int:
    """The loss's peak over the last stage's logits (see :data:`LOGITS_BYTES`, :data:`LOSS_SAME_ELEMENTS`)."""
    if cfg.loss_dtype == "same":
        return LOSS_SAME_ELEMENTS * DTYPES[cfg.dtype][0] * tokens * vocab_per_rank
    return LOGITS_BYTES[framework] * tokens * vocab_per_rank


def deferred_head_bytes(cfg, dims, tokens: int, vocab_per_rank: int) -> int:
    """``--defer-embedding-wgrad-compute`` on the last stage: Megatron-Core keeps each deferred head call's input
    (``embedding_activation_buffer.append(input_parallel)`` in ``ColumnParallelLinear.forward``: this rank's rows,
    ``s/TP`` with sequence parallelism) and its output gradient (``grad_output_buffer.append(grad_output)`` in the
    backward: the logits' gradient, ``tokens x vocab/TP`` in --dtype) until the pipeline drain consumes them
    (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/tensor_parallel/layers.py`` 499-504, 994-1000;
    ``megatron/core/utils.py`` 918-998): at the last backward all of them at once. ``min(calls, limit)`` calls
    (``0``: every call; a step's calls are its micro-batches times one plus the MTP modules)."""
    if not cfg.defer_embedding_wgrad:
        return 0
    calls = cfg.micro_batches * (1 + dims.mtp_layers)
    kept = calls if cfg.wgrad_deferral_limit == 0 else min(calls, cfg.wgrad_deferral_limit)
    nb = DTYPES[cfg.dtype][0]
    rows = tokens // cfg.tp if cfg.sequence_parallel else tokens
    return kept * nb * (rows * dims.hidden + tokens * vocab_per_rank)


def gemm_workspace_bytes(framework: str) -> int:
    """cuBLAS workspaces of a training step: PyTorch's for the forward thread and for the autograd engine's
    backward thread (two cuBLAS handles on one stream), and under Megatron-LM Transformer Engine's own."""
    return (3 if framework == "megatron" else 2) * CUBLAS_WORKSPACE_BYTES


def model_states(framework, cfg, params, units, edges, sharded):
    """(weights, gradients, optimizer, buffers) bytes of a training rank. ``params``: the parameters it holds;
    ``units``: the sizes of its largest gathered units (layers); ``edges``: its embedding/LM-head parameters;
    ``sharded(count, bytes_per)``: ``count`` parameters' bytes sharded over their data-parallel groups."""
    nb = DTYPES[cfg.dtype][0]
    whole_grads = not (cfg.grad_sync_every_micro_batch or cfg.micro_batches == 1)
    largest = max(units, default=0)
    if framework == "megatron":
        grad_bytes, opt_bytes = MEGATRON_BYTES[cfg.dtype]
        if cfg.grad_buffer == "same":  # NeMo's distributed fused Adam: the gradient buffer in grad_sync_dtype
            grad_bytes = nb
        optimizer = sharded(params, opt_bytes) if cfg.zero >= 1 else params * opt_bytes
        return params * nb, params * grad_bytes, optimizer, 0
    if framework == "fsdp2":
        # fp32 sharded parameters (the optimizer's master copy), bf16 compute copies of the root (embedding, LM
        # head) and of the units gathered at a time; fp32 sharded gradients and Adam moments. Beside them, the
        # unit being reduced: its unsharded gradient in --dtype and the fp32 copy reduce-scattered.
        if cfg.reshard_after_forward:  # the unit computing and the --fsdp-prefetch units gathered ahead of it
            gathered = (edges + (1 + cfg.fsdp_prefetch) * largest) * nb
        else:
            gathered = params * nb
        master = 0 if nb >= 4 else sharded(params, 4)
        gradients = params * nb if whole_grads else sharded(params, 4)
        return master + gathered, gradients, sharded(params, 8), largest * (nb + 4)
    # DeepSpeed ZeRO (Rajbhandari et al. 2020): weights and gradients in --dtype, K = 12 bytes of fp32 master
    # weights and moments (8 in fp32 training); stage 1 shards K, stage 2 the gradients too (reduced in buckets
    # after every micro-batch's backward), stage 3 the weights too (two units and the prefetch bucket gathered)
    opt_bytes = 12 - (4 if nb >= 4 else 0)
    optimizer = sharded(params, opt_bytes) if cfg.zero >= 1 else params * opt_bytes
    gradients = sharded(params, nb) if cfg.zero >= 2 else params * nb
    if cfg.zero == 3:
        weights = sharded(params, nb) + ((2 * largest + min(DS_PREFETCH_BUCKET, params)) * nb
                                         if cfg.reshard_after_forward else params * nb)
    else:
        weights = params * nb
    buffers = min(DS_REDUCE_BUCKET, params) * nb if cfg.zero >= 1 else 0
    return weights, gradients, optimizer, buffers


def op_sac_layer_bytes(dims, cfg, tokens: int) -> int:
    """Bytes a dense layer keeps for its backward under torchtitan's op-level selective activation checkpointing
    (torchtitan ``_save_list``; its ``mode = "selective"``, ``selective_ac_option = "op"``): the layer's input,
    the attention kernel's output and log-sum-exp, the reduce-scatters' outputs under TP, and every other matmul's
    output in the order the layer runs them (the 1st, 3rd, ...: wq, wv, w1, w2 for a Llama layer); the rest is
    recomputed. Row-parallel matmuls (wo, w2) output the whole hidden size before their reduce-scatter."""
    nb = DTYPES[cfg.dtype][0]
    t = cfg.tp
    h, d, kv = dims.hidden, dims.head_dim, dims.kv_heads
    # (width per TP rank) of each matmul output, in forward order
    mms = [dims.q_width // t, kv * d // t, kv * dims.v_dim // t, h]
    mms += [dims.ffn_hidden // t] * (2 if dims.gated else 1) + [h]
    saved = sum(width for i, width in enumerate(mms) if i % 2 == 0)
    replicated_div = t if (cfg.sequence_parallel or t > 1) else 1  # torchtitan's TP plan is sequence-parallel
    per_token = h // replicated_div + dims.o_width // t + saved + (2 * h // t if t > 1 else 0)
    lse = dims.heads // t * 4  # fp32 log-sum-exp per head and token
    return tokens * (per_token * nb + lse)


def moe_dispatch_bytes(dims, cfg, tokens: int, rows: int) -> int:
    """The all-to-all token dispatcher's buffers while one MoE layer runs (Megatron-LM's
    ``MoEAlltoAllTokenDispatcher``: the permuted token copies this rank sends, ``tokens * top_k`` capped by the
    experts' capacity, and the ``rows`` it receives for its experts, both ``h`` wide in --dtype); ``rows``
    follows the routing (capacity factor, padding, imbalance or expert loads: :func:`.routing.routed_rows`)."""
    nb = DTYPES[cfg.dtype][0]
    sent = min(tokens * dims.top_k, rows) if cfg.moe_capacity_factor is not None else tokens * dims.top_k
    return (sent + rows) * dims.hidden * nb
