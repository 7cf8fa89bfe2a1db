"""``astra workload llm``: mixture of experts with expert parallelism, and inference (prefill / decode). Expected
values are derived here from the published dimensions, independently of the generator's arithmetic."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

PLUGINS = ["network_analytical", "workload_generators"]
BF16 = 2

# Mixtral 8x7B written out again: L, h, heads, kv, expert ffn, E, top-k, vocab, seq (SwiGLU: 3 matrices)
MIXTRAL = dict(L=32, h=4096, heads=32, kv=8, f=14336, E=8, k=2, vocab=32000, s=4096)
# A small MoE with shared experts for the fast tests
SMALL_MOE = dict(layers=4, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
                 experts=8, top_k=2, moe_ffn=128, shared_experts=1)
SMALL_DENSE = dict(layers=4, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _attn_params(h, heads, kv):
    d = h // heads
    return h * h + 2 * h * kv * d + h * h  # Wq, Wk, Wv, Wo


def _activated(L, h, heads, kv, f, k, vocab, shared=0, gated=True, E=8):
    """Parameters one token passes through: attention + router (h x E) + (top-k + shared) experts of m*h*f
    each + LM head."""
    m = 3 if gated else 2
    return L * (_attn_params(h, heads, kv) + h * E + (k + shared) * m * h * f) + vocab * h


def _read_all(prefix, npus):
    return [read_rank_nodes(prefix, r) for r in range(npus)]


def _comp_ops(ranks):
    return sum(n.attrs["num_ops"] for nodes in ranks for n in nodes if n.type == T.COMP_NODE)


def _sim(tmp_path, prefix, npus):
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(npus,))
    report = simulate(prefix, sys_cfg, net, None, f"{prefix}.groups.json", plugins=PLUGINS)
    assert len(report.ranks) == npus and report.max_finish_ns > 0
    return report


def test_mixtral_preset_and_training_flops(tmp_path):
    x = MIXTRAL
    dims = model_dims("mixtral-8x7b")
    assert (dims.layers, dims.hidden, dims.heads, dims.kv_heads, dims.ffn_hidden, dims.experts, dims.top_k,
            dims.vocab, dims.seq_len, dims.gated) == (32, 4096, 32, 8, 14336, 8, 2, 32000, 4096, True)
    cfg = LlmConfig(tp=2, pp=2, dp=2, ep=2, micro_batches=2, micro_batch_size=1, sequence_parallel=True)
    generate_llm(dims, cfg, tmp_path / "t")
    P = _activated(x["L"], x["h"], x["heads"], x["kv"], x["f"], x["k"], x["vocab"])
    assert abs(P - 12.9e9) / 12.9e9 < 0.02  # Mixtral's published ~12.9B active (incl. 0.13B embedding)
    seqs = cfg.dp * cfg.micro_batches * cfg.micro_batch_size
    s = x["s"]
    expected = 6 * P * seqs * s + 12 * x["L"] * s * s * x["h"] * seqs
    total = _comp_ops(_read_all(tmp_path / "t", cfg.npus))
    assert abs(total - expected) / expected < 0.01


def test_small_moe_with_shared_experts_flops(tmp_path):
    cfg = LlmConfig(tp=2, pp=1, dp=4, ep=4, micro_batches=3, micro_batch_size=2, sequence_parallel=True)
    generate_llm(model_dims(**SMALL_MOE), cfg, tmp_path / "t")
    P = _activated(4, 256, 8, 4, 128, 2, 1000, shared=1)
    seqs = 4 * 3 * 2
    expected = 6 * P * seqs * 128 + 12 * 4 * 128 ** 2 * 256 * seqs
    assert abs(_comp_ops(_read_all(tmp_path / "t", cfg.npus)) - expected) / expected < 0.01


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_all_to_all_volume_and_ep_groups(tmp_path, ep):
    tp, pp, dp, M, b = 2, 2, 4, 2, 2
    cfg = LlmConfig(tp=tp, pp=pp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b, sequence_parallel=True)
    generate_llm(model_dims(**SMALL_MOE), cfg, tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    h, s, k, L, E, f = 256, 128, 2, 4, 8, 128
    # per rank per step: 4 all-to-alls (dispatch + combine, forward and backward) per local MoE layer and
    # micro-batch, each tokens_per_microbatch * top_k * hidden * bytes
    expected_a2a = 4 * (L // pp) * M * (b * s) * k * h * BF16 if ep > 1 else 0
    dense_layer = _attn_params(h, 8, 4) + 1 * 3 * h * f  # attention + shared expert
    expert_layer = E * 3 * h * f
    for rank, nodes in enumerate(_read_all(tmp_path / "t", cfg.npus)):
        t, d, p = rank % tp, (rank // tp) % dp, rank // (tp * dp)
        a2a = [n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL]
        assert sum(n.attrs["comm_size"] for n in a2a) == expected_a2a
        ep_block = [t + tp * (d // ep * ep + e) + tp * dp * p for e in range(ep)]
        for n in a2a:
            assert groups[n.attrs["pg_name"]] == ep_block
        # gradient sync: dense weights over the full DP group, this rank's E/EP experts over the DP/EP ranks
        # holding the same experts (with EP = 1 both over DP)
        vol = defaultdict(int)
        for n in nodes:
            if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_REDUCE and not n.name.startswith("tp"):
                vol[tuple(groups[n.attrs["pg_name"]])] += n.attrs["comm_size"]
        dp_group = tuple(t + tp * dd + tp * dp * p for dd in range(dp))
        edp_group = tuple(t + tp * (q * ep + d % ep) + tp * dp * p for q in range(dp // ep))
        stage = (L // pp) * dense_layer + 1024 * h  # plus embedding (first) or LM head (last): 1000 padded to 1024
        experts = (L // pp) * expert_layer // ep
        router = (L // pp) * h * E  # replicated on every TP rank, synced over DP
        router += (L // pp) * 4 * h + (2 * h if p == pp - 1 else 0)  # and so are the LayerNorms' weights and biases
        router += s * h if p == 0 else 0  # and the learned position table (no rotary flag), on the first stage
        if ep == 1:
            assert vol == {dp_group: ((stage + experts) // tp + router) * BF16}
        elif dp // ep == 1:
            assert vol == {dp_group: (stage // tp + router) * BF16}
        else:
            assert vol == {dp_group: (stage // tp + router) * BF16, edp_group: experts // tp * BF16}


# capacity factor: (C, pad) -> expert token copies per rank (b*s = 2*128 tokens, top-2 of 8 experts: 64 per
# expert when balanced); capacity = ceil(64 * C)
@pytest.mark.parametrize("factor, pad, copies", [
    (None, False, 512),      # dropless
    (1.25, False, 512),      # capacity 80 > 64: balanced routing drops nothing, no padding
    (1.25, True, 8 * 80),    # padded to capacity 80 per expert
    (0.5, False, 8 * 32),    # capacity 32 < 64: half the copies dropped
    (0.5, True, 8 * 32),
    (1.01, True, 8 * 65),    # ceil(64.64)
])
def test_capacity_factor_sets_all_to_all_bytes_and_expert_rows(tmp_path, factor, pad, copies):
    tp, dp, ep, M, b = 2, 4, 4, 2, 2
    cfg = LlmConfig(tp=tp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b, sequence_parallel=True,
                    moe_capacity_factor=factor, moe_pad_to_capacity=pad)
    generate_llm(model_dims(**SMALL_MOE), cfg, tmp_path / "t")
    h, f, L = 256, 128, 4
    for nodes in _read_all(tmp_path / "t", cfg.npus)[:3]:
        a2a = [n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL]
        assert len(a2a) == 4 * L * M
        assert {n.attrs["comm_size"] for n in a2a} == {copies * h * BF16}
        # routed experts (fc1 with SwiGLU: 2 x f/TP columns; fc2) forward and backward: 3 GEMMs each of 2*rows*...
        expert_ops = sum(n.attrs["num_ops"] for n in nodes if n.type == T.COMP_NODE
                         and ".experts." in n.attrs["label"])
        per_copy = 3 * (2 * h * 2 * f // tp + 2 * f // tp * h)  # fwd + dgrad + wgrad of fc1 (2f/TP) and fc2
        assert expert_ops == L * M * copies * per_copy


def test_capacity_factor_options_are_checked():
    moe, dense = model_dims(**SMALL_MOE), model_dims(**SMALL_DENSE)
    with pytest.raises(ConfigError, match="--moe-capacity-factor needs a mixture-of-experts"):
        generate_llm(dense, LlmConfig(moe_capacity_factor=1.0), "unused", write=False)
    with pytest.raises(ConfigError, match="--moe-pad-to-capacity needs --moe-capacity-factor"):
        generate_llm(moe, LlmConfig(moe_pad_to_capacity=True), "unused", write=False)
    with pytest.raises(ConfigError, match="must be a number > 0"):
        generate_llm(moe, LlmConfig(moe_capacity_factor=0), "unused", write=False)


def test_capacity_factor_from_the_cli_simulates(tmp_path):
    prefix = tmp_path / "out" / "g"
    assert main(["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "4",
                 "--vocab", "1000", "--seq-len", "128", "--gated", "--experts", "8", "--top-k", "2",
                 "--moe-ffn", "128", "--dp", "4", "--ep", "4", "--moe-capacity-factor", "1.5",
                 "--moe-pad-to-capacity", "-o", str(prefix)]) == 0
    a2a = [n for n in read_rank_nodes(prefix, 0) if n.type == T.COMM_COLL_NODE
           and n.attrs["comm_type"] == T.ALL_TO_ALL]
    assert {n.attrs["comm_size"] for n in a2a} == {8 * 48 * 256 * BF16}  # capacity ceil(128*2/8*1.5) = 48
    _sim(tmp_path, prefix, 4)


def test_moe_imbalance_times_every_rank_as_the_busiest(tmp_path):
    """--moe-imbalance F (dropless): the busiest EP rank computes and receives ceil(b*s*K*F) token copies and the
    combine all-to-all makes everyone wait for it, so every rank is timed as that rank; the step is slower, the
    model FLOPs (summary) stay the balanced ones."""
    tp, dp, ep, M, b, s, K, h = 1, 4, 4, 2, 2, 128, 2, 256
    steps = {}
    for factor in (1.0, 1.37):
        cfg = LlmConfig(tp=tp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b, moe_imbalance=factor)
        summary = generate_llm(model_dims(**SMALL_MOE), cfg, tmp_path / f"i{factor}")
        copies = {1.0: b * s * K, 1.37: 702}[factor]  # 512 balanced; ceil(512 * 1.37 = 701.44)
        for nodes in _read_all(tmp_path / f"i{factor}", cfg.npus):
            a2a = {n.attrs["comm_size"] for n in nodes
                   if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL}
            assert a2a == {copies * h * BF16}
            rows = {json.loads(n.inputs_shapes)[0][0] for n in nodes if n.attrs.get("label", "").endswith(
                ".experts.fc1") and n.attrs["label"].startswith("fwd")}
            assert rows == {copies}
        steps[factor] = (_sim(tmp_path, tmp_path / f"i{factor}", cfg.npus).max_finish_ns, summary["flops"])
    assert steps[1.37][0] > steps[1.0][0] and steps[1.37][1] == steps[1.0][1]


def test_moe_imbalance_options_are_checked():
    moe, dense = model_dims(**SMALL_MOE), model_dims(**SMALL_DENSE)
    for dims, cfg, match in [(moe, LlmConfig(moe_imbalance=0.9), "must be a number >= 1"),
                             (dense, LlmConfig(moe_imbalance=1.2), "needs a mixture-of-experts"),
                             (moe, LlmConfig(moe_imbalance=1.2, moe_capacity_factor=1.0), "dropless"),
                             (moe, LlmConfig(moe_imbalance=1.2), r"at most min\(EP, experts / top-k\) = 1 x"),
                             (moe, LlmConfig(dp=8, ep=8, moe_imbalance=4.5), r"= 4 x the balanced share")]:
        with pytest.raises(ConfigError, match=match):
            generate_llm(dims, cfg, "unused", write=False)


def test_ep_group_layout(tmp_path):
    generate_llm(model_dims(**SMALL_MOE), LlmConfig(tp=1, pp=1, dp=4, ep=2), tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    assert groups == {"1": [0, 1, 2, 3],             # DP
                      "2": [0, 1], "3": [2, 3],      # EP (consecutive DP indices)
                      "4": [0, 2], "5": [1, 3]}      # expert-DP (same experts)


def test_moe_simulates(tmp_path):
    prefix = tmp_path / "out" / "g"
    assert main(["workload", "llm", "--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "4",
                 "--vocab", "1000", "--seq-len", "128", "--gated", "--experts", "8", "--top-k", "2",
                 "--moe-ffn", "128", "--shared-experts", "1", "--tp", "2", "--pp", "2", "--dp", "2", "--ep", "2",
                 "--sequence-parallel", "--micro-batches", "3", "--zero", "1", "--recompute", "-o", str(prefix)]) == 0
    _sim(tmp_path, prefix, 8)


def test_prefill_flops_and_simulation(tmp_path):
    tp, pp, dp, ep, B, prompt = 2, 2, 2, 2, 4, 96
    prefix = tmp_path / "p"
    assert main(["workload", "llm", "--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "4",
                 "--vocab", "1000", "--seq-len", "128", "--gated", "--experts", "8", "--top-k", "2",
                 "--moe-ffn", "128", "--shared-experts", "1", "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
                 "--ep", str(ep), "--mode", "prefill", "--batch-size", str(B), "--micro-batches", "2",
                 "--prompt-len", str(prompt), "-o", str(prefix)]) == 0
    ranks = _read_all(prefix, 8)
    seqs = dp * B
    P = _activated(4, 256, 8, 4, 128, 2, 1000, shared=1)
    expected = 2 * P * seqs * prompt + 4 * 4 * prompt ** 2 * 256 * seqs  # forward only
    assert abs(_comp_ops(ranks) - expected) / expected < 0.01
    for nodes in ranks:
        assert not any(".bwd" in n.attrs.get("label", "") or n.name.startswith("bwd") for n in nodes)
        assert not any(n.type == T.COMP_NODE and n.name.endswith("_backward") for n in nodes)
        assert not any(n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_REDUCE
                       and not n.name.startswith("tp") for n in nodes)  # no gradient sync
        a2a = sum(n.attrs["comm_size"] for n in nodes
                  if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL)
        assert a2a == 2 * (4 // pp) * 2 * (B // 2 * prompt) * 2 * 256 * BF16  # dispatch + combine, forward only
    _sim(tmp_path, prefix, 8)


def test_decode_flops_kv_cache_and_simulation(tmp_path):
    L, h, heads, kv, f, vocab = 32, 4096, 32, 8, 14336, 128256  # llama3-8b
    tp, pp, B, prompt, gen = 2, 2, 8, 1000, 24
    c = prompt + gen
    cfg = LlmConfig(tp=tp, pp=pp, dp=1, micro_batches=2, micro_batch_size=B // 2, mode="decode",
                    prompt_len=prompt, decode_len=gen)
    generate_llm(model_dims("llama3-8b"), cfg, tmp_path / "d")
    ranks = _read_all(tmp_path / "d", cfg.npus)
    P = _attn_params(h, heads, kv) * L + L * 3 * h * f + vocab * h
    per_seq = _comp_ops(ranks) / B
    assert abs(per_seq - (2 * P + 4 * L * c * h)) / (2 * P) < 0.01
    assert abs(per_seq - 2 * P) / (2 * P) < 0.05  # ~2 x params per generated token
    d = h // heads
    kv_read = sum(n.attrs["kv_cache_bytes"] for nodes in ranks for n in nodes if "kv_cache_bytes" in n.attrs)
    assert kv_read == B * 2 * L * kv * d * c * BF16
    attn = [n for nodes in ranks for n in nodes if n.name == "aten::_scaled_dot_product_flash_attention"]
    assert all(n.attrs["tensor_size"] >= n.attrs["kv_cache_bytes"] for n in attn)
    # memory-bound: arithmetic intensity is tiny
    assert sum(n.attrs["num_ops"] for n in attn) / kv_read == heads // kv  # FLOP/byte = GQA group size
    _sim(tmp_path, tmp_path / "d", cfg.npus)


def test_errors(tmp_path):
    with pytest.raises(ConfigError, match="divisible by --ep"):
        generate_llm(model_dims(**SMALL_MOE), LlmConfig(dp=2, ep=4), tmp_path / "t")
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        generate_llm(model_dims(**SMALL_DENSE), LlmConfig(dp=2, ep=2), tmp_path / "t")
    with pytest.raises(ConfigError, match="experts 8 are not divisible"):
        generate_llm(model_dims(**SMALL_MOE), LlmConfig(dp=16, ep=16), tmp_path / "t")
    with pytest.raises(ConfigError, match="--mode"):
        generate_llm(model_dims(**SMALL_MOE), LlmConfig(mode="serve"), tmp_path / "t")
    assert main(["workload", "llm", "--preset", "llama2-7b", "--batch-size", "4", "-o", str(tmp_path / "x")]) == 2


@pytest.mark.parametrize("sp", [False, True])
def test_router_gemms_on_this_ranks_tokens(tmp_path, sp):
    """Router (gate) per MoE layer and micro-batch: forward [rows, h] x [h, E], backward dgrad and wgrad; rows =
    the micro-batch's tokens, split over TP with sequence parallelism. (Without it a DeepSpeed step: Megatron-Core
    refuses MoE at TP > 1 without sequence parallelism.)"""
    tp, b, s, h, E, L = 2, 2, 128, 256, 8, 4
    cfg = LlmConfig(tp=tp, pp=1, dp=2, ep=2, micro_batches=1, micro_batch_size=b, sequence_parallel=sp,
                    framework=None if sp else "deepspeed")
    generate_llm(model_dims(**SMALL_MOE), cfg, tmp_path / "t")
    rows = b * s // tp if sp else b * s
    for nodes in _read_all(tmp_path / "t", cfg.npus):
        fwd = [n for n in nodes if n.attrs.get("label", "").endswith(".router")]
        assert len(fwd) == L and {n.inputs_shapes for n in fwd} == {f"[[{rows}, {h}], [{h}, {E}]]"}
        assert all(n.attrs["num_ops"] == 2 * rows * h * E for n in fwd)
        for suffix in (".router.dgrad", ".router.wgrad"):
            assert sum(n.attrs.get("label", "").endswith(suffix) for n in nodes) == L
        assert sum(n.name == "aten::_softmax" for n in nodes) == L


def test_router_timed_by_the_gpu_model(tmp_path):
    prefix = tmp_path / "g"
    generate_llm(model_dims(**SMALL_MOE), LlmConfig(tp=1, pp=1, dp=2, ep=2), prefix)
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(2,))
    report = simulate(str(prefix), sys_cfg, net, None, f"{prefix}.groups.json", compute_model="gpu",
                      plugins=PLUGINS + ["gpu_model"])
    assert report.max_finish_ns > 0


def _kv_writes(ranks):
    return [n for nodes in ranks for n in nodes if n.attrs.get("label", "").endswith(".kv_write")]


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_kv_cache_writes(tmp_path, mode):
    """Each layer copies this step's K and V (q positions) into the cache: read + write 2*b*q*kv*d*bytes."""
    L, h, heads, kv = 4, 256, 8, 4
    d = h // heads
    tp, pp, M, b, prompt = 2, 2, 2, 3, 64
    cfg = LlmConfig(tp=tp, pp=pp, micro_batches=M, micro_batch_size=b, mode=mode, prompt_len=prompt)
    generate_llm(model_dims(**SMALL_DENSE), cfg, tmp_path / "k")
    writes = _kv_writes(_read_all(tmp_path / "k", cfg.npus))
    q = prompt if mode == "prefill" else 1
    assert len(writes) == L * M * tp  # every layer, micro-batch and TP rank
    assert {n.name for n in writes} == {"aten::copy_"}
    assert sum(n.attrs["tensor_size"] for n in writes) == 2 * (2 * L * M * b * q * kv * d * BF16)


