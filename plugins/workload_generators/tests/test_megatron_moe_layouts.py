"""Layouts Megatron-Core refuses are refused in a Megatron training step: an MoE layer in training at TP > 1
without sequence parallelism (core_r0.14.0 ``megatron/core/transformer/moe/moe_layer.py`` 258-262, any token
dispatcher), which includes EP > 1 with TP > 1 without it (``model_parallel_config.py`` 388-393). Inference and the
other frameworks keep such a layout."""

from __future__ import annotations

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError

from astra_workload_generators.llm import LlmConfig, check_config, model_dims

MOE = model_dims(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1024, seq_len=128, gated=True,
                 experts=8, top_k=2, moe_ffn=128)
DENSE = model_dims(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1024, seq_len=128, gated=True)


@pytest.mark.parametrize("kw, flags", [
    (dict(tp=2, dp=4, ep=4), "--tp 2 --ep 4 without --sequence-parallel"),
    (dict(tp=2, dp=4, ep=1), "--tp 2 without --sequence-parallel"),  # EP 1: moe_layer.py still refuses it
    (dict(tp=4, dp=2, zero=1, framework="megatron"), "--tp 4 without --sequence-parallel"),
    (dict(tp=2, dp=2, ep=2, moe_dispatcher="alltoall"), "--tp 2 --ep 2 without --sequence-parallel"),
])
def test_megatron_training_refuses_moe_at_tp_without_sp(kw, flags):
    with pytest.raises(ConfigError) as err:
        check_config(MOE, LlmConfig(**kw))
    message = str(err.value)
    assert "\n" not in message
    assert message == (f"a mixture-of-experts model (8 experts) at {flags}: Megatron-Core refuses MoE layers in "
                       "training at TP > 1 without sequence parallelism; add --sequence-parallel (or give "
                       "--framework fsdp2 / deepspeed, or --mode prefill / decode / mixed)")


@pytest.mark.parametrize("kw", [
    dict(tp=2, dp=4, ep=4, sequence_parallel=True),                  # Megatron with SP
    dict(tp=1, dp=8, ep=8),                                          # no TP
    dict(tp=2, dp=4, ep=4, zero=3),                                  # FSDP2 (implied by --zero 3)
    dict(tp=2, dp=4, ep=4, zero=3, framework="fsdp2"),
    dict(tp=2, dp=4, ep=2, framework="deepspeed"),
    dict(tp=2, dp=4, ep=4, mode="prefill"),
    dict(tp=2, dp=4, ep=4, mode="decode"),
    dict(tp=2, dp=4, ep=4, mode="mixed", prefill_chunk=16),
])
def test_inference_other_frameworks_and_sp_still_accept(kw):
    check_config(MOE, LlmConfig(**kw))


def test_dense_models_are_not_concerned():
    check_config(DENSE, LlmConfig(tp=2, dp=4))


def test_cli_refuses_with_one_line(tmp_path, capsys):
    args = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--vocab",
            "1024", "--seq-len", "128", "--gated", "--experts", "8", "--top-k", "2", "--moe-ffn", "128", "--tp", "2",
            "--dp", "2", "--ep", "2", "-o", str(tmp_path / "w")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("astra: error: a mixture-of-experts model (8 experts) at --tp 2 --ep 2 without "
                              "--sequence-parallel") and "add --sequence-parallel" in err[-1]
    assert not (tmp_path / "w.0.et").exists()


def test_search_enumerates_moe_at_tp_only_with_sp():
    """``astra search`` gives every TP > 1 layout sequence parallelism, so none of its MoE layouts is refused
    for this; every TP it can take on 8 GPUs per node stays in the list."""
    search = pytest.importorskip("astra_sweep.search")
    choices = dict(cp=[1], mbs=[1], vp=[1], zero=[0, 1, 3], recompute=["none"])
    layouts, _ = search.enumerate_layouts(MOE, 8, 8, 8, choices)
    assert {cfg.tp for cfg, _ in layouts} == {1, 2, 4}  # (4 kv heads: TP 8 is refused for that)
    assert all(cfg.sequence_parallel for cfg, _ in layouts if cfg.tp > 1)
