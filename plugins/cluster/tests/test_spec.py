"""The cluster spec reader: every bad key is a one-line ConfigError naming the file and the key."""

import pytest
from astra_sim.errors import ConfigError
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_cluster.spec import load_cluster_spec, parse_cluster_spec

GOOD = {"platform": "hgx-h100", "nodes": 2,
        "jobs": [{"name": "a", "gpus": 8, "steps": 10, "arrival_s": 1.5,
                  "workload": {"llm": {"preset": "llama3-8b", "tp": 8}}}]}


def with_(**changes):
    data = dict(GOOD)
    data.update(changes)
    return data


def test_a_good_spec():
    spec = parse_cluster_spec(with_(horizon_h=24, failures={"node_mtbf_h": 100, "events": [{"at_h": 2, "node": 1}]},
                                    checkpoint={"interval_steps": 50, "restart_s": 60}), "/x/c.yaml")
    assert spec.jobs[0].arrival_ns == 1_500_000_000 and spec.horizon_ns == 24 * 3600 * 10**9
    assert spec.failures.events == [(2 * 3600 * 10**9, "node", 1)] and spec.failures.mtbf_h == {"node": 100}
    assert spec.checkpoint.interval_steps == 50 and spec.base_dir == "/x"


@pytest.mark.parametrize("data, message", [
    (with_(colour="red"), "unknown key 'colour'"),
    (with_(nodes=None), "key 'nodes' is required"),
    (with_(placement="best"), "key 'placement' must be one of contiguous, random, topology, fixed"),
    (with_(scheduler="lifo"), "key 'scheduler'"),
    (with_(jobs=[]), "key 'jobs' must be a non-empty list"),
    (with_(jobs=[{"name": "a", "gpus": 0, "workload": {"micro": {}}}]), "key 'jobs\\[0\\].gpus'"),
    (with_(jobs=[{"name": "a", "gpus": 2, "workload": {"trace": "x"}}]), "key 'jobs\\[0\\].workload'"),
    (with_(jobs=[{"name": "a", "gpus": 2, "workload": {"micro": {}}}] * 2), "names two jobs"),
    (with_(placement="fixed"), "'jobs\\[0\\].place' is required"),
    (with_(jobs=[{"name": "a", "gpus": 2, "place": [1, 1], "workload": {"micro": {}}}]), "jobs\\[0\\].place"),
    (with_(horizon_h=0), "key 'horizon_h' must be a finite number > 0"),
    (with_(failures={"events": [{"at_h": 1}]}), "failures.events\\[0\\]"),
    (with_(failures={"node_mtbf_h": -1}), "failures.node_mtbf_h"),
    (with_(failures={"switch_mtbf_h": 100}), "failures.nodes_per_switch' is required"),
    (with_(failures={"events": [{"at_h": 1, "link": 2, "gpu": 3}]}), "failures.events\\[0\\]"),
    (with_(checkpoint={"interval_steps": "often"}), "checkpoint.interval_steps"),
    (with_(stragglers={"sigma": 0.1, "table": [1.1]}), "sigma or table"),
    (with_(stragglers={"slow_gpus": {"x": 2}}), "stragglers.slow_gpus"),
    (with_(system="s.json"), "either platform"),
    (dict(with_(platform=None, nodes=None), system="s.json", network="n.txt", gpus=0), "key 'gpus'"),
])
def test_bad_keys_are_named(data, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_cluster_spec(data, "c.yaml")
    assert str(info.value).startswith("c.yaml: ") and "\n" not in str(info.value)


def test_a_file_that_is_not_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("jobs: [unclosed\n")
    with pytest.raises(ConfigError, match="c.yaml"):
        load_cluster_spec(path)


_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True)
                       | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
_keys = st.sampled_from(["platform", "nodes", "system", "network", "gpus_per_node", "network_backend", "run",
                         "placement", "scheduler", "seed", "corun", "jobs", "stragglers", "failures",
                         "checkpoint", "horizon_h", "other"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6) | _values)
def test_any_input_is_a_spec_or_a_config_error(data):
    try:
        parse_cluster_spec(data, "c.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("c.yaml")


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=6), "gpus": _values, "steps": _values, "arrival_s": _values, "place": _values,
    "checkpoint_bytes": _values, "workload": st.sampled_from([{"micro": {}}, {"chakra": "p"}]) | _values}))
def test_any_job_is_a_job_or_a_config_error(job):
    try:
        parse_cluster_spec(with_(jobs=[job]), "c.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("c.yaml")


_cable = st.lists(st.text(max_size=4) | st.integers(-2, 9) | st.booleans() | st.none(), max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "failed_links": st.lists(_cable, max_size=3) | _values,
    "fabric": st.fixed_dictionaries({}, optional={"nodes_per_leaf": _values, "oversubscription": _values,
                                                  "x": _values}) | _values,
    "checkpoint": st.fixed_dictionaries({}, optional={"storage_write_gb_per_s": _values,
                                                      "node_write_gb_per_s": _values,
                                                      "storage_read_gb_per_s": _values,
                                                      "node_read_gb_per_s": _values}) | _values,
    "failures": st.fixed_dictionaries({}, optional={"events": st.lists(st.fixed_dictionaries(
        {"at_h": _values}, optional={"link": _cable | _values, "for_h": _values, "node": _values}), max_size=3),
        "repair_h": _values}),
    "stragglers": st.fixed_dictionaries({}, optional={"op_jitter_sigma": _values, "sigma": _values,
                                                      "draws": _values}) | _values,
    "network_backend": st.sampled_from(["flow", "ns3", "congestion", "analytical"])}))
def test_any_failed_links_fabric_storage_or_jitter_is_a_spec_or_a_config_error(extra):
    try:
        spec = parse_cluster_spec(with_(**extra), "c.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("c.yaml") and "\n" not in str(exc)
    else:
        assert all(len(pair) == 2 for pair in spec.failed_links)
        assert spec.fabric is None or spec.fabric["nodes_per_leaf"] >= 1
