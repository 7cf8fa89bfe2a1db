"""The memory estimate of ``astra workload llm`` against published cases: Korthikanti et al. 2022 (activation
memory per layer, the selective-recomputation savings they quote for GPT-3 and MT-NLG, the interleaved
schedule's factor) and the ZeRO paper's Figure 1 (7.5B parameters on 64 GPUs), and its way into the traces."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_sim.chakra import read_et
from astra_sim.cli import main

from astra_workload_generators.llm import LlmConfig, ModelDims, generate_llm, model_dims
from astra_workload_generators.llm.memory import (
    FRAGMENTATION, WORKSPACE_BYTES, layer_activation_bytes, memory_estimate, peak_memory, stage_memory,
)
from astra_workload_generators.llm.memory_terms import DS_PREFETCH_BUCKET

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
    from astra_workload_generators.llm.model import total_parameters

    dims = ModelDims(layers=30, hidden=4096, heads=32, kv_heads=32, ffn_hidden=16384, vocab=64, seq_len=1024)
    psi = total_parameters(dims)  # (every parameter: the biases, norms and position table too)
    published = {0: 120, 1: 31.4, 2: 16.6, 3: 1.875}
    for zero, gb in published.items():
        # gradients reduced after each micro-batch (one here); ZeRO-3 frees gathered weights after use
        cfg = LlmConfig(dp=64, zero=zero, dtype="fp16", reshard_after_forward=zero == 3, framework="deepspeed")
        m = stage_memory(dims, cfg, 0)
        states = m.weights + m.gradients + m.optimizer
        if zero == 3:  # less the two units (layers) and the prefetch bucket whole at a time while the step runs
            states -= 2 * (2 * (parameter_count(dims) - dims.vocab * dims.hidden) // dims.layers + DS_PREFETCH_BUCKET)
        assert states / psi * 7.5e9 / 1e9 == pytest.approx(gb, abs=0.06)


def test_gradients_accumulated_over_micro_batches_stay_whole():
    dims = model_dims("gpt3-13b")
    once = stage_memory(dims, LlmConfig(dp=8, zero=3, micro_batches=4, reshard_after_forward=True), 0)
    every = stage_memory(dims, LlmConfig(dp=8, zero=3, micro_batches=4, reshard_after_forward=True,
                                         grad_sync_every_micro_batch=True), 0)
    # FSDP2: unsharded bf16 gradients until the one reduce-scatter; else fp32 shards (4 bytes / 8 ranks)
    assert every.gradients * 8 == pytest.approx(once.gradients * 2, rel=1e-6)


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
    from astra_workload_generators.llm import padded_vocab, parameter_count

    m = peak_memory(GPT3, LlmConfig(dp=1024, micro_batches=1))
    # every weight (GPT-3 ties its embedding and LM head: one table, counted in parameter_count's LM head) x 18
    # bytes (Megatron-LM's bf16 row without the distributed optimizer: bf16 weights, fp32 main gradients, fp32 main
    # weights and two moments): 3.1 TB on every GPU; with the norms' weights and biases (LayerNorm: 2 h each, two a
    # layer and the final one), the linear layers' biases (QKV 3h, projection h, FC1 4h, FC2 h: 9h a layer) and the
    # learned position table (2048 x h); the vocabulary padded to a multiple of 128 (Megatron-LM: 50257 -> 50304)
    norms = (2 * GPT3.layers + 1) * 2 * GPT3.hidden
    biases, positions = GPT3.layers * 9 * GPT3.hidden, 2048 * GPT3.hidden
    assert GPT3.tied_embeddings
    assert m.weights + m.gradients + m.optimizer == 18 * (parameter_count(GPT3, 1, 128) + norms + biases + positions)
    untied = peak_memory(replace(GPT3, tied_embeddings=False), LlmConfig(dp=1024, micro_batches=1))
    assert (untied.weights + untied.gradients + untied.optimizer) - (m.weights + m.gradients + m.optimizer) == (
        18 * padded_vocab(GPT3, 1, 128) * GPT3.hidden)  # untied: a second table of the padded vocabulary
    assert m.total > 2.7e12


# --------------------------------------------------------------------------------------------- frameworks (issue 35)
SMALL_ARGV = ["--preset", "gpt3-13b", "--layers", "4", "--dp", "8", "--micro-batches", "2"]


def test_the_framework_the_flags_imply():
    from astra_workload_generators.llm.config import implied_framework

    assert implied_framework(LlmConfig()) == "megatron"
    assert implied_framework(LlmConfig(dp=2, zero=1)) == "megatron"
    assert implied_framework(LlmConfig(dp=2, zero=2)) == "deepspeed"
    assert implied_framework(LlmConfig(dp=2, zero=3)) == "fsdp2"
    assert implied_framework(LlmConfig(dp=2, zero=1, framework="deepspeed")) == "deepspeed"


def test_zero_3_reshards_after_forward_unless_told_not_to():
    from astra_workload_generators.llm import LlmSpec

    assert LlmSpec(preset="gpt3-13b", dp=2, zero=3).resolve()[1].reshard_after_forward is True
    assert LlmSpec(preset="gpt3-13b", dp=2, zero=3, reshard_after_forward=False).resolve()[1].reshard_after_forward \
        is False
    assert LlmSpec(preset="gpt3-13b", dp=2, zero=1).resolve()[1].reshard_after_forward is False


def test_megatron_keeps_fp32_main_gradients_and_shards_only_the_optimizer():
    """Megatron-LM's table (bf16 parameters, fp32 gradients): 18 bytes per parameter, 6 + 12/d distributed."""
    dims = model_dims("gpt3-13b", layers=4)
    base = stage_memory(dims, LlmConfig(dp=8), 0)
    dist = stage_memory(dims, LlmConfig(dp=8, zero=1), 0)
    params = base.weights // 2
    assert base.weights + base.gradients + base.optimizer == 18 * params
    assert dist.weights + dist.gradients == 6 * params and dist.optimizer == pytest.approx(12 * params / 8, rel=1e-6)
    ds = stage_memory(dims, LlmConfig(dp=8, zero=1, framework="deepspeed"), 0)
    # bf16 gradients and the reduce bucket (its vocabulary not padded: fewer parameters than Megatron's)
    assert ds.gradients == ds.weights < 2 * params and ds.buffers > 0


