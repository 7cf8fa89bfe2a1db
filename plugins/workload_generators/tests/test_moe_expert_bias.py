"""GPT-OSS's expert fc2 biases as Megatron-Core adds them in training (issue 36): ``TEGroupedMLP`` builds
``linear_fc2`` with ``skip_bias_add=True`` and adds the bias per local expert outside the grouped GEMM
(``_apply_bias``: ``torch.cat([t + b * p for each expert's rows])``; NVIDIA/Megatron-LM 2a75ac12,
``megatron/core/transformer/moe/experts.py``). Checked on a small hand-computed case."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.hf import load_hf_config

# 8 experts over EP 2 (4 local), top-2, 128 tokens: 256 token copies per rank, 64 rows per local expert
MOE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, experts=8, top_k=2, moe_ffn=512, gated=True)
H, ROWS, GROUPS = 256, 64, 4


def test_gpt_oss_config_has_expert_biases_and_mixtral_has_not():
    assert load_hf_config("gpt-oss-120b")[0]["expert_bias"] is True
    assert "expert_bias" not in load_hf_config("mixtral-8x7b")[0]


def test_no_bias_nodes_without_expert_biases(tmp_path, layer_nodes):
    generate_llm(model_dims(**MOE), LlmConfig(dp=2, ep=2), tmp_path / "w")
    assert not any(".bias" in name for name, _ in
                   layer_nodes(tmp_path / "w", "fwd") + layer_nodes(tmp_path / "w", "bwd"))


def test_forward_adds_the_bias_per_expert_after_fc2(tmp_path, layer_nodes, gpu_bytes):
    """Per local expert: b * p ([256] x [64, 1] -> [64, 256] bf16: reads 512 + 128 B, writes 32,768 B) and
    t + b*p (reads 2 x 32,768, writes 32,768 B); then the cat of the four [64, 256] pieces (reads and writes
    131,072 B). All after fc2's GEMMs and before the combine."""
    generate_llm(model_dims(**MOE, expert_bias=True), LlmConfig(dp=2, ep=2), tmp_path / "w")
    items = layer_nodes(tmp_path / "w", "fwd")
    names = [name for name, _ in items]
    bias = [i for i, name in enumerate(names) if ".bias" in name]
    assert [names[i] for i in bias] == ["experts.fc2.bias.scale", "experts.fc2.bias.add"] * GROUPS + [
        "experts.fc2.bias.cat"]
    assert names.index("experts.fc2") < bias[0]
    nodes = [items[i][1] for i in bias]
    assert nodes[0].name == "aten::mul" and nodes[0].attrs["tensor_size"] == 2 * (H + ROWS + ROWS * H)
    assert nodes[1].name == "aten::add" and nodes[1].attrs["tensor_size"] == 3 * ROWS * H * 2
    cat = nodes[-1]
    assert cat.name == "aten::cat" and cat.attrs["tensor_size"] == 2 * GROUPS * ROWS * H * 2 == 262144
    assert [gpu_bytes(n) for n in nodes[:2]] == [2 * (H + ROWS + ROWS * H), 3 * ROWS * H * 2]
    assert gpu_bytes(cat) == 262144


def test_backward_takes_both_gradients_of_b_times_p(tmp_path, layer_nodes, gpu_bytes):
    """Per expert: grad * p and its sum over the rows (the bias gradient), grad * b and its sum over h (the
    probability's); then the split's backward (cat of the 256 x 256 gradient: 262,144 B), the cat of the four
    [64, 1] probability gradients (1,024 B) and their sum with the activation's gradient of the same
    probabilities ([256, 1] + [256, 1]: 1,536 B); all before fc2's input gradient."""
    generate_llm(model_dims(**MOE, expert_bias=True), LlmConfig(dp=2, ep=2), tmp_path / "w")
    items = layer_nodes(tmp_path / "w", "bwd")
    names = [name for name, _ in items]
    bias = [i for i, name in enumerate(names) if ".bias" in name]
    per_expert = ["experts.fc2.bias.dbias.mul", "experts.fc2.bias.dbias.sum", "experts.fc2.bias.dprob.mul",
                  "experts.fc2.bias.dprob.sum"]
    assert [names[i] for i in bias] == per_expert * GROUPS + [
        "experts.fc2.bias.split.bwd", "experts.fc2.bias.dprob.cat", "experts.fc2.bias.dprob.accumulate"]
    assert bias[-1] < names.index("experts.fc2.dgrad")
    node = {names[i]: items[i][1] for i in bias}
    assert node["experts.fc2.bias.dbias.sum"].name == "aten::sum"
    assert node["experts.fc2.bias.dbias.sum"].attrs["tensor_size"] == ROWS * H * 2
    assert gpu_bytes(node["experts.fc2.bias.dbias.sum"]) == ROWS * H * 2
    assert node["experts.fc2.bias.split.bwd"].attrs["tensor_size"] == 262144
    assert node["experts.fc2.bias.dprob.cat"].attrs["tensor_size"] == 2 * GROUPS * ROWS * 2
    assert node["experts.fc2.bias.dprob.accumulate"].attrs["tensor_size"] == 3 * GROUPS * ROWS * 2


def test_inference_emits_no_bias_nodes(tmp_path):
    generate_llm(model_dims(**MOE, expert_bias=True), LlmConfig(dp=2, ep=2, mode="prefill", prompt_len=64), tmp_path / "w")
    assert not any(".bias" in (n.attrs.get("label") or "") for n in read_rank_nodes(tmp_path / "w", 0))
