"""Plugin discovery, selection and the backend registry (core/astra_sim/plugins.py).

The plugins here are in-test objects (pluggy names them by their ``__name__``)
registered through ``extra_plugins``; entry points are faked by monkeypatching
``astra_sim.plugins._entry_points``.
"""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint

import pytest

from astra_sim import hookimpl, plugins as plugins_mod
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.errors import PluginError
from astra_sim.plugins import GROUP, Registry, build_registry, make_plugin_manager, parse_plugin_args
from astra_sim.simulation import Simulation, simulate
from astra_sim_testing import system_config, reduction_ns

MIB = 1 << 20

SYSTEM = system_config()


def r_red(m):
    return reduction_ns(m)


def const_ar_ns(delay, npus=4):
    """Ring all-reduce of 1 MiB, p = 4, every message taking ``delay`` ns."""
    m = MIB // 4 // npus
    return 4 * (2 * (npus - 1) * delay + (2 * npus - 1) * 10 + (npus - 1) * r_red(m))


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch):
    monkeypatch.delenv("ASTRA_PLUGINS", raising=False)


@pytest.fixture
def files(tmp_path):
    system = tmp_path / "sys.json"
    system.write_text(json.dumps(SYSTEM))
    net = tmp_path / "net.yml"
    net.write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 100.0 ]\nlatency: [ 200.0 ]\n")
    prefix = tmp_path / "ar"
    for rank in range(4):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [
            make_node(1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": T.ALL_REDUCE, "comm_size": MIB})])
    return {"dir": tmp_path, "system": str(system), "net": str(net), "ar": str(prefix)}


class ConstNetwork:
    """A network where every message takes ``delay`` ns (only ``send``: no closed form)."""

    def __init__(self, context, delay, npus):
        self.engine = context.engine
        self.delay = delay
        self.npus_per_dim = [npus]
        self.sends = 0

    def send(self, src, dst, size, fn, arg):
        self.sends += 1
        self.engine.schedule(self.delay, fn, arg)

    def describe(self):
        return {"backend": "const", "delay_ns": self.delay}


class ClosedFormNetwork(ConstNetwork):
    """Same, but stateless: the kernel memoises ``delay_ns`` and schedules arrivals itself."""

    def delay_ns(self, src, dst, size):
        return self.delay


class NetworkPlugin:
    def __init__(self, plugin_name, backend_name, delay, npus=4, cls=ConstNetwork):
        self.__name__ = plugin_name
        self.backend_name = backend_name
        self.delay = delay
        self.npus = npus
        self.cls = cls
        self.built = []

    def factory(self, context):
        net = self.cls(context, self.delay, self.npus)
        self.built.append(net)
        return net

    @hookimpl
    def astra_register_network_backends(self, registry):
        registry.network_backend(self.backend_name, self.factory, f"constant {self.delay} ns")


# ---------------------------------------------------------------- registry


def test_duplicate_name_across_two_plugins_names_both():
    pm = make_plugin_manager([], (), [NetworkPlugin("alpha_plugin", "dup", 1), NetworkPlugin("beta_plugin", "dup", 2)])
    with pytest.raises(PluginError) as info:
        build_registry(pm)
    message = str(info.value)
    assert "'dup'" in message
    assert "'alpha_plugin'" in message and "'beta_plugin'" in message
    assert "network backend" in message


def test_duplicate_of_a_builtin_name_names_builtin():
    class ReplayAgain:
        __name__ = "replay_again"

        @hookimpl
        def astra_register_compute_models(self, registry):
            registry.compute_model("replay", object())

    with pytest.raises(PluginError, match=r"'replay'.*'builtin' and 'replay_again'"):
        build_registry(make_plugin_manager([], (), [ReplayAgain()]))


def test_same_name_in_different_roles_is_fine():
    class Both:
        __name__ = "both"

        @hookimpl
        def astra_register_network_backends(self, registry):
            registry.network_backend("x", object())

        @hookimpl
        def astra_register_memory_backends(self, registry):
            registry.memory_backend("x", object())

    registry = build_registry(make_plugin_manager([], (), [Both()]))
    assert registry.get("network_backend", "x").plugin == "both"
    assert registry.get("memory_backend", "x").plugin == "both"


def test_registry_direct_use():
    registry = Registry()
    registry.current_plugin = "one"
    registry.network_backend("n", "factory1", "first")
    registry.current_plugin = "two"
    with pytest.raises(PluginError, match="'one' and 'two'"):
        registry.network_backend("n", "factory2")
    with pytest.raises(PluginError, match="empty name"):
        registry.compute_model("", "f")
    entry = registry.get("network_backend", "n")
    assert (entry.factory, entry.plugin, entry.description) == ("factory1", "one", "first")
    with pytest.raises(PluginError, match=r"no compute model named 'zzz'; available: none"):
        registry.get("compute_model", "zzz")
    assert registry.names("network_backend") == ["n"]


def test_registry_attributes_entries_to_their_plugin():
    registry = build_registry(make_plugin_manager(["network_analytical"]))
    assert registry.get("network_backend", "analytical").plugin == "network_analytical"
    assert registry.get("collective_algorithm", "ring").plugin == "collectives_native"  # loaded by default
    assert registry.names("memory_backend") == ["none"]


def test_parse_plugin_args():
    assert parse_plugin_args([]) == (None, [])
    assert parse_plugin_args(["a", "no:b,c", " "]) == (["a", "c"], ["b"])
    assert parse_plugin_args(["no:x"]) == (None, ["x"])


# ---------------------------------------------------------------- selection by name


@pytest.mark.parametrize("order", ["a_first", "b_first"])
def test_backend_is_selected_by_name_not_registration_order(files, order):
    a = NetworkPlugin("plugin_a", "net_a", 100)
    b = NetworkPlugin("plugin_b", "net_b", 300)
    extra = [a, b] if order == "a_first" else [b, a]
    report = simulate(files["ar"], files["system"], "unused.yml", extra_plugins=extra, network_backend="net_b")
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(300)] * 4
    assert len(b.built) == 1 and a.built == []
    report = simulate(files["ar"], files["system"], "unused.yml", extra_plugins=extra, network_backend="net_a")
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(100)] * 4


