"""The kernel's custom-collective plumbing, with an in-test format plugin.

A custom collective is one stream with one phase; its path comes from ``*-implementation-custom``
(relative to the system config) or from ``per-node-custom-implementation``; the first installed
format whose ``matches(path)`` says yes loads it.
"""

import json

import pytest

from astra_sim import hookimpl
from astra_sim.api import CollectiveAlgorithmSpec
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim.system.collectives import Algorithm
from astra_sim_testing import system_config, write_network_config

MIB = 1 << 20


class PairExchange(Algorithm):
    """Toy algorithm: every rank sends ``data_size`` bytes to its neighbour, done on arrival."""

    __slots__ = ("rank", "peer_to", "peer_from", "pending")

    def __init__(self, com_type, rank, position, group_npus, data_size):
        self.com_type = com_type
        self.data_size = data_size
        self.final_data_size = data_size
        npus = group_npus or list(range(8))
        self.rank = rank
        self.peer_to = npus[(position + 1) % len(npus)]
        self.peer_from = npus[(position - 1) % len(npus)]
        self.pending = 2

    def run_init(self):
        self.sys.native_send(self.peer_to, self.data_size, 3, self._done, None)
        self.sys.native_recv(self.peer_from, self.data_size, 3, self._done, None)

    def run_general(self, _arg=None):
        pass

    def run_received(self, _arg=None):
        pass

    def _done(self, _arg):
        self.pending -= 1
        if self.pending == 0:
            self.finish()


class ToyCustom:
    def __init__(self, path):
        self.path = path

    def make_algorithm(self, com_type, rank, position, group_npus, data_size):
        return PairExchange(com_type, rank, position, group_npus, data_size)


class ToyFormat:
    loaded = []

    def matches(self, path):
        return path.endswith(".toy")

    def load(self, path, context):
        with open(path) as handle:
            assert handle.read().strip() == "toy"
        ToyFormat.loaded.append(path)
        return ToyCustom(path)


class ToyPlugin:
    @hookimpl
    def astra_register_collective_algorithms(self, registry):
        registry.collective_algorithm("toy", CollectiveAlgorithmSpec("custom", ToyFormat()))


#: Only the analytical network and the toy format (installed custom-format plugins stay out).
ONLY_TOY = {"plugins": ["network_analytical"], "extra_plugins": [ToyPlugin()]}


def _setup(tmp_path, system_extra, nodes=None):
    (tmp_path / "algo.toy").write_text("toy\n")
    system = system_config(**{})
    system.update(system_extra)
    (tmp_path / "conf").mkdir(exist_ok=True)
    system_path = tmp_path / "conf" / "system.json"
    system_path.write_text(json.dumps(system))
    network = write_network_config(tmp_path / "net.yml", ("FullyConnected",), (8,), (50.0,), (500.0,))
    nodes = nodes or [make_node(5, "ar", T.COMM_COLL_NODE,
                                attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB})]
    for rank in range(8):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return str(tmp_path / "t"), str(system_path), network


def _one_message_ns(size=MIB):
    return int(500 + size / (50 * (1 << 30) / 1e9))


def test_custom_collective_is_one_phase_with_the_whole_size(tmp_path):
    ToyFormat.loaded.clear()
    prefix, system, network = _setup(tmp_path, {"all-reduce-implementation-custom": ["../algo.toy"]})
    report = simulate(prefix, system, network, **ONLY_TOY)
    # No chunking, no endpoint delay: one message of the full size.
    assert {r.finish_ns for r in report.ranks} == {_one_message_ns()}
    assert ToyFormat.loaded == [str(tmp_path / "conf" / "../algo.toy")]


def test_custom_path_falls_back_to_the_working_directory(tmp_path, monkeypatch):
    prefix, system, network = _setup(tmp_path, {"all-reduce-implementation-custom": ["algo.toy"]})
    monkeypatch.chdir(tmp_path)  # algo.toy is not beside the system config, but in the cwd
    report = simulate(prefix, system, network, **ONLY_TOY)
    assert report.max_finish_ns == _one_message_ns()


def test_per_node_custom_implementation_applies_to_that_node_only(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "per_node.yaml").write_text("7: ../algo.toy\n")
    nodes = [
        make_node(5, "ar_native", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB}),
        make_node(7, "ar_custom", T.COMM_COLL_NODE, data_deps=[5],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": MIB}),
    ]
    prefix, system, network = _setup(tmp_path, {"per-node-custom-implementation": "per_node.yaml"}, nodes)
    (tmp_path / "native").mkdir()
    native = simulate(*_setup(tmp_path / "native", {}, nodes[:1]), plugins=["network_analytical"]).max_finish_ns
    report = simulate(prefix, system, network, **ONLY_TOY)
    assert report.max_finish_ns == native + _one_message_ns()


def test_custom_collectives_need_no_dataset_splits(tmp_path):
    system = {"all-reduce-implementation-custom": ["../algo.toy"]}
    prefix, system_path, network = _setup(tmp_path, system)
    data = json.loads(open(system_path).read())
    del data["preferred-dataset-splits"]
    open(system_path, "w").write(json.dumps(data))
    assert simulate(prefix, system_path, network, **ONLY_TOY).max_finish_ns == _one_message_ns()


def test_no_format_for_the_custom_path_is_a_clear_error(tmp_path):
    prefix, system, network = _setup(tmp_path, {"all-reduce-implementation-custom": ["../algo.unknown"]})
    with pytest.raises(ConfigError) as info:
        simulate(prefix, system, network, **ONLY_TOY)
    message = str(info.value)
    assert "algo.unknown" in message and "system.json" in message and "toy" in message


def test_a_custom_format_name_is_not_a_native_algorithm(tmp_path):
    prefix, system, network = _setup(tmp_path, {"all-reduce-implementation": ["toy"]})
    with pytest.raises(ConfigError, match="custom collective format"):
        simulate(prefix, system, network, **ONLY_TOY)


def test_custom_collectives_of_different_communicators_overlap_with_per_communicator_streams(tmp_path):
    # two custom all-reduces on groups 1 and 2 (both all 8 NPUs), independent of each other
    nodes = [make_node(i, f"ar{i}", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                          "comm_size": MIB, "pg_name": str(i)}) for i in (1, 2)]
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": list(range(8)), "2": list(range(8))}))
    finish = {}
    for streams in ("single", "per-communicator"):
        (tmp_path / streams).mkdir()
        prefix, system, network = _setup(tmp_path / streams, {"all-reduce-implementation-custom": ["../algo.toy"],
                                                              "comm-streams": streams}, nodes)
        finish[streams] = simulate(prefix, system, network, None, str(groups), **ONLY_TOY).max_finish_ns
    assert finish == {"single": 2 * _one_message_ns(), "per-communicator": _one_message_ns()}
