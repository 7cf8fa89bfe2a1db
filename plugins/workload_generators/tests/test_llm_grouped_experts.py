"""The routed experts' GEMMs are grouped GEMMs: ``grouped_gemm_dim``/``grouped_gemm_sizes`` carry the token copies
of each local expert (balanced, a straggler's, or per-expert loads), ``tensor_size`` every active expert's
weights, and the gpu compute model times them from those groups (issue 24)."""

from __future__ import annotations

import math

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.routing import expert_copies, parse_expert_load, split_evenly

MOE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, experts=8, top_k=2, moe_ffn=512, gated=True)
EXPERT_GEMMS = ("experts.fc1", "experts.fc2", "experts.fc2.dgrad", "experts.fc2.wgrad", "experts.fc1.dgrad",
                "experts.fc1.wgrad")


def _experts(folder, rank=0, layer=0):
    """{GEMM name: node} of the routed experts of ``layer`` (micro-batch 0) on ``rank``."""
    out = {}
    for n in read_rank_nodes(folder, rank):
        label = n.attrs.get("label", "")
        for phase in ("fwd", "bwd"):
            prefix = f"{phase}.l{layer}.mb0."
            if label.startswith(prefix) and label[len(prefix):] in EXPERT_GEMMS and n.name == "aten::mm":
                out[label[len(prefix):]] = n
    return out


def _shape(node):
    shapes = eval(node.inputs_shapes)
    (m, k), (_, n) = shapes[1:3] if node.name == "aten::addmm" else shapes[:2]  # (addmm: C, then the operands)
    return m, k, n


def test_split_evenly():
    assert split_evenly(10, 4) == (3, 3, 2, 2)
    assert split_evenly(8, 128) == (1,) * 8 + (0,) * 120
    assert split_evenly(0, 3) == (0, 0, 0)


def test_balanced_training_groups_by_hand(tmp_path):
    """8 experts over EP 2: 4 local experts; 128 tokens x top-2 = 256 copies, 64 per expert. Forward and input
    gradients split M, weight gradients split K; the weights of all 4 experts count in tensor_size."""
    dims = model_dims(**MOE)
    generate_llm(dims, LlmConfig(dp=2, ep=2), tmp_path / "w")
    nodes = _experts(tmp_path / "w")
    assert sorted(nodes) == sorted(EXPERT_GEMMS)
    for name, node in nodes.items():
        m, k, n = _shape(node)
        dim = "k" if name.endswith("wgrad") else "m"
        assert node.attrs["grouped_gemm_dim"] == dim and node.attrs["grouped_gemm_sizes"] == [64] * 4, name
        if dim == "m":
            assert m == 256 and node.attrs["tensor_size"] == (m * k + 4 * k * n + m * n) * 2, name
        else:
            # (one micro-batch: each expert's weight gradient written into its fp32 main_grad, 4 B an element)
            assert k == 256 and node.attrs["tensor_size"] == (m * k + k * n) * 2 + 4 * m * n * 4, name
        assert node.attrs["num_ops"] == 2 * m * k * n  # FLOPs unchanged
    assert _shape(nodes["experts.fc1"]) == (256, 256, 2 * 512)
    assert _shape(nodes["experts.fc1.wgrad"]) == (256, 256, 2 * 512)


def test_decode_tokens_land_on_few_experts(tmp_path):
    """Qwen3-30B-A3B's experts (hidden 2048, 128 experts of 768, top-8) decoding one sequence: 8 token copies,
    so 8 experts with one token each and 120 idle; the GEMM reads 8 experts' weights, not 1 (nor 128)."""
    dims = model_dims(**dict(MOE, layers=1, hidden=2048, heads=32, experts=128, top_k=8, moe_ffn=768))
    generate_llm(dims, LlmConfig(mode="decode", micro_batch_size=1, prompt_len=64, decode_len=2), tmp_path / "d")
    fc1 = _experts(tmp_path / "d")["experts.fc1"]
    m, k, n = _shape(fc1)
    assert fc1.attrs["grouped_gemm_sizes"] == [1] * 8 + [0] * 120 and m == 8
    assert fc1.attrs["tensor_size"] == (m * k + 8 * k * n + m * n) * 2
    gpu_model = pytest.importorskip("astra_gpu_model.model")
    model = gpu_model.GpuComputeModel(None, "H100")
    grouped_ns = model.compute_time_ns(fc1, 0)
    fc1.attrs.pop("grouped_gemm_dim"), fc1.attrs.pop("grouped_gemm_sizes")
    one_gemm_ns = model.compute_time_ns(fc1, 0)
    weights_ns = 8 * k * n * 2 / (model.gpu.gemm.hbm_efficiency * model.gpu.hbm_bytes_per_s) * 1e9
    launch_ns = model.gpu.gemm.launch_us * 1e3
    assert grouped_ns > weights_ns and grouped_ns - launch_ns > 4 * (one_gemm_ns - launch_ns)


def test_expert_loads_give_each_rank_its_experts_counts(tmp_path):
    """--moe-expert-load zipf:1.2 over EP 4: each EP rank's 2 experts compute EP x the copies every rank sends
    them (experts in order: EP rank 0 holds the two hottest)."""
    dims = model_dims(**MOE)
    cfg = LlmConfig(dp=4, ep=4, moe_expert_load=parse_expert_load("zipf:1.2", 8, dims.moe_layers))
    generate_llm(dims, cfg, tmp_path / "z")
    tokens = dims.seq_len
    copies = expert_copies(dims, cfg, tokens, 0)
    assert sum(copies) == tokens * 2 and copies[0] > copies[-1]
    seen = set()
    for rank in range(4):
        fc1 = _experts(tmp_path / "z", rank)["experts.fc1"]
        sizes = tuple(fc1.attrs["grouped_gemm_sizes"])
        assert sum(sizes) == _shape(fc1)[0]
        seen.add(sizes)
    assert seen == {tuple(4 * c for c in copies[2 * j:2 * j + 2]) for j in range(4)}


def test_imbalance_and_capacity_split_the_busiest_ranks_rows_evenly(tmp_path):
    dims = model_dims(**MOE)
    generate_llm(dims, LlmConfig(dp=2, ep=2, moe_imbalance=1.5), tmp_path / "i")
    fc1 = _experts(tmp_path / "i")["experts.fc1"]
    rows = math.ceil(128 * 2 * 1.5)
    assert fc1.attrs["grouped_gemm_sizes"] == list(split_evenly(rows, 4)) and _shape(fc1)[0] == rows
    generate_llm(dims, LlmConfig(dp=2, ep=2, moe_capacity_factor=1.5, moe_pad_to_capacity=True), tmp_path / "c")
    fc1 = _experts(tmp_path / "c")["experts.fc1"]
    capacity = math.ceil(128 * 2 / 8 * 1.5)  # per expert from each rank's tokens: EP x that per local expert
    assert fc1.attrs["grouped_gemm_sizes"] == [2 * capacity] * 4


def test_one_local_expert_is_a_plain_gemm(tmp_path):
    dims = model_dims(**MOE)
    generate_llm(dims, LlmConfig(dp=8, ep=8), tmp_path / "e")
    for node in _experts(tmp_path / "e").values():
        assert "grouped_gemm_sizes" not in node.attrs and "grouped_gemm_dim" not in node.attrs