def test_the_logits_and_the_allocated_and_reserved_views():
    dims = model_dims("llama3-8b")
    m = stage_memory(dims, LlmConfig(dp=8, zero=3, reshard_after_forward=True), 0)
    tokens, vocab = dims.seq_len, m.logits // (12 * dims.seq_len)
    assert m.logits == 12 * tokens * vocab and vocab >= dims.vocab  # fp32 log-softmax and two gradients
    mega = stage_memory(dims, LlmConfig(dp=8, zero=1), 0)
    assert mega.logits == 6 * tokens * vocab  # Megatron: the fp32 copy in place and the bf16 logits
    assert m.allocated_bytes + m.reserve == m.reserved_bytes and m.reserved_bytes + m.context == m.total
    assert m.measured("torch.cuda.max_memory_allocated") == m.allocated_bytes
    assert m.measured("nvidia-smi") == m.total
    with pytest.raises(ValueError, match="unknown memory measurement"):
        m.measured("rss")


def test_torchtitans_op_level_selective_recomputation_keeps_every_other_matmul():
    from astra_workload_generators.llm.memory_terms import op_sac_layer_bytes

    dims = model_dims("llama3-8b")
    tokens = 1000
    # the input, the attention output, wq, wv, w1 and w2 outputs (bf16) and the fp32 log-sum-exp per head
    per_token = 2 * (4096 + 4096 + 4096 + 1024 + 14336 + 4096) + 32 * 4
    assert op_sac_layer_bytes(dims, LlmConfig(), tokens) == tokens * per_token
    sac = stage_memory(dims, LlmConfig(dp=8, zero=3, recompute_selective=True), 0)
    korthikanti = stage_memory(dims, LlmConfig(dp=8, zero=3, recompute_selective=True, framework="deepspeed"), 0)
    assert sac.activations < korthikanti.activations


