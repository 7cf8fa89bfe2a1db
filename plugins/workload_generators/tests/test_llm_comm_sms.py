"""``astra workload llm --comm-sms`` / ``--tp-overlap-config``: the ``comm_sms`` attribute of communication nodes
(the SMs each kernel occupies), read by the gpu model's ``--gpu-contention``."""

from __future__ import annotations

import re

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, load_tp_overlap_sms, model_dims

GPT = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, gated=False)
COMM = (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)
# Transformer Engine's tp_overlap YAML in the layout MLPerf v3.1 GPT-3 ships (conf/tp_overlap/h100tp4pp8mbs1.yaml),
# numbers chosen so that every entry is distinct
TE_YAML = """
qkv_dgrad: {method: bulk, num_sm: 4, cga_size: 2, set_sm_margin: 0}
qkv_wgrad: {method: bulk, num_sm: 8, cga_size: 2, set_sm_margin: 0}
fc1_dgrad: {method: bulk, num_sm: 2, cga_size: 2, set_sm_margin: 0}
fc1_wgrad: {method: bulk, num_sm: 6, cga_size: 2, set_sm_margin: 0}
qkv_fprop: {method: ring_exchange, aggregate: 0}
proj_dgrad: {method: ring_exchange, aggregate: 0, use_ce: false, num_sm: 3}
fc1_fprop: {method: ring_exchange, aggregate: 0}
fc2_dgrad: {method: ring_exchange, aggregate: 1}
proj_fprop: {method: pipeline, num_sm: 24, cga_size: 2, num_splits: 4, set_sm_margin: 1}
fc2_fprop: {method: pipeline, num_sm: 12, cga_size: 2, num_splits: 4, set_sm_margin: 1}
"""
# what each emitted node is, by its name, written out here independently of the generator's table:
# (phase, ring/re-gather, the activation) -> the SMs TE_YAML gives that overlap
EXPECTED_TE = {
    ("fwd", "ag", "attn_in"): 0,    # qkv_fprop, copy engine
    ("fwd", "ag", "mlp_in"): 0,     # fc1_fprop
    ("fwd", "rs", "attn_out"): 24,  # proj_fprop
    ("fwd", "rs", "mlp_out"): 12,   # fc2_fprop
    ("bwd", "ag", "mlp_out"): 0,    # fc2_dgrad
    ("bwd", "ag", "attn_out"): 3,   # proj_dgrad, use_ce false
    ("bwd", "rs", "mlp_in"): 6,     # fc1_wgrad (TE's bulk RS beside the wgrad GEMM)
    ("bwd", "rs", "attn_in"): 8,    # qkv_wgrad
    ("bwd", "regather", "mlp_in"): 2,   # fc1_dgrad
    ("bwd", "regather", "attn_in"): 4,  # qkv_dgrad
}


def _write_yaml(tmp_path, text=TE_YAML):
    path = tmp_path / "tp_overlap.yaml"
    path.write_text(text)
    return path


def _generate(tmp_path, name, *extra, tp=2, pp=2, dp=2, hidden=256, seq_len=128):
    prefix = tmp_path / name / "t"
    args = ["workload", "llm", "--layers", "4", "--hidden", str(hidden), "--heads", "8", "--vocab", "1000",
            "--seq-len", str(seq_len), "--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--micro-batches", "2",
            "--sequence-parallel", "--zero", "1", "--gemm-dtype", "fp8", *extra, "-o", str(prefix)]
    assert main(args) == 0
    return prefix


def _comm_nodes(prefix, npus):
    return [n for r in range(npus) for n in read_rank_nodes(prefix, r) if n.type in COMM]


