"""The report's schema: every metric (a number at a dotted place of the report's JSON, ``*`` any one level) declared
once with its unit and meaning, by the kernel or a plugin (``astra_register_metrics``); tests/test_metrics.py checks
real reports. Units: simulated ``ns`` (integer), ``bytes``, ``count``, ``fraction`` (0..1), the tool's wall-clock
``s`` and ``per_s``, ``bytes_per_ns``, ``bits_per_s``, ``flop``, ``flop_per_s`` (simulated), ``id`` (names a rank, a
link), ``mj`` (simulated), ``w``, ``mhz``, ``ratio`` (a positive quotient not bounded by 1, such as a PUE).
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_sim.errors import PluginError

UNITS = ("ns", "bytes", "count", "fraction", "s", "per_s", "bytes_per_ns", "bits_per_s", "flop", "flop_per_s", "id",
         "mj", "w", "mhz", "ratio")


@dataclass(frozen=True)
class Metric:
    key: str
    unit: str
    description: str
    plugin: str = "builtin"

    def matches(self, path) -> bool:
        """Whether the report path (a tuple of keys) is this metric (``*`` matches any one level)."""
        parts = self.key.split(".")
        return len(parts) == len(path) and all(p == "*" or p == str(q) for p, q in zip(parts, path))


#: the kernel's own metrics (the run, the ranks; the breakdown's are the analysis plugin's, which computes it)
KERNEL_METRICS = (
    ("summary.npus", "count", "NPUs (ranks) in the run"),
    ("summary.max_finish_ns", "ns", "the step time: the last rank's finish"),
    ("summary.min_finish_ns", "ns", "the first rank's finish"),
    ("summary.max_exposed_comm_ns", "ns", "the largest exposed communication of a rank (finish - compute)"),
    ("ranks.*.rank", "id", "the rank"),
    ("ranks.*.finish_ns", "ns", "when the rank finished its trace"),
    ("ranks.*.compute_ns", "ns", "GPU compute time of the rank"),
    ("ranks.*.exposed_comm_ns", "ns", "finish - compute, as the reference reports it"),
    ("ranks.*.cpu_ns", "ns", "CPU (host) node time of the rank"),
    ("ranks.*.comm_ns", "ns", "time the rank's communication was in flight"),
    ("ranks.*.nodes", "count", "trace nodes the rank ran"),
    ("stats.events", "count", "events the engine ran"),
    ("stats.simulated_ranks", "count", "ranks simulated (fewer than the NPUs when symmetric ranks are folded)"),
    ("stats.messages", "count", "messages sent (every rank's, folded runs included)"),
    ("stats.message_bytes", "bytes", "bytes of those messages"),
    ("stats.nodes_by_type.*", "count", "trace nodes run, by Chakra node type"),
    ("stats.traces_parsed", "count", "distinct traces read (identical ones are shared)"),
    ("stats.build_s", "s", "wall-clock time to read the workload and build the run"),
    ("stats.run_s", "s", "wall-clock time of the event loop"),
    ("stats.analysis_s", "s", "wall-clock time of the breakdown and the analyses"),
    ("stats.events_per_s", "per_s", "events per wall-clock second"),
    ("stats.peak_python_memory_bytes", "bytes", "peak Python memory of the run (measure_memory=True)"),
    ("stats.simulated_ns", "ns", "an interrupted run: when it stopped"),
    # every network backend's stats() (api.NetworkWithStats) shares these; backends declare the rest
    ("network_stats.messages", "count", "messages the network carried"),
    ("network_stats.links.*.link", "id", "a link (by the backend's index)"),
    ("network_stats.links.*.src", "id", "the link's source node"),
    ("network_stats.links.*.dst", "id", "the link's destination node"),
    ("network_stats.links.*.bytes", "bytes", "bytes the link carried"),
    ("network_stats.links.*.busy_ns", "ns", "time the link was sending"),
    ("network_stats.links.*.messages", "count", "messages over the link"),
    ("network_stats.bottleneck.*.link", "id", "a busiest link"),
    ("network_stats.bottleneck.*.src", "id", "its source node"),
    ("network_stats.bottleneck.*.dst", "id", "its destination node"),
    ("network_stats.bottleneck.*.bytes", "bytes", "its bytes"),
    ("network_stats.bottleneck.*.busy_ns", "ns", "its busy time"),
    ("stats.ranks_finished", "count", "an interrupted run: ranks that had finished"),
)


class MetricRegistry:
    """Metrics by key; a key declared twice is a PluginError naming both plugins."""

    def __init__(self):
        self.entries = {}
        self.current_plugin = "builtin"

    def metric(self, key, unit, description):
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise PluginError(f"plugin {self.current_plugin!r} declared a metric with a bad key {key!r}")
        if unit not in UNITS:
            raise PluginError(f"plugin {self.current_plugin!r}: metric {key!r} has unit {unit!r}; expected one of "
                              f"{', '.join(UNITS)}")
        if key in self.entries:
            raise PluginError(f"metric {key!r} is declared by two plugins: {self.entries[key].plugin!r} and "
                              f"{self.current_plugin!r}")
        self.entries[key] = Metric(key, unit, str(description), self.current_plugin)

    def find(self, path):
        """The metrics matching a report path (a tuple of keys)."""
        return [m for m in self.entries.values() if m.matches(path)]


def metric_registry(pm=None) -> MetricRegistry:
    """The kernel's metrics and every loaded plugin's (``astra_register_metrics``), built once per plugin manager."""
    from astra_sim.plugins import call_registration_hook, registry_once

    def make(pm):
        registry = MetricRegistry()
        for key, unit, description in KERNEL_METRICS:
            registry.metric(key, unit, description)
        return call_registration_hook(pm, "astra_register_metrics", registry)

    return registry_once(pm, "_astra_metrics", make)


#: the report's sections that hold metrics (``settings`` holds the inputs, ``warnings`` text)
METRIC_SECTIONS = ("summary", "ranks", "stats", "network_stats", "breakdown", "critical_path", "timeline")


def report_numbers(document):
    """``[(path, value)]`` of every number (int or float, not bool) in a report's metric sections."""
    out = []

    def walk(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, path + (str(key),))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, path + (str(index),))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((path, value))

    if document.get("layout") == "rank-classes":  # astra run's compact file: read it as the per-rank one
        from astra_sim.report import read_report

        document = read_report(document)
    for section in METRIC_SECTIONS:
        if section in document:
            walk(document[section], (section,))
    return out


def undeclared(document, registry=None):
    """The dotted paths of numbers in ``document`` (a report's JSON) that no metric declares."""
    registry = registry if registry is not None else metric_registry()
    return [".".join(path) for path, _ in report_numbers(document) if not registry.find(path)]


def metrics_table(document, registry=None):
    """Every declared number of a report as rows ``(key, path, value, unit)``, for tables and DataFrames."""
    registry = registry if registry is not None else metric_registry()
    rows = []
    for path, value in report_numbers(document):
        found = registry.find(path)
        if found:
            rows.append((found[0].key, ".".join(path), value, found[0].unit))
    return rows