def test_the_changes_that_would_make_it_fit():
    from astra_workload_generators.llm.memory_fit import first_fix, fixes

    dims = model_dims("llama3-70b")
    cfg = LlmConfig(dp=64, zero=3, recompute=True)  # gathered weights kept: 200 GB
    found = fixes(dims, cfg)
    assert found[0][0] == "--reshard-after-forward"
    now = peak_memory(dims, cfg).total
    assert all(peak < now for _, peak in found)
    assert first_fix(found, 80 * 10**9)[0] == "--reshard-after-forward"
    assert first_fix(found, 10**9) is None


def test_framework_and_hbm_flags_end_to_end(capsys):
    import json

    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "1", "--framework", "deepspeed", "--summary",
                 "--json"]) == 0
    ds = json.loads(capsys.readouterr().out)
    assert ds["memory_framework"] == "deepspeed" and ds["memory"]["buffers"] > 0
    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "1", "--summary", "--hbm-gb", "1"]) == 0
    out = capsys.readouterr().out
    assert "(8 GPUs, megatron)" in out and "device memory 1.1 GB: does not fit" in out  # 1 GiB
    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "1", "--summary", "--hbm-gb", "500"]) == 0
    assert "fits, " in capsys.readouterr().out
    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "1", "--framework", "fsdp2", "--summary"]) == 2
    assert "--framework fsdp2" in capsys.readouterr().err
    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "3", "--framework", "megatron", "--summary"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["workload", "llm", *SMALL_ARGV, "--framework", "jax", "--summary"])
    assert exc.value.code == 2


def test_moe_dispatch_buffers_follow_the_routing():
    from astra_workload_generators.llm import LlmSpec

    def buffers(*extra):
        dims, cfg = LlmSpec.from_argv(["--model", "mixtral-8x7b", "--layers", "4", "--dp", "8", "--ep", "8",
                                       "--zero", "1", "--seq-len", "1024", *extra]).resolve(on_warning=lambda l: None)
        return stage_memory(dims, cfg, 0).buffers

    balanced = buffers()
    tokens, h = 1024, 4096
    assert balanced == 2 * tokens * 2 * h * 2  # top-2 copies sent and received, bf16
    assert buffers("--moe-imbalance", "2") == (2 * tokens + 4 * tokens) * h * 2
    # half the capacity drops half the copies on both sides
    assert buffers("--moe-capacity-factor", "0.5") == balanced // 2


def test_a_loss_in_the_training_dtype_keeps_three_copies(capsys):
    import json

    dims = model_dims("gpt3-13b", layers=4)
    fp32 = stage_memory(dims, LlmConfig(dp=8, zero=3, reshard_after_forward=True, framework="deepspeed"), 0)
    same = stage_memory(dims, LlmConfig(dp=8, zero=3, reshard_after_forward=True, framework="deepspeed",
                                        loss_dtype="same"), 0)
    assert same.logits * 12 == fp32.logits * 3 * 2  # 3 bf16 copies instead of 12 bytes per element
    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "3", "--framework", "deepspeed", "--loss-dtype", "same",
                 "--summary", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["logits"] == same.logits  # (micro-batches do not matter)


