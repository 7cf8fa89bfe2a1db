"""The default rotary embedding (``rope_kernel``) follows the model and the framework, by hand: a rotary model
(``ModelDims.rotary``, from its Hugging Face config or preset) gets Transformer Engine's fused RoPE in a Megatron
training step and vLLM's in-place ``rotary_embedding`` in an inference step; GPT-2/3, dimensions given without a
model, MLA and DeepSpeed get none; ``--rope`` still overrides."""

from __future__ import annotations

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.config import rope_kernel
from astra_workload_generators.llm.hf import load_hf_config

# head_dim 256 / 8 = 32; one sequence of 128 tokens: q is 1 x 128 x 8 x 32 = 32,768 elements, k (4 KV heads) 16,384
LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
Q, K = 128 * 8 * 32, 128 * 4 * 32


def _dims(rotary=True, **kw):
    return model_dims(**{**LLAMA, "rotary": rotary, **kw})


def _labelled(prefix, part):
    return [n for n in read_rank_nodes(prefix, 0) if part in (n.attrs.get("label") or "")]


def test_which_shipped_models_are_rotary():
    rotary = {m: model_dims(base=load_hf_config(m)[0]).rotary
              for m in ("gpt2", "gpt3-175b", "llama3-8b", "llama2-70b", "qwen3-30b-a3b", "mixtral-8x7b",
                        "gpt-oss-20b", "gpt-neox-20b", "deepseek-moe-16b", "deepseek-v3")}
    assert rotary == {"gpt2": False, "gpt3-175b": False, "llama3-8b": True, "llama2-70b": True,
                      "qwen3-30b-a3b": True, "mixtral-8x7b": True, "gpt-oss-20b": True, "gpt-neox-20b": True,
                      "deepseek-moe-16b": True, "deepseek-v3": False}  # (DeepSeek-V3: MLA's own rope_dim)
    assert model_dims("llama3-8b").rotary and not model_dims("gpt3-13b").rotary
    assert not model_dims(**LLAMA).rotary  # bare dimensions: Megatron-LM's learned_absolute default


def test_default_by_framework_and_model():
    assert rope_kernel(LlmConfig(dp=2), _dims()) == "fused"  # Megatron training: apply_rope_fusion
    assert rope_kernel(LlmConfig(dp=2), _dims(rotary=False)) == "none"  # GPT: learned positions
    assert rope_kernel(LlmConfig(dp=2), None) == "none"
    assert rope_kernel(LlmConfig(dp=2, zero=2), _dims()) == "none"  # DeepSpeed: HF's eager RoPE not modelled
    assert rope_kernel(LlmConfig(dp=2, zero=3, framework="fsdp2"), _dims(rotary=False)) == "eager"  # as before
    assert rope_kernel(LlmConfig(mode="prefill"), _dims()) == "fused"  # vLLM's rotary_embedding
    assert rope_kernel(LlmConfig(mode="prefill", elementwise=False), _dims()) == "none"
    assert rope_kernel(LlmConfig(dp=2, rope="none"), _dims()) == "none"  # --rope none still wins
    assert rope_kernel(LlmConfig(dp=2, rope="eager"), _dims()) == "eager"


def test_megatron_training_default_is_one_fused_kernel_per_tensor_each_way(tmp_path):
    # forward: read the bf16 tensor (2 B) and the fp32 (1, 128, 1, 32) frequencies (16,384 B), write it (2 B)
    generate_llm(_dims(), LlmConfig(dp=2, micro_batches=1), tmp_path / "m")
    fwd = _labelled(tmp_path / "m", "fwd.l0.mb0.rope.")
    assert [(n.name, n.attrs["tensor_size"]) for n in fwd] == [("aten::mul", Q * 4 + 16384),
                                                               ("aten::mul", K * 4 + 16384)]
    assert len(_labelled(tmp_path / "m", "bwd.l0.mb0.rope.")) == 2
    generate_llm(_dims(rotary=False), LlmConfig(dp=2, micro_batches=1), tmp_path / "g")
    assert not _labelled(tmp_path / "g", ".rope.")


def test_inference_default_is_one_in_place_kernel_on_q_and_k(tmp_path):
    # prefill of one 128-token prompt, fp16: read q (65,536 B) and k (32,768 B), the 128 int64 positions (1,024 B)
    # and 128 cache rows of 32 fp16 (8,192 B); write q and k back (98,304 B): 205,824 B, one node per layer
    generate_llm(_dims(), LlmConfig(mode="prefill", micro_batch_size=1, dtype="fp16"), tmp_path / "p")
    rope = _labelled(tmp_path / "p", ".rope.")
    assert len(rope) == 2  # one per layer
    assert {(n.name, n.attrs["tensor_size"]) for n in rope} == {("aten::mul_", 65536 + 32768 + 1024 + 8192 + 98304)}
