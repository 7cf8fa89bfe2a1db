"""The cluster spec (YAML): the machine, its jobs, how they are placed and scheduled, stragglers, failures and
checkpoints. Every key is checked here, and a bad one is a ConfigError naming the file, the key and what was
expected. Times carry their unit in the key (``arrival_s``, ``horizon_h``); sizes are bytes.

```yaml
platform: hgx-h100            # a registered platform and its nodes ...
nodes: 4
# system: sys.json            # ... or configuration files (relative to this file)
# network: net.yml
# gpus: 8                     # with files: the GPUs (default: the analytical network's NPUs; needed for ns-3)
# gpus_per_node: 8            # with files: GPUs per node (default: the network's first dimension)
network_backend: flow         # analytical | congestion | flow | ns3
run: {host_launch_us: 0}      # astra run options for every simulation
placement: contiguous         # contiguous | random | topology | fixed
scheduler: fifo               # fifo | sjf | backfill
seed: 0
jobs:
  - name: a
    gpus: 16
    steps: 1000
    arrival_s: 0
    workload: {llm: {preset: llama3-8b, tp: 8, dp: 2}}   # or {micro: {...}} or {chakra: PREFIX}
    place: [0, 1, 2]          # fixed placement only
    checkpoint_bytes: 1e11    # default for llm: 14 bytes per parameter
stragglers: {sigma: 0.05, draws: 20, slow_gpus: {3: 1.5}, op_jitter_sigma: 0.02}
failures: {node_mtbf_h: 5000, gpu_mtbf_h: 50000, repair_h: 0, events: [{at_h: 3, node: 1}, {at_h: 4, link: 9}]}
failed_links: [[npu0, npu1]]  # cables down throughout (node names of the graph, ns-3 node ids): rerouted on
                              # flow/ns3; on analytical their dimension's bandwidth is lowered
fabric: {nodes_per_leaf: 16, oversubscription: 2}   # flow/congestion: the scale-out Switch as leaves under a spine
checkpoint: {interval_steps: young-daly, write_gb_per_s: 10, read_gb_per_s: 10, restart_s: 120,
             storage_write_gb_per_s: 100, node_write_gb_per_s: 5,   # shared by jobs writing at once
             storage_read_gb_per_s: 100, node_read_gb_per_s: 5}     # and by jobs reading at restarts
horizon_h: 24
timeline_corun: false         # true: over time, each job's step is its step beside the jobs running with it
```
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError

PLACEMENTS = ("contiguous", "random", "topology", "fixed")
SCHEDULERS = ("fifo", "sjf", "backfill")
WORKLOAD_KINDS = ("llm", "micro", "chakra")
YOUNG_DALY = "young-daly"
#: bytes a training checkpoint holds per model parameter under mixed-precision Adam: the bf16 weights (2) and the
#: optimizer states, fp32 master weights and two fp32 moments (K = 12): source: Rajbhandari et al., "ZeRO: Memory
#: Optimizations Toward Training Trillion Parameter Models", SC'20, section 3.1 (gradients are not saved)
CHECKPOINT_BYTES_PER_PARAMETER = 14

_TOP = {"platform", "nodes", "system", "network", "gpus", "gpus_per_node", "network_backend", "run", "placement",
        "scheduler", "seed", "corun", "timeline_corun", "jobs", "stragglers", "failures", "checkpoint", "horizon_h",
        "failed_links", "fabric"}
_FABRIC = {"nodes_per_leaf", "oversubscription"}
#: the backends that build the last Switch dimension as leaves under a spine (``fabric:``)
TIERED_BACKENDS = ("flow", "congestion")
#: the backends that take a failed cable out: ``flow`` and ``ns3`` route around it, ``analytical`` lowers its
#: dimension's bandwidth (``congestion`` routes along fixed paths, so it refuses them)
FAILED_LINK_BACKENDS = ("analytical", "flow", "ns3")
_JOB = {"name", "gpus", "steps", "arrival_s", "workload", "place", "checkpoint_bytes"}
_STRAGGLERS = {"sigma", "draws", "slow_gpus", "table", "min_factor", "op_jitter_sigma"}
#: what can fail: a GPU, a node (its GPUs), a GPU's network link (its NIC), a switch (``nodes_per_switch`` nodes)
FAILURE_KINDS = ("gpu", "node", "link", "switch")
_FAILURES = {f"{kind}_mtbf_h" for kind in FAILURE_KINDS} | {"repair_h", "events", "nodes_per_switch"}
_CHECKPOINT = {"interval_steps", "write_gb_per_s", "read_gb_per_s", "restart_s", "storage_write_gb_per_s",
               "node_write_gb_per_s", "storage_read_gb_per_s", "node_read_gb_per_s"}


@dataclass
class JobSpec:
    name: str
    gpus: int
    steps: int
    arrival_ns: int
    workload_kind: str
    workload: object
    place: list | None = None
    checkpoint_bytes: int | None = None


@dataclass
class StragglerSpec:
    """Per-GPU slowdown factors: ``sigma`` of a lognormal (median 1), or ``table`` (factors drawn uniformly),
    clipped below at ``min_factor``; ``slow_gpus`` fixed factors; ``op_jitter_sigma``: every compute op's own
    lognormal factor (median 1, a new seed per draw); ``draws`` seeded draws."""

    sigma: float = 0.0
    table: list | None = None
    slow_gpus: dict = field(default_factory=dict)
    draws: int = 1
    min_factor: float = 1.0
    op_jitter_sigma: float = 0.0


@dataclass
class FailureSpec:
    """``mtbf_h``: ``{kind: hours}`` per failing unit (exponential, seeded); ``events``: ``[(at_ns, kind, index)]``;
    ``repair_h``: how long a failed unit stays down (0: a spare takes over at once)."""

    mtbf_h: dict = field(default_factory=dict)
    repair_h: float = 0.0
    events: list = field(default_factory=list)
    nodes_per_switch: int | None = None
    #: ``[(at_ns, (a, b), down_ns or None)]``: cables that go down (``link: [a, b]``) and are routed around for
    #: ``for_h`` (default ``repair_h``; with neither, until the horizon)
    cables: list = field(default_factory=list)

    @property
    def node_mtbf_h(self):
        return self.mtbf_h.get("node")


@dataclass
class CheckpointSpec:
    interval_steps: object = YOUNG_DALY  # an int, or "young-daly"
    write_gb_per_s: float = 10.0
    read_gb_per_s: float = 10.0
    restart_s: float = 0.0
    storage_write_gb_per_s: float | None = None  # the storage's aggregate, shared by jobs writing at once
    node_write_gb_per_s: float | None = None  # what one node can write (a job's cap: its nodes times this)
    storage_read_gb_per_s: float | None = None  # the same for reading checkpoints back at restarts
    node_read_gb_per_s: float | None = None

    @property
    def shared(self) -> bool:
        """Whether writes share the storage (else each job writes alone at ``write_gb_per_s``)."""
        return self.storage_write_gb_per_s is not None or self.node_write_gb_per_s is not None

    @property
    def shared_reads(self) -> bool:
        """Whether restarts' reads share the storage (else each job reads alone at ``read_gb_per_s``)."""
        return self.storage_read_gb_per_s is not None or self.node_read_gb_per_s is not None


