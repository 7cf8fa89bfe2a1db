"""Link use over time (``--timeline``): the bins add up to what each link carried, and without a timeline the
backends record nothing (astra_analysis.links)."""

from __future__ import annotations

import gzip
import json

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import Simulation
from astra_sim_testing import write_network_config, write_system_config


def _case(tmp_path, npus=8):
    (tmp_path / "t").mkdir()
    for rank in range(npus):
        nodes = [make_node(0, "ar", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                              "comm_size": 1 << 22})]
        write_et(tmp_path / "t" / f"t.{rank}.et", make_metadata(), nodes)
    return (str(tmp_path / "t" / "t"), write_system_config(tmp_path / "system.json"),
            write_network_config(tmp_path / "net.yml", npus=(npus,)))


@pytest.mark.parametrize("backend", ["congestion", "flow"])
def test_bins_add_up_to_each_links_traffic(tmp_path, backend):
    args = _case(tmp_path)
    sim = Simulation(*args, network_backend=backend, timeline=str(tmp_path / "trace.json.gz"))
    report = sim.run()
    load = sim.output("timeline").link_load
    links = {row.get("link", i): row for i, row in enumerate(report.network_stats["links"])}
    assert load.bins
    for link, bins in load.bins.items():
        carried = sum(bins)  # ns x share of bandwidth
        if backend == "congestion":
            row = next(r for r in report.network_stats["links"]
                       if f"{r['src']} -> {r['dst']}" == load.name(link))
            assert carried == pytest.approx(row["busy_ns"], rel=1e-9)
        else:
            row = links[link]
            # flows end at whole nanoseconds (the backend truncates), so up to 1 ns x rate per flow is lost
            assert carried * row["bandwidth_bytes_per_ns"] == pytest.approx(row["bytes"], rel=1e-3)
    with gzip.open(tmp_path / "trace.json.gz", "rt") as handle:
        events = json.load(handle)["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} and all(0 <= e["args"]["utilisation"] <= 1 for e in counters)
    assert report.timeline["link_counters"] == len(load.bins)
    assert report.network_stats["link_utilisation"]["links"]


@pytest.mark.parametrize("backend", ["congestion", "flow"])
def test_no_timeline_no_link_recording(tmp_path, backend):
    args = _case(tmp_path)
    sim = Simulation(*args, network_backend=backend)
    report = sim.run()
    assert sim.output("timeline") is None and "link_utilisation" not in report.network_stats
    assert getattr(sim.network, "_link_load", None) is None


def test_coarsening_keeps_the_total():
    from astra_analysis.links import LinkLoad

    load = LinkLoad(width_ns=10, max_bins=8)
    load.add(0, 5, 25)  # 20 ns
    load.add(0, 70, 400, 0.5)  # 165 ns-equivalents, past the 80 ns the bins covered
    assert load.width == 80 and sum(load.bins[0]) == pytest.approx(185.0)
