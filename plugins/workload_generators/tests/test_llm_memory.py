"""The memory estimate of ``astra workload llm`` against published cases: Korthikanti et al. 2022 (activation
memory per layer, the selective-recomputation savings they quote for GPT-3 and MT-NLG, the interleaved
schedule's factor) and the ZeRO paper's Figure 1 (7.5B parameters on 64 GPUs), and its way into the traces."""

from __future__ import annotations

import pytest

from astra_sim.chakra import read_et
from astra_sim.cli import main

from astra_workload_generators.llm import LlmConfig, ModelDims, generate_llm, model_dims
from astra_workload_generators.llm.memory import (
    FRAGMENTATION, WORKSPACE_BYTES, layer_activation_bytes, memory_estimate, peak_memory, stage_memory,
)

GPT3 = model_dims("gpt3-175b")
#: MT-NLG 530B (Smith et al. 2022): 105 layers, h 20480, 128 heads
MTNLG = ModelDims(layers=105, hidden=20480, heads=128, kv_heads=128, ffn_hidden=4 * 20480, vocab=51200,
                  seq_len=2048)
S, H, A = 2048, 12288, 96


def unfused(**kw):
    return LlmConfig(attention="unfused", **kw)


def test_per_layer_activations_are_korthikanti_table_2():
    sbh = S * H  # b = 1, 16-bit activations, dropout on
    score = 5 * A * S / H  # 80 for GPT-3, as the paper says
    assert score == 80
    assert layer_activation_bytes(GPT3, unfused()) == sbh * (34 + score)                      # no parallelism
    t = 8
    assert layer_activation_bytes(GPT3, unfused(tp=t)) == sbh * (10 + 24 / t + score / t)      # tensor parallel
    assert layer_activation_bytes(GPT3, unfused(tp=t, sequence_parallel=True)) == sbh / t * (34 + score)
    # selective recomputation (and FlashAttention, which never keeps the scores): sbh(10 + 24/t), 34 sbh/t with SP
    assert layer_activation_bytes(GPT3, unfused(tp=t), "selective") == sbh * (10 + 24 / t)
    assert layer_activation_bytes(GPT3, LlmConfig(tp=t)) == sbh * (10 + 24 / t)
    assert layer_activation_bytes(GPT3, LlmConfig(tp=t, sequence_parallel=True)) == sbh * 34 / t
    # full recomputation: the layer's input only, 2 sbh (/t with SP)
    assert layer_activation_bytes(GPT3, LlmConfig(tp=t, recompute=True)) == 2 * sbh
    assert layer_activation_bytes(GPT3, LlmConfig(tp=t, recompute=True, sequence_parallel=True)) == 2 * sbh / t


@pytest.mark.parametrize("dims, saving", [(GPT3, 0.70), (MTNLG, 0.65)])
def test_selective_recomputation_saves_what_the_paper_says(dims, saving):
    # "selective activation recomputation ... reduces the required memory by 70% for GPT-3 and 65% for MT-NLG"
    full = layer_activation_bytes(dims, unfused(tp=8, sequence_parallel=True))
    selective = layer_activation_bytes(dims, unfused(tp=8, sequence_parallel=True), "selective")
    assert 1 - selective / full == pytest.approx(saving, abs=0.005)


def test_first_stage_keeps_pp_micro_batches_and_the_interleaving_factor():
    dims = model_dims("gpt3-175b")
    for V in (1, 2, 3):
        cfg = LlmConfig(tp=8, pp=8, dp=1, micro_batches=64, sequence_parallel=True, virtual_stages=V, dropout=False)
        per_layer = layer_activation_bytes(dims, cfg)  # (no dropout: no embedding dropout mask either)
        m = stage_memory(dims, cfg, 0)
        assert m.in_flight == 8 * (V + 1) - 1 if V > 1 else m.in_flight == 8
        # L layers' activations x (1 + (p - 1)/(p V)) for the interleaved schedule (Korthikanti, section 4.2.3)
        factor = 1 + (8 - 1) / (8 * V) if V > 1 else 1
        assert m.activations == pytest.approx(dims.layers * per_layer * factor, rel=1e-9)
    last = stage_memory(dims, LlmConfig(tp=8, pp=8, micro_batches=64, sequence_parallel=True), 7)
    assert last.in_flight == 1


