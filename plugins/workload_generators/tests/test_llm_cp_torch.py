"""``astra workload llm --cp N --cp-rotate allgather | alltoall``: context parallelism as PyTorch's experimental
``context_parallel`` runs it (torch/distributed/tensor/experimental/_attention.py; torchtitan's CP). Each term is
checked against numbers computed here by hand from the model's shapes: the K/V all-gather (or permutes) of the
query-head K/V, one SDPA call per step, the fp32 merges, the fp32 dK/dV permutes and the accumulations."""

from __future__ import annotations

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.torch_cp import cp_rotate

ops = pytest.importorskip("astra_gpu_model.ops")

L, H, HEADS, KV, S = 2, 256, 8, 4, 128
D = H // HEADS
DIMS = dict(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=512, vocab=1000, seq_len=S, gated=True)
FWD, BWD = "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward"
TORCH = dict(framework="fsdp2", zero=3, recompute=True)


def _gen(tmp_path, name="t", **cfg):
    cfg = LlmConfig(**cfg)
    generate_llm(model_dims(**DIMS), cfg, tmp_path / name)
    return [read_rank_nodes(tmp_path / name, r) for r in range(cfg.npus)]


def _labelled(nodes, prefix):
    return [n for n in nodes if n.attrs.get("label", "").startswith(prefix)]


def _named(nodes, prefix):
    return [n for n in nodes if n.name.startswith(prefix)]


def _bytes(node):
    return ops.classify(node.name, *ops.node_io(node)).nbytes


def _flops(node):
    return ops.classify(node.name, *ops.node_io(node)).flops


def test_rotate_defaults():
    """torchtitan 9dec370's context_parallel_rotate_method defaults to "allgather"; Megatron's CP is a ring."""
    assert cp_rotate(LlmConfig(cp=2)) == "ring"
    assert cp_rotate(LlmConfig(cp=2, framework="megatron")) == "ring"
    assert cp_rotate(LlmConfig(cp=2, framework="fsdp2")) == "allgather"
    assert cp_rotate(LlmConfig(cp=2, framework="fsdp2", cp_rotate="alltoall")) == "alltoall"
    assert cp_rotate(LlmConfig(cp=2, framework="fsdp2", cp_rotate="ring")) == "ring"


def test_megatron_cp_is_unchanged(tmp_path):
    """The ring (the default without --framework fsdp2) keeps its send/recv ring and one flash call per step, with
    none of the torch path's all-gathers, merges or accumulations."""
    for name, cfg in (("m", dict(cp=2)), ("r", dict(TORCH, cp=2, cp_rotate="ring"))):
        nodes = _gen(tmp_path, name, **cfg)[0]
        assert [n.name for n in _named(nodes, "cp_send.fwd.l0.")] == ["cp_send.fwd.l0.mb0.kv.1"]
        assert not _named(nodes, "cp_kv_ag.") and not _labelled(nodes, "fwd.l0.mb0.attn.cp1.merge")


