"""The LLM generator's fast paths (issue 37) write the bytes of the reference paths they replaced: the direct node
encoder ``astra_workload_generators.llm.encode.encode_node`` those of ``make_node(...)._raw`` (a protobuf message,
serialized and parsed back), and the element-wise nodes' shapes computed once per (op, arguments) those computed
for every node.

Two checks:

* every file of a spread of workloads (dense and MoE; TP, PP, VP, CP, EP; ZeRO 0-3; recompute; FP8 and MXFP8;
  per-rank and compact; training, prefill, decode and mixed; FSDP2, DeepSpeed, LoRA, CUDA graphs) is byte-identical
  when the generator's encoder is swapped for the reference one and its element-wise cache remembers nothing (the
  same code otherwise: the slow paths stay callable, so the test needs no stored digests; test_llm_golden.py keeps
  the digests of older code);
* ``encode_node`` equals ``make_node(...)._raw`` (or raises the same error) on random nodes (Hypothesis).
"""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim.chakra.errors import ChakraError
from astra_sim.chakra.writer import make_node
from astra_sim.cli import main

from astra_workload_generators.llm import emit, stage
from astra_workload_generators.llm.encode import encode_node

from astra_sim_testing.llm_layouts import MOE, SHARED_LAYOUTS, SMALL

TE_YAML = "qkv_fprop:\n  method: ring_exchange\n  set_sm_margin: 1\n  use_ce: false\n  num_sm: 8\n" \
          "proj_fprop:\n  method: pipeline\n  num_sm: 24\n  set_sm_margin: 1\n"

