"""A platform fits the workload: --nodes follows the workload's ranks, a job smaller than a node runs on a partial
node, and an explicit --nodes that disagrees is a one-line error saying what would fit."""

from __future__ import annotations

import pytest

import astra_sim
from astra_sim.errors import ConfigError
from astra_sim.platforms import fit_workload, get_platform
from astra_folding.symmetry import BlockShift
from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim.spec import workload_ranks
from astra_workload_compact import write_compact_workload


def all_reduce(prefix, ranks, size_bytes=16 << 20):
    node = make_node(0, "all_reduce", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size_bytes})
    write_compact_workload(str(prefix), ranks, [BlockShift(1, ranks, ranks)],
                           [(0, encode_et(make_metadata(), [node]))], generator="test_platform_fit")
    return str(prefix)


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_a_job_smaller_than_a_node_runs_on_a_partial_node(tmp_path, ranks):
    prefix = all_reduce(tmp_path / "w", ranks)
    report = astra_sim.simulate(workload=prefix, platform="hgx-h100")
    assert report.settings["platform"] == {"name": "hgx-h100", "nodes": 1, "devices_per_node": ranks}
    assert report.settings["npus_per_dim"] == [ranks] and len(report.ranks) == ranks
    # the same as the platform with that many GPUs per node, asked for explicitly
    smaller = get_platform("hgx-h100").variant(gpus_per_node=ranks)
    assert astra_sim.simulate(workload=prefix, platform=smaller, nodes=1).max_finish_ns == report.max_finish_ns
    if ranks > 1:  # NVLink between the job's GPUs, as in a full node
        full = astra_sim.simulate(workload=all_reduce(tmp_path / "f", 8), platform="hgx-h100")
        assert 0 < report.max_finish_ns < 2 * full.max_finish_ns


def test_nodes_follow_the_workload(tmp_path):
    prefix = all_reduce(tmp_path / "w", 16)
    assert workload_ranks(prefix) == 16
    inferred = astra_sim.simulate(workload=prefix, platform="hgx-h100")
    explicit = astra_sim.simulate(workload=prefix, platform="hgx-h100", nodes=2)
    assert inferred.settings["platform"]["nodes"] == 2
    assert inferred.max_finish_ns == explicit.max_finish_ns


def test_what_does_not_fit_says_what_would(tmp_path):
    h100 = get_platform("hgx-h100")
    with pytest.raises(ConfigError, match=r"--nodes 1 of hgx-h100 is 8 devices but the workload has 16 ranks: leave "
                                          r"--nodes out \(it follows the workload\) or give --nodes 2"):
        fit_workload(h100, 1, 16, {})
    with pytest.raises(ConfigError, match=r"12 ranks are not whole hgx-h100 nodes of 8 devices: generate it for 1 or "
                                          r"2 nodes \(8 or 16 ranks\)"):
        fit_workload(h100, None, 12, {})
    with pytest.raises(ConfigError, match=r"--tpu-topology AxB with 4 chips"):
        fit_workload(get_platform("tpu-v3"), None, 4, {})
    tpu, nodes = fit_workload(get_platform("tpu-v3"), None, 8, {"tpu_topology": "2x4"})
    assert nodes == 1 and tpu.devices_per_node({"tpu_topology": "2x4"}) == 8
    assert fit_workload(h100, None, None, {}) == (h100, 1)  # a workload whose ranks cannot be counted: one node
    prefix = all_reduce(tmp_path / "w", 12)
    with pytest.raises(ConfigError, match="not whole hgx-h100 nodes"):
        astra_sim.simulate(workload=prefix, platform="hgx-h100")


def test_the_command_line_fits_the_same_way(tmp_path, capsys):
    from astra_sim.cli import main

    prefix = all_reduce(tmp_path / "w", 2)
    assert main(["run", "--workload-configuration", prefix, "--platform", "dgx-a100", "--json"]) == 0
    assert '"devices_per_node": 2' in capsys.readouterr().out
    assert main(["run", "--workload-configuration", prefix, "--platform", "dgx-a100", "--nodes", "3", "-q"]) == 2
    assert "--nodes 3 of dgx-a100 is 24 devices but the workload has 2 ranks" in capsys.readouterr().err