def test_default_network_backend_stays_analytical_with_extra_plugins(files):
    extra = NetworkPlugin("plugin_late", "late", 5)
    report = simulate(files["ar"], files["system"], files["net"], extra_plugins=[extra])
    assert report.settings["network_backend"] == "analytical"
    assert extra.built == []
    # Ring-4, 100 GB/s, 200 ns: T(65536) = 810
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(810)] * 4


# ---------------------------------------------------------------- in-test backends


@pytest.mark.parametrize("cls", [ConstNetwork, ClosedFormNetwork], ids=["send", "delay_ns"])
def test_in_test_network_backend_via_extra_plugins(files, cls):
    plugin = NetworkPlugin("const_plugin", "const", 1000, cls=cls)
    report = simulate(files["ar"], files["system"], "unused.yml", plugins=[], extra_plugins=[plugin],
                      network_backend="const")
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(1000)] * 4
    assert report.settings["network_backend"] == "const"
    assert report.settings["network"] == {"backend": "const", "delay_ns": 1000}
    assert report.settings["memory_backend"] == "none"  # memory_analytical not selected
    net = plugin.built[0]
    if cls is ConstNetwork:
        # 4 ranks x 4 chunks x 6 messages, every one through send().
        assert net.sends == 4 * 4 * 6
    else:
        assert net.sends == 0


def test_in_test_network_sets_the_npu_count(files, tmp_path):
    # The network backend decides how many NPUs run: 2 here, so ranks 2 and 3's files are unused.
    plugin = NetworkPlugin("two", "two", 50, npus=2)
    report = simulate(files["ar"], files["system"], "unused.yml", extra_plugins=[plugin], network_backend="two")
    assert len(report.ranks) == 2
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(50, npus=2)] * 2