#: name -> astra workload llm arguments (without -o)
LAYOUTS = {
    **SHARED_LAYOUTS,
    "vp_sp_overlap_fp8_zero1": SMALL + ["--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "4",
                                        "--sequence-parallel", "--tp-comm-overlap", "--gemm-dtype", "fp8",
                                        "--virtual-stages", "2", "--zero", "1", "--overlap-param-gather",
                                        "--tp-overlap-config", "{yaml}", "--comm-sms", "tp=8,dp=8,pp=2,amax=1"],
    "gqa_recompute_zero3_reshard": SMALL + ["--kv-heads", "4", "--gated", "--tp", "2", "--dp", "2",
                                            "--micro-batches", "2", "--recompute", "--zero", "3",
                                            "--reshard-after-forward", "--grad-sync-every-micro-batch"],
    "zero2_per_rank": SMALL + ["--dp", "4", "--zero", "2", "--micro-batches", "2", "--per-rank-files"],
    "moe_expert_load_cublas": MOE + ["--dp", "4", "--ep", "4", "--micro-batches", "2", "--moe-expert-load",
                                     "zipf:1.2:3", "--moe-grouped-gemm", "cublas-streams", "--per-rank-files"],
    "moe_capacity_zero2": MOE + ["--pp", "2", "--dp", "4", "--ep", "2", "--micro-batches", "2",
                                 "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "--zero", "2"],
    "lora": SMALL + ["--gated", "--dp", "2", "--micro-batches", "2", "--lora-rank", "8"],
}


def _reference_encode(*args, **kwargs):
    """The encoding the generator used before encode_node: a protobuf message, serialized and parsed back."""
    return make_node(*args, **kwargs)._raw


class _Forgetful(dict):
    """An element-wise cache that remembers nothing: every ew() node computes its shapes again."""

    def __setitem__(self, key, value):
        pass


def _reference_builder_init(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.ew_cache = _Forgetful()
    return wrapped


def _files(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as handle:
            out[name] = handle.read()
    return out


def _generate(tmp_path, name, which):
    folder = tmp_path / which
    folder.mkdir()
    yaml_path = tmp_path / "te.yaml"
    yaml_path.write_text(TE_YAML)
    args = [a.replace("{yaml}", str(yaml_path)) for a in LAYOUTS[name]]
    # (file names are compared, so the prefix is the same in both runs: the manifest names its traces)
    prefix = tmp_path / "w"
    assert main(["workload", "llm", *args, "-o", str(prefix)]) == 0
    for path in tmp_path.iterdir():
        if path.is_file() and path.name.startswith("w."):
            path.rename(folder / path.name)
    return _files(folder)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_file_is_what_the_reference_encoder_writes(tmp_path, monkeypatch, name, capsys):
    fast = _generate(tmp_path, name, "fast")
    with monkeypatch.context() as patch:
        patch.setattr(emit, "encode_node", _reference_encode)
        patch.setattr(stage._StageBuilder, "__init__", _reference_builder_init(stage._StageBuilder.__init__))
        slow = _generate(tmp_path, name, "slow")
    assert sorted(fast) == sorted(slow)
    assert any(f.endswith(".et") for f in fast)
    for file_name in fast:  # (digests in the message: a whole trace does not print usefully)
        assert hashlib.sha256(fast[file_name]).hexdigest() == hashlib.sha256(slow[file_name]).hexdigest(), file_name


def test_the_reference_paths_are_really_swapped_in(tmp_path, monkeypatch, capsys):
    """The swaps above reach the generator: a reference that writes other bytes changes the traces, and the
    forgetful cache is the one ew() uses."""
    def other(*args, **kwargs):
        return _reference_encode(*args, **kwargs) + b"\x30\x01"  # start_time_micros = 1
    caches = []

    def init(self, *args, **kwargs):
        _reference_builder_init(original)(self, *args, **kwargs)
        caches.append(self.ew_cache)
    original = stage._StageBuilder.__init__
    monkeypatch.setattr(emit, "encode_node", other)
    monkeypatch.setattr(stage._StageBuilder, "__init__", init)
    changed = _generate(tmp_path, "dense_tp_pp_dp", "other")
    monkeypatch.undo()
    plain = _generate(tmp_path, "dense_tp_pp_dp", "plain")
    traces = [f for f in plain if f.endswith(".et")]
    assert traces and all(changed[f] != plain[f] for f in traces)
    assert caches and all(isinstance(c, _Forgetful) and not c for c in caches)


# -- random nodes ---------------------------------------------------------------------------------------------
_NAMES = st.sampled_from(["is_cpu_op", "comm_type", "comm_size", "num_ops", "tensor_size", "comm_src", "comm_dst",
                          "comm_tag", "comm_priority", "pg_name", "involved_dim", "label", "x", ""])
_INTS = st.one_of(st.integers(-(1 << 64), 1 << 65), st.integers(-300, 300))
_SCALARS = st.one_of(st.booleans(), _INTS, st.floats(allow_nan=True), st.text(max_size=8), st.binary(max_size=4),
                     st.none())
_VALUES = st.one_of(_SCALARS, st.lists(st.booleans(), max_size=3), st.lists(_INTS, max_size=3),
                    st.lists(st.floats(), max_size=3), st.lists(st.one_of(st.integers(), st.floats()), max_size=3),
                    st.lists(st.text(max_size=3), max_size=3), st.lists(st.binary(max_size=3), max_size=3))
_IDS = st.one_of(st.integers(0, 1 << 64), st.integers(-2, 70000), st.just(True))
_TEXT = st.one_of(st.none(), st.just(""), st.text(max_size=12))


def _outcome(fn, kwargs):
    try:
        return fn(**kwargs)
    except ChakraError as exc:
        return ("error", str(exc))


@settings(max_examples=400, deadline=None)
@given(id=_IDS, name=st.text(max_size=10),
       type=st.one_of(st.integers(0, 7), st.integers(-3, 1 << 31), st.sampled_from([True, 4.0])),
       data_deps=st.lists(_IDS, max_size=3), ctrl_deps=st.lists(_IDS, max_size=2),
       duration_micros=st.one_of(st.integers(0, 1 << 20), st.integers(-1, 1 << 65)),
       attrs=st.dictionaries(_NAMES, _VALUES, max_size=6), inputs_values=_TEXT, inputs_shapes=_TEXT,
       inputs_types=_TEXT)
def test_encode_node_is_make_node(**kwargs):
    """Same bytes, or the same ChakraError, for valid and invalid nodes alike (twice: its caches answer the
    second time)."""
    expected = _outcome(lambda **k: make_node(**k)._raw, kwargs)
    assert _outcome(encode_node, kwargs) == expected
    assert _outcome(encode_node, kwargs) == expected