def test_zero_paper_figure_1():
    """7.5B parameters, 64-way data parallel, fp16 mixed precision with Adam (K = 12): 120 GB, 31.4 GB, 16.6 GB
    and 1.9 GB of model states per GPU for the baseline and ZeRO stages 1, 2 and 3 (Rajbhandari et al. 2020)."""
    from astra_workload_generators.llm import parameter_count

    dims = ModelDims(layers=30, hidden=4096, heads=32, kv_heads=32, ffn_hidden=16384, vocab=64, seq_len=1024)
    psi = parameter_count(dims)
    published = {0: 120, 1: 31.4, 2: 16.6, 3: 1.875}
    for zero, gb in published.items():
        # gradients reduced after each micro-batch (one here); ZeRO-3 frees gathered weights after use
        cfg = LlmConfig(dp=64, zero=zero, dtype="fp16", reshard_after_forward=zero == 3)
        m = stage_memory(dims, cfg, 0)
        states = m.weights + m.gradients + m.optimizer
        if zero == 3:  # less the two units (layers) whole at a time while the step runs
            states -= 2 * 2 * (psi - dims.vocab * dims.hidden) // dims.layers
        assert states / psi * 7.5e9 / 1e9 == pytest.approx(gb, abs=0.06)


def test_gradients_accumulated_over_micro_batches_stay_whole():
    dims = model_dims("gpt3-13b")
    once = stage_memory(dims, LlmConfig(dp=8, zero=2, micro_batches=4), 0)
    every = stage_memory(dims, LlmConfig(dp=8, zero=2, micro_batches=4, grad_sync_every_micro_batch=True), 0)
    assert once.gradients == once.weights and every.gradients * 8 == pytest.approx(every.weights, rel=1e-6)


def test_inference_kv_cache_and_allowance():
    dims = model_dims("llama2-70b")  # 80 layers, 8 kv heads of 128
    cfg = LlmConfig(tp=8, mode="decode", micro_batches=2, micro_batch_size=4, prompt_len=1000, decode_len=24)
    m = stage_memory(dims, cfg, 0)
    assert m.kv_cache == 2 * 80 * 1 * 128 * 2 * 8 * 1024
    assert m.gradients == m.optimizer == 0
    rest = m.weights + m.activations + m.kv_cache
    assert m.workspace == WORKSPACE_BYTES + int(FRAGMENTATION * rest)
    assert m.total == rest + m.workspace


def test_estimate_in_the_traces_and_on_the_terminal(tmp_path, capsys):
    args = ["workload", "llm", "--preset", "gpt3-13b", "--layers", "4", "--tp", "2", "--pp", "2", "--dp", "2",
            "--micro-batches", "4", "--sequence-parallel", "--zero", "1", "-o", str(tmp_path / "w")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "estimated peak HBM per GPU" in out and "activations" in out
    dims = model_dims("gpt3-13b", layers=4)
    cfg = LlmConfig(tp=2, pp=2, dp=2, micro_batches=4, sequence_parallel=True, zero=1)
    for p, estimate in enumerate(memory_estimate(dims, cfg)):
        attrs = {a.name: a.int64_val for a in read_et(str(tmp_path / f"w.class{p}.et")).metadata.attr
                 if a.name.startswith("memory_")}
        assert attrs["memory_peak_bytes"] == estimate.total
        assert attrs["memory_activations_bytes"] == estimate.activations > 0
    assert peak_memory(dims, cfg).stage == 0  # the first stage keeps the most micro-batches


def test_full_replication_of_gpt3_175b_cannot_fit_anything():
    from astra_workload_generators.llm import parameter_count

    m = peak_memory(GPT3, LlmConfig(dp=1024, micro_batches=1))
    # every weight (embedding and LM head untied) x 16 bytes: 2.8 TB on every GPU
    assert m.weights + m.gradients + m.optimizer == 16 * (parameter_count(GPT3) + GPT3.vocab * GPT3.hidden)
    assert m.total > 2.7e12
