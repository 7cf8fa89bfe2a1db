"""The plugin as users meet it: the seven names and their specs, loaded by default, ``astra plugins``, a run, and
the error when it is blocked or missing."""

from __future__ import annotations

import json

import pytest
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.plugins import build_registry, make_plugin_manager
from astra_sim.simulation import simulate
from astra_sim_testing import reduction_ns, write_network_config, write_system_config

from astra_collectives_native import plugin

MIB = 1 << 20
BW, LAT = 100.0, 200.0

#: name -> (topology, takes_window, symmetry): what the kernel's builtin registered before the move (halving-doubling
#: declares "xor" since issue 37: its partners are the index XOR 2^k)
SPECS = {
    "ring": ("ring", False, "rotation"),
    "oneRing": ("one", False, "rotation"),
    "direct": ("ring", True, "rotation"),
    "oneDirect": ("one", True, "rotation"),
    "halvingDoubling": ("ring", False, "xor"),
    "oneHalvingDoubling": ("one", False, "xor"),
    "doubleBinaryTree": ("tree", False, None),
}


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch):
    monkeypatch.delenv("ASTRA_PLUGINS", raising=False)


def test_registers_the_seven_names_with_their_specs():
    registry = build_registry(make_plugin_manager(select=[]))
    entries = registry.entries["collective_algorithm"]
    assert {entries[name].plugin for name in SPECS} == {"collectives_native"}
    for name, (topology, takes_window, symmetry) in SPECS.items():
        spec = entries[name].factory
        assert (spec.topology, spec.takes_window, spec.symmetry) == (topology, takes_window, symmetry), name
        assert not spec.whole_group and spec.exchanges_messages


@pytest.mark.parametrize("select", [[], ["network_analytical"], ["collectives_native", "network_analytical"]])
def test_loaded_by_default_even_when_p_names_other_plugins(select):
    pm = make_plugin_manager(select=select)
    assert pm.get_plugin("collectives_native") is plugin
    assert set(SPECS) <= set(build_registry(pm).names("collective_algorithm"))


def test_blocking_it_removes_the_names():
    registry = build_registry(make_plugin_manager(block=["collectives_native"]))
    assert not set(SPECS) & set(registry.names("collective_algorithm"))


@pytest.fixture
def case(tmp_path):
    """Ring-4 (100 GB/s, 200 ns), every rank one 1 MiB all-reduce, the reference's usual system config."""
    for rank in range(4):
        write_et(str(tmp_path / f"ar.{rank}.et"), make_metadata(),
                 [make_node(1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": T.ALL_REDUCE, "comm_size": MIB})])
    system = write_system_config(tmp_path / "sys.json")
    network = write_network_config(tmp_path / "net.yml", ("Ring",), (4,), (BW,), (LAT,))
    return str(tmp_path / "ar"), system, network


def ring_all_reduce_ns():
    """p = 4 chunks of 256 KiB, each 2(n-1) messages of m = 64 KiB: 6 T(m) + 7 E + 3 R(m) per chunk."""
    m = MIB // 16
    t = int(LAT + m / (BW * (1 << 30) / 1e9))
    return 4 * (6 * t + 7 * 10 + 3 * reduction_ns(m))


def test_a_run_with_only_the_network_plugin_named_uses_the_native_ring(case):
    report = simulate(*case, plugins=["network_analytical"])
    assert {rank.finish_ns for rank in report.ranks} == {ring_all_reduce_ns()}


def test_a_run_without_it_says_to_install_it(case):
    with pytest.raises(ConfigError, match=r"unknown collective algorithm 'ring'.*collectives_native plugin"):
        simulate(*case, block=["collectives_native"])


def test_cli_plugins_lists_it(capsys):
    assert main(["plugins", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    row = rows["collectives_native"]
    assert row["status"] == "loaded" and row["distribution"] == "astra-collectives-native"
    assert row["provides"] == sorted(f"collective_algorithm:{name}" for name in SPECS)
    assert row["hooks"] == ["astra_register_collective_algorithms"]


def test_cli_blocked_is_a_one_line_error(case, capsys):
    prefix, system, network = case
    rc = main(["-p", "no:collectives_native", "run", "--workload-configuration", prefix,
               "--system-configuration", system, "--network-configuration", network, "-q"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "sys.json" in err and "install" in err and "collectives_native" in err


@pytest.mark.parametrize("backend", ["analytical", "congestion"])
def test_an_unfolded_ring_posts_on_shared_channels_and_releases_them(case, backend, monkeypatch):
    """Issue 37: a ring posts every step on one matcher channel per direction (astra_collectives_native.channel), the
    same object on the sender's and the receiver's side, and gives them back when its phase ends; the ns are the
    hand-counted ones on either backend (one hop per message: the congestion backend's link is never busy here).

    Watched from interpreted code only, so that it holds under a compiled tree too (tools/compile_core.py binds
    ``open_channel`` into the compiled ring): the plugin's factory (read when the registry is built) records each
    ring, and the matcher's ``channels`` dict records what opens and closes (mypyc writes a dict subclass through
    its methods); each ring's two channels are read, once set, when the next ring is made or a channel opens or
    closes."""
    from astra_sim.run import build
    from astra_sim.system.frontend import SendRecvMatcher

    from astra_collectives_native import ring

    rings, seen, opened, closed, matchers = [], {}, [], [], []

    def look():
        for r in rings:
            if id(r) not in seen and r._send_on is not None and r._recv_on is not None:
                seen[id(r)] = (r._send_on, r._recv_on)

    class Channels(dict):
        def __setitem__(self, key, channel):
            look()
            opened.append(channel)
            super().__setitem__(key, channel)

        def __delitem__(self, key):
            look()
            closed.append((self[key], self[key].users))
            super().__delitem__(key)

    def matcher(engine, network):
        m = SendRecvMatcher(engine, network)
        m.channels = Channels()
        matchers.append(m)
        return m

    monkeypatch.setattr(build, "SendRecvMatcher", matcher)
    monkeypatch.setattr(plugin, "make_ring", lambda *a: look() or rings.append(ring.make_ring(*a)) or rings[-1])
    report = simulate(*case, network_backend=backend, fold=False)
    assert {rank.finish_ns for rank in report.ranks} == {ring_all_reduce_ns()}
    # 4 ranks x 4 chunks, a send channel and a receive channel each; rank r's send channel is rank r+1's receive one
    assert len(rings) == 16 and len(seen) == 16
    sends, recvs = [s for s, _ in seen.values()], [r for _, r in seen.values()]
    assert len({id(c) for c in sends}) == 16 and {id(c) for c in sends} == {id(c) for c in recvs}
    assert all(s is not r and s.key[1] == rank.rank and r.key[2] == rank.rank
               for rank, (s, r) in zip(rings, (seen[id(x)] for x in rings)))
    # each opened once (the second ring shares it), closed once when neither uses it, its messages all matched
    assert sorted(id(c) for c in opened) == sorted(id(c) for c in sends)
    assert sorted(id(c) for c, _ in closed) == sorted(id(c) for c in sends) and {u for _, u in closed} == {0}
    assert len(matchers) == 1 and not matchers[0].channels and not matchers[0]._waiting
