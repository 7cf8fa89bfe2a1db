"""``astra workload llm`` flash attention: the causal mask (``is_causal`` in ``inputs.values``, which the gpu model
times as the lower triangle only) and context parallelism's one call per ring step on Megatron-LM's load-balanced
sequence chunks. The work each rank must do is counted here position by position, independently of the generator."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, inference_flops, model_dims

ops = pytest.importorskip("astra_gpu_model.ops")

L, H, HEADS, KV, S = 2, 256, 8, 4, 128
D = H // HEADS
DIMS = dict(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=512, vocab=1000, seq_len=S, gated=True)
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"


def _gen(tmp_path, name="t", **cfg):
    cfg = LlmConfig(**cfg)
    generate_llm(model_dims(**DIMS), cfg, tmp_path / name)
    return [read_rank_nodes(tmp_path / name, r) for r in range(cfg.npus)]


def _attn(nodes, name, prefix):
    return [n for n in nodes if n.name == name and n.attrs["label"].startswith(prefix)]


def _flops(node):
    return ops.classify(node.name, *ops.node_io(node)).flops


def _pairs(query_positions):
    """(query, key) pairs a causal mask leaves: query at position i sees keys 0..i."""
    return sum(i + 1 for i in query_positions)


@pytest.mark.parametrize("causal", [True, False])
def test_flash_nodes_time_the_causal_triangle(tmp_path, causal):
    b = 2
    nodes = _gen(tmp_path, micro_batch_size=b, causal=causal)[0]
    fwd, bwd = _attn(nodes, FWD, "fwd.l0.mb0"), _attn(nodes, BWD, "bwd.l0.mb0")
    assert len(fwd) == len(bwd) == 1
    pairs = _pairs(range(S)) if causal else S * S
    # QK^T and AV: 2 * d FLOPs per (query, key) pair and head, each; backward: FlashAttention-2's 2.5x
    assert _flops(fwd[0]) == 2 * b * HEADS * pairs * 2 * D
    assert _flops(bwd[0]) == 2.5 * _flops(fwd[0])
    # num_ops keeps the model FLOPs (Megatron's formula: no causal saving) either way
    assert fwd[0].attrs["num_ops"] == 4 * b * S * S * D * HEADS
    assert bwd[0].attrs["num_ops"] == 8 * b * S * S * D * HEADS


def test_prefill_is_causal_decode_attends_to_the_whole_cache(tmp_path):
    prefill = _gen(tmp_path, "p", mode="prefill", prompt_len=64)[0]
    (node,) = _attn(prefill, FWD, "fwd.l0")
    assert _flops(node) == 2 * HEADS * _pairs(range(64)) * 2 * D
    decode = _gen(tmp_path, "d", mode="decode", prompt_len=64, decode_len=3)[0]
    (node,) = _attn(decode, FWD, "fwd.l0")
    assert _flops(node) == 2 * HEADS * (64 + 3) * 2 * D  # one query against every cached key


@pytest.mark.parametrize("cp", [2, 4])
def test_causal_cp_steps_do_the_load_balanced_share(tmp_path, cp):
    b, tp = 1, 2
    ranks = _gen(tmp_path, micro_batch_size=b, tp=tp, cp=cp, recompute=True)
    q, m = S // cp, S // (2 * cp)
    hq = HEADS // tp
    for rank, nodes in enumerate(ranks):
        c = (rank // tp) % cp
        # Megatron-LM's layout: CP rank c holds chunks c and 2CP-1-c of 2CP (load balance under the mask)
        mine = list(range(c * m, (c + 1) * m)) + list(range((2 * cp - 1 - c) * m, (2 * cp - c) * m))
        by_id = {n.id: n for n in nodes}
        for tag in ("fwd", "recompute"):
            steps = _attn(nodes, FWD, f"{tag}.l0.mb0")
            assert [n.attrs["label"] for n in steps] == [f"{tag}.l0.mb0.attn.cp{j}" for j in range(cp)]
            assert sum(_flops(n) for n in steps) == 2 * b * hq * _pairs(mine) * 2 * D
            assert sum(n.attrs["num_ops"] for n in steps) == 4 * b * q * S * D * hq
            # step j computes on the K/V chunk of ring step j; the local step waits for no transfer
            recvs = [by_id[i].name for n in steps for i in n.data_deps if by_id[i].type == T.COMM_RECV_NODE]
            assert recvs == [f"cp_recv.{tag}.l0.mb0.kv.{j}" for j in range(1, cp)]
        back = _attn(nodes, BWD, "bwd.l0.mb0")
        assert len(back) == cp
        assert sum(_flops(n) for n in back) == 2.5 * 2 * b * hq * _pairs(mine) * 2 * D
        # the dK/dV ring starts once the first remote chunk's gradients are done and accumulated (TE's dV add_
        # after step 1's backward: test_llm_te_cp_merges.py)
        first_send = next(n for n in nodes if n.name == "cp_send.bwd.l0.mb0.dkv.1")
        accumulated = next(n for n in nodes if n.attrs.get("label") == "bwd.l0.mb0.attn.cp1.dv_accumulate")
        assert first_send.data_deps == [accumulated.id] and back[1].id < accumulated.id
    # the whole mask is covered exactly once over the CP ranks of one TP index
    total = sum(_flops(n) for r in range(0, tp * cp, tp) for n in _attn(ranks[r], FWD, "fwd.l0.mb0"))
    assert total == 2 * b * hq * _pairs(range(S)) * 2 * D


def test_bidirectional_cp_steps_are_full_blocks(tmp_path):
    cp = 2
    nodes = _gen(tmp_path, cp=cp, causal=False)[0]
    steps = _attn(nodes, FWD, "fwd.l0.mb0")
    assert [_flops(n) for n in steps] == [2 * HEADS * (S // cp) ** 2 * 2 * D] * cp


def test_causal_cp_needs_2cp_chunks(tmp_path):
    dims = model_dims(**dict(DIMS, seq_len=120))
    with pytest.raises(ConfigError, match="2 x --cp"):
        generate_llm(dims, LlmConfig(cp=8), tmp_path / "x")
    generate_llm(dims, LlmConfig(cp=8, causal=False), tmp_path / "ok")  # no load-balanced chunks needed
    generate_llm(dims, LlmConfig(cp=4), tmp_path / "ok4")


def test_cli_no_causal(tmp_path, capsys):
    args = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000",
            "--seq-len", "128", "--no-causal", "-o", str(tmp_path / "n")]
    assert main(args) == 0
    (node,) = _attn(read_rank_nodes(tmp_path / 'n', 0), FWD, "fwd.l0.mb0")
    assert _flops(node) == 2 * HEADS * S * S * 2 * D


def test_cp_prefill(tmp_path):
    """Context-parallel prefill (long prompts): each CP rank runs its s/CP tokens of the prompt, the K/V ring and
    its load-balanced share of the causal mask, and writes its own chunk of the KV cache."""
    cp, tp, pp, prompt, b = 2, 2, 2, 96, 2
    kw = dict(mode="prefill", prompt_len=prompt, cp=cp, tp=tp, pp=pp, micro_batches=2, micro_batch_size=b)
    cfg = LlmConfig(**kw)
    ranks = _gen(tmp_path, "p", **kw)
    assert sum(n.attrs["num_ops"] for r in ranks for n in r if n.type == T.COMP_NODE) == \
        inference_flops(model_dims(**DIMS), cfg)
    q, m = prompt // cp, prompt // (2 * cp)
    for rank, nodes in enumerate(ranks):
        c = (rank // tp) % cp
        mine = list(range(c * m, (c + 1) * m)) + list(range((2 * cp - 1 - c) * m, (2 * cp - c) * m))
        layer = L // pp * (rank // (tp * cp))  # the stage's first layer
        steps = _attn(nodes, FWD, f"fwd.l{layer}.mb0")
        assert sum(_flops(n) for n in steps) == 2 * b * (HEADS // tp) * _pairs(mine) * 2 * D
        (kv,) = [n for n in nodes if n.attrs.get("label") == f"fwd.l{layer}.mb0.kv_write"]
        assert f"[2, {b}, {KV // tp}, {q}, {D}]" in kv.inputs_shapes
        assert len([n for n in nodes if n.name.startswith("cp_send.")]) == (L // pp) * 2 * (cp - 1)
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(cfg.npus,))
    report = simulate(tmp_path / "p", sys_cfg, net, None, str(tmp_path / "p.groups.json"),
                      plugins=["network_analytical", "workload_generators"])
    assert len(report.ranks) == cfg.npus and report.max_finish_ns > 0
