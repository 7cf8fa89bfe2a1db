"""What Megatron-Core and Transformer Engine run around the routed experts, as options of ``astra workload llm``
(issue 36): ``--moe-dispatcher alltoall`` (the alltoall token dispatcher's counts, host synchronisation and fused
permutes), ``--moe-grouped-gemm cublas-streams`` (one cuBLAS GEMM per local expert) and ``--recompute-modules
layernorm,moe_act`` (Megatron's output-discarding recompute). Each is checked on a small hand-computed case;
the defaults leave the trace as it was."""

from __future__ import annotations

import pytest

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims

# 8 experts over EP 2 (4 local), top-2, 128 tokens: 256 token copies sent and received per rank, 64 per expert
MOE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, experts=8, top_k=2, moe_ffn=512, gated=True)
H, N, R, E = 256, 128, 256, 8


def _layer(folder, phase, rank=0, layer=0):
    """[(label suffix, node)] of ``phase`` ("fwd"/"bwd") of ``layer``, micro-batch 0, in trace order."""
    out = []
    for n in read_rank_nodes(folder, rank):
        label = n.attrs.get("label") or n.name
        for prefix in (f"{phase}.l{layer}.mb0.", f"ep_a2a.{phase}.l{layer}.mb0."):
            if label.startswith(prefix):
                out.append((("a2a:" if prefix.startswith("ep_a2a") else "") + label[len(prefix):], n))
    return out


def _names(items):
    return [name for name, _ in items]


def test_the_defaults_emit_no_dispatcher_kernels(tmp_path):
    dims = model_dims(**MOE)
    generate_llm(dims, LlmConfig(dp=2, ep=2), tmp_path / "a")
    generate_llm(dims, LlmConfig(dp=2, ep=2, moe_dispatcher="exchange", moe_grouped_gemm="grouped"), tmp_path / "b")
    assert [n.name for n in read_rank_nodes(tmp_path / "a", 0)] == [n.name for n in read_rank_nodes(tmp_path / "b", 0)]
    assert not any("permute" in _ for _ in _names(_layer(tmp_path / "a", "fwd")))
    assert not any(n.attrs.get("host_waits") for n in read_rank_nodes(tmp_path / "a", 0))


def test_alltoall_dispatcher_forward_by_hand(tmp_path):
    """Forward of one MoE layer: the count reads the 128 x 8 boolean routing map (1,024 B); its all-gather over EP
    carries the 8 int64 counts (64 B per rank) and makes the host wait; the permute reads 128 x 256 and writes
    256 x 256 bf16 (196,608 B); with 4 local experts the chunk sort reads and writes 256 x 256 (262,144 B) after
    the dispatch and again (unsort) before the combine; the probabilities' all-to-all is 256 copies x 2 B (bf16:
    no --moe-router-dtype, so Megatron's router runs in the input's dtype); the
    unpermute reads 256 x 256 and writes 128 x 256 (196,608 B)."""
    generate_llm(model_dims(**MOE), LlmConfig(dp=2, ep=2, moe_dispatcher="alltoall"), tmp_path / "w")
    items = _layer(tmp_path / "w", "fwd")
    names = _names(items)
    order = ["router", "router.softmax", "dispatch.counts", "dispatch.counts_ag", "dispatch.permute",
             "a2a:dispatch", "a2a:dispatch.probs", "dispatch.sort", "experts.fc1", "experts.fc1.silu",
             "experts.fc1.mul", "experts.fc2", "combine.unsort", "a2a:combine", "combine.unpermute"]
    assert [x for x in names if x in order] == order
    node = dict(items)
    assert node["dispatch.counts"].attrs["tensor_size"] == N * E
    ag = node["dispatch.counts_ag"]
    assert ag.type == T.COMM_COLL_NODE and ag.attrs["comm_type"] == T.ALL_GATHER
    assert ag.attrs["comm_size"] == E * 8 and ag.attrs["host_waits"] is True
    assert not node["dispatch.counts"].attrs.get("host_waits")  # (EP > 1: the gather is the sync point)
    assert node["dispatch.permute"].attrs["tensor_size"] == (R + N) * H * 2 == 196_608
    assert node["dispatch.sort"].attrs["tensor_size"] == node["combine.unsort"].attrs["tensor_size"] == 2 * R * H * 2
    assert node["combine.unpermute"].attrs["tensor_size"] == 196_608
    assert node["a2a:dispatch.probs"].attrs["comm_size"] == R * 2 == 512
    assert node["a2a:dispatch"].attrs["comm_size"] == R * H * 2  # the tokens' exchange as before


