"""Every InfraGraph sample in shared/samples/infragraph/generated loads and runs an all-reduce and an
all-to-all on the ``flow`` backend.

The blueprint samples give bandwidths only for the fabric links (e.g. 400/800 Gb/s between hosts and
switches) and no latencies; loading them as they are is an error naming the missing values (tested in
test_infragraph.py). Here a wrapper supplies them, the way a user would: datasheet-like bandwidths
per link name and one default latency.
"""

import json

import pytest
import yaml

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, write_system_config

SHARED = find_shared_dir()
GENERATED = SHARED / "samples" / "infragraph" / "generated" if SHARED else None
SAMPLES = sorted(p for p in GENERATED.glob("infra-*.yaml") if not p.name.endswith("annotation.yaml")) if GENERATED else []

# Bandwidths for links the blueprints leave without one (per direction).
DATASHEET = {"nvlink": "450 GB/s", "xpu_fabric": "450 GB/s", "pcie": "64 GB/s", "infinity": "128 GB/s",
             "cpu_fabric": "128 GB/s", "ici": "100 GB/s"}
DEFAULT_BANDWIDTH = "100 GB/s"


def _links_without_bandwidth(infrastructure):
    """Link names (``<device>/<link>`` for device links) that some edge uses but that have no
    physical bandwidth."""
    names = {}
    used = {edge.get("link") for edge in infrastructure.get("edges", []) or []}
    for link in infrastructure.get("links", []) or []:
        if link["name"] in used and not (link.get("physical") or {}).get("bandwidth"):
            names[link["name"]] = link.get("description", "")
    for device in infrastructure.get("devices", []) or []:
        device_used = {edge.get("link") for edge in device.get("edges", []) or []}
        for link in device.get("links", []) or []:
            if link["name"] in device_used and not (link.get("physical") or {}).get("bandwidth"):
                names[f"{device['name']}/{link['name']}"] = link.get("description", "")
    return names


def _bandwidth_for(name, description):
    text = f"{name} {description}".lower()
    for key, value in DATASHEET.items():
        if key in text:
            return value
    return DEFAULT_BANDWIDTH


def _write_wrapper(sample, folder):
    infrastructure = yaml.safe_load(sample.read_text())
    links = {name: {"bandwidth": _bandwidth_for(name, desc)}
             for name, desc in _links_without_bandwidth(infrastructure).items()}
    wrapper = {"infrastructure": str(sample), "default_link_latency_ns": 500, "links": links}
    annotation = sample.with_name(sample.stem + ".rank-annotation.yaml")
    if annotation.exists():
        wrapper["annotations"] = str(annotation)
    path = folder / "network.yaml"
    path.write_text(yaml.safe_dump(wrapper))
    return path


@pytest.mark.skipif(not SAMPLES, reason="shared/samples/infragraph/generated not found")
@pytest.mark.parametrize("sample", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_generated_sample_runs_all_reduce_and_all_to_all(tmp_path, sample):
    from astra_network_congestion.infragraph import load_network_graph

    network = _write_wrapper(sample, tmp_path)
    ranks = load_network_graph(str(network)).total_npus
    assert ranks >= 2
    system = write_system_config(tmp_path / "system.json", algorithm="ring", preferred_dataset_splits=1)
    size = 1 << 16
    nodes = [
        make_node(0, "all_reduce", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size}),
        make_node(1, "all_to_all", T.COMM_COLL_NODE, data_deps=[0],
                  attrs={"is_cpu_op": False, "comm_type": T.ALL_TO_ALL, "comm_size": size}),
    ]
    for rank in range(ranks):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    report = simulate(str(tmp_path / "t"), system, str(network), network_backend="flow")
    assert len(report.ranks) == ranks
    # Both collectives ran: every rank spent time communicating, and traffic crossed the links.
    assert all(r.comm_ns > 0 and r.finish_ns >= r.comm_ns for r in report.ranks)
    assert report.network_stats["links"], json.dumps(report.network_stats)[:200]