def test_multi_step_decode(tmp_path):
    """Three decode steps in one trace: the context grows by one per step, FLOPs and KV reads are the sum of the
    steps', the last stage sends each sampled token (int64 per sequence) back to the first, and it simulates."""
    L, h, heads, kv, vocab = 4, 256, 8, 4, 1000
    d = h // heads
    tp, pp, M, b, prompt, gen, steps = 2, 2, 2, 2, 100, 5, 3
    cfg = LlmConfig(tp=tp, pp=pp, micro_batches=M, micro_batch_size=b, mode="decode", prompt_len=prompt,
                    decode_len=gen, decode_steps=steps)
    generate_llm(model_dims(**SMALL_DENSE), cfg, tmp_path / "m")
    ranks = _read_all(tmp_path / "m", cfg.npus)
    P = L * (_attn_params(h, heads, kv) + 3 * h * 512) + vocab * h
    B = M * b
    expected = sum(B * (2 * P + 4 * L * (prompt + gen + i) * h) for i in range(steps))
    assert abs(_comp_ops(ranks) - expected) / expected < 0.01
    kv_read = sum(n.attrs["kv_cache_bytes"] for nodes in ranks for n in nodes if "kv_cache_bytes" in n.attrs)
    assert kv_read == sum(B * 2 * L * kv * d * (prompt + gen + i) * BF16 for i in range(steps))
    assert len(_kv_writes(ranks)) == steps * L * M * tp
    for rank, nodes in enumerate(ranks):
        stage = rank // tp
        token = [n for n in nodes if "token" in n.name]
        assert len(token) == (steps - 1) * M if stage in (0, pp - 1) else not token
        for n in token:
            assert n.attrs["comm_size"] == b * 8
            assert n.type == (T.COMM_SEND_NODE if stage == pp - 1 else T.COMM_RECV_NODE)
    assert _sim(tmp_path, tmp_path / "m", cfg.npus).max_finish_ns > 0


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_decode_steps_wait_for_the_sampled_token(tmp_path, micro_batches):
    """One micro-batch: step i+1 cannot start before step i's token is back, so 3 steps take 3x one step plus two
    token messages. Two micro-batches pipeline across steps (micro-batch 0's next step runs while 1 finishes)."""
    def run(steps, name):
        cfg = LlmConfig(tp=1, pp=2, micro_batches=micro_batches, micro_batch_size=2, mode="decode", prompt_len=64,
                        decode_steps=steps)
        generate_llm(model_dims(**SMALL_DENSE), cfg, tmp_path / name)
        return _sim(tmp_path, tmp_path / name, cfg.npus).max_finish_ns
    single, multi = run(1, "one"), run(3, "three")
    if micro_batches == 1:
        assert 3 * single < multi < 3 * single + 2 * 20_000  # + two small token messages
    else:
        assert 2 * single < multi < 3 * single


