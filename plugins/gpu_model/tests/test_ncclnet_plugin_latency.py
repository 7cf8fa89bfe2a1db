"""A network plugin's reported latency in NCCL's choice across nodes (``NcclConfig.net_latency_us``, ``--scale-out
efa``). NCCL's tuning (src/graph/tuning.cc, v2.26.2-1 lines 299-340, master 5067397 lines 387-428): ``interLat =
hwLat[NET][a][p] + graphs[a]->latencyInter``, ``+ latencyInter`` again for Simple, on every network step of the ring,
the tree, PAT and NVLSTree (``intraLat + 2 log2i(nNodes) x interLat``). aws-ofi-nccl reports 75 us on p5/p5e and 35 on
p5en/p6-b200 (src/platform-aws.cpp at 2daf7d30). Expected values computed by hand from those constants."""

from __future__ import annotations

from dataclasses import replace

import pytest

from astra_gpu_model import nccl, nccl_tuning
from astra_gpu_model.nccl import (
    ALL_REDUCE, LL, LL128, NVLS_TREE, RING, SIMPLE, TREE, _chosen, collective_time_us, config_for_gpu,
    config_for_options, predict,
)
from astra_sim.errors import ConfigError

MIB = 1 << 20


def _raw(**kw):
    return config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0, calibrated=False, **kw)


def _cands(size, n, nodes, cfg):
    return {c[1:3]: c for c in predict(ALL_REDUCE, size, n, cfg, nodes=nodes)}


def test_the_plugin_latency_enters_every_network_step_and_nvls_tree_twice():
    """2 x 8 H100, plugin 75 us. Tree LL: 6.8 + 2 x (7 x 0.6 + log2(2) x (5 + 75)) = 175.2; ring LL: 6.6 + 28 x
    max(0.6, 1.0) + 2 x (2.7 + 75) = 190.0; NVLSTree (Simple: the plugin twice): 25 + 2 x 1 x (20.9 + 2 x 75) = 366.8
    (66.8 without a plugin). 4 x 8: NVLSTree 25 + 2 x 2 x 170.9 = 708.6."""
    efa = _raw(net_latency_us=75.0)
    c = _cands(MIB, 16, 2, efa)
    assert c[(TREE, LL)][3] == pytest.approx(175.2)
    assert c[(RING, LL)][3] == pytest.approx(190.0)
    assert c[(NVLS_TREE, SIMPLE)][3] == pytest.approx(366.8)
    assert _cands(MIB, 16, 2, _raw())[(NVLS_TREE, SIMPLE)][3] == pytest.approx(66.8)
    assert _cands(MIB, 32, 4, efa)[(NVLS_TREE, SIMPLE)][3] == pytest.approx(708.6)


def test_nccl_226_nvls_tree_latency_takes_the_plugin_too():
    """NCCL 2.26's NVLSTree: 25 + 2 x log2i(nodes) x (14 + 2 x 35): 193.0 on 2 nodes, 361.0 on 4 (53 and 81 without)."""
    cfg = _raw(net_latency_us=35.0, tuning=nccl_tuning.V2_26)
    assert _cands(MIB, 16, 2, cfg)[(NVLS_TREE, SIMPLE)][3] == pytest.approx(193.0)
    assert _cands(MIB, 32, 4, cfg)[(NVLS_TREE, SIMPLE)][3] == pytest.approx(361.0)
    assert _cands(MIB, 16, 2, replace(cfg, net_latency_us=None))[(NVLS_TREE, SIMPLE)][3] == pytest.approx(53.0)


def test_the_plugin_moves_the_choice_not_the_time():
    """2 x 8 H100, 4 MiB: without a plugin NCCL picks NVLSTree (66.8 us of latency); with aws-ofi-nccl's 75 us its
    latency is 366.8 and tree LL128's 14.0 + 2 x (7 x 1.25 + 8.5 + 75) = 198.5, so NCCL runs tree LL128. The time is
    that pair's own terms without the plugin's figure (a tuning input, not a measured latency)."""
    cal = config_for_gpu("H100-SXM5-80GB", nic_gbps=50.0)
    efa = replace(cal, net_latency_us=75.0)
    assert predict(ALL_REDUCE, 4 * MIB, 16, cal, 2)[0][1:3] == (NVLS_TREE, SIMPLE)
    pick = predict(ALL_REDUCE, 4 * MIB, 16, efa, 2)[0]
    assert pick[1:3] == (TREE, LL128) and pick[3] == pytest.approx(198.5)
    plain = _cands(4 * MIB, 16, 2, cal)[(TREE, LL128)]
    assert _chosen(ALL_REDUCE, 4 * MIB, 16, efa, 2) == plain
    eff = cal.correction().efficiency_for("net", TREE, LL128)
    t, algo, proto = collective_time_us(ALL_REDUCE, 4 * MIB, 16, efa, 2)
    cor = cal.correction()
    assert (algo, proto) == (TREE, LL128)
    assert t == pytest.approx(cor.overhead_us + cor.latency_scale * plain[3] + plain[4] / eff)
    # 1 KiB: tree LL either way, the same time
    assert collective_time_us(ALL_REDUCE, 1024, 16, efa, 2) == collective_time_us(ALL_REDUCE, 1024, 16, cal, 2)


