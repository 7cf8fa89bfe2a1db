"""PyTorch's context parallelism (torchtitan's CP): the forward of a ring step after the first is timed on CP index 0,
whose every such step is ``_templated_ring_attention``'s ``i > rank`` branch (``query.chunk(2, dim=2)[1]`` against
all ``q`` received keys), and the backward on the last rank (``i <= rank``: all ``q`` queries against ``key.chunk(2,
dim=2)[0]``).

Why (issue 36, helper cp53): the two branches do the same FLOPs, but FlashAttention-2 runs them at different rates.
This project's H200 (``plugins/gpu_model/calibration/nvidia-h200-2026-11-30/attention_long.csv``, 32 heads of 128,
not causal) measured the forward 25.58 ms for 16k x 32k against 24.43 ms for 32k x 16k, and the backward 69.05 against
71.01 ms. Nothing waits for another rank inside a forward pass (the K/V are all-gathered once, at step 0), so the
pass ends when the slowest rank's does, and the next layer's all-gather makes every rank wait for it: CP index 0's
forward, all ``i > rank``. In the backward the fp32 dK/dV permute couples neighbours at every step, so each step
costs the slower branch's: ``i <= rank``, the last rank's. Numbers by hand below."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

ops = pytest.importorskip("astra_gpu_model.ops")
model_mod = pytest.importorskip("astra_gpu_model.model")

HEADS, KV, D, Q = 32, 8, 128, 32768  # Llama 3.1 8B's attention; Q: a rank's tokens (torchtitan's CP rows)
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """Rank 0's nodes of one Llama-3.1-8B-shaped layer at CP 2 (sequence 2 Q), torchtitan's flags."""
    dims = model_dims(layers=1, hidden=HEADS * D, heads=HEADS, kv_heads=KV, ffn_hidden=14336, vocab=1000,
                      seq_len=2 * Q, gated=True)
    cfg = LlmConfig(cp=2, dp=1, framework="fsdp2", zero=3, recompute=True, cp_rotate="allgather", cp_compile=True)
    path = tmp_path_factory.mktemp("cp2") / "w"
    generate_llm(dims, cfg, path)
    return read_rank_nodes(path, 0)


def _one(nodes, label, name):
    (node,) = [n for n in nodes if n.attrs.get("label") == label and n.name == name]
    return node


def test_forward_steps_are_cp_index_0s_and_backward_steps_the_last_ranks(nodes):
    half = Q // 2
    for lab in ("fwd.l0.mb0.attn", "recompute.l0.mb0.attn"):
        first, later = _one(nodes, lab + ".cp0", FWD), _one(nodes, lab + ".cp1", FWD)
        assert first.inputs_shapes == f"[[1, {HEADS}, {Q}, {D}], [1, {HEADS}, {Q}, {D}], [1, {HEADS}, {Q}, {D}]]"
        assert later.inputs_shapes == f"[[1, {HEADS}, {half}, {D}], [1, {HEADS}, {Q}, {D}], [1, {HEADS}, {Q}, {D}]]"
    later = _one(nodes, "bwd.l0.mb0.attn.cp1", BWD)
    assert later.inputs_shapes.startswith(f"[[1, {HEADS}, {Q}, {D}], [1, {HEADS}, {Q}, {D}], [1, {HEADS}, {half}, {D}]")
    # the same FLOPs either way: 4 x q x q/2 x d x heads = 4 x 32768 x 16384 x 128 x 32 = 8,796,093,022,208
    info = ops.classify(FWD, *ops.node_io(_one(nodes, "fwd.l0.mb0.attn.cp1", FWD)))
    assert info.flops == 4 * Q * half * D * HEADS == 8_796_093_022_208


def test_the_wide_forward_block_is_priced_at_the_measured_rate(nodes):
    """On the H100 SXM5 (the H200's compute): the forward block timed is 16k queries x 32k keys, FA2 not causal at
    the 32k-key row (354.3 TFLOP/s in full waves), 32 heads x 128 query blocks = 4,096 thread blocks in 32 waves of
    132 SMs (0.96970): 8.796e12 / (354.3e12 x 4096 / 4224) = 25.603 ms. The last rank's 32k x 16k block would be the
    16k-key row (365.5) in 63 waves (8,192 / 8,316 = 0.98509): 24.430 ms, 4.8 % less; the H200 measured 25.58 and
    24.43 ms."""
    model = model_mod.GpuComputeModel(None, "H100-SXM5-80GB")
    launch_s = model.gpu.gemm.launch_us * 1e-6
    flops = 4 * Q * (Q // 2) * D * HEADS
    wide = ops.classify(FWD, *ops.node_io(_one(nodes, "fwd.l0.mb0.attn.cp1", FWD)))
    assert model.op_seconds(wide, kernel="fa2") == pytest.approx(launch_s + flops / (354.3e12 * 4096 / 4224))
    assert flops / (354.3e12 * 4096 / 4224) == pytest.approx(25.603e-3, abs=1e-6)
    tall = ops.Op("attention", "sdpa", "bf16", flops=flops, nbytes=1.0, ctas=HEADS * Q // 128, seq_k=Q // 2,
                  seq_q=Q, causal=False, backward=False, head_dim=D, heads=HEADS)
    assert model.op_seconds(tall, kernel="fa2") == pytest.approx(launch_s + flops / (365.5e12 * 8192 / 8316))
    assert flops / (365.5e12 * 8192 / 8316) == pytest.approx(24.430e-3, abs=1e-6)