@dataclass
class ClusterSpec:
    path: str
    jobs: list
    platform: str | None = None
    nodes: int | None = None
    system: str | None = None
    network: str | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    network_backend: str = "analytical"
    run: dict = field(default_factory=dict)
    placement: str = "contiguous"
    scheduler: str = "fifo"
    seed: int = 0
    corun: bool = True
    timeline_corun: bool = False
    stragglers: StragglerSpec | None = None
    failures: FailureSpec | None = None
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    horizon_ns: int | None = None
    failed_links: list = field(default_factory=list)  # [[a, b]]: cables down throughout, routed around
    fabric: dict | None = None  # {"nodes_per_leaf": N, "oversubscription": R}: shared uplinks between leaves

    @property
    def base_dir(self):
        return os.path.dirname(os.path.abspath(self.path))


# ------------------------------------------------------------------ reading
def load_cluster_spec(path) -> ClusterSpec:
    """Read and check the cluster spec at ``path``."""
    from astra_sim.safeio import load_yaml

    return parse_cluster_spec(load_yaml(path, "cluster spec"), str(path))


def parse_cluster_spec(data, path="<spec>") -> ClusterSpec:
    """The spec of a parsed YAML mapping (``path`` names it in errors and anchors relative files)."""
    where = _Where(path)
    if not isinstance(data, dict):
        raise where.error("", "a mapping of cluster keys (platform, jobs, ...)", data)
    where.unknown("", data, _TOP)
    base = os.path.dirname(os.path.abspath(path))
    spec = ClusterSpec(path=path, jobs=[])
    spec.platform = where.text("platform", data.get("platform"), optional=True)
    spec.nodes = where.integer("nodes", data.get("nodes"), low=1, optional=True)
    spec.system = _file(where, "system", data.get("system"), base)
    spec.network = _file(where, "network", data.get("network"), base)
    files = (spec.system is not None, spec.network is not None)
    if files not in ((False, False), (True, True)) or (spec.platform is None) == (files == (False, False)):
        raise ConfigError(f"{path}: give either platform (and nodes) or both system and network")
    if spec.platform is not None and spec.nodes is None:
        raise ConfigError(f"{path}: key 'nodes' is required with platform (the cluster's size in nodes)")
    spec.gpus = where.integer("gpus", data.get("gpus"), low=1, optional=True)
    spec.gpus_per_node = where.integer("gpus_per_node", data.get("gpus_per_node"), low=1, optional=True)
    spec.network_backend = where.text("network_backend", data.get("network_backend", "analytical"))
    run = data.get("run", {}) or {}
    if not isinstance(run, dict):
        raise where.error("run", "a mapping of astra run options", run)
    spec.run = dict(run)
    spec.placement = where.choice("placement", data.get("placement", "contiguous"), PLACEMENTS)
    spec.scheduler = where.choice("scheduler", data.get("scheduler", "fifo"), SCHEDULERS)
    spec.seed = where.integer("seed", data.get("seed", 0), low=0)
    spec.corun = where.boolean("corun", data.get("corun", True))
    spec.timeline_corun = where.boolean("timeline_corun", data.get("timeline_corun", False))
    jobs = data.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise where.error("jobs", "a non-empty list of jobs", jobs)
    names = set()
    for i, item in enumerate(jobs):
        job = _job(where, f"jobs[{i}]", item, spec.placement)
        if job.name in names:
            raise ConfigError(f"{path}: key 'jobs[{i}].name': {job.name!r} names two jobs")
        names.add(job.name)
        spec.jobs.append(job)
    if "stragglers" in data:
        spec.stragglers = _stragglers(where, data["stragglers"])
    if "failures" in data:
        spec.failures = _failures(where, data["failures"])
    if "checkpoint" in data:
        spec.checkpoint = _checkpoint(where, data["checkpoint"])
    if data.get("failed_links"):
        spec.failed_links = _failed_links(where, "failed_links", data["failed_links"])
        if spec.network_backend not in FAILED_LINK_BACKENDS:
            raise ConfigError(f"{path}: key 'failed_links': cables fail on the {', '.join(FAILED_LINK_BACKENDS)} "
                              f"backends only; network_backend is {spec.network_backend!r}")
    if spec.failures is not None and spec.failures.cables and spec.network_backend not in FAILED_LINK_BACKENDS:
        raise ConfigError(f"{path}: key 'failures.events': a cable (link: [a, b]) fails on the "
                          f"{', '.join(FAILED_LINK_BACKENDS)} backends only; network_backend is "
                          f"{spec.network_backend!r} (link: G stops GPU G's job instead)")
    if data.get("fabric") is not None:
        spec.fabric = _fabric(where, data["fabric"])
        if spec.network_backend not in TIERED_BACKENDS:
            raise ConfigError(f"{path}: key 'fabric': leaves and a spine are built by the "
                              f"{' and '.join(TIERED_BACKENDS)} backends only; network_backend is "
                              f"{spec.network_backend!r}")
    if data.get("horizon_h") is not None:
        spec.horizon_ns = hours_to_ns(where.number("horizon_h", data["horizon_h"], low=0, open_low=True))
    return spec