def test_options_and_the_efa_scale_out_kind():
    from astra_gpu_model.platforms import get_platform
    from astra_gpu_model.scale_out import KINDS

    base = config_for_options({"gpu": "H100-SXM5-80GB"})
    assert config_for_options({"gpu": "H100-SXM5-80GB", "nccl_net_latency_us": 0.0}) is base
    assert config_for_options({"gpu": "H100-SXM5-80GB", "nccl_net_latency_us": 75}).net_latency_us == 75.0
    with pytest.raises(ConfigError):
        config_for_options({"gpu": "H100-SXM5-80GB", "nccl_net_latency_us": -1.0})
    assert KINDS["efa"].nccl_net_latency_us == 75.0 and KINDS["efa-p5en"].nccl_net_latency_us == 35.0
    assert "platform-aws.cpp" in KINDS["efa"].nccl_net_latency_source
    assert KINDS["ib-ndr"].nccl_net_latency_us == 0.0 and KINDS["roce"].nccl_net_latency_us == 0.0
    h100 = get_platform("hgx-h100")
    assert h100.resolve(2, {"scale_out": "efa"}).options["nccl_net_latency_us"] == 75.0
    assert "nccl_net_latency_us" not in h100.resolve(2, {"scale_out": "ib-ndr"}).options
    assert "reports 75 us" in h100.resolve(2, {"scale_out": "efa"}).defaults["scale_out"]
    assert nccl.NET_PLUGIN_LATENCY_US == 0.0


# ----------------------------------------------------------------------------- NCCL_ALGO / NCCL_PROTO (--nccl-algo/-proto)
def test_nccl_env_lists_parse_as_nccl_does():
    """NCCL's parseList (src/graph/tuning.cc v2.26.2-1 l. 33-110): a list enables only its names, ``^`` disables them,
    a ``function:`` entry replaces that function's list, names and functions match case-insensitively."""
    from astra_gpu_model.nccl_tuning import ENV_ALGOS, ENV_PROTOS, parse_enable_list

    ring_tree = parse_enable_list("Ring,tree", ENV_ALGOS, "--nccl-algo")
    assert ring_tree["AllReduce"] == {"Ring", "Tree"} and ring_tree["AllGather"] == {"Ring", "Tree"}
    assert parse_enable_list("^LL128", ENV_PROTOS, "--nccl-proto")["AllReduce"] == {"LL", "Simple"}
    mixed = parse_enable_list("LL,Simple;allreduce:^LL", ENV_PROTOS, "--nccl-proto")
    assert mixed["AllReduce"] == {"LL128", "Simple"} and mixed["ReduceScatter"] == {"LL", "Simple"}
    for bad in ("LLX", "Simple;LL", "alltoall:Simple"):
        with pytest.raises(ConfigError):
            parse_enable_list(bad, ENV_PROTOS, "--nccl-proto")


def test_nccl_algo_and_proto_restrict_the_choice():
    """2 x 8 H100, NCCL's own terms. GCP's A3 Mega profile (Ring,Tree; Simple; NVLS off): at 1 KiB the tree Simple,
    latency 8.4 + 2 x (7 x 4.0 + log2(2) x 14.0) = 92.4 us, against the ring Simple's 8.4 + 28 x max(3.4, 3 x 1.0) +
    2 x 14.0 = 131.6 (1 KiB / (16 x 16) < 64 B: no x1.4). ^LL128 at 1 MiB: the fastest pair left of NCCL's list
    (tree LL128 without it). An all-gather with only the tree has no pair: NCCL's error."""
    raw = _raw(nvls=False, algo_env="Ring,Tree", proto_env="Simple")
    pick = predict(ALL_REDUCE, 1024, 16, raw, 2)
    assert [c[1:3] for c in pick] == [(TREE, SIMPLE), (RING, SIMPLE)]
    assert pick[0][3] == pytest.approx(92.4) and pick[1][3] == pytest.approx(131.6)
    full = predict(ALL_REDUCE, MIB, 16, _raw(), 2)
    assert full[0][1:3] == (TREE, LL128)
    assert predict(ALL_REDUCE, MIB, 16, _raw(proto_env="^LL128"), 2)[0] == min(c for c in full if c[2] != LL128)
    from astra_gpu_model.nccl import ALL_GATHER

    with pytest.raises(ConfigError, match="no algorithm/protocol"):
        predict(ALL_GATHER, MIB, 16, _raw(algo_env="Tree"), 2)
    cfg = config_for_options({"gpu": "H100-SXM5-80GB", "nccl_algo": "Ring,Tree", "nccl_proto": "Simple"})
    assert (cfg.algo_env, cfg.proto_env) == ("Ring,Tree", "Simple")
    assert config_for_options({"gpu": "H100-SXM5-80GB"}).algo_env is None
