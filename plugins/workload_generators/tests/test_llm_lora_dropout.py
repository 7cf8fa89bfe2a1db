"""``--lora-dropout P``: the adapters' input dropout (NeMo's LoRA, dropout_position "pre"), one memory-bound
dropout before A in forward and its backward after A's input gradient, per target and layer; bytes by hand."""

from __future__ import annotations

import pytest
from astra_sim.errors import ConfigError
from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.spec import LlmSpec

try:  # the compact trace reader (a plugin since issue 34; the kernel's before)
    from astra_workload_compact.expand import read_rank_nodes
except ImportError:  # pragma: no cover - older layout
    from astra_sim.workload.compact import read_rank_nodes

L, H, HEADS, KV, FFN, VOCAB, S = 2, 256, 8, 4, 512, 1000, 128
SMALL = {"layers": L, "hidden": H, "heads": HEADS, "kv_heads": KV, "ffn_hidden": FFN, "vocab": VOCAB, "seq_len": S,
         "gated": True}
R = 8


def _nodes(tmp_path, **cfg):
    cfg = LlmConfig(**cfg)
    generate_llm(model_dims(**SMALL), cfg, tmp_path / "t")
    return read_rank_nodes(tmp_path / "t", 0)


def _label(n):
    return n.attrs.get("label", "")


def _dropouts(nodes):
    return [n for n in nodes if _label(n).endswith(".lora_dropout")]


@pytest.mark.parametrize("tp,sp", [(1, False), (2, True)])
def test_one_dropout_each_way_per_target_and_layer_with_its_bytes(tmp_path, tp, sp):
    mbs = 2
    nodes = _nodes(tmp_path, tp=tp, sequence_parallel=sp, micro_batch_size=mbs, lora_rank=R,
                   lora_targets=("qkv", "proj"), lora_dropout=0.1)
    drops = _dropouts(nodes)
    tokens = mbs * S
    # qkv's input: the LayerNorm output, h wide, this TP rank's rows under sequence parallelism (dropped before
    # the adapter's gather); proj's: the attention output, TP-sharded features, every token of the rank
    rows = {"qkv": tokens // tp if sp else tokens, "proj": tokens}
    width = {"qkv": H, "proj": H // tp}
    fwd = [n for n in drops if _label(n).startswith("fwd.")]
    bwd = [n for n in drops if _label(n).startswith("bwd.")]
    assert len(fwd) == len(bwd) == L * 2
    for n in fwd:  # read x, write the dropped x (bf16)
        target = "qkv" if ".qkv." in _label(n) else "proj"
        assert n.name == "aten::native_dropout"
        assert n.attrs["tensor_size"] == 2 * rows[target] * width[target] * 2
    for n in bwd:  # read the gradient and the bool mask, write the gradient
        target = "qkv" if ".qkv." in _label(n) else "proj"
        assert n.name == "aten::native_dropout_backward"
        assert n.attrs["tensor_size"] == rows[target] * width[target] * (2 + 1 + 2)


def test_backward_dropout_follows_a_input_gradient(tmp_path):
    nodes = _nodes(tmp_path, lora_rank=R, lora_targets=("qkv",), lora_dropout=0.1)
    names = [_label(n) for n in nodes]
    f = names.index("fwd.l0.mb0.qkv.lora_dropout")
    assert names[f + 1] == "fwd.l0.mb0.qkv.lora_a"
    b = names.index("bwd.l0.mb0.qkv.lora_dropout")
    assert names[b - 1] == "bwd.l0.mb0.qkv.lora_a.dgrad"


def test_off_by_default_and_at_zero(tmp_path):
    base = _nodes(tmp_path, lora_rank=R, lora_targets=("qkv", "proj"))
    assert not _dropouts(base)
    zero = _nodes(tmp_path, lora_rank=R, lora_targets=("qkv", "proj"), lora_dropout=0.0)
    assert [_label(n) for n in zero] == [_label(n) for n in base]


def test_the_flag_and_its_errors():
    spec = LlmSpec.from_argv(SMALL_ARGV + ["--lora-rank", "16", "--lora-dropout", "0.1"], where="t")
    assert spec.resolve()[1].lora_dropout == 0.1
    with pytest.raises(ConfigError, match="--lora-dropout needs --lora-rank"):
        LlmSpec.from_argv(SMALL_ARGV + ["--lora-dropout", "0.1"], where="t").resolve()
    with pytest.raises(ConfigError, match=r"probability in \[0, 1\)"):
        LlmSpec.from_argv(SMALL_ARGV + ["--lora-rank", "16", "--lora-dropout", "1"], where="t").resolve()


SMALL_ARGV = ["--layers", str(L), "--hidden", str(H), "--heads", str(HEADS), "--kv-heads", str(KV), "--ffn-hidden",
              str(FFN), "--vocab", str(VOCAB), "--seq-len", str(S), "--gated"]