def hours_to_ns(hours) -> int:
    return int(round(hours * 3600e9))


def _file(where, key, value, base):
    if value is None:
        return None
    text = where.text(key, value)
    return text if os.path.isabs(text) else os.path.join(base, text)


def _job(where, key, item, placement):
    if not isinstance(item, dict):
        raise where.error(key, "a mapping with name, gpus, steps and workload", item)
    where.unknown(key, item, _JOB)
    name = where.text(f"{key}.name", item.get("name"))
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise where.error(f"{key}.name", "letters, digits, '-', '_' or '.'", name)
    gpus = where.integer(f"{key}.gpus", item.get("gpus"), low=1)
    steps = where.integer(f"{key}.steps", item.get("steps", 1), low=1)
    arrival = where.number(f"{key}.arrival_s", item.get("arrival_s", 0), low=0)
    workload = item.get("workload")
    if not isinstance(workload, dict) or len(workload) != 1 or next(iter(workload)) not in WORKLOAD_KINDS:
        raise where.error(f"{key}.workload", "one of {llm: {options}}, {micro: {options}}, {chakra: PREFIX}",
                          workload)
    kind, value = next(iter(workload.items()))
    if kind == "chakra":
        if isinstance(value, str):
            value = {"prefix": value}
        if not isinstance(value, dict) or not isinstance(value.get("prefix"), str) or \
                set(value) - {"prefix", "comm_groups"}:
            raise where.error(f"{key}.workload.chakra", "PREFIX or {prefix: PREFIX, comm_groups: GROUPS.json}",
                              value)
    elif not isinstance(value, dict):
        raise where.error(f"{key}.workload.{kind}", f"a mapping of astra workload {kind} options", value)
    place = item.get("place")
    if place is not None:
        if not isinstance(place, list) or len(place) != gpus or not all(
                isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in place) or len(set(place)) != gpus:
            raise where.error(f"{key}.place", f"a list of {gpus} distinct GPU numbers (one per rank)", place)
    elif placement == "fixed":
        raise ConfigError(f"{where.path}: key '{key}.place' is required with placement: fixed")
    ckpt = item.get("checkpoint_bytes")
    if ckpt is not None:
        ckpt = int(where.number(f"{key}.checkpoint_bytes", ckpt, low=0))
    return JobSpec(name, gpus, steps, int(round(arrival * 1e9)), kind, value, place, ckpt)


