"""Load-store collectives: CTAs issue loads/stores to peer GPUs' memory over NVLink + NVSwitch.

Collective implementations ``ls_oneshot``, ``ls_twoshot``, ``nvls`` (all-reduce) and ``ls_direct``
(all-gather / reduce-scatter). Like ``nccl`` they compute their own time (no packets go through the
kernel's network) and wait it, but the time comes from a cache-line-level simulation.

Model (one representative GPU; every GPU does the same thing at the same time, see README):

* Data moves in lines of ``line_bytes`` (64 or 128 B). A collective uses ``sms`` SMs (CTAs); each SM
  works in rounds: it issues up to ``outstanding`` line operations at once, waits until all of them
  completed, then issues the next round (Little's law: an uncontended SM moves
  ``outstanding * line_bytes / round_trip`` bytes per ns).
* Every line operation crosses the GPU's NVLink port, a FIFO pipe of ``link_gbps`` per direction
  (the preset's ports x per-port bandwidth). A line costs ``cost`` line times on that pipe
  (1 for a load/store; ``n + 1`` for one NVLS ld_reduce+multimem.st seen from one GPU, because every
  GPU's port carries one line per owner's reduce plus its own store).
  Because the traffic is symmetric (each GPU's k-th line goes to ``rank + c_k``: a permutation), each
  receive port sees the mirror image of the send port and never queues: it adds one line time.
* Latency: ``hop_ns`` per hop (GPU->NVSwitch, NVSwitch->GPU). One way = 2 hops + a line time;
  round trip (load data back / store ack) = 4 hops + a line time (+ ``switch_reduce_ns`` for NVLS).
* A barrier = every GPU stores a flag line to each of its ``n - 1`` peers and waits for theirs.

Batching: the lines one SM issues in one round have the same start time, the same path (this GPU's
port, then fixed latencies) and the same size; they enter the FIFO pipe back to back, so the k-th
finishes exactly ``k * cost * line_time`` after the first starts, and the round ends with its last
line. One batch per (SM, round) therefore gives exactly the line-by-line times (integer femtosecond
arithmetic, no rounding difference): :func:`phase_line_by_line` is the per-line event simulation the
tests compare against.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, TimedCollective

FS_PER_NS = 1_000_000

ONESHOT, TWOSHOT, NVLS, DIRECT = "ls_oneshot", "ls_twoshot", "nvls", "ls_direct"


@dataclass(frozen=True)
class LoadStoreConfig:
    link_gbps: float = 450.0       # per GPU, per direction (H100: 18 x 25 GB/s)
    line_bytes: int = 128          # 64 or 128
    sms: int = 32                  # SMs (CTAs) the collective kernel uses
    outstanding: int = 128         # line operations in flight per SM (per round)
    hop_ns: float = 250.0          # GPU -> NVSwitch (and NVSwitch -> GPU)
    switch_reduce_ns: float = 100.0  # NVLS: reduction in the switch, per ld_reduce
    launch_ns: float = 0.0         # kernel launch/entry overhead (0: compare with the kernel's ring as is)
    hbm_gbps: float = 3350.0       # local reduction of received shards (ls_direct reduce-scatter)
    nvls: bool = True              # the switch can reduce (NVSwitch gen3, Hopper and later)

    def __post_init__(self):
        if self.line_bytes not in (64, 128):
            raise ValueError(f"line_bytes must be 64 or 128, got {self.line_bytes}")
        if self.sms < 1 or self.outstanding < 1 or self.link_gbps <= 0:
            raise ValueError("sms, outstanding and link_gbps must be positive")

    @property
    def line_fs(self) -> int:
        """Time of one line on the port (integer femtoseconds: bytes / (GB/s) = ns)."""
        return max(1, round(self.line_bytes / self.link_gbps * FS_PER_NS))

    @property
    def hop_fs(self) -> int:
        return round(self.hop_ns * FS_PER_NS)

    @property
    def one_way_fs(self) -> int:
        return 2 * self.hop_fs + self.line_fs

    @property
    def round_trip_fs(self) -> int:
        return 4 * self.hop_fs + self.line_fs

    def per_sm_gbps(self) -> float:
        """Little's law: outstanding x line / round trip (uncontended)."""
        return self.outstanding * self.line_bytes / (self.round_trip_fs / FS_PER_NS)


def config_for_gpu(name=None, **overrides) -> LoadStoreConfig:
    from astra_gpu_model.gpu import load_gpu

    gpu = load_gpu(name)
    text = f"{gpu.name} {gpu.raw.get('architecture', '')}".lower()
    nvls = any(k in text for k in ("hopper", "blackwell", "h100", "h200", "b200"))
    kw = dict(link_gbps=float(gpu.scaleup_bandwidth_gbps or 450.0), hbm_gbps=float(gpu.hbm_bandwidth_gbps), nvls=nvls)
    kw.update(overrides)
    return LoadStoreConfig(**kw)