def _expected(node, groups):
    """The SMs a node should carry under TE_YAML + ``groups`` (--comm-sms), from its name alone."""
    name = node.name
    m = re.match(r"tp_(send|recv)\.(ag|rs)\.(fwd|bwd)\..*\.(attn_in|attn_out|mlp_in|mlp_out)\.\d+$", name)
    if m:
        return EXPECTED_TE[(m[3], m[2], m[4])]
    m = re.match(r"tp_ag\.bwd\..*\.(attn_in|mlp_in)\.regather$", name)
    if m:
        return EXPECTED_TE[("bwd", "regather", m[1])]
    m = re.match(r"tp_rs\.bwd\.l\d+\.mb\d+\.(attn_in|mlp_in)$", name)  # (the bulk reduce-scatter beside the wgrad)
    if m:
        return EXPECTED_TE[("bwd", "rs", m[1])]
    if re.match(r"tp_(ag|rs)\.(fwd|bwd)\.head\.mb\d+\.head_in(\.regather)?$", name):
        return groups["tp"]  # the LM head's (Megatron's own ColumnParallelLinear): NCCL TP collectives
    if name == "tp_ar.norm_grads":  # (SP: the norms' gradients over TP, finalize_model_grads: NCCL)
        return groups["tp"]
    if re.match(r"tp_(ar|rs)\.fwd\.embedding\.mb\d+$|tp_ag\.bwd\.embedding\.mb\d+$", name):
        return groups["tp"]  # (the vocabulary-parallel embedding, not a Transformer Engine module: NCCL)
    if re.match(r"(send|recv)_(act|grad)", name):
        return groups["pp"]
    if name.startswith("amax."):
        return groups["amax"]
    if name.startswith("dp_") or name == "optimizer.clip.norm_all_reduce":  # (Megatron's grad norm, over DP)
        return groups["dp"]
    raise AssertionError(f"unexpected communication node {name!r}")


def test_without_the_options_no_node_has_the_attribute(tmp_path):
    prefix = _generate(tmp_path, "plain", "--tp-comm-overlap")
    assert not any("comm_sms" in n.attrs for n in _comm_nodes(prefix, 8))


def test_every_communication_node_carries_its_kinds_sms(tmp_path):
    groups = {"dp": 8, "pp": 2, "amax": 1, "tp": 5}
    yaml_path = _write_yaml(tmp_path)
    prefix = _generate(tmp_path, "sms", "--tp-comm-overlap", "--tp-overlap-config", str(yaml_path),
                       "--comm-sms", "dp=8, pp=2,amax=1,tp=5")
    nodes = _comm_nodes(prefix, 8)
    seen = set()
    for node in nodes:
        assert node.attrs["comm_sms"] == _expected(node, groups), node.name
        seen.add(node.name.split(".")[0] + "." + node.name.split(".")[1])
    # every kind was there: the four ring kinds, the re-gathers, pipeline, amax and DP collectives
    assert {"tp_send.ag", "tp_send.rs", "tp_recv.ag", "tp_ag.bwd", "amax.fwd"} <= seen
    assert any(s.startswith("dp_") for s in seen) and any(s.startswith("send_act") for s in seen)
    # --comm-sms overrides the YAML; a TP key alone covers only the NCCL TP collectives (the layers' re-gathers
    # and the LM head's gather, re-gather and reduce-scatter)
    prefix = _generate(tmp_path, "override", "--tp-comm-overlap", "--tp-overlap-config", str(yaml_path),
                       "--comm-sms", "proj_fprop=5")
    by_name = {n.name: n.attrs.get("comm_sms") for n in _comm_nodes(prefix, 8)}
    assert {v for k, v in by_name.items() if k.startswith("tp_send.rs.fwd") and k.split(".")[-2] == "attn_out"} \
        == {5}
    assert {v for k, v in by_name.items() if k.startswith("tp_send.rs.fwd") and k.split(".")[-2] == "mlp_out"} \
        == {12}
    assert {v for k, v in by_name.items() if k.startswith(("dp_", "send_act", "amax."))} == {None}  # no keys given
    prefix = _generate(tmp_path, "tp", "--tp-comm-overlap", "--comm-sms", "tp=7")
    with_sms = {n.name for n in _comm_nodes(prefix, 8) if "comm_sms" in n.attrs}
    assert with_sms and all(name.endswith(".regather") or ".head." in name or name == "tp_ar.norm_grads"
                            or name.startswith("tp_rs.bwd.l") or ".embedding." in name for name in with_sms)
    # (the bulk reduce-scatters, like the re-gathers, take the TP key when their TE names have none)
    assert [name for name in with_sms if name.startswith("tp_rs.bwd.l")]