def _failed_links(where, key, value):
    """``[[a, b], ...]``: cables named by their two ends (the flow graph's node names, ``npu3`` or
    ``d1.g0.switch``; ns-3's node ids). Whether such a link exists is the backend's to say (checked before any
    step is simulated, see :meth:`Machine.check_failed_links`)."""
    ok = isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(
            (isinstance(end, str) and end.strip()) or (isinstance(end, int) and not isinstance(end, bool))
            for end in pair) for pair in value)
    if not ok:
        raise where.error(key, "a list of cables [[a, b], ...], each named by its two nodes (npu0, d0.g0.switch; "
                          "ns-3 node ids)", value)
    return [[end.strip() if isinstance(end, str) else end for end in pair] for pair in value]


def _fabric(where, data):
    """The scale-out fabric's two tiers: ``nodes_per_leaf`` members of the network's last (Switch) dimension per
    leaf, and the leaves' ``oversubscription`` (downlink over uplink capacity, >= 1)."""
    key = "fabric"
    if not isinstance(data, dict):
        raise where.error(key, "a mapping {nodes_per_leaf: N, oversubscription: R}", data)
    where.unknown(key, data, _FABRIC)
    return {"nodes_per_leaf": where.integer(f"{key}.nodes_per_leaf", data.get("nodes_per_leaf"), low=1),
            "oversubscription": where.number(f"{key}.oversubscription", data.get("oversubscription", 1.0), low=1)}