@pytest.mark.parametrize("b", [1, 2])
def test_allgather_forward(tmp_path, b):
    cp = 2
    q, m = S // cp, S // (2 * cp)
    nodes = _gen(tmp_path, micro_batch_size=b, cp=cp, **TORCH)[0]
    by_id = {n.id: n for n in nodes}
    for tag in ("fwd", "recompute"):
        lab = f"{tag}.l0.mb0.attn"
        # one all-gather per pass of the local K and V, repeated to the query heads (torchtitan's repeat_kv)
        (ag,) = [n for n in nodes if n.name == f"cp_kv_ag.{lab}"]
        assert ag.type == T.COMM_COLL_NODE and ag.attrs["comm_type"] == T.ALL_GATHER
        assert ag.attrs["comm_size"] == b * q * HEADS * 2 * D * 2  # each rank's K and V, bf16
        steps = [n for n in _labelled(nodes, lab + ".cp") if n.name == FWD]
        assert [n.attrs["label"] for n in steps] == [f"{lab}.cp0", f"{lab}.cp1"]
        assert f"[{b}, {HEADS}, {q}, {D}]" in steps[0].inputs_shapes and "True" in steps[0].inputs_values
        # CP index 0's step 1 (i > rank): the second half of its queries against all q keys received
        assert steps[1].inputs_shapes == f"[[{b}, {HEADS}, {m}, {D}], [{b}, {HEADS}, {q}, {D}], [{b}, {HEADS}, {q}, {D}]]"
        assert "False" in steps[1].inputs_values
        assert ag.id in steps[1].data_deps  # step 1 waits for the gather (its first use)
        # the local causal block on the head-tail chunks plus q x m pairs: with the other rank, the whole triangle
        assert sum(_flops(n) for n in steps) == 2 * b * HEADS * (q * (q + 1) // 2 + q * m) * 2 * D
        assert cp * (q * (q + 1) // 2 + q * m) == S * (S + 1) // 2
        # _SDPAMerger: each block output cast to fp32 (2 + 4 bytes an element); step 1 merged in fp32 on the half
        # of the output it computed (partial), then _partial_update's torch.cat of the kept and merged halves
        out, half = b * HEADS * q * D, b * HEADS * m * D
        for j in range(cp):
            (cast,) = _labelled(nodes, f"{lab}.cp{j}.out_to_f32")
            assert _bytes(cast) == (out if j == 0 else half) * 6
        merge = _labelled(nodes, f"{lab}.cp1.merge.")
        assert len(merge) == 10 and not _labelled(nodes, f"{lab}.cp0.merge.")
        big = {n.attrs["label"].rsplit(".", 1)[1]: _bytes(n) for n in merge}
        assert big["out_diff"] == big["out"] == 3 * half * 4  # out - block_out: two fp32 reads, one write
        assert big["scale"] == b * HEADS * m * 4 + 2 * half * 4  # sigmoid (b x h x q/2 x 1) x diff
        assert big["lse_diff"] == 3 * b * HEADS * m * 4
        assert big["out_cat"] == 2 * out * 4 and big["lse_cat"] == 2 * b * HEADS * q * 4  # both halves read, joined
        (back,) = _labelled(nodes, f"{lab}.out_to_dtype")
        assert _bytes(back) == out * 6
        # key/value.contiguous(), and the cat of K and V before every exchange but the last
        assert [_bytes(n) for n in _labelled(nodes, f"{lab}.k_contiguous")] == [b * HEADS * q * D * 4]
        assert [_bytes(n) for n in _labelled(nodes, f"{lab}.kv_cat.")] == [b * HEADS * q * 2 * D * 4]
        assert by_id[ag.data_deps[0]].attrs["label"] == f"{lab}.kv_cat.0"


@pytest.mark.parametrize("cp", [2, 4])
def test_allgather_backward(tmp_path, cp):
    b = 1
    q, m = S // cp, S // (2 * cp)
    nodes = _gen(tmp_path, micro_batch_size=b, cp=cp, **TORCH)[0]
    by_id = {n.id: n for n in nodes}
    lab = "bwd.l0.mb0.attn"
    (ag,) = [n for n in nodes if n.name == f"cp_kv_ag.{lab}.bwd"]  # the K/V gathered again
    assert ag.attrs["comm_size"] == b * q * HEADS * 2 * D * 2
    steps = [n for n in _labelled(nodes, lab + ".cp") if n.name == BWD]
    assert len(steps) == cp
    assert sum(_flops(n) for n in steps) == 2.5 * 2 * b * HEADS * (q * (q + 1) // 2 + (cp - 1) * q * m) * 2 * D
    # dK/dV: CP permutes of the fp32 buffer to c+1, one per step
    sends = _named(nodes, f"cp_send.{lab}.dkv.")
    recvs = _named(nodes, f"cp_recv.{lab}.dkv.")
    assert len(sends) == len(recvs) == cp
    assert {n.attrs["comm_size"] for n in sends + recvs} == {b * q * HEADS * 2 * D * 4}
    # step j >= 1 accumulates into the buffer that came from c-1 (the half chunk, then torch.cat of the chunks)
    for j in range(1, cp):
        acc = _labelled(nodes, f"{lab}.cp{j}.dk_accumulate")[0]
        assert recvs[j - 1].id in acc.data_deps
        assert _bytes(acc) == b * HEADS * m * D * (4 + 2 + 4)  # fp32 += bf16 on half the chunk
        assert _bytes(_labelled(nodes, f"{lab}.cp{j}.dk_cat")[0]) == b * HEADS * q * D * 8
    assert _bytes(_labelled(nodes, f"{lab}.cp0.dk_accumulate")[0]) == b * HEADS * q * D * 10
    assert _bytes(_labelled(nodes, f"{lab}.cp0.dq_accumulate")[0]) == b * HEADS * q * D * 10
    # zeroed fp32 dQ, dK, dV (written once)
    assert _bytes(_labelled(nodes, f"{lab}.dq_zeros")[0]) == b * HEADS * q * D * 4
    (home,) = _labelled(nodes, f"{lab}.dkv_to_dtype")
    assert recvs[-1].id in home.data_deps and _bytes(home) == b * HEADS * q * 2 * D * 6
    assert by_id[sends[0].data_deps[0]].attrs["label"] == f"{lab}.cp0.dkv_cat"


def test_alltoall_rotates_every_step(tmp_path):
    cp, b = 4, 1
    q = S // cp
    nodes = _gen(tmp_path, micro_batch_size=b, cp=cp, cp_rotate="alltoall", **TORCH)[0]
    assert not _named(nodes, "cp_kv_ag.")
    lab = "fwd.l0.mb0.attn"
    sends, recvs = _named(nodes, f"cp_send.{lab}.kv."), _named(nodes, f"cp_recv.{lab}.kv.")
    assert len(sends) == len(recvs) == cp - 1
    assert {n.attrs["comm_size"] for n in sends} == {b * q * HEADS * 2 * D * 2}
    steps = [n for n in _labelled(nodes, lab + ".cp") if n.name == FWD]
    for j in range(1, cp):  # step j computes on the K/V received at step j
        assert recvs[j - 1].id in steps[j].data_deps
    # the backward passes K/V on again, and dK/dV as always
    assert len(_named(nodes, "cp_send.bwd.l0.mb0.attn.bwd.kv.")) == cp - 1
    assert len(_named(nodes, "cp_send.bwd.l0.mb0.attn.dkv.")) == cp


def test_torch_cp_needs_causal_flash(tmp_path):
    dims = model_dims(**DIMS)
    with pytest.raises(ConfigError, match="is_causal"):
        generate_llm(dims, LlmConfig(cp=2, causal=False, **TORCH), tmp_path / "x")
    with pytest.raises(ConfigError, match="--attention flash"):
        generate_llm(dims, LlmConfig(cp=2, attention="unfused", **TORCH), tmp_path / "y")
    with pytest.raises(ConfigError, match="--cp-rotate must be one of"):
        generate_llm(dims, LlmConfig(cp=2, cp_rotate="ring2", **TORCH), tmp_path / "z")
    generate_llm(dims, LlmConfig(cp=2, causal=False, cp_rotate="ring", **TORCH), tmp_path / "ok")


@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_torch_cp_simulates(tmp_path, rotate):
    """Every send finds its receive and every rank finishes (CP 4 x DP 2)."""
    cfg = LlmConfig(cp=4, dp=2, cp_rotate=rotate, **TORCH)
    generate_llm(model_dims(**DIMS), cfg, tmp_path / "w")
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(cfg.npus,))
    report = simulate(tmp_path / "w", sys_cfg, net, None, str(tmp_path / "w.groups.json"),
                      plugins=["network_analytical", "workload_generators"])
    assert len(report.ranks) == cfg.npus and report.max_finish_ns > 0


@pytest.mark.parametrize("cp", [2, 4])
def test_compiled_waits_where_issued_and_fuses(tmp_path, cp):
    """--cp-compile: the gather waited before step 0's SDPA (no overlap), no cat for the steps that send nothing, one
    fused merge per step; in the backward each dK/dV permute waited before the step's dQ accumulation."""
    b = 1
    q, m = S // cp, S // (2 * cp)
    nodes = _gen(tmp_path, micro_batch_size=b, cp=cp, cp_compile=True, **TORCH)[0]
    lab = "fwd.l0.mb0.attn"
    (ag,) = [n for n in nodes if n.name == f"cp_kv_ag.{lab}"]
    steps = [n for n in _labelled(nodes, lab + ".cp") if n.name == FWD]
    assert ag.id in steps[0].data_deps and all(ag.id in n.data_deps for n in steps)
    assert [n.attrs["label"] for n in _labelled(nodes, f"{lab}.kv_cat.")] == [f"{lab}.kv_cat.0"]
    out = b * HEADS * q * D
    for j in range(1, cp):
        fused = _labelled(nodes, f"{lab}.cp{j}.merge.")
        assert [n.attrs["label"].rsplit(".", 1)[1] for n in fused] == ["out", "lse"]
        # CP index 0 (i > rank): read the fp32 output, the bf16 half block and both half LSEs, write the whole fp32
        # output (the merged half and the kept one: _partial_update's cat fused in)
        assert _bytes(fused[0]) == out * 4 + (out // 2) * 2 + 2 * b * HEADS * m * 4 + out * 4
    assert not _labelled(nodes, f"{lab}.cp0.out_to_f32") and not _labelled(nodes, "bwd.l0.mb0.attn.dq_zeros")
    bwd = "bwd.l0.mb0.attn"
    recvs = _named(nodes, f"cp_recv.{bwd}.dkv.")
    kv = b * HEADS * q * 2 * D
    for j in range(cp):
        (dq,) = _labelled(nodes, f"{bwd}.cp{j}.dq_accumulate")
        assert recvs[j].id in dq.data_deps
        (acc,) = _labelled(nodes, f"{bwd}.cp{j}.dkv_accumulate")
        # the received fp32 buffer (none at step 0) plus this step's bf16 dK, dV, written as the fp32 buffer sent
        assert _bytes(acc) == (kv * 6 if j == 0 else kv * 8 + b * HEADS * m * 2 * D * 2)
    with pytest.raises(ConfigError, match="--cp-compile"):
        generate_llm(model_dims(**DIMS), LlmConfig(cp=2, cp_compile=True), tmp_path / "x")
