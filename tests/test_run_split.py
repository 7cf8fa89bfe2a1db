"""The pieces of a run (astra_sim.run): what the lifecycle hooks see, what the system layer
shares, and the backend capabilities declared in astra_sim.api."""

import pytest

from astra_sim import hookimpl
from astra_sim.api import (
    Foldable, StatelessNetwork, SymmetricNetwork, delay_function, in_switch_query, is_foldable, network_stats,
    symmetry_dims,
)
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.run.view import RunView
from astra_sim.simulation import Simulation
from astra_sim.system.context import SharedContext
from astra_sim_testing import write_network_config, write_system_config


@pytest.fixture
def case(tmp_path):
    prefix = tmp_path / "w"
    for rank in range(4):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [
            make_node(1, "k", T.COMP_NODE, duration_micros=3),
            make_node(2, "ar", T.COMM_COLL_NODE, data_deps=[1], attrs={"comm_type": T.ALL_REDUCE, "comm_size": 4096}),
        ])
    system = write_system_config(tmp_path / "sys.json", 1, "ring")
    network = write_network_config(tmp_path / "net.yml", ["Ring"], [4], [50.0], [500.0])
    return str(prefix), str(system), str(network)


def test_hooks_get_one_read_only_view_with_plugin_state(case):
    seen = {}

    class Plugin:
        @hookimpl
        def astra_run_start(self, run):
            seen["start"] = run
            run.plugin_state["mine"] = {"npus": run.total_npus, "now": run.now_ns}
            with pytest.raises(AttributeError, match="read-only"):
                run.memory_summary = 1
            with pytest.raises(TypeError):
                run.options["x"] = 1
            run.warn("from the plugin")

        @hookimpl
        def astra_run_finish(self, run, report):
            assert run is seen["start"]
            report.stats["mine"] = dict(run.plugin_state["mine"], end=run.now_ns)

    report = Simulation(*case, extra_plugins=[Plugin()]).run()
    view = seen["start"]
    assert isinstance(view, RunView)
    assert report.stats["mine"] == {"npus": 4, "now": 0, "end": report.max_finish_ns}
    assert "from the plugin" in report.warnings
    assert view.npus_per_dim == (4,) and view.compute_model_name == "replay"
    assert view.symmetry is not None and view.fold["simulated_ranks"] == 1  # a ring of identical ranks folds


def test_system_layer_shares_the_narrow_context_only(case):
    sim = Simulation(*case, fold=False)
    sim.run()
    shared = sim.systems[0].shared
    assert isinstance(shared, SharedContext) and shared is sim.workloads[3].shared
    assert shared.total_npus == 4 and shared.symmetry is None
    with pytest.raises(AttributeError):
        shared.scratch = 1  # no attributes beyond the declared ones


def test_capabilities_are_declared_and_can_be_withdrawn():
    class Net:
        def delay_ns(self, src, dst, size_bytes):
            return 7

        def symmetry_dims(self):
            return ("any",)

        def stats(self):
            return {"links": []}

    class Withdrawn(Net):
        delay_ns = None
        symmetry_dims = None

    class Memory:
        @property
        def foldable(self):
            return False

    assert isinstance(Net(), StatelessNetwork) and isinstance(Net(), SymmetricNetwork)
    assert delay_function(Net())(0, 1, 8) == 7 and symmetry_dims(Net()) == ["any"]
    assert network_stats(Net()) == {"links": []} and network_stats(object()) == {}
    assert delay_function(Withdrawn()) is None and symmetry_dims(Withdrawn()) is None
    assert in_switch_query(Net()) is None
    assert isinstance(Memory(), Foldable) and not is_foldable(Memory()) and not is_foldable(object())