def _split(n_ops, sms):
    q, r = divmod(n_ops, sms)
    return [q + (1 if i < r else 0) for i in range(sms) if q or i < r]


def phase_batched(start_fs, n_ops, cost, done_fs, cfg, sms=None, window=None):
    """End time of a phase of ``n_ops`` line operations; one batch per (SM, round)."""
    if n_ops <= 0:
        return start_fs
    sms = sms or cfg.sms
    window = window or cfg.outstanding
    unit = cost * cfg.line_fs
    remaining = _split(n_ops, sms)
    heap = [(start_fs, i) for i in range(len(remaining))]
    pipe = start_fs
    end = start_fs
    while heap:
        t, i = heapq.heappop(heap)
        k = min(window, remaining[i])
        remaining[i] -= k
        pipe = max(t, pipe) + k * unit
        fin = pipe + done_fs
        if remaining[i]:
            heapq.heappush(heap, (fin, i))
        elif fin > end:
            end = fin
    return end


def phase_line_by_line(start_fs, n_ops, cost, done_fs, cfg, sms=None, window=None):
    """The same phase simulated one line at a time (events per line issue, port departure and
    completion; a FIFO port). Reference for :func:`phase_batched` (slow: small sizes only)."""
    if n_ops <= 0:
        return start_fs
    sms = sms or cfg.sms
    window = window or cfg.outstanding
    unit = cost * cfg.line_fs
    remaining = _split(n_ops, sms)
    inflight = [0] * len(remaining)
    heap, seq = [], 0
    queue, busy = deque(), False
    end = start_fs

    def push(t, kind, sm):
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, sm))
        seq += 1

    def issue_round(t, sm):
        k = min(window, remaining[sm])
        remaining[sm] -= k
        inflight[sm] = k
        for _ in range(k):
            push(t, 0, sm)  # 0: line arrives at the port

    for sm in range(len(remaining)):
        issue_round(start_fs, sm)
    while heap:
        t, _, kind, sm = heapq.heappop(heap)
        if kind == 0:
            queue.append(sm)
            if not busy:
                busy = True
                push(t + unit, 1, queue[0])
        elif kind == 1:  # line leaves the port
            queue.popleft()
            push(t + done_fs, 2, sm)
            if queue:
                push(t + unit, 1, queue[0])
            else:
                busy = False
        else:  # line completed (data back / ack)
            end = max(end, t)
            inflight[sm] -= 1
            if inflight[sm] == 0 and remaining[sm]:
                issue_round(t, sm)
    return end


def phase_all_gpus(n, n_ops, cfg, sms=None, window=None):
    """Check of the symmetry argument: a cost-1 load/store phase simulated line by line on all ``n``
    GPUs, each with its own send port and receive port (FIFO pipes), lines of SM ``i`` going to peers
    ``rank + 1 + (i + j) mod (n - 1)`` in turn; completion = receive-port departure + 2 hops back.
    Returns the end time (fs); equals ``phase_*(0, n_ops, 1, round_trip, cfg)``. Small sizes only."""
    sms = sms or cfg.sms
    window = window or cfg.outstanding
    unit, two_hops = cfg.line_fs, 2 * cfg.hop_fs
    heap, seq = [], 0
    remaining = [_split(n_ops, sms) for _ in range(n)]
    inflight = [[0] * len(remaining[0]) for _ in range(n)]
    counter = [[0] * len(remaining[0]) for _ in range(n)]
    out_free, in_free = [0] * n, [0] * n
    end = 0

    def push(t, kind, g, sm, dst=0):
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, g, sm, dst))
        seq += 1

    def issue_round(t, g, sm):
        k = min(window, remaining[g][sm])
        remaining[g][sm] -= k
        inflight[g][sm] = k
        for _ in range(k):
            dst = (g + 1 + (sm + counter[g][sm]) % (n - 1)) % n
            counter[g][sm] += 1
            push(t, 0, g, sm, dst)

    for g in range(n):
        for sm in range(len(remaining[g])):
            issue_round(0, g, sm)
    while heap:
        t, _, kind, g, sm, dst = heapq.heappop(heap)
        if kind == 0:  # enters g's send port (FIFO: events leave the heap in time order)
            out_free[g] = max(t, out_free[g]) + unit
            push(out_free[g] + two_hops, 1, g, sm, dst)
        elif kind == 1:  # reaches dst's receive port
            in_free[dst] = max(t, in_free[dst]) + unit
            push(in_free[dst] + two_hops, 2, g, sm, dst)
        else:  # data back / ack at g
            end = max(end, t)
            inflight[g][sm] -= 1
            if inflight[g][sm] == 0 and remaining[g][sm]:
                issue_round(t, g, sm)
    return end