def test_decode_steps_errors(tmp_path):
    with pytest.raises(ConfigError, match="--decode-steps is for --mode decode"):
        generate_llm(model_dims(**SMALL_DENSE), LlmConfig(mode="prefill", decode_steps=2), tmp_path / "t")
    with pytest.raises(ConfigError, match="--decode-steps must be a positive integer"):
        generate_llm(model_dims(**SMALL_DENSE), LlmConfig(mode="decode", decode_steps=0), tmp_path / "t")


def test_context_and_expert_parallelism_together(tmp_path):
    """CP 2 with EP 2 (DP 2): each CP rank routes its own s/CP tokens inside an EP group of one CP index; the
    experts of EP rank e are synced over every (DP/EP block, CP index); dense weights over DP x CP."""
    tp, cp, dp, ep, M, b, s, h, k, L, E, f = 1, 2, 2, 2, 2, 2, 128, 256, 2, 4, 8, 128
    cfg = LlmConfig(tp=tp, cp=cp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b)
    generate_llm(model_dims(**SMALL_MOE), cfg, tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    ranks = _read_all(tmp_path / "t", cfg.npus)
    rank = lambda d, c: c + cp * d  # noqa: E731  (t = 0, p = 0)
    for d in range(dp):
        for c in range(cp):
            nodes = ranks[rank(d, c)]
            a2a = [n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL]
            assert sum(n.attrs["comm_size"] for n in a2a) == 4 * L * M * (b * s // cp) * k * h * BF16
            assert {tuple(groups[n.attrs["pg_name"]]) for n in a2a} == {(rank(0, c), rank(1, c))}
            experts = [n for n in nodes if n.name.startswith("edp")]
            assert {tuple(groups[n.attrs["pg_name"]]) for n in experts} == {(rank(d, 0), rank(d, 1))}
            assert sum(n.attrs["comm_size"] for n in experts) == L * E * 3 * h * f // ep * BF16
            dense = [n for n in nodes if n.name.startswith("dpcp")]
            assert {len(groups[n.attrs["pg_name"]]) for n in dense} == {dp * cp}
    P = _activated(L, h, 8, 4, f, k, 1000, shared=1)
    seqs = dp * M * b
    expected = 6 * P * seqs * s + 12 * L * s * s * h * seqs
    assert abs(_comp_ops(ranks) - expected) / expected < 0.01
    _sim(tmp_path, tmp_path / "t", cfg.npus)


def test_mixed_step_continuous_batching(tmp_path):
    """--mode mixed: each micro-batch is b decode tokens plus a chunk of a new prompt (chunked prefill). The GEMMs
    run on b + chunk rows; the decode tokens attend to their caches, the chunk causally to the prompt's cached
    tokens and itself; both write their K/V; FLOPs and the executed attention pairs are counted here."""
    ops = pytest.importorskip("astra_gpu_model.ops")
    L, h, heads, kv, f, vocab = 4, 256, 8, 4, 512, 1000
    d = h // heads
    tp, pp, dp, M, b, prompt, gen, chunk, done = 2, 2, 2, 2, 3, 64, 5, 40, 24
    c = prompt + gen
    cfg = LlmConfig(tp=tp, pp=pp, dp=dp, micro_batches=M, micro_batch_size=b, mode="mixed", prompt_len=prompt,
                    decode_len=gen, prefill_chunk=chunk, prefill_done=done)
    summary = generate_llm(model_dims(**SMALL_DENSE), cfg, tmp_path / "m")
    ranks = _read_all(tmp_path / "m", cfg.npus)
    P = L * (_attn_params(h, heads, kv) + 3 * h * f) + vocab * h
    expected = dp * M * (2 * P * (b + chunk) + 4 * L * h * (b * c + chunk * (done + chunk)))
    assert _comp_ops(ranks) == summary["flops"]
    assert abs(summary["flops"] - expected) / expected < 1e-9
    hq, hkv = heads // tp, kv // tp
    for rank, nodes in enumerate(ranks):
        stage = rank // (tp * dp)
        layer = stage * L // pp
        by = {n.attrs.get("label"): n for n in nodes}
        lab = f"fwd.l{layer}.mb0"
        assert json.loads(by[f"{lab}.qkv"].inputs_shapes)[0] == [b + chunk, h]
        dec, pre = by[f"{lab}.attn"], by[f"{lab}.prefill.attn"]
        assert json.loads(dec.inputs_shapes) == [[b, hq, 1, d], [b, hkv, c, d], [b, hkv, c, d]]
        keys = [1, hkv, done + chunk, d]
        assert json.loads(pre.inputs_shapes) == [[1, hq, chunk, d], keys, keys]
        pairs = sum(done + i + 1 for i in range(chunk))  # query at prompt position done + i sees done + i + 1 keys
        assert ops.classify(pre.name, *ops.node_io(pre)).flops == 2 * hq * pairs * 2 * d
        assert ops.classify(dec.name, *ops.node_io(dec)).flops == 2 * b * hq * c * 2 * d
        writes = {n.attrs["label"]: n.attrs["tensor_size"] for n in nodes if n.name == "aten::copy_"
                  and n.attrs["label"].startswith(lab)}
        assert writes == {f"{lab}.kv_write": 2 * 2 * b * hkv * d * BF16,
                          f"{lab}.prefill.kv_write": 2 * 2 * chunk * hkv * d * BF16}
        if stage == pp - 1:
            assert json.loads(by["fwd.head.mb0"].inputs_shapes)[0] == [b + chunk, h]
        else:  # the stage boundary carries all b + chunk tokens' activations
            (send,) = [n for n in nodes if n.name == "send_act.mb0"]
            assert send.attrs["comm_size"] == (b + chunk) * h * BF16
    _sim(tmp_path, tmp_path / "m", cfg.npus)


def test_mixed_step_errors(tmp_path):
    dims = model_dims(**SMALL_DENSE)
    for cfg, match in [(LlmConfig(mode="mixed"), "--prefill-chunk >= 1"),
                       (LlmConfig(mode="decode", prefill_chunk=8), "are for --mode mixed"),
                       (LlmConfig(mode="mixed", prefill_chunk=8, prefill_done=-1), "--prefill-done must be"),
                       (LlmConfig(mode="mixed", prefill_chunk=8, cp=2), "--cp is for --mode train or prefill")]:
        with pytest.raises(ConfigError, match=match):
            generate_llm(dims, cfg, tmp_path / "x", write=False)
    assert main(["workload", "llm", "--preset", "llama3-8b", "--layers", "2", "--mode", "mixed", "--batch-size",
                 "4", "--prefill-chunk", "256", "--prefill-done", "256", "--prompt-len", "1024",
                 "-o", str(tmp_path / "cli")]) == 0


# ---------------------------------------------------------------- dense first layers (DeepSeekMoE)

def test_deepseek_moe_16b_preset_matches_the_published_sizes():
    # DeepSeekMoE 16B written out again (its config: 28 layers, h 2048, 16 heads, first_k_dense_replace 1 with a
    # dense SwiGLU FFN of 10944, then 64 routed experts (top-6) + 2 shared of 1408, vocab 102400, untied head)
    dims = model_dims("deepseek-moe-16b")
    assert (dims.layers, dims.moe_dense_layers, dims.ffn_hidden, dims.experts, dims.top_k, dims.moe_ffn,
            dims.shared_experts) == (28, 1, 10944, 64, 6, 1408, 2)
    h, V = 2048, 102400
    attn, expert = _attn_params(h, 16, 16), 3 * h * 1408
    dense_layer = attn + 3 * h * 10944
    total = dense_layer + 27 * (attn + h * 64 + 66 * expert) + 2 * V * h  # embedding + LM head
    active = dense_layer + 27 * (attn + h * 64 + 8 * expert) + 2 * V * h
    from astra_workload_generators.llm import activated_parameter_count, parameter_count

    assert parameter_count(dims) + V * h == total and activated_parameter_count(dims) + V * h == active
    # the paper's 16.4B parameters, 2.8B activated
    assert abs(total - 16.4e9) / 16.4e9 < 0.01 and abs(active - 2.8e9) / 2.8e9 < 0.02


def test_dense_first_layers_flops_all_to_alls_and_gradient_sync(tmp_path):
    tp, pp, dp, ep, M, b = 2, 2, 4, 4, 2, 1
    moe = dict(SMALL_MOE, moe_dense_layers=1)
    cfg = LlmConfig(tp=tp, pp=pp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b, sequence_parallel=True)
    generate_llm(model_dims(**moe), cfg, tmp_path / "t")
    ranks = _read_all(tmp_path / "t", cfg.npus)
    h, s, k, E, f, F, V = 256, 128, 2, 8, 128, 512, 1000
    attn = _attn_params(h, 8, 4)
    # FLOPs: layer 0 dense (FFN of 512), layers 1-3 MoE
    P = attn + 3 * h * F + 3 * (attn + h * E + (k + 1) * 3 * h * f) + V * h
    seqs = dp * M * b
    expected = 6 * P * seqs * s + 12 * 4 * s * s * h * seqs
    assert abs(_comp_ops(ranks) - expected) / expected < 0.01
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    for rank, nodes in enumerate(ranks):
        p = rank // (tp * dp)
        moe_layers = 1 if p == 0 else 2  # stage 0 holds layers 0 (dense) and 1
        a2a = [n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL]
        assert sum(n.attrs["comm_size"] for n in a2a) == 4 * moe_layers * M * (b * s) * k * h * BF16
        assert not any(".l0." in n.name for n in a2a)
        assert not any("experts" in n.attrs.get("label", "") for n in nodes if ".l0." in n.attrs.get("label", ""))
        assert any(".l1.mb0.experts" in n.attrs.get("label", "") for n in nodes) == (p == 0)
        ar = {n.name: n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_REDUCE
              and not n.name.startswith("tp")}
        norms = 4 * h  # (each layer's two LayerNorms' weights and biases, whole on every TP rank)
        if p == 0:  # the dense layer's gradients: attention + FFN, TP-sharded, over the full DP group
            (l0,) = [n for name, n in ar.items() if name.endswith(".l0")]
            assert l0.attrs["comm_size"] == ((attn + 3 * h * F) // tp + norms) * BF16
            assert len(groups[l0.attrs["pg_name"]]) == dp
            assert not any(name.endswith(".l0.experts") for name in ar)
        (l1,) = [n for name, n in ar.items() if name.endswith(f".l{2 * p + 1}")]
        assert l1.attrs["comm_size"] == ((attn + 3 * h * f) // tp + h * E + norms) * BF16  # + shared + router
    _sim(tmp_path, tmp_path / "t", cfg.npus)


def test_dense_first_layers_from_the_cli_and_errors(tmp_path):
    prefix = tmp_path / "out" / "g"
    args = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len",
            "128", "--gated", "--experts", "8", "--top-k", "2", "--moe-ffn", "128", "--dp", "2", "--ep", "2"]
    assert main(args + ["--moe-dense-layers", "1", "-o", str(prefix)]) == 0
    labels = [n.attrs.get("label", n.name) for n in read_rank_nodes(prefix, 0)]
    assert "fwd.l0.mb0.fc1" in labels and "fwd.l1.mb0.fc1" not in labels
    assert "fwd.l1.mb0.experts.fc1" in labels and not any(".l0.mb0.experts" in n for n in labels)
    _sim(tmp_path, prefix, 2)
    assert main(args + ["--moe-dense-layers", "2", "-o", str(prefix)]) == 2  # no MoE layer left
    with pytest.raises(ConfigError, match="--moe-dense-layers 2 and --moe-layer-freq 1 leave no MoE layer of the 2 "
                                          "layers"):
        model_dims(**dict(SMALL_MOE, layers=2, moe_dense_layers=2))
    with pytest.raises(ConfigError, match="--moe-dense-layers needs a mixture-of-experts model"):
        model_dims(**dict(SMALL_DENSE, moe_dense_layers=1))


# ---------------------------------------------------------------- expert load distributions (--moe-expert-load)

def _expert_rows(nodes):
    return {json.loads(n.inputs_shapes)[0][0] for n in nodes
            if n.attrs.get("label", "").endswith(".experts.fc1") and n.attrs["label"].startswith("fwd")}


def _a2a_sizes(nodes):
    return {n.attrs["comm_size"] for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_TO_ALL}


def test_expert_load_specs():
    from astra_workload_generators.llm import parse_expert_load

    assert parse_expert_load("1,2,0,1", 4, 3) == ((1.0, 2.0, 0.0, 1.0),)
    zipf = parse_expert_load("zipf:1", 4, 3)
    assert zipf == ((1.0, 1 / 2, 1 / 3, 1 / 4),)
    dealt = parse_expert_load("zipf:1:5", 4, 3)
    assert len(dealt) == 3 and all(sorted(w) == sorted(zipf[0]) for w in dealt)  # the same loads, dealt per layer
    assert len(set(dealt)) > 1 and parse_expert_load("zipf:1:5", 4, 3) == dealt  # differ by layer, reproducible
    assert parse_expert_load("zipf:0", 4, 1) == ((1.0,) * 4,)


def test_expert_load_spec_errors(tmp_path):
    from astra_workload_generators.llm import parse_expert_load

    (tmp_path / "two.json").write_text("[[1, 2], [3, 4]]")
    (tmp_path / "bad.json").write_text("[1, 2,")
    for spec, match in [("1,2,3", "expected the loads of the 4 experts, got 3"),
                        ("1,-2,3,4", "finite numbers >= 0"), ("0,0,0,0", "not all 0"),
                        ("1,x,2,3", "expected E comma-separated numbers"), ("zipf:", "expected zipf:S"),
                        ("zipf:-1", "expected zipf:S"), ("zipf:1:2:3", "expected zipf:S"),
                        (str(tmp_path / "two.json"), "2 lists of expert loads, expected 1 .* or one per MoE layer "
                                                     r"\(3\)"),
                        (str(tmp_path / "bad.json"), "bad.json: invalid JSON at line 1"),
                        (str(tmp_path / "none.json"), "none.json' does not exist")]:
        with pytest.raises(ConfigError, match=match):
            parse_expert_load(spec, 4, 3)
    # the API checks what it is given too (SMALL_MOE: 4 MoE layers of 8 experts)
    for load, imbalance, match in [(((1,) * 8,) * 2, 1.0, r"expected 1 or 4 \(MoE layers\) lists of 8 expert loads"),
                                   (((1,) * 7,), 1.0, "lists of 8 expert loads"),
                                   (((0,) * 8,), 1.0, "not all 0"), (((1,) * 8,), 1.5, "give one")]:
        with pytest.raises(ConfigError, match=match):
            generate_llm(model_dims(**SMALL_MOE), LlmConfig(moe_expert_load=load, moe_imbalance=imbalance), "x",
                         write=False)


def test_ep_loads_round_and_cap():
    from astra_workload_generators.llm import ep_loads

    dims = model_dims(**SMALL_MOE)  # 8 experts, top-2
    cfg = LlmConfig(dp=4, ep=4, moe_expert_load=((3, 1, 1, 1, 1, 1, 0, 0),))
    # 100 tokens x 2 = 200 copies: 75, 25 x 5 (exact), 0, 0 -> EP ranks (2 experts each): 100, 50, 50, 0
    assert ep_loads(dims, cfg, 100, 0) == (100, 50, 50, 0)
    # 7 tokens x 2 = 14 copies: exact 5.25, 1.75 x 5, 0, 0 -> floors 5, 1 x 5 (10), the 4 largest remainders
    # (0.75 each, lowest expert first) get one more: 5, 2, 2, 2, 2, 1, 0, 0
    assert ep_loads(dims, cfg, 7, 0) == (7, 4, 3, 0)
    # capacity ceil(100 x 2 / 8 x 1.0) = 25: expert 0 drops 50 copies; padded: every expert 25
    assert ep_loads(dims, LlmConfig(dp=4, ep=4, moe_expert_load=cfg.moe_expert_load, moe_capacity_factor=1.0),
                    100, 0) == (50, 50, 50, 0)
    assert ep_loads(dims, LlmConfig(dp=4, ep=4, moe_expert_load=cfg.moe_expert_load, moe_capacity_factor=1.0,
                                    moe_pad_to_capacity=True), 100, 0) == (50, 50, 50, 50)
    # a token picks top-2 *distinct* experts: no expert takes more than the 100 tokens; the excess goes to the others
    skew = lambda w: ep_loads(dims, LlmConfig(dp=4, ep=4, moe_expert_load=(w,)), 100, 0)
    assert skew((100, 0, 0, 0, 0, 0, 0, 1)) == (100, 0, 0, 100)
    assert skew((100, 1, 0, 0, 0, 0, 0, 1)) == (150, 0, 0, 50)  # expert 0 full; 1 and 7 share the other 100
    # all the weight on one expert: the other 100 copies spread evenly over the 7 unweighted experts
    assert skew((1, 0, 0, 0, 0, 0, 0, 0)) == (100 + 15, 29, 28, 28)


def test_uniform_expert_load_is_balanced_routing(tmp_path):
    cfg = dict(tp=2, pp=2, dp=4, ep=4, micro_batches=2, micro_batch_size=1, sequence_parallel=True)
    generate_llm(model_dims(**SMALL_MOE), LlmConfig(**cfg), tmp_path / "b", per_rank_files=True)
    generate_llm(model_dims(**SMALL_MOE), LlmConfig(**cfg, moe_expert_load=((2,) * 8,)), tmp_path / "u",
                 per_rank_files=True)
    for r in range(16):
        assert (tmp_path / f"b.{r}.et").read_bytes() == (tmp_path / f"u.{r}.et").read_bytes()


def test_skewed_expert_load_rows_all_to_alls_flops_and_straggler(tmp_path):
    """zipf:1 over 8 experts on 4 EP ranks: EP rank j holds experts 2j, 2j+1, so its share is (1/(2j+1) +
    1/(2j+2)) / H8. Each EP rank computes EP x its share of a rank's copies; every all-to-all is timed by the
    busiest rank (per-peer message: the largest share); the FLOPs over all ranks stay the balanced ones; the
    step is as slow as --moe-imbalance with the busiest rank's factor."""
    tp, dp, ep, M, b, s, K, h = 1, 4, 4, 2, 2, 128, 2, 256
    moe = dict(SMALL_MOE, moe_dense_layers=1)
    dims = model_dims(**moe)
    copies = b * s * K  # 512 per rank and layer
    w = [1 / (e + 1) for e in range(8)]
    share = [(w[2 * j] + w[2 * j + 1]) / sum(w) for j in range(4)]
    base = LlmConfig(tp=tp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b)
    skew = LlmConfig(tp=tp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b,
                     moe_expert_load=parse_spec("zipf:1", dims))
    generate_llm(dims, base, tmp_path / "b")
    generate_llm(dims, skew, tmp_path / "z")
    ranks = _read_all(tmp_path / "z", 4)
    busiest = max(r for nodes in ranks for r in _expert_rows(nodes))  # EP rank 0's: EP x its share of copies
    for r, nodes in enumerate(ranks):
        (rows,) = _expert_rows(nodes)
        assert abs(rows - 4 * copies * share[r]) <= 4  # EP x (its share, rounded to whole copies per expert)
        assert _a2a_sizes(nodes) == {busiest * h * BF16}  # EP peers x the largest per-peer message
    assert sum(r for nodes in ranks for r in _expert_rows(nodes)) == 4 * copies  # every copy computed once
    assert _comp_ops(ranks) == _comp_ops(_read_all(tmp_path / "b", 4))
    straggler = LlmConfig(tp=tp, dp=dp, ep=ep, micro_batches=M, micro_batch_size=b, moe_imbalance=4 * share[0])
    generate_llm(dims, straggler, tmp_path / "i")
    t_b, t_z, t_i = (_sim(tmp_path, tmp_path / x, 4).max_finish_ns for x in "bzi")
    assert t_z > 1.05 * t_b and abs(t_z - t_i) / t_i < 0.01


def parse_spec(spec, dims):
    from astra_workload_generators.llm import parse_expert_load

    return parse_expert_load(spec, dims.experts, dims.moe_layers)


def test_expert_load_from_a_json_file_per_layer_on_the_cli(tmp_path):
    # 3 MoE layers after a dense one; layer-specific loads: all on EP rank 0, balanced, all on EP rank 1
    loads = [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 1, 1]]
    (tmp_path / "loads.json").write_text(json.dumps(loads))
    prefix = tmp_path / "out" / "g"
    args = ["workload", "llm", "--layers", "4", "--hidden", "256", "--heads", "8", "--vocab", "1000", "--seq-len",
            "128", "--gated", "--experts", "4", "--top-k", "2", "--moe-ffn", "128", "--dp", "2", "--ep", "2",
            "--moe-dense-layers", "1", "-o", str(prefix)]
    assert main(args + ["--moe-expert-load", str(tmp_path / "loads.json")]) == 0
    copies = 128 * 2
    for e in (0, 1):
        nodes = read_rank_nodes(prefix, e)
        rows = {n.attrs["label"].split(".")[1]: json.loads(n.inputs_shapes)[0][0] for n in nodes
                if n.attrs.get("label", "").endswith(".experts.fc1") and n.attrs["label"].startswith("fwd")}
        assert rows == {"l1": 2 * copies if e == 0 else 0, "l2": copies, "l3": 0 if e == 0 else 2 * copies}
    _sim(tmp_path, prefix, 2)
    assert main(args + ["--moe-expert-load", "1,2,3"]) == 2
    assert main(args + ["--moe-expert-load", "zipf:1", "--moe-imbalance", "1.5"]) == 2
    assert main(args[:10] + ["-o", str(prefix), "--moe-expert-load", "zipf:1"]) == 2  # a dense model


# ---------------------------------------------------------------- --logits last (serving)

@pytest.mark.parametrize("mode", ["prefill", "mixed", "decode"])
def test_logits_on_the_last_position_only(tmp_path, mode):
    # the LM head runs on one row per sequence (+ one for a mixed step's prefill chunk) instead of every position;
    # everything else is unchanged, and the FLOPs drop by exactly 2 x V x h per dropped row
    dims = model_dims(**SMALL_DENSE)
    kw = dict(tp=2, pp=2, dp=1, micro_batches=2, micro_batch_size=3, mode=mode, prompt_len=64)
    if mode == "mixed":
        kw.update(prefill_chunk=16)
    s_all = generate_llm(dims, LlmConfig(**kw), tmp_path / "a", per_rank_files=True)
    s_last = generate_llm(dims, LlmConfig(**kw, logits="last"), tmp_path / "l", per_rank_files=True)
    rows_per_mb = {"prefill": 3 * 64, "mixed": 3 + 16, "decode": 3}[mode]
    kept = {"prefill": 3, "mixed": 3 + 1, "decode": 3}[mode]
    V, h = 1000, 256
    dropped_flops = 2 * V * h * (rows_per_mb - kept) * 2  # 2 micro-batches
    assert s_all["flops"] - s_last["flops"] == dropped_flops
    ops = lambda prefix: _comp_ops(_read_all(prefix, 4))
    assert ops(tmp_path / "a") - ops(tmp_path / "l") == dropped_flops
    heads = [json.loads(n.inputs_shapes)[0][0] for n in read_rank_nodes(tmp_path / 'l', 2)
             if n.attrs.get("label", "").startswith("fwd.head")]
    assert heads == [kept, kept]
    if mode == "decode":  # one position per sequence anyway: the same trace
        assert (tmp_path / "a.2.et").read_bytes() == (tmp_path / "l.2.et").read_bytes()
    _sim(tmp_path, tmp_path / "l", 4)


def test_logits_last_errors():
    dims = model_dims(**SMALL_DENSE)
    for cfg, match in [(LlmConfig(logits="last"), "for inference"),
                       (LlmConfig(logits="first", mode="prefill"), "must be all or last"),
                       (LlmConfig(logits="last", mode="prefill", cp=2), "not modelled")]:
        with pytest.raises(ConfigError, match=match):
            generate_llm(dims, cfg, "x", write=False)


def test_moe_layer_freq(tmp_path):
    # Megatron's --moe-layer-freq 2: layers 0 and 2 of 4 have experts, 1 and 3 a dense FFN; with 1 dense first
    # layer as well only layer 2 does. FLOPs, all-to-alls and per-MoE-layer expert loads follow.
    h, s, k, E, f, F, V = 256, 128, 2, 8, 128, 512, 1000
    attn = _attn_params(h, 8, 4)
    moe, dense = attn + h * E + (k + 1) * 3 * h * f, attn + 3 * h * F
    for extra, moe_layers in [(dict(moe_layer_freq=2), [0, 2]), (dict(moe_layer_freq=2, moe_dense_layers=1), [2])]:
        dims = model_dims(**dict(SMALL_MOE, **extra))
        assert [i for i in range(4) if dims.is_moe_layer(i)] == moe_layers and dims.moe_layers == len(moe_layers)
        # per MoE layer its own loads: the second MoE layer (if any) sends everything to EP rank 1
        loads = ((1,) * 8, (0, 0, 0, 0, 1, 1, 1, 1))[:len(moe_layers)]
        cfg = LlmConfig(dp=2, ep=2, micro_batches=1, moe_expert_load=loads)
        generate_llm(dims, cfg, tmp_path / "m")
        ranks = _read_all(tmp_path / "m", 2)
        P = len(moe_layers) * moe + (4 - len(moe_layers)) * dense + V * h
        expected = 6 * P * 2 * s + 12 * 4 * s * s * h * 2
        assert abs(_comp_ops(ranks) - expected) / expected < 0.01
        for e, nodes in enumerate(ranks):
            rows = {n.attrs["label"].split(".")[1]: json.loads(n.inputs_shapes)[0][0] for n in nodes
                    if n.attrs.get("label", "").endswith(".experts.fc1") and n.attrs["label"].startswith("fwd")}
            want = {f"l{moe_layers[0]}": s * k}
            if len(moe_layers) > 1:
                want[f"l{moe_layers[1]}"] = 2 * s * k if e == 1 else 0
            assert rows == want
            a2a = {n.name.split(".")[2] for n in nodes if n.type == T.COMM_COLL_NODE
                   and n.attrs["comm_type"] == T.ALL_TO_ALL}
            assert a2a == {f"l{i}" for i in moe_layers}
        _sim(tmp_path, tmp_path / "m", 2)
    with pytest.raises(ConfigError, match="leave no MoE layer"):
        model_dims(**dict(SMALL_MOE, moe_layer_freq=2, moe_dense_layers=3))
    with pytest.raises(ConfigError, match="--moe-layer-freq needs a mixture-of-experts model"):
        model_dims(**dict(SMALL_DENSE, moe_layer_freq=2))
    with pytest.raises(SystemExit) as exit_:  # argparse refuses 0
        main(["workload", "llm", "--layers", "4", "--hidden", "256", "--heads", "8", "--vocab", "1000",
              "--seq-len", "128", "--experts", "4", "--moe-layer-freq", "0", "-o", str(tmp_path / "x")])
    assert exit_.value.code == 2