def test_in_test_compute_model_and_lifecycle_hooks(files, tmp_path):
    events = []

    class Plugin:
        __name__ = "compute_plugin"

        @hookimpl
        def astra_register_compute_models(self, registry):
            class Fixed:
                def __init__(self, context):
                    pass

                def compute_time_ns(self, node, rank):
                    return 123 * (rank + 1)

            registry.compute_model("fixed", Fixed)

        @hookimpl
        def astra_run_start(self, run):
            events.append(("start", run.total_npus))

        @hookimpl
        def astra_run_finish(self, run, report):
            events.append(("finish", report.max_finish_ns))

    prefix = tmp_path / "c"
    for rank in range(4):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [make_node(1, "k", T.COMP_NODE, duration_micros=9)])
    report = simulate(str(prefix), files["system"], files["net"], extra_plugins=[Plugin()], compute_model="fixed")
    assert [r.finish_ns for r in report.ranks] == [123, 246, 369, 492]
    assert events == [("start", 4), ("finish", 492)]


def test_unknown_backend_name_lists_available(files):
    with pytest.raises(PluginError, match=r"no network backend named 'nope'; available: analytical"):
        simulate(files["ar"], files["system"], files["net"], network_backend="nope")


def test_plugin_with_unknown_hook_is_rejected():
    class Bad:
        __name__ = "bad_hooks"

        @hookimpl
        def astra_register_everything(self, registry):
            pass

    with pytest.raises(PluginError, match=r"is invalid: unknown hook 'astra_register_everything'"):
        make_plugin_manager([], (), [Bad()])


# ---------------------------------------------------------------- entry points


def _with_fake_entry_point(monkeypatch, name, value):
    real = plugins_mod._entry_points()
    fake = EntryPoint(name=name, value=value, group=GROUP)
    monkeypatch.setattr(plugins_mod, "_entry_points", lambda: real + [fake])


def test_plugin_whose_module_fails_to_import(files, monkeypatch):
    _with_fake_entry_point(monkeypatch, "broken_plugin", "astra_no_such_module_xyz:plugin")
    with pytest.raises(PluginError) as info:
        simulate(files["ar"], files["system"], files["net"])
    message = str(info.value)
    assert "'broken_plugin'" in message
    assert "failed to import" in message
    assert "astra_no_such_module_xyz" in message
    assert "-p no:broken_plugin" in message
    # Blocking it, or selecting others only, runs normally.
    report = simulate(files["ar"], files["system"], files["net"], block=["broken_plugin"])
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(810)] * 4
    report = simulate(files["ar"], files["system"], files["net"], plugins=["network_analytical"])
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(810)] * 4


