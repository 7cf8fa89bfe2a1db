"""torchtitan's TP plan with Float8 (pytorch/torchtitan 9dec370 ``apply_tp``: ``PrepareFloat8ModuleInput``,
``Float8ColwiseParallel``, ``Float8RowwiseParallel``; pytorch/ao eab345c ``float8/float8_tensor_parallel.py``): the
sequence-parallel shard is cast to FP8 before the all-gather of the attention's and the FFN's input, and in backward
the row-parallel output's gradient is cast on its shard before its all-gather. So those gathers move 1 B an element,
and the gradient casts read ``tokens / TP`` rows. Bytes by hand on a one-layer Llama at TP 2."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
N, H, TP = 128, 256, 2  # tokens (one sequence), hidden, TP


def _nodes(tmp_path, name, **kw):
    cfg = LlmConfig(tp=TP, dp=2, zero=3, framework="fsdp2", micro_batches=1, sequence_parallel=True,
                    recompute=True, **kw)
    generate_llm(model_dims(**LLAMA), cfg, tmp_path / name)
    return {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / name, 0)}


def _comm(node):
    return node.attrs["comm_size"]


def test_float8_tp_gathers_fp8_and_casts_the_gradient_shard(tmp_path):
    fp8, bf16 = _nodes(tmp_path, "f", gemm_dtype="fp8"), _nodes(tmp_path, "b")
    # bf16: every SP all-gather gathers 128 x 256 x 2 = 65,536 B, each rank's part (comm_size) 32,768 B
    for label in ("tp_ag.fwd.l0.mb0.attn_in", "tp_ag.fwd.l0.mb0.mlp_in", "tp_ag.bwd.l0.mb0.mlp_out",
                  "tp_ag.bwd.l0.mb0.attn_out", "tp_ag.recompute.l0.mb0.attn_in"):
        assert _comm(bf16[label]) == N * H * 2 // TP == 32_768
        # Float8 (torchao tensorwise, the FSDP2 default): 1 B an element, each rank's part 16,384 B
        assert _comm(fp8[label]) == N * H * 1 // TP == 16_384
    # the reduce-scatters stay in bf16 (the whole 128 x 256 x 2 B input)
    assert _comm(fp8["tp_rs.fwd.l0.mb0.mlp_out"]) == 65_536
    # the output-gradient casts read this rank's 64 rows: 64 x 256 x (2 + 1 + 1) = 65,536 B, not 131,072
    for name in ("fc2", "proj"):
        assert fp8[f"bwd.l0.mb0.{name}.dgrad.fp8_cast"].attrs["tensor_size"] == (N // TP) * H * 4 == 65_536


def test_the_gradient_cast_comes_before_the_gather(tmp_path):
    fp8 = _nodes(tmp_path, "f", gemm_dtype="fp8")
    cast, gather = fp8["bwd.l0.mb0.fc2.dgrad.fp8_cast"], fp8["tp_ag.bwd.l0.mb0.mlp_out"]
    assert cast.id < gather.id and cast.id in gather.data_deps + gather.ctrl_deps
