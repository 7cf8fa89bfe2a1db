"""FSDP2's root unit (the token embedding and the LM head under torchtitan, ``DataParallelOps._fsdp2_root``) has its
gradients reduce-scattered as one, after the embedding's backward: its size is read from the step's parameter table
(``grad_sync(..., table=)``), not added up in the stage builder as the head's and the embedding's syncs pass (issue
36). The traces are byte for byte those of the code that added them up (digests below, made with it at f1dbf98),
renewed once on purpose (issue 36): the cases with element-wise nodes gained the final norm before the LM head
(``LayerOps.final_norm``, test_llm_final_norm.py), and with it switched off they are the f1dbf98 digests; and again
(issue 36): the norms' weights (and LayerNorm's biases) are parameters of their units, the final norm's of the root
(``model.layer_norm_parameters``, test_llm_norm_params.py); and again (issue 36): the model (no rotary flag) has
Megatron's default learned position table, a parameter of the embedding's unit, here the root
(``model.embedding_shard``, test_parameters_complete.py); with it counted as zero they are the digests before."""

from __future__ import annotations

import hashlib

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.stage import _StageBuilder

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
#: name -> (LlmConfig keywords besides dp=2, zero=3, framework="fsdp2", micro_batches=2; sha256 of the files)
CASES = {
    "per_step": ({}, "84b493f9630e0d225adac0ee20fc3aee67eafcefebf8c3d1ff63a79f27bbdffb"),
    "every_mb": ({"grad_sync_every_micro_batch": True},
                 "cb18d23bccf516dffaeb43fe40253f200499f022206876886bfce1f6af16952f"),
    "tp_reshard": ({"tp": 2, "reshard_after_forward": True},
                   "7d051ee4ad0ac2fe6892f8b08342257e4340003f0baf7580fac3796a6d048500"),
    "no_ew": ({"elementwise": False}, "0c3b09b966c2a6ef1d329dc345881649a7e0731ba1ddb5862cc2deca408b73a0"),
}


def _generate(folder, **kw):
    generate_llm(model_dims(**LLAMA), LlmConfig(dp=2, zero=3, framework="fsdp2", micro_batches=2, **kw), folder / "t")


@pytest.mark.parametrize("name", sorted(CASES))
def test_traces_unchanged(tmp_path, name):
    kw, digest = CASES[name]
    _generate(tmp_path, **kw)
    h = hashlib.sha256()
    for f in sorted(tmp_path.iterdir()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    assert h.hexdigest() == digest


def test_root_reduce_scatter_is_the_tables_root_and_the_builder_keeps_no_sum(tmp_path, monkeypatch):
    builders = []
    build = _StageBuilder.build

    def keep(self):
        builders.append(self)
        return build(self)

    monkeypatch.setattr(_StageBuilder, "build", keep)
    _generate(tmp_path, grad_sync_every_micro_batch=True)
    assert builders and all("_root_grads" not in vars(b) for b in builders)
    by = {n.attrs.get("label", n.name): n for n in read_rank_nodes(tmp_path / "t", 0)}
    # the embedding's and the head's 1000 x 256 each, the learned position table (128 x 256: no rotary flag) and the
    # final LayerNorm's weight and bias (2 x 256), reduced in fp32 (torchtitan's mixed_precision_reduce)
    for mb in (0, 1):
        assert by[f"dp_rs.root.mb{mb}"].attrs["comm_size"] == (2 * 1000 * 256 + 128 * 256 + 512) * 4
    assert not [label for label in by if label.startswith(("dp_rs.head", "dp_rs.embedding"))]