def test_plugin_import_failure_through_the_cli(files, monkeypatch, capsys):
    _with_fake_entry_point(monkeypatch, "broken_plugin", "astra_no_such_module_xyz:plugin")
    args = ["run", "--workload-configuration", files["ar"], "--system-configuration", files["system"],
            "--network-configuration", files["net"], "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "-p no:broken_plugin" in err and "Traceback" not in err
    assert main(args + ["-p", "no:broken_plugin"]) == 0
    assert main(["plugins", "--json", "-p", "no:broken_plugin"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["broken_plugin"]["status"] == "blocked"


def test_plugin_that_raises_on_import(files, monkeypatch, tmp_path):
    (tmp_path / "astra_test_exploding_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _with_fake_entry_point(monkeypatch, "exploding", "astra_test_exploding_plugin")
    with pytest.raises(PluginError, match=r"'exploding'.*failed to import: boom at import; use -p no:exploding"):
        simulate(files["ar"], files["system"], files["net"])


def test_entry_point_plugin_is_loaded_by_name(files, monkeypatch, tmp_path):
    (tmp_path / "astra_test_const_plugin.py").write_text(
        "from astra_sim import hookimpl\n"
        "class Net:\n"
        "    def __init__(self, context):\n"
        "        self.npus_per_dim = [4]\n"
        "    def delay_ns(self, src, dst, size):\n"
        "        return 700\n"
        "    def describe(self):\n"
        "        return {}\n"
        "@hookimpl\n"
        "def astra_register_network_backends(registry):\n"
        "    registry.network_backend('const700', Net)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _with_fake_entry_point(monkeypatch, "const_ep", "astra_test_const_plugin")
    report = simulate(files["ar"], files["system"], "unused.yml", plugins=["const_ep"], network_backend="const700")
    assert [r.finish_ns for r in report.ranks] == [const_ar_ns(700)] * 4
    assert "const_ep" in report.settings["plugins"]
    assert "network_analytical" not in report.settings["plugins"]


def test_two_distributions_declaring_one_plugin_name(monkeypatch):
    real = plugins_mod._entry_points()
    dup = EntryPoint(name="network_analytical", value="astra_network_analytical.plugin", group=GROUP)
    monkeypatch.setattr(plugins_mod, "_entry_points", lambda: real + [dup])
    with pytest.raises(PluginError, match="'network_analytical' is declared by two distributions"):
        make_plugin_manager()


class SynchronousNetwork(ConstNetwork):
    """Delivers every message inside ``send`` itself (zero time, no event): the send's completion, and
    the next issue pass it starts, run while the workload layer is still issuing."""

    def send(self, src, dst, size, fn, arg):
        self.sends += 1
        fn(arg)


def test_network_that_delivers_inside_send_issues_every_node_once(files):
    prefix = files["dir"] / "sync"
    for rank in range(2):
        if rank == 0:
            nodes = [make_node(i, f"send{i}", T.COMM_SEND_NODE, attrs={"comm_dst": 1, "comm_size": 64, "comm_tag": i})
                     for i in (1, 2, 3)]
            nodes.append(make_node(4, "comp", T.COMP_NODE, duration_micros=5, data_deps=[2]))
        else:
            nodes = [make_node(i, f"recv{i}", T.COMM_RECV_NODE, attrs={"comm_src": 0, "comm_size": 64, "comm_tag": i})
                     for i in (1, 2, 3)]
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    plugin = NetworkPlugin("sync_plugin", "sync", 0, npus=2, cls=SynchronousNetwork)
    sim = Simulation(str(prefix), files["system"], "unused.yml", extra_plugins=[plugin], network_backend="sync")
    seen = []
    sim.record_node = lambda rank, node, start, end: seen.append((rank, node.id, start, end))
    report = sim.run()
    assert plugin.built[0].sends == 3
    assert sorted(seen) == [(0, 1, 0, 0), (0, 2, 0, 0), (0, 3, 0, 0), (0, 4, 0, 5000),
                            (1, 1, 0, 0), (1, 2, 0, 0), (1, 3, 0, 0)]
    assert [r.finish_ns for r in report.ranks] == [5000, 0]


def test_compute_model_sees_the_communication_in_flight(files, tmp_path):
    """``context.comm_nodes_in_flight(rank)``: the running collectives and sends as nodes (a posted
    receive is not one); ``comm_in_flight(rank)`` counts them."""
    seen = []

    class Plugin:
        __name__ = "sees_comm"

        @hookimpl
        def astra_register_compute_models(self, registry):
            class Watching:
                def __init__(self, context):
                    self.context = context

                def compute_time_ns(self, node, rank):
                    nodes = self.context.comm_nodes_in_flight(rank)
                    seen.append((rank, node.name, sorted(n.name for n in nodes),
                                 self.context.comm_in_flight(rank)))
                    return 10

            registry.compute_model("watching", Watching)

    prefix = tmp_path / "w"
    for rank in range(4):
        peer = rank ^ 1
        write_et(f"{prefix}.{rank}.et", make_metadata(), [
            make_node(1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": T.ALL_REDUCE, "comm_size": MIB}),
            make_node(2, "recv", T.COMM_RECV_NODE, attrs={"comm_src": peer, "comm_size": 64, "comm_tag": 7}),
            make_node(3, "during", T.COMP_NODE, duration_micros=1),
            make_node(4, "send", T.COMM_SEND_NODE, data_deps=[3],
                      attrs={"comm_dst": peer, "comm_size": 64, "comm_tag": 7}),
            make_node(5, "after", T.COMP_NODE, data_deps=[1, 2, 4], duration_micros=1),
        ])
    simulate(str(prefix), files["system"], files["net"], extra_plugins=[Plugin()], compute_model="watching")
    for rank in range(4):
        mine = [s[1:] for s in seen if s[0] == rank]
        assert mine == [("during", ["ar"], 1), ("after", [], 0)]  # (the receive was posted during both)