def test_alltoall_dispatcher_backward_by_hand(tmp_path):
    """Backward: the unpermute's backward (a permute of the gradient, 196,608 B), the combine's all-to-all, the
    unsort's backward, the experts, the sort's backward, the dispatch's two all-to-alls, the permute's backward;
    no host synchronisation (the splits are on the host already)."""
    generate_llm(model_dims(**MOE), LlmConfig(dp=2, ep=2, moe_dispatcher="alltoall"), tmp_path / "w")
    items = _layer(tmp_path / "w", "bwd")
    names = _names(items)
    order = ["combine.unpermute.bwd", "a2a:combine", "combine.unsort.bwd", "experts.fc2.dgrad",
             "experts.fc1.wgrad", "dispatch.sort.bwd", "a2a:dispatch", "a2a:dispatch.probs",
             "dispatch.permute.bwd", "router.dgrad"]
    assert [x for x in names if x in order] == order
    node = dict(items)
    assert node["combine.unpermute.bwd"].attrs["tensor_size"] == node["dispatch.permute.bwd"].attrs["tensor_size"] \
        == (R + N) * H * 2
    assert not any(n.attrs.get("host_waits") for _, n in items)


def test_one_ep_rank_syncs_on_the_count_and_one_local_expert_sorts_nothing(tmp_path):
    """EP 1: no count all-gather; the sync point is "before_finish", so the count itself makes the host wait.
    8 experts over EP 8: one local expert, no chunk sort."""
    dims = model_dims(**MOE)
    generate_llm(dims, LlmConfig(dp=1, ep=1, moe_dispatcher="alltoall"), tmp_path / "one")
    node = dict(_layer(tmp_path / "one", "fwd"))
    assert "dispatch.counts_ag" not in node and node["dispatch.counts"].attrs["host_waits"] is True
    assert "a2a:dispatch.probs" not in node  # (no exchange at EP 1)
    generate_llm(dims, LlmConfig(dp=8, ep=8, moe_dispatcher="alltoall"), tmp_path / "eight")
    names = _names(_layer(tmp_path / "eight", "fwd")) + _names(_layer(tmp_path / "eight", "bwd"))
    assert "dispatch.permute" in names and not any("sort" in x for x in names)


def test_cublas_streams_one_gemm_per_local_expert(tmp_path):
    """4 local experts of 64 copies: fc1 forward is 4 GEMMs [64, 256] x [256, 1024], each a plain GEMM (no
    grouped attributes, one expert's weights in tensor_size); a weight gradient splits K: 4 x [256, 64] x [64,
    1024]. The FLOPs add up to the grouped GEMM's."""
    generate_llm(model_dims(**MOE), LlmConfig(dp=2, ep=2, moe_grouped_gemm="cublas-streams"), tmp_path / "w")
    fwd = [n for name, n in _layer(tmp_path / "w", "fwd") if name == "experts.fc1"]
    assert len(fwd) == 4
    for n in fwd:
        assert eval(n.inputs_shapes) == [[64, 256], [256, 1024]] and "grouped_gemm_sizes" not in n.attrs
        assert n.attrs["tensor_size"] == (64 * 256 + 256 * 1024 + 64 * 1024) * 2
    wgrad = [n for name, n in _layer(tmp_path / "w", "bwd") if name == "experts.fc1.wgrad"]
    # (each written into its expert's fp32 main_grad, listed last: one micro-batch, TE's first)
    assert [eval(n.inputs_shapes) for n in wgrad] == [[[256, 64], [64, 1024], [256, 1024]]] * 4
    assert sum(n.attrs["num_ops"] for n in wgrad) == 2 * 256 * 256 * 1024


def test_recompute_modules_by_hand(tmp_path):
    """layernorm: the two norms of each layer (128 x 256) again at the start of its backward; moe_act: the
    experts' SiLU and product on the 256 x 512 received copies after the combine's backward all-to-all."""
    dims = model_dims(**MOE)
    generate_llm(dims, LlmConfig(dp=2, ep=2), tmp_path / "plain")
    generate_llm(dims, LlmConfig(dp=2, ep=2, recompute_modules=("layernorm", "moe_act")), tmp_path / "w")
    plain, items = _names(_layer(tmp_path / "plain", "bwd")), _layer(tmp_path / "w", "bwd")
    names = _names(items)
    extra = [x for x in names if x not in plain]
    assert extra == ["recompute.ln1.ln", "recompute.ln2.ln", "experts.fc1.recompute.silu",
                     "experts.fc1.recompute.mul"]
    node = dict(items)
    assert node["recompute.ln1.ln"].name == "aten::native_layer_norm"
    assert eval(node["experts.fc1.recompute.silu"].inputs_shapes) == [[256, 512]]
    assert names.index("experts.fc1.recompute.mul") < names.index("experts.fc2.dgrad")
    assert names.index("a2a:combine") < names.index("experts.fc1.recompute.silu")
    # only the norms on a dense model; the forward is unchanged
    dense = dict(MOE, experts=None, top_k=None, moe_ffn=None)
    generate_llm(model_dims(**dense), LlmConfig(recompute_modules=("layernorm",)), tmp_path / "d")
    assert [x for x in _names(_layer(tmp_path / "d", "bwd")) if "recompute" in x] == ["recompute.ln1.ln",
                                                                                      "recompute.ln2.ln"]
    assert _names(_layer(tmp_path / "w", "fwd")) == _names(_layer(tmp_path / "plain", "fwd"))


