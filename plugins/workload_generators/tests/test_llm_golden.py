"""The LLM generator's traces do not change when its code is reorganised: every node of every trace of a set
of configurations (dense, MoE with EP and expert loads, CP, FP8, TP overlap, virtual stages, ZeRO, inference
modes, per-rank files) hashes to what the code gave before it was split into a package (issue 19). Only the
GlobalMetadata frame is left out of the hash: it carries the memory estimate, which was added afterwards.
The MoE cases' hashes were renewed once, on purpose (issue 24): their routed-expert GEMMs gained the
``grouped_gemm_dim``/``grouped_gemm_sizes`` attributes and a ``tensor_size`` that counts every active expert's
weights; the dense cases are unchanged. The four inference cases (prefill_cp_logits, decode_steps_moe, mixed_chunk,
llama2_70b_decode_preset) were renewed on purpose for issue 34: ``--inference-elementwise`` became the default, so
they gained each layer's norms, residual adds and activation (their new hashes are those the code before gave with
``--inference-elementwise``); every training case is unchanged. The two FP8 training cases
(gpt_sp_overlap_fp8_vp_zero1, moe_expert_load_fp8) were renewed on purpose for issue 36: each linear weight held
in bf16 is cast to FP8 once a step, before micro-batch 0's forward GEMM (``Fp8Ops.weight_quantize``). Then every
training case with element-wise nodes, on purpose (issue 36): the ``_fused_adam_`` node's ``tensor_size`` counts
the two moments written back (28 bytes per parameter, as the gpu model counts it); nothing else in them changed.
Then the Megatron training cases with element-wise nodes (not ZeRO-2/3), on purpose (issue 36): Megatron-Core's
gradient norm (and its all-reduce) before Adam, and after it the gradient buffer's ``zero_grad_buffer`` and the
parameters' copy back (``DataParallelOps.megatron_grad_norm``/``zero_grad_buffer``/``megatron_params_back``).
Then llama3_8b_preset, on purpose (issue 36): its dense gated FFN's SwiGLU is Megatron-Core's default fused kernel
(``bias_swiglu_fusion``: one kernel each way, ``LayerOps.dense_act_fwd``/``dense_act_bwd``); no other case has a
dense gated FFN in a Megatron training step. Then the Megatron training cases with dropout (cp_causal_unfused,
dense_tp_pp_dp, gpt3_13b_preset, llama3_8b_preset, moe_expert_load_fp8, moe_imbalance_cp_ep, per_rank_files), on
purpose (issue 36): the residual stream's dropout and add are Megatron's fused bias-dropout-add, one node
(``LayerOps.dropout_add``). Then the Megatron ZeRO-0 training cases, on purpose (issue 36): without the distributed
optimizer the gradient norm is not all-reduced over DP (Megatron-Core's grad-stats group is the model-parallel one).
Then the two preset cases, whose models are rotary (llama3_8b_preset, llama2_70b_decode_preset), on purpose (issue
36): RoPE on Q and K is emitted by default (``config.rope_kernel``): Transformer Engine's fused kernel, one per
tensor each way, in the Megatron training step (Megatron-LM's ``apply_rope_fusion`` default), vLLM's in-place
``rotary_embedding``, one per layer, in the decode step; the other cases give dimensions without a model (not
rotary: Megatron-LM's learned_absolute default) and are unchanged. Then the two Megatron training cases with context
parallelism (cp_causal_unfused, moe_imbalance_cp_ep), on purpose (issue 36): Transformer Engine's ring attention merges
the CP steps' outputs (LSE and output corrections) and accumulates their dQ, dK, dV in kernels of its own
(``AttentionOps.te_ring_merges``); the inference case with CP (prefill_cp_logits) is unchanged. Then the training cases
of a non-gated (biased) model with element-wise nodes on linears that are not Transformer Engine's (cp_causal_unfused,
dense_tp_pp_dp, gpt3_13b_preset, moe_imbalance_cp_ep, per_rank_files: Megatron-LM's own linears; moe_ep_capacity:
``--zero 2``, DeepSpeed), on purpose (issue 36): each linear layer's bias gradient is an ``aten::sum`` of its output
gradient in the backward (``LayerOps.bias_grad``); the FP8 / TP-overlap case (Transformer Engine fuses it), the gated
and inference cases are unchanged. In the same change the emitter counts a reduction's ``tensor_size`` as the gpu
model does (its arguments read once, not twice): no case here has a reduction node other than those new sums.
Then the two preset cases, whose models are RMSNorm models (llama3_8b_preset, llama2_70b_decode_preset), on purpose
(issue 36): their norms are ATen's ``_fused_rms_norm`` / ``_fused_rms_norm_backward`` (``ModelDims.rms_norm``,
``LayerOps.layer_norm``), not ``native_layer_norm``; every other case gives dimensions without a model (LayerNorm,
Megatron-LM's default) or has no element-wise nodes, and is unchanged.
Then every case with element-wise nodes (all but unfused_scatter_gather and deepseek_preset), on purpose (issue 36):
the stage that holds the LM head runs the model's final norm before it, forward and backward (``LayerOps.final_norm``,
the layers' norm kind and rows); only the last stage's files changed, and with the final norm switched off every
hash is the one before.
Then the cases with sequence parallelism at TP 2 (gpt3_13b_preset, gpt_sp_overlap_fp8_vp_zero1, moe_ep_capacity,
moe_imbalance_cp_ep, per_rank_files), on purpose (issue 36): the LM head all-gathers its s/TP input rows over TP before
its GEMM, and in the backward Megatron re-gathers them for the weight gradient and reduce-scatters the input gradient
(``LayerOps.head_gather`` / ``head_regather`` / ``head_grad_scatter``); only the last stage's files changed, and with
those three switched off every hash is the one before.
Then the Megatron training cases with sequence parallelism and without ``--tp-comm-overlap`` (gpt3_13b_preset,
moe_imbalance_cp_ep, per_rank_files), on purpose (issue 36): a layer's QKV / FC1 input-gradient reduce-scatter is
launched right after its dgrad GEMM, beside the wgrad GEMM, and the norm's backward waits for it
(``LayerOps._dgrad_reduce``, Megatron-Core's async reduce-scatter); the same nodes, other dependencies.
Then every training case with data parallelism or ZeRO (all but the inference cases and unfused_scatter_gather), on
purpose (issue 36): the norms' weights (RMSNorm: h, LayerNorm: weight and bias, two a layer, the final norm with the
LM head's unit) are parameters: their gradients join the DP reductions, the ZeRO / FSDP units and the optimizer's
counts (``model.layer_norm_parameters``); with sequence parallelism Megatron all-reduces them over TP before the
optimizer (``DataParallelOps.sp_norm_grad_all_reduce``).
Then the Megatron case with ``--tp-comm-overlap`` (gpt_sp_overlap_fp8_vp_zero1), on purpose (issue 36): the QKV / FC1
input gradient's reduce-scatter is Transformer Engine's default bulk overlap beside the wgrad GEMM (one
reduce-scatter of the whole --dtype gradient after the whole dgrad GEMM, ``LayerOps._bulk_wgrad_scatter``), not a
ring pipelined with dgrad chunks (TE's ``ub_overlap_rs_dgrad``, off by default in Megatron).
Then the training cases with data parallelism or ZeRO whose dimensions say no rotary embedding or no gated FFN
(cp_causal_unfused, dense_tp_pp_dp, gpt3_13b_preset, gpt_sp_overlap_fp8_vp_zero1, llama_gqa_recompute_zero3_reshard,
moe_ep_capacity, moe_expert_load_fp8, moe_imbalance_cp_ep, per_rank_files), on purpose (issue 36): the learned
position table (Megatron-LM's default ``learned_absolute``, ``seq_len x h``, whole on every TP rank) is a parameter of
the embedding's unit, and a non-gated model's linear biases (Megatron's ``add_bias_linear``: QKV and FC1 split over TP,
the projection's and FC2's whole, the latter in the SP norm-gradient all-reduce) are parameters of their layer
(``model.embedding_shard``, ``model.bias_widths``, test_parameters_complete.py); with those two counted as zero every
hash is the one before.
Then the Megatron training cases at TP 2 without sequence parallelism (cp_causal_unfused, dense_tp_pp_dp,
llama3_8b_preset, unfused_scatter_gather), on purpose (issue 36): a layer's QKV / FC1 input-gradient all-reduce is
launched right after its dgrad GEMM, beside the wgrad GEMM, and the next compute node waits for it
(``LayerOps._dgrad_reduce``, Megatron-Core's ``allreduce_dgrad`` ``async_op=True``); the same nodes, other
dependencies. Then the same four cases, on purpose (issue 36): the LM head's input gradient is all-reduced over TP
after its dgrad GEMM, beside its wgrad GEMM (``LayerOps.head_grad_scatter``: Megatron's ``output_layer`` is a
``ColumnParallelLinear`` with ``allreduce_dgrad``); only the last stage's files changed.
Then the Megatron training cases at TP 2 (cp_causal_unfused, dense_tp_pp_dp, gpt3_13b_preset,
gpt_sp_overlap_fp8_vp_zero1, llama3_8b_preset, moe_imbalance_cp_ep, per_rank_files, unfused_scatter_gather), on
purpose (issue 36): the vocabulary-parallel embedding's output is reduced over TP once a micro-batch before the
first layer (an all-reduce; with sequence parallelism and rotary positions a reduce-scatter) and, with sequence
parallelism, its gradient all-gathered before the embedding's weight gradient (``embedding.EmbeddingOps``); only
the first stage's files changed, and with those switched off every hash is the one before. (No case here has tied
embeddings at PP > 1, whose gradient all-reduce over the embedding group came in the same change.)
Then the four inference cases, all at TP > 1 (decode_steps_moe, llama2_70b_decode_preset, mixed_chunk,
prefill_cp_logits), on purpose (issue 36): a serving step all-reduces the embedding output over TP before the first
layer (vLLM's ``VocabParallelEmbedding``, ``--inference-embedding vocab-parallel``, the default); with
``--inference-embedding replicated`` every hash is the one before.
Then the Megatron training cases whose vocabulary is not a multiple of 128 x TP (cp_causal_unfused, dense_tp_pp_dp,
gpt3_13b_preset, gpt_sp_overlap_fp8_vp_zero1, moe_expert_load_fp8, moe_imbalance_cp_ep, per_rank_files,
unfused_scatter_gather: 1000 -> 1024, GPT-3's 50257 -> 50432 at TP 2), on purpose (issue 36): Megatron-LM pads
the vocabulary to a multiple of ``--make-vocab-size-divisible-by`` (128) x TP (``model.vocab_padding``); with
``--make-vocab-size-divisible-by 1`` every hash is the one before; the other cases (llama3_8b_preset's 128256 and
deepseek_preset's 102400 are multiples already; ZeRO-2/3 and inference do not pad) are unchanged.
Then the Megatron training cases with memory-bound nodes (cp_causal_unfused, dense_tp_pp_dp, gpt3_13b_preset,
gpt_sp_overlap_fp8_vp_zero1, llama3_8b_preset, moe_expert_load_fp8, moe_imbalance_cp_ep, per_rank_files), on
purpose (issue 36): Megatron's memory-bound kernels around the embedding (the ids' mask and the out-of-shard rows'
zeros at TP > 1, the learned positions' lookup and add, the ``[b s h] -> [s b h]`` copy, the SP shard's clone, the
embedding dropout, and their backward; ``embedding.EmbeddingOps._embedding_kernels``); only the first stage's files
changed, and with those kernels switched off every hash is the one before.
Then gpt3_13b_preset, on purpose (issue 36): ``--preset gpt3-13b`` ties its LM head to the embedding, as GPT-3 does
and as the shipped config of the same name does (``model.PRESETS``); at PP 2 the first and the last stage each keep
a copy whose gradients are all-reduced over the embedding group (a new group in the groups file); with
``--no-tie-embeddings`` every hash is the one before.

Then llama3_8b_preset, on purpose (issue 36): Megatron-Core's unfused QKV split copies the grouped query
(``query.reshape``), Transformer Engine copies the value once RoPE has written new queries and keys
(``get_qkv_layout``'s ``.contiguous()``), and ``SplitAlongDim``'s backward concatenates dQ, dK, dV
(``RopeOps.qkv_split_fwd`` / ``qkv_split_value`` / ``qkv_split_bwd``); it is the only Megatron training case of a
rotary or grouped-query model, every other hash is the one before.

Regenerate (only when a change of the traces is intended)::

    .venv/bin/python plugins/workload_generators/tests/test_llm_golden.py
Then the Megatron FP8 training cases with a dense FFN (gpt_sp_overlap_fp8_vp_zero1, moe_expert_load_fp8), on purpose
(issue 36): Megatron-Core's MLP runs its own activation between Transformer Engine's FC1 and FC2, so FC2 casts its
input in forward and FC1 its output gradient in backward (``Fp8Ops.fp8_mlp_casts_apart``); with ``--te-op-fuser``
(TE's fused activation) every hash is the one before.
Then the Megatron FP8 training cases (gpt_sp_overlap_fp8_vp_zero1, moe_expert_load_fp8, delayed scaling), on purpose
(issue 36): Transformer Engine's norm before the QKV and dense FC1 GEMMs writes their FP8 input itself, listed as the
norm's last argument (``Fp8Ops.norm_writes_fp8``, ``NormOps.layer_norm``); MoE layers' pre-MLP norm and the final
norm are unchanged.
Then every Megatron training case (cp_causal_unfused, deepseek_preset, dense_tp_pp_dp, gpt3_13b_preset,
gpt_sp_overlap_fp8_vp_zero1, llama3_8b_preset, moe_expert_load_fp8, moe_imbalance_cp_ep, per_rank_files,
unfused_scatter_gather), on purpose (issue 36): each weight-gradient GEMM writes its parameter's ``main_grad``
(gradient-accumulation fusion: ``NodeEmitter._grad_buffer``), listed on the node: Transformer Engine's linears write
it on micro-batch 0 (without --recompute) and accumulate into it after (``aten::addmm`` / ``_scaled_mm`` with C), the
LM head accumulates on every micro-batch; the inference, ZeRO-2 and ZeRO-3 cases are unchanged. (For a while
micro-batch 0 was emitted accumulating too, for astra search's bound, which extrapolated from one and two
micro-batches; it extrapolates from two and three now, ``astra_sweep.bound.BoundCache.terms_layout``, and these ten
cases were renewed back, on purpose.)
Then the Megatron case with ``--tp-comm-overlap`` (gpt_sp_overlap_fp8_vp_zero1), on purpose (issue 36): Transformer
Engine's bulk overlaps as ``CommOverlapBase::bulk_overlap`` orders them: the QKV input's re-gather after the output
gradient's FP8 cast, and the QKV / FC1 bulk reduce-scatter after the re-gather and Hopper's FP8 transpose, launched
with the wgrad GEMM (``LayerOps._bulk_wgrad_scatter``, test_llm_bulk_overlap.py); the same nodes, other order and
dependencies; every other case is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from astra_sim.cli import main

SMALL = ["--layers", "4", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len", "128"]
MOE = SMALL + ["--experts", "8", "--top-k", "2", "--moe-ffn", "512"]
TE_YAML = "qkv_fprop:\n  method: ring_exchange\n  set_sm_margin: 1\n  use_ce: false\n  num_sm: 8\n" \
          "proj_fprop:\n  method: pipeline\n  num_sm: 24\n  set_sm_margin: 1\n"

#: name -> astra workload llm arguments (without -o)
CASES = {
    "dense_tp_pp_dp": SMALL + ["--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "4"],
    "gpt_sp_overlap_fp8_vp_zero1": SMALL + ["--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "4",
                                            "--sequence-parallel", "--tp-comm-overlap", "--gemm-dtype", "fp8",
                                            "--virtual-stages", "2", "--zero", "1", "--no-dropout",
                                            "--tp-overlap-config", "{yaml}", "--comm-sms", "dp=8,pp=2"],
    "llama_gqa_recompute_zero3_reshard": ["--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "4",
                                          "--ffn-hidden", "512", "--vocab", "1000", "--seq-len", "128", "--gated",
                                          "--tp", "2", "--dp", "2", "--micro-batches", "2", "--recompute",
                                          "--zero", "3", "--reshard-after-forward", "--grad-sync-every-micro-batch"],
    "moe_ep_capacity": MOE + ["--tp", "2", "--pp", "2", "--dp", "4", "--ep", "2", "--micro-batches", "2",
                              "--sequence-parallel", "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity",
                              "--shared-experts", "1", "--moe-dense-layers", "1", "--zero", "2"],
    "moe_expert_load_fp8": MOE + ["--dp", "4", "--ep", "4", "--micro-batches", "2", "--moe-expert-load",
                                  "zipf:1.2:3", "--gemm-dtype", "fp8", "--moe-layer-freq", "2"],
    "moe_imbalance_cp_ep": MOE + ["--tp", "2", "--cp", "2", "--dp", "2", "--ep", "2", "--moe-imbalance", "1.5",
                                  "--sequence-parallel"],
    "cp_causal_unfused": SMALL + ["--tp", "2", "--cp", "2", "--pp", "2", "--micro-batches", "2",
                                  "--overlap-param-gather", "--zero", "1", "--dp", "2"],
    "unfused_scatter_gather": SMALL + ["--tp", "2", "--pp", "2", "--micro-batches", "2", "--attention",
                                       "unfused", "--pp-scatter-gather", "--no-elementwise", "--dtype", "fp16"],
    "prefill_cp_logits": SMALL + ["--mode", "prefill", "--tp", "2", "--cp", "2", "--pp", "2",
                                  "--batch-size", "4", "--micro-batches", "2", "--prompt-len", "64"],
    "decode_steps_moe": MOE + ["--mode", "decode", "--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2",
                               "--batch-size", "4", "--micro-batches", "2", "--decode-steps", "3",
                               "--decode-len", "5", "--logits", "last"],
    "mixed_chunk": SMALL + ["--mode", "mixed", "--tp", "2", "--pp", "2", "--batch-size", "4",
                            "--prefill-chunk", "32", "--prefill-done", "16"],
    "per_rank_files": SMALL + ["--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "2",
                               "--sequence-parallel", "--per-rank-files"],
    "deepseek_preset": ["--preset", "deepseek-moe-16b", "--layers", "4", "--seq-len", "256", "--dp", "4",
                        "--ep", "4", "--no-elementwise"],
    # dense presets (issue 24: their hashes were made with the code before --model existed, commit cbb6e4a)
    "gpt3_13b_preset": ["--preset", "gpt3-13b", "--layers", "2", "--seq-len", "256", "--tp", "2", "--pp", "2",
                        "--micro-batches", "2", "--sequence-parallel"],
    "llama3_8b_preset": ["--preset", "llama3-8b", "--layers", "2", "--seq-len", "512", "--tp", "2", "--dp", "2",
                         "--micro-batches", "2"],
    "llama2_70b_decode_preset": ["--preset", "llama2-70b", "--layers", "2", "--mode", "decode", "--tp", "4",
                                 "--batch-size", "8", "--prompt-len", "128", "--decode-len", "2"],
}
#: the eight presets, which are also shipped config files (issue 24)
PRESETS = ["gpt3-175b", "gpt3-13b", "llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "mixtral-8x7b",
           "deepseek-moe-16b"]


def _node_frames(data):
    """The bytes after the first frame (the GlobalMetadata) of a Chakra ET file."""
    length, shift, pos = 0, 0, 0
    while True:
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return data[pos + length:]


def digests(folder):
    """{file name: sha256} of a generated workload (traces: their node frames only). The groups' roles file
    (``*.groups.roles.json``, issue 18) came after the split; test_llm.py checks it."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".roles.json"):
            continue
        with open(os.path.join(folder, name), "rb") as handle:
            data = handle.read()
        if name.endswith(".et"):
            data = _node_frames(data)
        out[name] = hashlib.sha256(data).hexdigest()
    return out


