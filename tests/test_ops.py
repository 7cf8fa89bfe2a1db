"""astra_sim.ops: the one place that names ATen ops and classes them (gemm / attention / elementwise / other).

The breakdown used to class nodes by regular expressions over their names; ``op_class`` must give every real
node name the class those gave (the corpus: the reference samples' traces and the traces the generators
write), and never raise on any string."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim import ops
from astra_sim.ops import ATTENTION_OPS, CONV_OPS, GEMM_OPS, OP_CLASSES, canonical_name, op_class

# The breakdown's classifier before astra_sim.ops (the oracle: kept here verbatim).
_OLD_GEMM_RE = re.compile(r"(^|[^a-z])(b?mm|addb?mm|baddbmm|matmul|gemm|linear|conv\w*|_scaled_mm|dot)([^a-z]|$)")
_OLD_ATTENTION_RE = re.compile(r"attention|attn|sdpa|flash")


def old_name_op_class(name):
    lower = (name or "").lower()
    if _OLD_ATTENTION_RE.search(lower):
        return "attention"
    if _OLD_GEMM_RE.search(lower):
        return "gemm"
    return "elementwise" if lower.startswith("aten::") else "other"


#: Names seen in real traces, always available (the fixture adds the samples' and the generators').
KNOWN_NAMES = [
    "aten::mm", "aten::mm(0)", "aten::addmm", "aten::matmul", "aten::linear", "aten::linear(1)", "aten::bmm",
    "aten::conv2d(0)", "aten::convolution_backward(3)", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "ScaledDotProductFlashAttentionForCpuBackward0",
    "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionForCpuBackward0",
    "aten::native_layer_norm", "aten::gelu", "aten::_fused_adam_", "aten::view", "aten::copy_", "aten::_to_copy",
    "COMP_NODE_layer_64_1_conv1_FWD", "COMM_COLL_NODE_conv1_ALLREDUCE", "COMP_NODE", "ALL_REDUCE",
    "tp_ar.fwd.l0.mb0.attn_out", "dp_ar.l0", "ep_a2a.fwd.l0.mb0.dispatch", "", "c",
]


def _json_names(obj, out):
    """Every ``name`` of an ET or Kineto JSON node / event."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("name"), str) and ("ph" in item or "id" in item or "ctrl_deps" in item):
                out.add(item["name"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _sample_names(shared):
    from astra_sim.chakra import read_et

    names = set()
    for path in sorted((shared / "samples").rglob("*.et")):
        try:
            names.update(node.name for node in read_et(path, keep_raw=False).nodes)
        except Exception:  # the malformed edge cases
            continue
    for path in sorted((shared / "samples").rglob("*.json*")):
        if "pytorch" not in str(path) or not (path.suffix == ".json" or path.name.endswith(".json.gz")):
            continue
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rt") as handle:
                _json_names(json.load(handle), names)
        except (ValueError, OSError):
            continue
    return names


def _generator_names(tmp):
    generators = pytest.importorskip("astra_workload_generators")
    from astra_sim.chakra import read_et

    small = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128, "per_rank_files": True}
    cases = [{"tp": 2, "dp": 2}, {"experts": 4, "top_k": 2, "moe_ffn": 512, "ep": 2, "dp": 2},
             {"mode": "prefill", "batch_size": 2, "prompt_len": 64}, {"mode": "decode", "batch_size": 2, "prompt_len": 64}]
    for i, case in enumerate(cases):
        generators.generate_llm_workload(generators.LlmSpec.from_mapping({**small, **case}), str(tmp / f"llm{i}"))
    generators.generate_micro(str(tmp / "suite"), npus=2, chakra_suite=True)
    return {node.name for path in tmp.rglob("*.et") for node in read_et(path, keep_raw=False).nodes}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from astra_sim_testing import find_shared_dir

    names = set(KNOWN_NAMES)
    shared = find_shared_dir()
    if shared is not None:
        names |= _sample_names(shared)
    names |= _generator_names(tmp_path_factory.mktemp("generated"))
    return sorted(names)


def test_the_corpus_is_real_and_covers_every_class(corpus):
    classes = {op_class(name) for name in corpus}
    assert classes == set(OP_CLASSES)
    assert any(name.startswith("aten::") and name.endswith(")") for name in corpus)  # the converters' (N)


def test_op_class_gives_every_real_name_the_old_class(corpus):
    differ = {name: (op_class(name), old_name_op_class(name)) for name in corpus
              if op_class(name) != old_name_op_class(name)}
    assert not differ


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_op_class_agrees_with_the_old_classifier_on_real_names_and_their_variants(corpus, data):
    """A real name, as traced or with an overload, a case change or the converters' ``(N)``: same class."""
    name = data.draw(st.sampled_from(corpus))
    variant = data.draw(st.sampled_from(["", ".default", ".out", "(7)"]))
    for candidate in (name, name + variant, name.upper(), name.lower()):
        assert op_class(candidate) == old_name_op_class(candidate), candidate


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.text().map(lambda s: "aten::" + s), st.none()))
def test_op_class_never_raises_and_only_the_tables_overrule_the_name_rule(name):
    found = op_class(name)
    assert found in OP_CLASSES
    listed = canonical_name(name) in GEMM_OPS | CONV_OPS | ATTENTION_OPS
    if not listed:
        assert found == old_name_op_class(name)


@given(st.sampled_from(sorted(GEMM_OPS | CONV_OPS | ATTENTION_OPS)), st.sampled_from(["", ".default", ".out"]))
def test_a_listed_op_has_its_tables_class_whatever_its_overload(op, overload):
    expected = "attention" if op in ATTENTION_OPS else "gemm"
    assert op_class(f"aten::{op}{overload}") == expected


def test_matrix_vector_products_are_gemms_as_the_compute_models_time_them():
    """The one deliberate change against the old regexes: ``aten::mv`` / ``addmv`` (listed GEMMs, which the gpu
    model times as GEMMs) are ``gemm`` when no compute model classifies them either (no trace in the corpus has
    them)."""
    assert old_name_op_class("aten::mv") == "elementwise"
    assert op_class("aten::mv") == op_class("aten::addmv.default") == "gemm"


@pytest.mark.parametrize("name, canonical", [
    ("aten::addmm.default", "addmm"), ("aten::mm", "mm"), ("aten::mm(0)", "mm(0)"), ("aten::", ""),
    ("mm", None), ("", None), (None, None), ("ATEN::mm", None), ("aten::_foreach_add_.List", "_foreach_add_"),
])
def test_canonical_name(name, canonical):
    assert canonical_name(name) == canonical


def test_the_sets_are_disjoint_and_frozen():
    assert not (GEMM_OPS & CONV_OPS or GEMM_OPS & ATTENTION_OPS or CONV_OPS & ATTENTION_OPS)
    assert ops.COMPUTE_BOUND_OPS == GEMM_OPS | CONV_OPS | ATTENTION_OPS
    assert all(isinstance(s, frozenset) for s in (GEMM_OPS, CONV_OPS, ATTENTION_OPS))


def test_the_gpu_models_detail_tables_are_keyed_by_the_kernels_names():
    gpu_ops = pytest.importorskip("astra_gpu_model.ops")
    assert set(gpu_ops.ATTENTION_OPS) == ATTENTION_OPS
    assert gpu_ops.GEMM_OPS is GEMM_OPS and gpu_ops.CONV_OPS is CONV_OPS
    assert gpu_ops.canonical_name is canonical_name