@given(framework=st.one_of(st.none(), st.sampled_from(["megatron", "fsdp2", "deepspeed"]), st.text(max_size=12)),
       loss=st.one_of(st.sampled_from(["fp32", "same"]), st.text(max_size=8)),
       zero=st.integers(0, 3), hbm=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
@settings(max_examples=60, deadline=None)
def test_the_memory_options_read_from_a_mapping_are_checked(framework, loss, zero, hbm):
    """Any value of --framework / --loss-dtype / --hbm-gb either resolves or is a ConfigError naming the option."""
    from astra_sim.errors import ConfigError

    from astra_workload_generators.llm import LlmSpec, llm_summary

    options = {"preset": "gpt3-13b", "layers": 2, "dp": 2, "zero": zero, "framework": framework,
               "loss-dtype": loss, "hbm-gb": hbm}
    try:
        summary = llm_summary(LlmSpec.from_mapping(options))
    except ConfigError as exc:
        assert any(word in str(exc) for word in ("framework", "loss-dtype", "hbm-gb"))
        return
    assert summary["memory_peak_bytes"] > 0
    assert summary["memory_framework"] == (framework or {3: "fsdp2", 2: "deepspeed"}.get(zero, "megatron"))


def test_nemos_bf16_gradient_buffer_and_fp8_weights():
    """--grad-buffer same: NeMo's distributed fused Adam keeps gradients in bf16 (2 bytes, not Megatron-LM's fp32
    4); --fp8-params: a linear weight is its FP8 copy and transpose (2 bytes), without the bf16 weight beside."""
    dims = model_dims("gpt3-13b", layers=4)
    base = stage_memory(dims, LlmConfig(dp=8, zero=1, gemm_dtype="fp8"), 0)
    nemo = stage_memory(dims, LlmConfig(dp=8, zero=1, gemm_dtype="fp8", grad_buffer="same"), 0)
    fp8 = stage_memory(dims, LlmConfig(dp=8, zero=1, gemm_dtype="fp8", grad_buffer="same", fp8_params=True), 0)
    params = base.gradients // 4
    assert nemo.gradients == 2 * params and (nemo.weights, nemo.optimizer) == (base.weights, base.optimizer)
    # the linear layers' bf16 copy is gone; the embedding (not FP8) keeps its bf16 weight
    linear = 4 * sum(layer_shards_sizes(dims))
    assert base.weights - fp8.weights == 2 * linear and fp8.optimizer == base.optimizer


def layer_shards_sizes(dims):
    from astra_workload_generators.llm.model import layer_shards

    return layer_shards(dims, LlmConfig(dp=8), False)


def test_grad_buffer_and_fp8_params_end_to_end(capsys):
    import json

    def peak(*extra):
        assert main(["workload", "llm", *SMALL_ARGV, "--zero", "1", "--gemm-dtype", "fp8", *extra, "--summary",
                     "--json"]) == 0
        return json.loads(capsys.readouterr().out)["memory"]

    base, nemo = peak(), peak("--grad-buffer", "same", "--fp8-params")
    assert nemo["gradients"] * 2 == base["gradients"] and nemo["weights"] < base["weights"]
    assert main(["workload", "llm", *SMALL_ARGV, "--zero", "3", "--grad-buffer", "same", "--summary"]) == 2
    assert "--grad-buffer and --fp8-params are Megatron-LM/NeMo" in capsys.readouterr().err
    assert main(["workload", "llm", *SMALL_ARGV, "--fp8-params", "--summary"]) == 2
    assert "--fp8-params needs --gemm-dtype fp8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["workload", "llm", *SMALL_ARGV, "--grad-buffer", "fp16", "--summary"])
    assert exc.value.code == 2


@given(buffer=st.one_of(st.sampled_from(["fp32", "same"]), st.text(max_size=8)), fp8=st.booleans(),
       gemm=st.sampled_from(["same", "fp8"]), zero=st.integers(0, 3))
@settings(max_examples=40, deadline=None)
def test_grad_buffer_and_fp8_params_read_from_a_mapping_are_checked(buffer, fp8, gemm, zero):
    """Any --grad-buffer / --fp8-params either resolves or is a ConfigError naming the option."""
    from astra_sim.errors import ConfigError

    from astra_workload_generators.llm import LlmSpec, llm_summary

    options = {"preset": "gpt3-13b", "layers": 2, "dp": 2, "zero": zero, "grad-buffer": buffer, "fp8-params": fp8,
               "gemm-dtype": gemm}
    try:
        summary = llm_summary(LlmSpec.from_mapping(options))
    except ConfigError as exc:
        assert any(word in str(exc) for word in ("grad-buffer", "fp8-params"))
        return
    assert summary["memory_peak_bytes"] > 0


def test_serving_keeps_the_logits_of_each_sequences_last_position_only():
    """--logits last (astra serve, vLLM): fp32 logits of one position per sequence, not of every prompt token."""
    from astra_workload_generators.llm import LlmSpec

    def activations(logits):
        dims, cfg = LlmSpec(model="llama3.1-8b", mode="prefill", batch_size=2, prompt_len=1000,
                            logits=logits).resolve(on_warning=lambda line: None)
        return peak_memory(dims, cfg).activations

    assert activations("all") - activations("last") == 4 * (2 * 1000 - 2) * 128256


def test_hsdp_shards_within_its_group_and_prefetch_gathers_more_units():
    """FSDP2 HSDP (--dp-shard 8 of --dp 64) holds what FULL_SHARD over 8 GPUs holds; each unit prefetched beyond
    the default one adds one layer's bf16 weights."""
    from astra_workload_generators.llm.model import layer_norm_parameters, layer_shards

    dims = model_dims("llama3-8b", layers=4)
    fsdp = dict(zero=3, framework="fsdp2", reshard_after_forward=True)
    hsdp = stage_memory(dims, LlmConfig(dp=64, dp_shard=8, **fsdp), 0)
    full8 = stage_memory(dims, LlmConfig(dp=8, **fsdp), 0)
    assert (hsdp.weights, hsdp.gradients, hsdp.optimizer) == (full8.weights, full8.gradients, full8.optimizer)
    assert stage_memory(dims, LlmConfig(dp=64, **fsdp), 0).optimizer * 8 == pytest.approx(hsdp.optimizer, rel=1e-6)
    layer = sum(layer_shards(dims, LlmConfig(dp=8), False)) + layer_norm_parameters(dims)  # (its two RMSNorms too)
    deeper = stage_memory(dims, LlmConfig(dp=8, fsdp_prefetch=3, **fsdp), 0)
    assert deeper.weights - full8.weights == 2 * layer * 2  # two more bf16 units


def test_dp_shard_and_fsdp_prefetch_end_to_end(capsys):
    import json

    fsdp = ["--preset", "llama3-8b", "--layers", "4", "--dp", "16", "--zero", "3", "--summary", "--json"]
    assert main(["workload", "llm", *fsdp]) == 0
    full = json.loads(capsys.readouterr().out)["memory"]
    assert main(["workload", "llm", *fsdp, "--dp-shard", "4", "--fsdp-prefetch", "2"]) == 0
    hsdp = json.loads(capsys.readouterr().out)["memory"]
    assert hsdp["optimizer"] > 3 * full["optimizer"] and hsdp["weights"] > full["weights"]
    assert main(["workload", "llm", *fsdp, "--dp-shard", "5"]) == 2
    assert "--dp-shard 5: HSDP shards over a divisor of --dp 16" in capsys.readouterr().err
    assert main(["workload", "llm", *SMALL_ARGV, "--fsdp-prefetch", "2", "--summary"]) == 2
    assert "FSDP2 training memory" in capsys.readouterr().err


@given(shard=st.one_of(st.none(), st.integers(-2, 40), st.text(max_size=4)),
       prefetch=st.one_of(st.integers(-2, 6), st.text(max_size=4)), zero=st.sampled_from([1, 3]))
@settings(max_examples=40, deadline=None)
def test_dp_shard_and_fsdp_prefetch_read_from_a_mapping_are_checked(shard, prefetch, zero):
    """Any --dp-shard / --fsdp-prefetch either resolves or is a ConfigError naming the option."""
    from astra_sim.errors import ConfigError

    from astra_workload_generators.llm import LlmSpec, llm_summary

    options = {"preset": "gpt3-13b", "layers": 2, "dp": 8, "zero": zero, "dp-shard": shard,
               "fsdp-prefetch": prefetch}
    try:
        summary = llm_summary(LlmSpec.from_mapping(options))
    except ConfigError as exc:
        assert any(word in str(exc) for word in ("dp-shard", "fsdp-prefetch")), str(exc)
        return
    assert summary["memory_peak_bytes"] > 0