def generate(name, folder):
    os.makedirs(folder, exist_ok=True)
    yaml_path = os.path.join(os.path.dirname(folder), f"{name}.te.yaml")
    with open(yaml_path, "w") as handle:
        handle.write(TE_YAML)
    args = [a.replace("{yaml}", yaml_path) for a in CASES[name]]
    assert main(["workload", "llm", *args, "-o", os.path.join(folder, "w")]) == 0


GOLDEN = os.path.join(os.path.dirname(__file__), "data", "llm_golden.json")


@pytest.mark.parametrize("name", sorted(CASES))
def test_traces_are_those_of_the_code_before_the_split(tmp_path, name, capsys):
    with open(GOLDEN) as handle:
        golden = json.load(handle)
    generate(name, str(tmp_path / name))
    assert digests(str(tmp_path / name)) == golden[name]


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_and_its_config_file_give_the_same_traces(tmp_path, preset):
    """``--preset X`` and ``--model X`` (the shipped config file) write byte-identical workloads, the GPT-3 ones
    tied both ways (the presets tie as their GPT-2-format files do, ``tie_word_embeddings``' default)."""
    # (an MoE model at TP 2 in a Megatron training step needs sequence parallelism: Megatron-Core refuses it without)
    ep = ["--ep", "2", "--sequence-parallel"] if preset in ("mixtral-8x7b", "deepseek-moe-16b") else []
    common = ["--layers", "2", "--seq-len", "256", "--tp", "2", "--dp", "2", *ep]
    out = []
    for flag in ("--preset", "--model"):
        folder = tmp_path / flag.strip("-")
        folder.mkdir()
        assert main(["workload", "llm", flag, preset, *common, "-o", str(folder / "w")]) == 0
        out.append(digests(str(folder)))
    assert out[0] == out[1]


if __name__ == "__main__":  # regenerate the golden file (only when a change of the traces is intended)
    import sys
    import tempfile

    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in sorted(CASES):
            generate(case, os.path.join(tmp, case))
            result[case] = digests(os.path.join(tmp, case))
    with open(sys.argv[1] if len(sys.argv) > 1 else GOLDEN, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write("\n")
