"""Transformer Engine writes FP8 transposes only where the GPU's FP8 GEMMs need them (TE v2.7
``is_non_tn_fp8_gemm_supported``: compute capability 10.x/11.x or >= 13.0 take any layout): with each cast on Hopper,
plus each ``--fp8-params`` weight's once a step; none on Blackwell. The generator learns the GPU from the platform
the step is generated for (``LlmSpec.platform`` -> ``cfg.fp8_transpose``); without one it keeps its earlier step."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes
from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims
from astra_workload_generators.llm.fp8 import fp8_transpose_for, non_tn_fp8_gemm

#: one layer, hidden 256, 8 heads of 32 with 4 KV heads (QKV 256 x 512), SwiGLU FFN 512 (FC1 256 x 1024); one
#: micro-batch of 128 tokens
LLAMA = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
#: the four weights' elements: QKV 512 x 256 + projection 256 x 256 + FC1 1024 x 256 + FC2 256 x 512
WEIGHT_ELEMENTS = 131_072 + 65_536 + 262_144 + 131_072  # = 589,824


def _te_nodes(tmp_path, name, **kw):
    cfg = dict(dp=2, micro_batches=1, zero=1, gemm_dtype="fp8")
    cfg.update(kw)
    generate_llm(model_dims(**LLAMA), LlmConfig(**cfg), tmp_path / name)
    return {n.attrs["label"]: n for n in read_rank_nodes(tmp_path / name, 0)
            if n.name.startswith("transformer_engine::") and "amax" not in n.name and ".l0." in n.attrs["label"]}


def _bytes(nodes):
    return sum(n.attrs["tensor_size"] for n in nodes.values())


def test_one_layers_fp8_bytes_on_hopper_and_blackwell(tmp_path):
    # (TE's fused activation, --te-op-fuser: its SwiGLU writes FC2's FP8 input and FC1's FP8 output gradient;
    # Megatron-Core's own activation and TE's separate casts: test_llm_smalldense_mlp_casts.py)
    hopper = _te_nodes(tmp_path, "hopper", fp8_transpose=True, te_op_fuser=True)
    blackwell = _te_nodes(tmp_path, "blackwell", fp8_transpose=False, te_op_fuser=True)
    # Delayed scaling, bf16 weights, n = 128 tokens. Hopper: every cast reads 2 B and writes the FP8 copy and its
    # transpose (1 + 1 B): the four weights 589,824 x 4 = 2,359,296; the projection's input 128 x 256 x 4 = 131,072;
    # the backward's output-gradient casts fc2 and proj 128 x 256 x 4 = 131,072 each, QKV 128 x 512 x 4 = 262,144;
    # the transposes of the LayerNorm/SwiGLU outputs cast inside those kernels (read 1, write 1 B) for the wgrad
    # GEMMs: FC2's input 128 x 512 x 2 = 131,072, FC1's and QKV's 128 x 256 x 2 = 65,536 each.
    assert _bytes(hopper) == 2_359_296 + 131_072 + 131_072 + 131_072 + 262_144 + 131_072 + 65_536 + 65_536 == 3_276_800
    # Blackwell: no transposes; each cast writes the FP8 copy only (2 + 1 B) over the same 589,824 + 163,840
    # elements (163,840 = 32,768 x 3 + 65,536): 753,664 x 3
    assert _bytes(blackwell) == (WEIGHT_ELEMENTS + 163_840) * 3 == 2_260_992
    assert not any(n.name == "transformer_engine::fp8_transpose" for n in blackwell.values())
    assert blackwell["bwd.l0.mb0.qkv.dgrad.fp8_cast"].name == "transformer_engine::quantize"
    assert blackwell["bwd.l0.mb0.qkv.dgrad.fp8_cast"].attrs["tensor_size"] == 128 * 512 * 3 == 196_608


def test_current_scaling_on_blackwell_reads_twice_and_writes_once(tmp_path):
    hopper = _te_nodes(tmp_path, "hopper", fp8_transpose=True, fp8_recipe="current")
    blackwell = _te_nodes(tmp_path, "blackwell", fp8_transpose=False, fp8_recipe="current")
    # FC2's input (the SwiGLU output, 128 x 512): amax read + cast read (2 x 2 B), then 1 + 1 B (Hopper) or 1 B
    assert hopper["fwd.l0.mb0.fc2.fp8_cast"].attrs["tensor_size"] == 128 * 512 * 6 == 393_216
    assert blackwell["fwd.l0.mb0.fc2.fp8_cast"].attrs["tensor_size"] == 128 * 512 * 5 == 327_680


def test_fp8_weights_transposed_once_a_step_on_hopper_only(tmp_path):
    kw = dict(fp8_recipe="current", fp8_params=True, micro_batches=2)
    hopper = _te_nodes(tmp_path, "hopper", fp8_transpose=True, **kw)
    weights = {k: n for k, n in hopper.items() if ".weight." in k}
    # each FP8 weight's transpose before micro-batch 0's GEMM only (the optimizer's cast reset it): read 1, write 1 B
    assert sorted(weights) == sorted(f"fwd.l0.mb0.{w}.weight.fp8_transpose" for w in ("qkv", "proj", "fc1", "fc2"))
    assert all(n.name == "transformer_engine::fp8_transpose" for n in weights.values())
    assert _bytes(weights) == WEIGHT_ELEMENTS * 2 == 1_179_648
    assert weights["fwd.l0.mb0.fc1.weight.fp8_transpose"].attrs["tensor_size"] == 1024 * 256 * 2
    for name, extra in (("blackwell", dict(fp8_transpose=False)), ("unknown", {}),
                        ("lora", dict(fp8_transpose=True, lora_rank=4, lora_targets=("qkv",)))):
        # Blackwell keeps no transpose; no platform: as before; LoRA's frozen FP8 base: no optimizer step resets it
        assert not any(".weight." in k for k in _te_nodes(tmp_path, name, **kw, **extra)), name


def test_without_a_platform_the_step_keeps_hoppers_casts(tmp_path):
    unknown = _te_nodes(tmp_path, "unknown")
    hopper = _te_nodes(tmp_path, "hopper", fp8_transpose=True)
    assert {k: (n.name, n.attrs["tensor_size"]) for k, n in unknown.items()} == \
        {k: (n.name, n.attrs["tensor_size"]) for k, n in hopper.items()}


def test_the_platform_says_where_te_writes_transposes():
    # TE v2.7: (10, 0) <= capability < (12, 0) or capability >= (13, 0) take non-TN FP8 GEMMs
    assert [non_tn_fp8_gemm(c) for c in ((8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (13, 0))] == \
        [False, False, True, True, False, True]
    assert fp8_transpose_for("hgx-h200") is True       # H200: compute capability 9.0
    assert fp8_transpose_for("hgx-b200") is False      # B200: 10.0
    assert fp8_transpose_for("gb300-nvl72") is False   # B300: 10.3
    assert fp8_transpose_for("mi355x") is None         # AMD: no compute capability stated
    assert fp8_transpose_for(None) is None
    base = LlmSpec(preset="llama3-8b", gemm_dtype="fp8")
    assert base.resolve()[1].fp8_transpose is None
    assert base.replace(platform="hgx-b200").resolve()[1].fp8_transpose is False
    assert LlmSpec.from_argv(["--preset", "llama3-8b", "--platform", "hgx-h100"]).resolve()[1].fp8_transpose is True
    with pytest.raises(ConfigError, match="unknown --platform"):
        base.replace(platform="no-such-machine").resolve()


@pytest.mark.parametrize("fp8_params", [False, True])
def test_the_memory_estimate_keeps_a_weights_fp8_transpose_on_hopper_only(fp8_params):
    from astra_workload_generators.llm import peak_memory

    dims = model_dims(**LLAMA)

    def weights(transpose):
        cfg = LlmConfig(dp=2, micro_batches=1, zero=1, gemm_dtype="fp8", fp8_params=fp8_params,
                        fp8_transpose=transpose)
        return peak_memory(dims, cfg).weights

    # Hopper (and no platform) caches each linear weight's FP8 copy and its transpose (1 + 1 B an element);
    # Blackwell the copy only: 589,824 bytes less, one per linear weight element
    assert weights(True) == weights(None) == weights(False) + WEIGHT_ELEMENTS


def test_astra_run_warns_when_the_fp8_step_was_generated_for_another_gpu(tmp_path):
    """The trace says which layout its FP8 casts were written for; a run on a platform whose GPU wants the other
    one warns (the same step through `astra validate` or a sweep is generated for the platform)."""
    from astra_sim import simulate
    from astra_sim.chakra import read_metadata
    from astra_workload_compact import read_compact_workload
    from astra_workload_generators.llm import generate_llm_workload

    warnings = {}
    for name, platform in (("plain", None), ("blackwell", "hgx-b200")):
        spec = LlmSpec(layers=1, hidden=256, heads=8, ffn_hidden=512, vocab=1000, seq_len=128, tp=1, dp=8,
                       micro_batches=1, gemm_dtype="fp8", platform=platform)
        prefix = str(tmp_path / name)
        generate_llm_workload(spec, prefix, on_warning=lambda line: None)
        trace = read_compact_workload(prefix).traces[0]
        assert read_metadata(trace)["te_fp8_transposes"] is (platform is None)
        for run_on in ("hgx-h100", "hgx-b200"):
            seen = []
            simulate(workload=prefix, platform=run_on, nodes=1, on_warning=seen.append)
            warnings[name, run_on] = [w for w in seen if "FP8 transposes" in w]
    assert not warnings["plain", "hgx-h100"] and not warnings["blackwell", "hgx-b200"]
    assert "astra workload llm --platform hgx-b200" in warnings["plain", "hgx-b200"][0]
    assert "generated without" in warnings["blackwell", "hgx-h100"][0]
