"""LoRA fine-tuning (``--lora-rank``, ``--lora-targets``): the DP all-reduce carries the adapters only, the memory
estimate's model states are the frozen base in --dtype plus the adapters' mixed-precision Adam, and the GEMM FLOPs
are the base forward, its input gradients (no weight gradients) and the adapters' -- all computed by hand here."""

from __future__ import annotations

import json

import pytest

from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_workload_compact import read_rank_nodes
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.lora import parse_lora_targets
from astra_workload_generators.llm.memory import stage_memory
from astra_workload_generators.llm.model import padded_vocab
from astra_workload_generators.llm.spec import LlmSpec

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, strategies as st  # noqa: E402

from astra_sim_testing.fuzzing import fuzz_settings  # noqa: E402

L, H, HEADS, KV, FFN, VOCAB, S = 4, 256, 8, 4, 512, 1000, 128
SMALL = dict(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=FFN, vocab=VOCAB, seq_len=S, gated=True)
R = 8
D = H // HEADS
QKV = H + 2 * KV * D  # the QKV projection's outputs
ALL = ("qkv", "proj", "fc1", "fc2")


def _adapters(tp=1, targets=ALL):
    """One layer's adapter parameters on one TP rank, by hand: R x (inputs + outputs) per target."""
    shapes = {"qkv": (H, QKV // tp), "proj": (H // tp, H), "fc1": (H, 2 * FFN // tp), "fc2": (FFN // tp, H)}
    return sum(R * sum(shapes[t]) for t in targets)


def _gen(tmp_path, **cfg):
    cfg = LlmConfig(**cfg)
    generate_llm(model_dims(**SMALL), cfg, tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    return cfg, groups, [read_rank_nodes(tmp_path / "t", r) for r in range(cfg.npus)]


def _colls(nodes, prefix, comm_type):
    return [n for n in nodes if n.type == T.COMM_COLL_NODE and n.name.startswith(prefix)
            and n.attrs["comm_type"] == comm_type]


@pytest.mark.parametrize("tp,targets", [(1, ALL), (2, ALL), (1, ("qkv", "fc2"))])
def test_dp_all_reduce_is_the_adapters(tmp_path, tp, targets):
    cfg, groups, ranks = _gen(tmp_path, tp=tp, dp=2, micro_batches=2, lora_rank=R, lora_targets=targets)
    for nodes in ranks:
        dp = _colls(nodes, "dp_ar", T.ALL_REDUCE)
        assert sum(n.attrs["comm_size"] for n in dp) == L * _adapters(tp, targets) * 2  # bf16
        assert not any("head" in n.name or "embedding" in n.name for n in dp)
        # the TP-replicated factors' partial gradients: R x h per target and layer, once per step
        tp_sync = [n for n in _colls(nodes, "tp_ar", T.ALL_REDUCE) if n.name.endswith("lora_grads")]
        assert sum(n.attrs["comm_size"] for n in tp_sync) == (L * len(targets) * R * H * 2 if tp > 1 else 0)


def test_zero1_reduce_scatters_the_adapters(tmp_path):
    _, _, ranks = _gen(tmp_path, dp=2, zero=1, lora_rank=R, lora_targets=ALL)
    rs = _colls(ranks[0], "dp_rs", T.REDUCE_SCATTER)
    assert sum(n.attrs["comm_size"] for n in rs) == L * _adapters() * 2


def test_memory_model_states():
    dims = model_dims(**SMALL)
    lora = LlmConfig(dp=2, lora_rank=R, lora_targets=ALL)
    full = stage_memory(dims, LlmConfig(dp=2), 0)
    est = stage_memory(dims, lora, 0)
    adapters = L * _adapters()
    base = full.weights // 2  # bf16: every base parameter of the stage
    assert est.weights == 2 * base + 2 * adapters       # frozen base and adapters in bf16
    assert est.gradients == 4 * adapters                # Megatron's fp32 main gradients, adapters only
    assert est.optimizer == 12 * adapters               # fp32 master weights and two moments, adapters only
    assert est.activations == full.activations          # (activations: as full training, see the docs)
    zero1 = stage_memory(dims, LlmConfig(dp=2, zero=1, lora_rank=R, lora_targets=ALL), 0)
    assert zero1.optimizer == 12 * adapters // 2        # the distributed optimizer shards the adapters' states


def _mm_flops(nodes, phase):
    return sum(n.attrs["num_ops"] for n in nodes if n.type == T.COMP_NODE and n.name in ("aten::mm",)
               and n.attrs["label"].startswith(phase))


def test_gemm_flops_by_hand(tmp_path):
    _, _, (nodes,) = _gen(tmp_path, lora_rank=R, lora_targets=ALL, elementwise=False)
    n, V = S, padded_vocab(model_dims(**SMALL), 1, 128)
    base = 2 * n * (H * QKV + H * H + H * 2 * FFN + FFN * H)  # QKV, projection, FC1 (gated: 2 FFN), FC2
    adapters = 2 * n * _adapters()                            # x A and (x A) B of each target
    head = 2 * n * H * V
    assert _mm_flops(nodes, "fwd") == L * (base + adapters) + head
    # backward: the base's input gradients only, the adapters' four GEMMs (twice their forward), the head's dgrad
    assert _mm_flops(nodes, "bwd") == L * (base + 2 * adapters) + head
    labels = [x.attrs.get("label", "") for x in nodes]
    assert not [x for x in labels if x.endswith(".wgrad") and ".lora_" not in x]


def test_step_flops_and_cli(tmp_path):
    prefix = tmp_path / "l"
    assert main(["workload", "llm", "--layers", str(L), "--hidden", str(H), "--heads", str(HEADS), "--kv-heads",
                 str(KV), "--ffn-hidden", str(FFN), "--vocab", str(VOCAB), "--seq-len", str(S), "--gated",
                 "--dp", "2", "--pp", "2", "--micro-batches", "2", "--lora-rank", str(R),
                 "--lora-targets", "fc2,qkv", "-o", str(prefix)]) == 0
    nodes = read_rank_nodes(prefix, 0)
    assert not [x for x in nodes if x.name == "aten::embedding_dense_backward"]
    assert {x.attrs["label"].split(".")[-2] for x in nodes if ".lora_" in x.attrs.get("label", "")
            and x.attrs["label"].startswith("fwd")} == {"qkv", "fc2"}
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(4,))
    report = simulate(prefix, sys_cfg, net, None, str(tmp_path / "l.groups.json"),
                      plugins=["network_analytical", "workload_generators"])
    assert report.max_finish_ns > 0
    # model FLOPs of the step: 4PT (forward and input gradients) + 6 x adapters x T + attention's 6 x 2 s^2 h
    summary = generate_llm(model_dims(**SMALL), LlmConfig(dp=2, pp=2, micro_batches=2, lora_rank=R,
                                                           lora_targets=("qkv", "fc2")), tmp_path / "m")
    tokens = 2 * 2 * S
    P = L * (H * QKV + H * H + 3 * H * FFN) + padded_vocab(model_dims(**SMALL), 1, 128) * H
    attention = 6 * S * (S * L) * (H + H) * 4  # 6 x s x (keys summed over layers) x (q + o widths) x sequences
    assert summary["flops"] == 4 * P * tokens + 6 * L * _adapters(1, ("qkv", "fc2")) * tokens + attention


def test_errors():
    base = dict(SMALL, lora_rank=R)
    with pytest.raises(ConfigError, match="--lora-targets needs --lora-rank"):
        LlmSpec(**SMALL, lora_targets="qkv").resolve()
    with pytest.raises(ConfigError, match="unknown target 'k'"):
        LlmSpec(**base, lora_targets="qkv,k").resolve()
    with pytest.raises(ConfigError, match="is for --mode train"):
        LlmSpec(**base, mode="prefill").resolve()
    with pytest.raises(ConfigError, match="--zero 3"):
        LlmSpec(**base, zero=3, dp=2).resolve()
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        LlmSpec(**base, experts=4, top_k=2).resolve()
    with pytest.raises(SystemExit) as exc:
        main(["workload", "llm", "--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "100",
              "--seq-len", "16", "--lora-rank", "0", "-o", "/nonexistent/x"])
    assert exc.value.code == 2


@fuzz_settings(200)
@given(st.text(max_size=40))
def test_parse_lora_targets_fuzz(text):
    try:
        out = parse_lora_targets(text)
    except ConfigError as e:
        assert "\n" not in str(e) and str(e).startswith("--lora-targets:")
    else:
        assert out and set(out) <= set(ALL) and list(out) == [t for t in ALL if t in out]


def test_spec_mapping_takes_a_list_of_targets():
    spec = LlmSpec.from_mapping(dict(SMALL, lora_rank=R, lora_targets=["fc1", "qkv"]))
    assert spec.resolve()[1].lora_targets == ("qkv", "fc1")
    assert LlmSpec(**SMALL, lora_rank=R).resolve()[1].lora_targets == ALL  # default: all four
