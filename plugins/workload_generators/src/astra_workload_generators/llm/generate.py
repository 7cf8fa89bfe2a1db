"""Writing the workload: every stage's graph once, each rank's trace (or each class's, compact) with its own
group ids and peers appended, the groups file and the manifest."""

from __future__ import annotations

import json
from contextlib import nullcontext

from astra_sim.chakra.reader import parse_node
from astra_sim.chakra.writer import encode_varint, make_metadata
from astra_sim.gcpause import gc_paused
from astra_sim.safeio import write_bytes_atomic
from astra_folding.symmetry import RankSymmetry
from astra_workload_compact import hold_compact_workload, write_compact_workload

from ..common import ensure_parent
from .blockscale import block_format
from .config import LlmConfig, _check
from .encode import encode_memory_node, with_rank_attrs
from .memory import memory_estimate, metadata_attrs
from .layout import _dyn_bytes, comm_groups, rank_of, rank_symmetry
from .model import (ModelDims, activated_parameter_count, inference_flops, parameter_count, training_flops,
                    vocab_padding)
from .lora import lora_training_flops
from .embedding import embedding_group_used
from .stage import _StageBuilder


def generate_llm(dims: ModelDims, cfg: LlmConfig, prefix, *, write=True, per_rank_files=False,
                 model_name=None, in_memory=False):
    """Write the workload, ``PREFIX.groups.json`` and ``PREFIX.groups.roles.json`` (each group's role: tp, dp,
    pp, ...); returns a summary dict.

    Ranks of one pipeline stage share their graph: it is encoded once per stage and each rank only appends its
    own ``pg_name`` / ``comm_src`` / ``comm_dst`` attributes. With ``--moe-expert-load`` each EP index of a stage
    has its own graph (its experts compute their own rows). By default the workload is compact
    (:mod:`astra_workload_compact`): one trace per class of ranks that :func:`rank_symmetry` relates
    (``PREFIX.class<i>.et``) and ``PREFIX.workload.json``; ``per_rank_files`` writes ``PREFIX.<rank>.et``
    for every rank instead.

    ``in_memory`` (compact only; issue 37): the class traces are not encoded. Each is held in this process as the
    nodes reading its file would give (:mod:`astra_workload_compact.memory`), and its file holds only the
    GlobalMetadata and a frame that no reader takes for a node: a run in this process reads the nodes as they are,
    skipping the encode and the parse; anything else that needs the file gets it written, byte for byte what
    ``in_memory=False`` writes (:func:`astra_workload_compact.ensure_written`)."""
    if in_memory and per_rank_files:
        raise ValueError("generate_llm: in_memory holds a compact workload's class traces; per_rank_files writes "
                         "every rank's file")
    _check(dims, cfg)
    gids, groups = comm_groups(cfg, embedding=embedding_group_used(dims, cfg))
    prefix = str(prefix)
    if write:
        ensure_parent(prefix)
        write_bytes_atomic(f"{prefix}.groups.json", json.dumps(groups).encode())
        # what each group is for, for the breakdown's communicator names (read beside the groups file)
        roles = {str(gid): role for role, by_key in gids.items() for gid in by_key.values()}
        write_bytes_atomic(f"{prefix}.groups.roles.json",
                           json.dumps(dict(sorted(roles.items(), key=lambda kv: int(kv[0])))).encode())
    memory = memory_estimate(dims, cfg)
    sequences = cfg.dp * cfg.micro_batches * cfg.micro_batch_size
    if cfg.inference:
        flops = inference_flops(dims, cfg)
    elif cfg.lora_rank:
        flops = lora_training_flops(dims, cfg, sequences, cfg.tp)
    else:
        flops = training_flops(dims, sequences, cfg.tp, vocab_padding(cfg))
    step_attrs = step_metadata(dims, cfg, flops, model_name)
    nodes_per_stage = []
    per_ep = cfg.ep if cfg.moe_expert_load else 1
    symmetry = RankSymmetry(rank_symmetry(cfg))
    classes = []
    # held nodes are a million small objects that cannot form cycles: the cyclic GC re-scanning them while they
    # are made took more than the making (13 of 23 CPU seconds of the MLPerf GPT-3 step), as in parse_et
    with gc_paused() if in_memory else nullcontext():
        for p in range(cfg.pp):
            graphs = [_build(dims, cfg, p, e, in_memory) for e in range(per_ep)]
            # the stage's memory estimate travels in its traces' GlobalMetadata (astra run checks it against HBM)
            meta = make_metadata(attrs={"generator": "astra workload llm",
                                        **metadata_attrs(memory[p]), **step_attrs}).SerializeToString()
            head = encode_varint(len(meta)) + meta
            nodes_per_stage.append(len(graphs[0]))
            keys = sorted({dyn for items in graphs for _, dyn in items if dyn is not None})
            if in_memory:
                for t, d, c in ((t, d, c) for t in range(cfg.tp) for d in range(cfg.dp) for c in range(cfg.cp)):
                    rank = rank_of(cfg, t, d, p, c)
                    if symmetry.is_representative(rank):
                        extra = {k: parse_node(_dyn_bytes(k, rank, cfg, gids), keep_raw=False) for k in keys}
                        classes.append((rank, head, [node if dyn is None else with_rank_attrs(node, extra[dyn], None)
                                                     for node, dyn in graphs[d % per_ep]]))
                continue
            # a node without a rank-specific part is framed (length + body) once: the same frame in every rank's trace
            graphs = [[(raw, dyn) if dyn is not None else (encode_varint(len(raw)) + raw, None) for raw, dyn in items]
                      for items in graphs]
            for t, d, c in ((t, d, c) for t in range(cfg.tp) for d in range(cfg.dp) for c in range(cfg.cp)):
                rank = rank_of(cfg, t, d, p, c)
                if not per_rank_files and not symmetry.is_representative(rank):
                    continue
                items = graphs[d % per_ep]
                suffix = {k: _dyn_bytes(k, rank, cfg, gids) for k in keys}
                chunks = [head]
                for raw, dyn in items:
                    if dyn is None:  # (framed above)
                        chunks.append(raw)
                    else:
                        body = raw + suffix[dyn]
                        chunks.append(encode_varint(len(body)))
                        chunks.append(body)
                if not write:
                    continue
                if per_rank_files:
                    write_bytes_atomic(f"{prefix}.{rank}.et", b"".join(chunks))
                else:
                    classes.append((rank, b"".join(chunks)))
    if write and in_memory:
        classes.sort(key=lambda item: item[0])
        hold_compact_workload(prefix, cfg.npus, symmetry.shifts, classes, encode_memory_node,
                              comm_groups=f"{prefix}.groups.json", generator="astra workload llm")
    elif write and not per_rank_files:
        classes.sort()
        write_compact_workload(prefix, cfg.npus, symmetry.shifts, classes, comm_groups=f"{prefix}.groups.json",
                               generator="astra workload llm")
    padding = vocab_padding(cfg)  # (the vocabulary padded as the framework pads it)
    return {"npus": cfg.npus, "nodes_per_stage": nodes_per_stage, "groups": len(groups),
            "parameters": parameter_count(dims, cfg.tp, padding), "classes": cfg.npus // symmetry.order,
            "activated_parameters": activated_parameter_count(dims, cfg.tp, padding), "flops": flops,
            "memory": memory, "peak_memory_bytes": max(m.total for m in memory)}


