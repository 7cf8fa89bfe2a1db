"""The combined workload: each job's ranks on its GPUs, its groups renumbered, idle GPUs empty."""

import json

import pytest
from astra_sim.chakra import read_et
from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError
from astra_workload_generators import generate_micro

from astra_cluster.workloads import JobWorkload, write_combined


def test_peers_and_groups_are_the_cluster_s(tmp_path):
    generate_micro(tmp_path / "p2p", npus=2, p2p="shift", size=1024)
    generate_micro(tmp_path / "ar", npus=2, collective="all_reduce", size=4096)
    placed = [(JobWorkload(str(tmp_path / "p2p"), 2), [5, 1]), (JobWorkload(str(tmp_path / "ar"), 2), [2, 6])]
    out = write_combined(str(tmp_path / "c" / "t"), 8, placed)
    groups = json.loads(open(out["comm_groups"]).read())
    assert groups == {"1": [5, 1], "2": [2, 6]}  # each job's default group: its own GPUs, in rank order
    sends = [n for n in read_et(tmp_path / "c" / "t.5.et").nodes if n.type == T.COMM_SEND_NODE]
    assert [n.attrs["comm_dst"] for n in sends] == [1]
    recvs = [n for n in read_et(tmp_path / "c" / "t.5.et").nodes if n.type == T.COMM_RECV_NODE]
    assert [n.attrs["comm_src"] for n in recvs] == [1]
    coll = read_et(tmp_path / "c" / "t.6.et").nodes
    assert [n.attrs["pg_name"] for n in coll] == ["2"]
    for idle in (0, 3, 4, 7):
        assert read_et(tmp_path / "c" / f"t.{idle}.et").nodes == []


def test_a_job_on_every_gpu_keeps_the_default_group(tmp_path):
    generate_micro(tmp_path / "ar", npus=4, collective="all_reduce", size=4096)
    out = write_combined(str(tmp_path / "t"), 4, [(JobWorkload(str(tmp_path / "ar"), 4), [0, 1, 2, 3])])
    assert out["worlds"] == [None]
    assert "pg_name" not in read_et(tmp_path / "t.0.et").nodes[0].attrs


def test_job_groups_are_renumbered(tmp_path):
    generate_micro(tmp_path / "ar", npus=4, collective="all_reduce", size=4096)
    for rank in range(4):  # the job's collective runs on its group 7 = ranks {1, 3}
        et = read_et(tmp_path / f"ar.{rank}.et")
        et.nodes[0].set_attr("pg_name", "7")
        from astra_sim.chakra import write_et

        write_et(tmp_path / f"ar.{rank}.et", et.metadata, et.nodes)
    (tmp_path / "groups.json").write_text('{"7": [1, 3]}')
    job = JobWorkload(str(tmp_path / "ar"), 4, str(tmp_path / "groups.json"))
    out = write_combined(str(tmp_path / "t"), 8, [(job, [4, 5, 6, 7])])
    groups = json.loads(open(out["comm_groups"]).read())
    assert groups["1"] == [5, 7] and groups["2"] == [4, 5, 6, 7]
    assert read_et(tmp_path / "t.5.et").nodes[0].attrs["pg_name"] == "1"


@pytest.mark.parametrize("placed, message", [
    ([[0, 1], [1, 2]], "GPU 1 is given twice"),
    ([[0, 9]], "GPU 9 is not in the cluster"),
])
def test_bad_placements_are_refused(tmp_path, placed, message):
    generate_micro(tmp_path / "ar", npus=2, collective="all_reduce", size=4096)
    job = JobWorkload(str(tmp_path / "ar"), 2)
    with pytest.raises(ConfigError, match=message):
        write_combined(str(tmp_path / "t"), 8, [(job, gpus) for gpus in placed])