def _stragglers(where, data):
    key = "stragglers"
    if not isinstance(data, dict):
        raise where.error(key, "a mapping (sigma, table, slow_gpus, draws, min_factor, op_jitter_sigma)", data)
    where.unknown(key, data, _STRAGGLERS)
    out = StragglerSpec()
    out.sigma = where.number(f"{key}.sigma", data.get("sigma", 0.0), low=0)
    table = data.get("table")
    if table is not None:
        if not isinstance(table, list) or not table or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1e6 for x in table):
            raise where.error(f"{key}.table", "a non-empty list of slowdown factors > 0", table)
        if out.sigma:
            raise ConfigError(f"{where.path}: key '{key}': give sigma or table, not both")
        out.table = [float(x) for x in table]
    slow = data.get("slow_gpus", {}) or {}
    if not isinstance(slow, dict):
        raise where.error(f"{key}.slow_gpus", "a mapping {GPU: factor}", slow)
    for gpu, factor in slow.items():
        if isinstance(gpu, str) and gpu.strip().isdigit():
            gpu = int(gpu)
        g = where.integer(f"{key}.slow_gpus (a key)", gpu, low=0)
        out.slow_gpus[g] = where.number(f"{key}.slow_gpus.{gpu}", factor, low=0, open_low=True)
    out.op_jitter_sigma = where.number(f"{key}.op_jitter_sigma", data.get("op_jitter_sigma", 0.0), low=0)
    if out.op_jitter_sigma >= 10:
        raise where.error(f"{key}.op_jitter_sigma", "a number in [0, 10)", data["op_jitter_sigma"])
    out.draws = where.integer(f"{key}.draws", data.get("draws", 1), low=1)
    out.min_factor = where.number(f"{key}.min_factor", data.get("min_factor", 1.0), low=0, open_low=True)
    return out


def _failures(where, data):
    key = "failures"
    if not isinstance(data, dict):
        raise where.error(key, "a mapping (node_mtbf_h, gpu_mtbf_h, link_mtbf_h, switch_mtbf_h, repair_h, events, "
                          "nodes_per_switch)", data)
    where.unknown(key, data, _FAILURES)
    out = FailureSpec()
    for kind in FAILURE_KINDS:
        value = data.get(f"{kind}_mtbf_h")
        if value is not None:
            out.mtbf_h[kind] = where.number(f"{key}.{kind}_mtbf_h", value, low=0, open_low=True)
    out.repair_h = where.number(f"{key}.repair_h", data.get("repair_h", 0.0), low=0)
    out.nodes_per_switch = where.integer(f"{key}.nodes_per_switch", data.get("nodes_per_switch"), low=1,
                                         optional=True)
    events = data.get("events", []) or []
    if not isinstance(events, list):
        raise where.error(f"{key}.events", "a list of {at_h, node|gpu|link|switch: N}", events)
    for i, event in enumerate(events):
        ek = f"{key}.events[{i}]"
        if isinstance(event, dict) and isinstance(event.get("link"), list):  # a cable: rerouted, not a stop
            if "at_h" not in event or set(event) - {"at_h", "link", "for_h"}:
                raise where.error(ek, "{at_h: HOURS, link: [a, b], for_h: HOURS}", event)
            cable = tuple(str(end) for end in _failed_links(where, f"{ek}.link", [event["link"]])[0])
            at = hours_to_ns(where.number(f"{ek}.at_h", event["at_h"], low=0))
            down_for = event.get("for_h")
            down_for = None if down_for is None else hours_to_ns(where.number(f"{ek}.for_h", down_for, low=0,
                                                                              open_low=True))
            out.cables.append((at, cable, down_for))
            continue
        kinds = set(event) & set(FAILURE_KINDS) if isinstance(event, dict) else set()
        if not isinstance(event, dict) or "at_h" not in event or len(kinds) != 1 or \
                set(event) - {"at_h", *FAILURE_KINDS}:
            raise where.error(ek, "{at_h: HOURS, node: N} (or gpu: G, link: G or [a, b], switch: S)", event)
        kind = kinds.pop()
        at = hours_to_ns(where.number(f"{ek}.at_h", event["at_h"], low=0))
        out.events.append((at, kind, where.integer(f"{ek}.{kind}", event[kind], low=0)))
    out.events.sort()
    out.cables.sort()
    uses_switch = "switch" in out.mtbf_h or any(kind == "switch" for _at, kind, _i in out.events)
    if uses_switch and out.nodes_per_switch is None:
        raise ConfigError(f"{where.path}: key '{key}.nodes_per_switch' is required with switch failures (the nodes "
                          "one switch connects)")
    return out