def test_without_overlap_tp_collectives_take_the_tp_key(tmp_path):
    prefix = _generate(tmp_path, "tp", "--comm-sms", "tp=8,dp=4", pp=1)
    nodes = _comm_nodes(prefix, 4)
    tp = [n for n in nodes if n.name.startswith("tp_")]
    assert tp and {n.attrs["comm_sms"] for n in tp} == {8}
    assert {n.attrs["comm_sms"] for n in nodes if n.name.startswith("dp_")} == {4}


@pytest.mark.parametrize("args, message", [
    (["--comm-sms", "xx=3"], "--comm-sms: unknown key 'xx'"),
    (["--comm-sms", "dp=-1"], "--comm-sms: dp must be a non-negative integer"),
    (["--comm-sms", "dp"], "expected KEY=SMS"),
    (["--comm-sms", "dp=eight"], "expected KEY=SMS \\(an integer\\), got 'dp=eight'"),
    (["--comm-sms", "qkv_fprop=0"], "qkv_fprop is a Transformer Engine userbuffers overlap, emitted only with "
                                    "--tp-comm-overlap"),
])
def test_bad_comm_sms(tmp_path, capsys, args, message):
    assert main(["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000",
                 "--seq-len", "128", "--tp", "2", "--sequence-parallel", *args, "-o", str(tmp_path / "x")]) == 2
    assert re.search(message, capsys.readouterr().err)


def _margins(prefix, npus):
    """{GEMM label without its chunk: {sm_margin values}} of the compute nodes."""
    out = {}
    for r in range(npus):
        for n in read_rank_nodes(prefix, r):
            if n.type == T.COMP_NODE and ".c" in n.attrs.get("label", ""):
                label = n.attrs["label"].rsplit(".c", 1)[0]
                out.setdefault(label.split(".", 1)[0] + "." + label.rsplit(".", 1)[-1], set()).add(
                    n.attrs.get("sm_margin"))
    return out


def test_set_sm_margin_gives_the_overlapped_gemm_chunks_an_sm_margin(tmp_path):
    # TE_YAML: proj_fprop (pipeline, 24 SMs) and fc2_fprop (12) with set_sm_margin: their forward GEMM chunks
    # (projection, FC2) carry sm_margin = those SMs; the other chunked GEMMs none (no set_sm_margin, or a
    # copy-engine ring)
    yaml_path = _write_yaml(tmp_path, TE_YAML.replace("qkv_fprop: {method: ring_exchange, aggregate: 0}",
                                                      "qkv_fprop: {method: ring_exchange, set_sm_margin: 1}"))
    prefix = _generate(tmp_path, "margin", "--tp-comm-overlap", "--tp-overlap-config", str(yaml_path))
    margins = _margins(prefix, 8)
    assert margins["fwd.proj"] == {24} and margins["fwd.fc2"] == {12}
    assert {k: v for k, v in margins.items() if k not in ("fwd.proj", "fwd.fc2")} and \
        all(v == {None} for k, v in margins.items() if k not in ("fwd.proj", "fwd.fc2"))
    # --comm-sms changes the overlap's SMs, and so its margin; 0 SMs leave no margin
    prefix = _generate(tmp_path, "margin2", "--tp-comm-overlap", "--tp-overlap-config", str(yaml_path),
                       "--comm-sms", "proj_fprop=16,fc2_fprop=0")
    margins = _margins(prefix, 8)
    assert margins["fwd.proj"] == {16} and margins["fwd.fc2"] == {None}
    # without the YAML: no margins
    assert all(v == {None} for v in _margins(_generate(tmp_path, "plain2", "--tp-comm-overlap"), 8).values())
    assert load_tp_overlap_sms(yaml_path, with_margins=True)[1] == {"proj_fprop": 24, "fc2_fprop": 12}