def _build(dims, cfg, stage, ep_index, in_memory):
    """One stage's graph (for one EP index): ``(bytes or EtNode, rank-specific key or None)`` per node."""
    builder = _StageBuilder(dims, cfg, stage, ep_index)
    builder.in_memory = in_memory
    return builder.build()


def layout_text(cfg):
    """The step's parallel layout as people write it: ``TP 8 x PP 4 x DP 2``, CP when used, EP (which splits the
    DP ranks' experts) after it: ``TP 1 x PP 1 x DP 8 (EP 8)``."""
    parts = [("TP", cfg.tp), ("CP", cfg.cp), ("PP", cfg.pp), ("DP", cfg.dp)]
    text = " x ".join(f"{name} {size}" for name, size in parts if size > 1 or name != "CP")
    return text + (f" (EP {cfg.ep})" if cfg.ep > 1 else "")


def step_metadata(dims, cfg, flops, model_name=None):
    """What the step computes, as GlobalMetadata attributes of every trace: the model FLOPs of the whole step (all
    ranks; the 6PT + attention count of :func:`training_flops`, or the forward of an inference step), the hardware
    FLOPs (full recomputation runs the forward again), the tokens and sequences it processes and the GEMMs' dtype.
    ``astra run`` turns them into MFU, model TFLOP/s per GPU and tokens/s (``stats.throughput``)."""
    sequences = cfg.dp * cfg.micro_batches * cfg.micro_batch_size
    if cfg.mode == "train":
        tokens = sequences * dims.seq_len
    elif cfg.mode == "prefill":
        tokens = sequences * (cfg.prompt_len or dims.seq_len)
    else:  # decode (one token per sequence per step) and mixed (plus one prefill chunk per micro-batch and replica)
        tokens = sequences * cfg.steps + (cfg.dp * cfg.micro_batches * cfg.prefill_chunk if cfg.mode == "mixed" else 0)
    hardware = flops
    if cfg.mode == "train" and cfg.recompute:  # the forward again: a third of 6PT, more of a LoRA step
        hardware += lora_training_flops(dims, cfg, sequences, cfg.tp, forward=True) if cfg.lora_rank else flops // 3
    elif cfg.mode == "train" and cfg.recompute_selective and cfg.framework == "fsdp2" and not dims.mla:
        # torchtitan's op-level checkpointing re-runs wk, wo and w3 of every dense layer (layer_recompute_op_sac)
        dense = sum(1 for i in range(dims.layers) if not dims.is_moe_layer(i))
        widths = dims.kv_heads * dims.head_dim + dims.o_width + dims.ffn_hidden
        hardware += 2 * sequences * dims.seq_len * dims.hidden * widths * dense
    # FLOPs as doubles: a large step overflows 64-bit integers (405B x 16M tokens x 6 is 4e22)
    return {"model_flops_per_step": float(flops), "hardware_flops_per_step": float(hardware),
            "tokens_per_step": int(tokens), "sequences_per_step": int(sequences),
            "compute_dtype": _compute_dtype(cfg), "step_mode": cfg.mode,
            # what the step is, for titles (astra plot): the model as named (--model / --preset) and the layout
            "layout": layout_text(cfg), **({"model_name": str(model_name)} if model_name else {}),
            # the GPU layout Transformer Engine's FP8 casts were written for (astra run warns on another GPU's
            # platform): with transposes (Hopper, or no platform given) or without (Blackwell); none for torchao's
            # tensorwise casts, which write both layouts on every GPU (no TE)
            **({"te_fp8_transposes": cfg.fp8_transpose is not False}
               if cfg.gemm_dtype == "fp8" and cfg.ew and cfg.fp8_recipe != "tensorwise" else {})}


def _compute_dtype(cfg):
    """The GEMMs' dtype as the gpu model names it (the peak MFU is taken against): fp8, nvfp4, mxfp8, mxfp6, mxfp4 or
    ``--dtype``."""
    fmt = block_format(cfg)
    if fmt is not None:
        return fmt.name
    return "fp8" if cfg.gemm_dtype == "fp8" else cfg.dtype