def _checkpoint(where, data):
    key = "checkpoint"
    if not isinstance(data, dict):
        raise where.error(key, "a mapping (interval_steps, write_gb_per_s, read_gb_per_s, restart_s, "
                          "storage_write_gb_per_s, node_write_gb_per_s, storage_read_gb_per_s, "
                          "node_read_gb_per_s)", data)
    where.unknown(key, data, _CHECKPOINT)
    out = CheckpointSpec()
    interval = data.get("interval_steps", YOUNG_DALY)
    if interval != YOUNG_DALY:
        interval = where.integer(f"{key}.interval_steps", interval, low=1)
    out.interval_steps = interval
    out.write_gb_per_s = where.number(f"{key}.write_gb_per_s", data.get("write_gb_per_s", 10.0), low=0,
                                      open_low=True)
    out.read_gb_per_s = where.number(f"{key}.read_gb_per_s", data.get("read_gb_per_s", 10.0), low=0,
                                     open_low=True)
    out.restart_s = where.number(f"{key}.restart_s", data.get("restart_s", 0.0), low=0)
    for name in ("storage_write_gb_per_s", "node_write_gb_per_s", "storage_read_gb_per_s", "node_read_gb_per_s"):
        if data.get(name) is not None:
            setattr(out, name, where.number(f"{key}.{name}", data[name], low=0, open_low=True))
    return out


class _Where:
    """Error messages that name the file and the key."""

    def __init__(self, path):
        self.path = path

    def error(self, key, expected, got):
        from astra_sim.safeio import brief

        at = f"key '{key}'" if key else "the file"
        return ConfigError(f"{self.path}: {at} must be {expected}, got {brief(got)}")

    def unknown(self, key, mapping, known):
        from astra_sim.cliutil import did_you_mean

        for name in mapping:
            if name not in known:
                full = f"{key}.{name}" if key else str(name)
                raise ConfigError(f"{self.path}: unknown key '{full}'{did_you_mean(name, known)}; known: "
                                  f"{', '.join(sorted(known))}")

    def text(self, key, value, optional=False):
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "a non-empty string", value)
        return value.strip()

    def integer(self, key, value, low=None, optional=False):
        if value is None and optional:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
            raise self.error(key, f"an integer >= {low}" if low is not None else "an integer", value)
        return value

    def number(self, key, value, low=None, open_low=False):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok and low is not None:
            ok = value > low if open_low else value >= low
        if not ok:
            bound = "" if low is None else (f" > {low}" if open_low else f" >= {low}")
            raise self.error(key, f"a finite number{bound}", value)
        return float(value)

    def choice(self, key, value, choices):
        if value not in choices:
            raise self.error(key, f"one of {', '.join(choices)}", value)
        return value

    def boolean(self, key, value):
        if not isinstance(value, bool):
            raise self.error(key, "true or false", value)
        return value