@pytest.mark.parametrize("text, message", [
    ("qkv_fprop: {method: bulk, set_sm_margin: 2}", r"qkv_fprop\.set_sm_margin must be true or false"),
    ("qkv_fprop: {method: ring}", r"qkv_fprop\.method must be one of ring_exchange, pipeline, bulk, got 'ring'"),
    ("attn_fprop: {method: bulk}", r"unknown layer 'attn_fprop'"),
    ("qkv_fprop: {method: bulk, num_sms: 3}", r"qkv_fprop: unknown key 'num_sms'"),
    ("qkv_fprop: {method: bulk, num_sm: -2}", r"qkv_fprop\.num_sm must be a non-negative integer"),
    ("qkv_fprop: 3", r"qkv_fprop: expected a mapping"),
    ("- a\n- b", r"expected a mapping of Transformer Engine layer names"),
    ("a: [", r"not valid YAML \(line 1"),
])
def test_bad_tp_overlap_config_names_the_file_and_key(tmp_path, text, message):
    path = _write_yaml(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ".*" + message if "YAML" not in message
                       else message):
        load_tp_overlap_sms(path)


def test_tp_overlap_config_needs_the_overlap(tmp_path, capsys):
    path = _write_yaml(tmp_path)
    assert main(["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000",
                 "--seq-len", "128", "--tp", "2", "--sequence-parallel", "--tp-overlap-config", str(path), "-o", str(tmp_path / "x")]) == 2
    assert "--tp-overlap-config needs --tp-comm-overlap" in capsys.readouterr().err
    assert main(["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000",
                 "--seq-len", "128", "--tp", "2", "--sequence-parallel", "--tp-comm-overlap", "--tp-overlap-config", str(tmp_path / "none.yaml"),
                 "-o", str(tmp_path / "x")]) == 2
    assert "none.yaml' does not exist" in capsys.readouterr().err


def test_config_checks_its_comm_sms():
    dims = model_dims(**GPT)
    with pytest.raises(ConfigError, match="unknown key 'dpx'"):
        generate_llm(dims, LlmConfig(comm_sms=(("dpx", 1),)), "/nonexistent/x")
    with pytest.raises(ConfigError, match="must be a non-negative integer"):
        generate_llm(dims, LlmConfig(comm_sms=(("dp", True),)), "/nonexistent/x")


def test_copy_engine_rings_contend_less_than_sm_rings(tmp_path):
    """Simulated with the gpu model's contention: the same trace with the TP rings on copy engines (0 SMs) runs
    faster than with 32-SM rings, and without contention both equal the unannotated trace."""
    pytest.importorskip("astra_gpu_model")
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1, comm_streams="per-communicator")
    net = write_network_config(tmp_path / "net.yml", npus=(4,))
    times = {}
    for name, sms in (("ce", "0"), ("sm", "32")):
        spec = ",".join(f"{k}={sms}" for k in ("qkv_fprop", "fc1_fprop", "proj_fprop", "fc2_fprop", "proj_dgrad",
                                                  "fc2_dgrad", "qkv_wgrad", "fc1_wgrad", "qkv_dgrad", "fc1_dgrad"))
        prefix = _generate(tmp_path, name, "--tp-comm-overlap", "--comm-sms", spec, tp=4, pp=1, dp=1, hidden=4096,
                           seq_len=2048)
        for contention in (True, False):
            report = simulate(prefix, sys_cfg, net, None, f"{prefix}.groups.json",
                              plugins=["network_analytical", "workload_generators", "gpu_model"],
                              compute_model="gpu", options={"gpu_contention": contention})
            times[name, contention] = report.max_finish_ns
    assert times["ce", True] < times["sm", True]
    # (copy-engine rings take no SMs: since the backward's reduce-scatters are TE's bulk ones beside the wgrad,
    # without ring adds, nothing of theirs contends here)
    assert times["ce", False] == times["sm", False] <= times["ce", True]