def test_the_flags_on_the_command_line():
    spec = LlmSpec.from_argv(["--preset", "mixtral-8x7b", "--dp", "8", "--ep", "8", "--moe-dispatcher", "alltoall",
                              "--moe-grouped-gemm", "cublas-streams", "--recompute-modules", "layernorm,moe_act"])
    _, cfg = spec.resolve()
    assert (cfg.moe_dispatcher, cfg.moe_grouped_gemm, cfg.recompute_modules) == (
        "alltoall", "cublas-streams", ("layernorm", "moe_act"))
    mapped = LlmSpec.from_mapping({"preset": "mixtral-8x7b", "recompute-modules": ["layernorm", "moe_act"],
                                   "moe_dispatcher": "alltoall"})  # (a sweep's llm: block)
    assert mapped.recompute_modules == "layernorm,moe_act" and mapped.moe_dispatcher == "alltoall"
    _, cfg = LlmSpec(preset="mixtral-8x7b").resolve()
    assert (cfg.moe_dispatcher, cfg.moe_grouped_gemm, cfg.recompute_modules) == ("exchange", "grouped", ())


@pytest.mark.parametrize("argv, match", [
    (["--preset", "llama3-8b", "--moe-dispatcher", "alltoall"], "mixture-of-experts"),
    (["--preset", "llama3-8b", "--moe-grouped-gemm", "cublas-streams"], "mixture-of-experts"),
    (["--preset", "llama3-8b", "--recompute-modules", "moe_act"], "mixture-of-experts"),
    (["--preset", "mixtral-8x7b", "--recompute-modules", "core_attn"], "not one of"),
    (["--preset", "mixtral-8x7b", "--recompute-modules", "layernorm", "--recompute", "full"], "full"),
    (["--preset", "mixtral-8x7b", "--recompute-modules", "layernorm", "--mode", "prefill"], "training"),
    (["--preset", "mixtral-8x7b", "--moe-dispatcher", "alltoall", "--moe-capacity-factor", "1.0"], "dropless"),
])
def test_bad_combinations_are_errors(argv, match):
    with pytest.raises(ConfigError, match=match):
        LlmSpec.from_argv(argv).resolve()


def test_router_dtype_sets_the_probabilities_bytes(tmp_path):
    """--moe-router-dtype (Megatron's moe_router_dtype; TopKRouter.gating at Megatron-LM 2a75ac12): the router's
    logits and probabilities in fp32 (4 B) or fp64 (8 B); without it in --dtype (bf16: 2 B, fp16 too). The
    probabilities' all-to-all: 256 copies x those bytes, forward and backward; the router's softmax on its
    128 x 8 logits reads and writes them in that dtype (128 x 8 x 2 x 4 = 8,192 B in fp32)."""
    dims = model_dims(**MOE)
    for router, dtype, nbytes in ((None, "bf16", 2), ("fp32", "bf16", 4), ("fp64", "bf16", 8), (None, "fp32", 4)):
        folder = tmp_path / f"{router}-{dtype}"
        generate_llm(dims, LlmConfig(dp=2, ep=2, moe_dispatcher="alltoall", moe_router_dtype=router, dtype=dtype),
                     folder)
        fwd, bwd = dict(_layer(folder, "fwd")), dict(_layer(folder, "bwd"))
        assert fwd["a2a:dispatch.probs"].attrs["comm_size"] == bwd["a2a:dispatch.probs"].attrs["comm_size"] \
            == R * nbytes
        assert fwd["router.softmax"].attrs["tensor_size"] == 2 * N * E * nbytes
    assert LlmSpec.from_mapping({"preset": None, **MOE, "dp": 2, "ep": 2,
                                 "moe_router_dtype": "fp32"}).resolve()[1].moe_router_dtype == "fp32"


def test_router_dtype_is_checked():
    with pytest.raises(ConfigError, match="moe-router-dtype must be one of"):
        generate_llm(model_dims(**MOE), LlmConfig(dp=2, ep=2, moe_router_dtype="bf16"), "unused")
    dense = {k: v for k, v in MOE.items() if k not in ("experts", "top_k", "moe_ffn")}
    with pytest.raises(ConfigError, match="needs a mixture-of-experts model"):
        generate_llm(model_dims(**dense), LlmConfig(moe_router_dtype="fp32"), "unused")