def _lines(nbytes, cfg):
    return -(-int(nbytes) // cfg.line_bytes)


def collective_time_fs(algo, com_type, data_size, n, cfg: LoadStoreConfig, phase=phase_batched):
    """Time (fs) of one load-store collective on ``n`` GPUs. ``data_size``: the kernel's chunk size
    (all-reduce / reduce-scatter: the per-rank buffer; all-gather: the per-rank input)."""
    if n <= 1 or data_size <= 0:
        return 0
    rt = cfg.round_trip_fs

    def barrier(t):  # n - 1 flag lines, complete when they arrive
        return phase(t, n - 1, 1, cfg.one_way_fs, cfg, sms=1, window=n - 1)

    t = round(cfg.launch_ns * FS_PER_NS)
    if algo == ONESHOT and com_type == ALL_REDUCE:
        t = barrier(t)
        return phase(t, (n - 1) * _lines(data_size, cfg), 1, rt, cfg)
    if algo == TWOSHOT and com_type == ALL_REDUCE:
        shard = _lines(-(-data_size // n), cfg)
        t = barrier(t)
        t = phase(t, (n - 1) * shard, 1, rt, cfg)  # reduce-scatter by loads, reduced in registers
        t = barrier(t)
        return phase(t, (n - 1) * shard, 1, rt, cfg)  # all-gather by loads
    if algo == NVLS and com_type == ALL_REDUCE:
        if not cfg.nvls:
            raise ValueError("nvls: this GPU/NVSwitch generation cannot reduce in the switch (Hopper or later)")
        shard = _lines(-(-data_size // n), cfg)
        t = barrier(t)
        op = rt + round(cfg.switch_reduce_ns * FS_PER_NS) + cfg.one_way_fs  # ld_reduce, then multimem.st
        t = phase(t, shard, n + 1, op, cfg)
        return barrier(t)
    if algo == DIRECT and com_type == ALL_GATHER:
        t = barrier(t)
        t = phase(t, (n - 1) * _lines(data_size, cfg), 1, rt, cfg)  # stores, acked
        return barrier(t)
    if algo == DIRECT and com_type == REDUCE_SCATTER:
        shard_bytes = -(-data_size // n)
        t = barrier(t)
        t = phase(t, (n - 1) * _lines(shard_bytes, cfg), 1, rt, cfg)
        t = barrier(t)
        return t + round((n + 1) * shard_bytes / cfg.hbm_gbps * FS_PER_NS)  # reduce n shards locally
    raise ValueError(f"{algo} does not implement {com_type}")


def collective_time_ns(algo, com_type, data_size, n, cfg=None, phase=phase_batched) -> float:
    return collective_time_fs(algo, com_type, data_size, n, cfg or LoadStoreConfig(), phase) / FS_PER_NS


class LoadStoreCollective(TimedCollective):
    """Waits the load-store model's time for its chunk, then finishes: no packets."""

    __slots__ = ("algo", "config")

    def __init__(self, algo, com_type, rank, topo, data_size, config=None):
        super().__init__(com_type, rank, topo, data_size)
        self.algo = algo
        self.config = config

    def bind(self, stream):
        super().bind(stream)
        if self.config is None:
            self.config = _config_for_options(self.options)

    def duration_ns(self):
        key = (self.algo, self.com_type, int(self.data_size), self.nodes_in_ring, self.config)
        t = _TIME_CACHE.get(key)
        if t is None:
            t = _TIME_CACHE[key] = collective_time_ns(self.algo, self.com_type, int(self.data_size),
                                                      self.nodes_in_ring, self.config)
        return t


_CONFIG_CACHE = {}
_TIME_CACHE = {}


def _config_for_options(options):
    """The run's ``--gpu`` option, else the default GPU (H100); ``ls_*`` options override fields."""
    name = options.get("gpu")
    over = {k[3:]: options[k] for k in ("ls_line_bytes", "ls_sms", "ls_outstanding", "ls_hop_ns")
            if options.get(k) is not None}
    key = (str(name), tuple(sorted(over.items())))
    if key not in _CONFIG_CACHE:
        _CONFIG_CACHE[key] = config_for_gpu(name, **over)
    return _CONFIG_CACHE[key]


def _factory(algo, allowed):
    def factory(com_type, rank, topo, data_size, direction, window):
        if com_type not in allowed:
            raise ValueError(f"{algo} implements {', '.join(allowed)}, not {com_type}")
        return LoadStoreCollective(algo, com_type, rank, topo, data_size)
    return factory


oneshot_factory = _factory(ONESHOT, (ALL_REDUCE,))
twoshot_factory = _factory(TWOSHOT, (ALL_REDUCE,))
nvls_factory = _factory(NVLS, (ALL_REDUCE,))
direct_factory = _factory(DIRECT, (ALL_GATHER, REDUCE_SCATTER))

__all__ = ["LoadStoreConfig", "LoadStoreCollective", "config_for_gpu", "collective_time_ns", "collective_time_fs",
           "phase_batched", "phase_line_by_line", "phase_all_gpus", "ONESHOT", "TWOSHOT", "NVLS", "DIRECT"]
