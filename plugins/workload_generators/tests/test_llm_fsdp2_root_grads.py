"""FSDP2's root unit (the token embedding and the LM head under torchtitan, ``DataParallelOps._fsdp2_root``) has its
gradients reduce-scattered as one, after the embedding's backward: its size is read from the step's parameter table
(``grad_sync(..., table=)``), not added up in the stage builder as the head's and the embedding's syncs pass (issue
36). The traces are byte for byte those of the code that added them up (digests below, made with it at f1dbf98),
renewed once on purpose (issue 36): the cases with element-wise nodes gained the final norm before the LM head
(``LayerOps.final_norm``, test_llm_final_norm.py), and with it switched off they are the f1dbf98 digests."""

from __future__ import annotations

import hashlib

import pytest

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.stage import _StageBuilder

LLAMA = dict(layers=2, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)
#: name -> (LlmConfig keywords besides dp=2, zero=3, framework="fsdp2", micro_batches=2; sha256 of the files)
CASES = {
    "per_step": ({}, "0f05acdbaa85780c838f577e8a294225862d7f4f45899aad27b6f75fc310b917"),
    "every_mb": ({"grad_sync_every_micro_batch": True},
                 "18a4dc5e6bce8a8f8047413a85f1532c012dbd474bd2805a67532347f86c758d"),
    "tp_reshard": ({"tp": 2, "reshard_after_forward": True},
                   "064da22c8ff40786d9e59ad039dd1e0e37ad6e38dfefe551af814f5343caa317"),
    "no_ew": ({"elementwise": False}, "b8118484415741e8a80ae403f0ff4c3192a72c2ec83b664c14962114c800143e"),
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
    # the embedding's and the head's 1000 x 256 each, reduced in fp32 (torchtitan's mixed_precision_reduce)
    for mb in (0, 1):
        assert by[f"dp_rs.root.mb{mb}"].attrs["comm_size"] == 2 * 1000 * 256 * 4
    assert not [label for label in by if label.startswith(("dp_rs.head", "dp_rs.embedding"))]
