"""SM and HBM contention between communication and compute kernels on one GPU (``--gpu-contention``).

NCCL-style collectives run as kernels: each channel is one CTA that occupies one SM for the whole
collective, and the collective streams its data through HBM. A compute kernel that overlaps a
collective therefore runs on the remaining SMs and shares HBM bandwidth; overlap is not free.

The model, kept simple and explicit:

* **when**: the decision is made at the nanosecond a COMP node is *issued*, once every event of that
  nanosecond has run (the model declares ``reads_comm_in_flight``, and the workload times the node at
  the end of its nanosecond: ``EventEngine.at_end_of_ns``), from the collectives and sends of the rank
  running then (``context.comm_nodes_in_flight(rank)``; a posted receive does not count). A collective that
  starts at the kernel's nanosecond slows it and one that ends then does not, whatever the order of that
  nanosecond's events;
* **for how long** (piecewise, :func:`piecewise`): a running collective whose end is already fixed, every chunk
  in a last phase that is a timed model (``--platform-collective nccl``, the GPU platforms' default: the
  NCCL phase's end is set when it starts; ``Sys.collective_end_ns``, read through the run's
  ``collective_end_ns``), slows the kernel until that end only: the kernel does ``1 / duration`` of its work per
  ns of each state (its whole duration on the GPU that state leaves), the state changing at each such end, and
  runs the rest on what is left (the whole GPU when nothing else runs). Exact fractions; the last piece is
  rounded to the nearest ns. A collective or send whose end is not known then (a send through the network
  backend, a collective of packets, i.e. a native algorithm, a custom one, or one issued but not yet launched
  by the host model) slows it for the rest of its duration, as before; nothing is re-timed mid-kernel.
  Why: NCCL's channels are CTAs that hold their SMs and stream HBM only while the collective's kernel runs;
  when it exits the SMs take the waiting CTAs of the running GEMM (the hardware block scheduler assigns
  CTAs to SMs as they free) and the HBM bandwidth is the kernel's again. Our own interference measurements
  (``fit/fit_contention.py``: ``calibration/nvidia-h200-2026-11-26/interference.csv``) time a kernel with a
  memory-streaming kernel of k CTAs beside it for the whole kernel, so they give the rate while both run,
  which is the rate used for the overlap only;
* **SMs**: every running collective or send occupies SMs for its whole duration: the number in its
  ``comm_sms`` node attribute when it has one (NCCL's CTAs of that communicator, e.g. ``NCCL_MAX_CTAS``;
  0 for a copy-engine transfer, as Transformer Engine's ``ring_exchange`` userbuffers use), otherwise
  ``--gpu-comm-sms`` (default :data:`DEFAULT_COMM_SMS` = 32, NCCL's usual channel count for NVLink
  collectives on H100). Concurrent operations (one per communicator stream) add up; the sum is capped at
  ``sm_count - 1``. The compute kernel is timed with the remaining SMs, each at the same per-SM peak, so
  GEMM wave quantisation and attention waves are over the remaining SMs;
* **HBM**: each running collective or send takes ``2 x link GB/s / HBM GB/s`` of the HBM bandwidth (it
  streams at its link's rate, reading what it sends and writing what it receives): the NIC's rate
  (``nccl_nic_gbps``, set by a ``--platform``) when the transfer leaves the rank's node (``npus_per_dim[0]``
  consecutive NPUs: a send to another node, a collective whose group spans several), the scale-up
  (NVLink) rate otherwise; concurrent shares add up, capped at :data:`MAX_DEFAULT_HBM_SHARE`.
  ``--gpu-comm-hbm-share`` fixes one share instead, as does a run without a NIC rate (default
  ``2 x scale-up GB/s / HBM GB/s``, H100: 2 x 450 / 3350 = 0.27; :data:`FALLBACK_HBM_SHARE` when the
  preset has no scale-up bandwidth). Reduction reads, message sizes and the transfer's actual rate are
  ignored. The compute kernel sees ``(1 - share) x HBM`` whenever any communication runs, whatever its
  SMs (a copy-engine transfer streams through HBM too);
* **SM margin**: a compute node with an ``sm_margin`` attribute was launched on ``sm_count - sm_margin``
  SMs (Transformer Engine's ``set_sm_margin``: a GEMM beside a userbuffers overlap leaves that overlap's
  SMs free for its whole duration, whether the overlap's transfer runs then or not), so it is timed with
  at most that many SMs, and with fewer if the running communication takes more;
* **the collective, slowed by compute** (``--gpu-contention-model measured`` only, the GPU platforms' default;
  :meth:`Contention.slowed_collective_ns`): a timed NCCL collective (``--platform-collective nccl``) that starts
  while compute kernels of its rank run (issued in an earlier nanosecond, so their ends are known) has its
  *bandwidth* part stretched by :data:`COMM_SLOWDOWN_BESIDE_COMPUTE` until the last of those kernels ends, then runs
  at full speed; decided when it starts (exact fractions, rounded half up to the ns). Kernels issued after it starts
  do not re-time it, and a collective of packets, a custom one or a send is not slowed. ASSUMPTION: the factor is
  the median ``comm_slowdown`` of our H200 ``stream`` rows (``interference.csv``: an HBM copy kernel of 2-64 CTAs
  beside GEMMs, attention, norms and adds), a stand-in for NCCL's channels, not a measurement of NCCL over NVLink.

Utilisation: the model records per-rank intervals — compute kernels (when issued, with the SMs they
ran on and an estimate of their HBM use: bytes moved / (duration x HBM bandwidth)), and collectives and
sends with their SMs and HBM shares (from the run's finished-node records) — and summarises them for the report
(``report.stats["gpu_utilization"]``).
"""

from __future__ import annotations

import dataclasses
from array import array
from fractions import Fraction

from astra_sim.chakra import types as T
from astra_sim.errors import WorkloadError
from astra_sim.ops import COMPUTE_BOUND_OPS, canonical_name
from astra_sim.workload.workload import DEFAULT_PG_NAMES

from astra_gpu_model.gpu import DTYPE_BYTES
from astra_gpu_model.grouped import group_shapes
from astra_gpu_model.ops import OpError, classify, node_io

DEFAULT_COMM_SMS = 32
FALLBACK_HBM_SHARE = 0.1
MAX_DEFAULT_HBM_SHARE = 0.5
TIMELINE_CAP = 256
COMM_TYPES = (T.COMM_COLL_NODE, T.COMM_SEND_NODE)
#: ASSUMPTION (a stand-in, not NCCL): how much slower a communication kernel streams beside a running compute kernel,
#: the median ``comm_slowdown`` (throughput alone / beside the kernel) of the 47 ``stream`` rows with ``overlap_ok`` of
#: ``calibration/nvidia-h200-2026-11-26/interference.csv`` (an HBM copy kernel of 2-64 CTAs beside GEMMs, attention,
#: norms and adds on an H200; range 1.11-2.63); ``tests/test_comm_slowed_by_compute.py`` recomputes it from the file.
COMM_SLOWDOWN_BESIDE_COMPUTE = Fraction(226964, 100000)


#: how a kernel beside communication is timed: the SMs and HBM share the communication leaves ("sm-hbm"), or
#: the slowdowns measured on a Hopper GPU (data/contention_fit.json, fit/fit_contention.py)
CONTENTION_MODELS = ("sm-hbm", "measured")
_MEASURED = None


def measured_slowdown(kind, fraction):
    """The measured slowdown of a ``compute`` or ``memory`` kernel while communication takes this fraction of
    the SMs (``carveout``: a GEMM launched leaving it free), interpolated, never decreasing in the fraction."""
    global _MEASURED
    if _MEASURED is None:
        import json
        from pathlib import Path

        with open(Path(__file__).with_name("data") / "contention_fit.json") as handle:
            table = json.load(handle)["slowdown_by_fraction_of_sms_taken"]
        _MEASURED = {}
        for name, points in table.items():
            best, monotone = 1.0, [(0.0, 1.0)]
            for f, x in points:
                best = max(best, x)
                monotone.append((f, best))
            _MEASURED[name] = monotone
    points = _MEASURED[kind]
    if fraction <= 0:
        return 1.0
    for (f0, x0), (f1, x1) in zip(points, points[1:]):
        if fraction <= f1:
            return x0 + (x1 - x0) * (fraction - f0) / (f1 - f0)
    (f0, x0), (f1, x1) = points[-2], points[-1]
    return x1 + (x1 - x0) * (fraction - f1) / (f1 - f0)  # beyond the measured range: the last slope


def _flag(value):
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def link_hbm_share(gpu, link_gbps):
    """HBM share of a transfer streaming at ``link_gbps`` (it reads what it sends and writes what it receives):
    ``2 x link / HBM``, at most :data:`MAX_DEFAULT_HBM_SHARE`."""
    return min(MAX_DEFAULT_HBM_SHARE, 2.0 * link_gbps / gpu.hbm_bandwidth_gbps)


def default_hbm_share(gpu):
    link = gpu.scaleup_bandwidth_gbps
    if not link or not gpu.hbm_bandwidth_gbps:
        return FALLBACK_HBM_SHARE
    return link_hbm_share(gpu, link)


def _sm_attr(node, key, rank, kind, high, meaning):
    """A node's SM-count attribute ``key``: an integer from 0 (to ``high``, when given), else an error that
    names the node, its rank and what the number means."""
    value = node.attrs[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (high is not None and value > high):
        where = "" if rank is None else f" of rank {rank}"
        bound = ">= 0" if high is None else f"from 0 to {high}"
        raise WorkloadError(f"{kind} node {node.id} ({node.name!r}){where}: attribute {key!r} must be an integer "
                            f"{bound} ({meaning}), got {value!r}")
    return value


def contended_gpu(gpu, comm_sms, hbm_share):
    """``gpu`` as a compute kernel sees it while communication runs: fewer SMs (same per-SM peak,
    so the whole-GPU peaks scale down) and ``(1 - hbm_share)`` of the HBM bandwidth."""
    sms = gpu.sm_count - comm_sms
    scale = sms / gpu.sm_count
    return dataclasses.replace(
        gpu, sm_count=sms, tensor_tflops={k: v * scale for k, v in gpu.tensor_tflops.items()},
        hbm_bandwidth_gbps=gpu.hbm_bandwidth_gbps * (1.0 - hbm_share),
    )


class _Intervals:
    """One rank's recorded intervals as flat arrays (about 30 bytes each instead of ~200 for a tuple: a run
    records one per compute kernel and per collective or send). ``comm_sms`` is -1 for a compute kernel that
    ran uncontended; ``compute_sms`` and ``hbm`` are unused for communication intervals."""

    __slots__ = ("start", "end", "compute_sms", "comm_sms", "hbm")

    def __init__(self):
        self.start, self.end = array("q"), array("q")
        self.compute_sms, self.comm_sms = array("h"), array("h")
        self.hbm = array("f")

    def add(self, start, end, compute_sms, comm_sms, hbm=0.0):
        self.start.append(start)
        self.end.append(end)
        self.compute_sms.append(compute_sms)
        self.comm_sms.append(comm_sms)
        self.hbm.append(hbm)

    def rows(self):
        return zip(self.start, self.end, self.compute_sms, self.comm_sms, self.hbm)


_NO_INTERVALS = _Intervals()


class Contention:
    """Contention settings and per-rank utilisation records for one :class:`GpuComputeModel`."""

    def __init__(self, gpu, context=None, comm_sms=None, hbm_share=None):
        from astra_sim.errors import ConfigError

        comm_sms = DEFAULT_COMM_SMS if comm_sms is None else comm_sms
        try:
            comm_sms = int(comm_sms)
        except (TypeError, ValueError):
            raise ConfigError(f"--gpu-comm-sms must be an integer, got {comm_sms!r}") from None
        if comm_sms < 0:
            raise ConfigError(f"--gpu-comm-sms must be >= 0, got {comm_sms}")
        self.comm_sms = min(comm_sms, gpu.sm_count - 1)
        options = getattr(context, "options", None) or {}
        nic = options.get("nccl_nic_gbps")
        #: per-transfer HBM shares (NVLink or NIC rate) unless --gpu-comm-hbm-share fixes one, or the NIC rate
        #: or the scale-up rate is unknown
        self.per_transfer = (hbm_share is None and nic is not None and bool(gpu.scaleup_bandwidth_gbps)
                             and bool(gpu.hbm_bandwidth_gbps))
        self.nic_gbps = float(nic) if nic is not None else None
        self._context = context
        self._group_nodes = {}  # pg_name -> nodes (scale-up domains) its NPUs span, or None if unknown
        self._domain = None  # NPUs per node (scale-up domain), read from the context on first use
        if hbm_share is None:
            hbm_share = default_hbm_share(gpu)
        try:
            hbm_share = float(hbm_share)
        except (TypeError, ValueError):
            raise ConfigError(f"--gpu-comm-hbm-share must be a number, got {hbm_share!r}") from None
        if not 0.0 <= hbm_share < 1.0:
            raise ConfigError(f"--gpu-comm-hbm-share must be in [0, 1), got {hbm_share}")
        self.hbm_share = hbm_share
        self.gpu = gpu
        self._slowed = {}  # SMs taken by communication -> (the contended GPU, its duration cache)
        self._bytes_cache = {}  # (op name, shapes, types, values, launched, grouped) -> HBM bytes (-1: unknown)
        self._engine = getattr(context, "engine", None)
        self._nodes_in_flight = getattr(context, "comm_nodes_in_flight", None)
        self._end_of = None  # (rank, node id) -> when a running collective ends, or None (bind_run)
        self.compute = {}  # rank -> _Intervals of its compute kernels (comm_sms -1: not contended)
        self.comm = {}  # rank -> _Intervals of its collectives and sends (their comm_sms)
        self.contended_nodes = 0
        self._running = {}  # rank -> [(issued_ns, end_ns)] of its compute kernels not yet known to have ended
        #                     (kept by the measured model only)
        self.mode = "sm-hbm"

    @classmethod
    def from_options(cls, gpu, context, options):
        if not _flag(options.get("gpu_contention", False)) or options.get("gpu_contention_model") == "off":
            return None
        contention = cls(gpu, context, options.get("gpu_comm_sms"), options.get("gpu_comm_hbm_share"))
        mode = options.get("gpu_contention_model") or "sm-hbm"
        if mode not in CONTENTION_MODELS:
            from astra_sim.errors import ConfigError

            raise ConfigError(f"--gpu-contention-model must be one of {', '.join(CONTENTION_MODELS)}, got {mode!r}")
        contention.mode = mode
        return contention

    def describe(self):
        d = {"model": self.mode, "comm_sms": self.comm_sms, "comm_hbm_share": round(self.hbm_share, 4),
             "compute_sms_during_comm": self.gpu.sm_count - self.comm_sms}
        if self.per_transfer:
            d["comm_hbm_share"] = "per transfer"
            d["hbm_share_scaleup"] = round(link_hbm_share(self.gpu, self.gpu.scaleup_bandwidth_gbps), 4)
            d["hbm_share_nic"] = round(link_hbm_share(self.gpu, self.nic_gbps), 4)
        return d

    # ------------------------------------------------------------------ timing
    def node_sms(self, node, rank=None):
        """SMs the communication ``node`` occupies: its ``comm_sms`` attribute, else ``--gpu-comm-sms``."""
        if "comm_sms" not in node.attrs:
            return self.comm_sms
        return _sm_attr(node, "comm_sms", rank, "communication", None,
                        "SMs its kernel occupies; 0 for a copy-engine transfer")

    def node_hbm_share(self, node, rank):
        """HBM share the transfer ``node`` takes while it runs: fixed (``--gpu-comm-hbm-share`` or its default),
        or per transfer, ``2 x link rate / HBM bandwidth`` (it reads what it sends and writes what it
        receives), the link being the NIC when the transfer leaves the rank's node (a send to another node, a
        collective whose group spans several) and the scale-up link (NVLink) otherwise."""
        if not self.per_transfer:
            return self.hbm_share
        return link_hbm_share(self.gpu, self.nic_gbps if self._crosses_nodes(node, rank)
                              else self.gpu.scaleup_bandwidth_gbps)

    def _crosses_nodes(self, node, rank):
        context = self._context
        domain = self._domain
        if domain is None:  # the network's first dimension (known once the run is built)
            domain = self._domain = max(1, int((getattr(context, "npus_per_dim", None) or [1])[0]))
        if node.type == T.COMM_SEND_NODE:
            peer = node.attrs.get("comm_dst")
            return isinstance(peer, int) and peer // domain != rank // domain
        pg = node.attrs.get("pg_name", "")
        spans = self._group_nodes.get(pg, -1)
        if spans == -1:
            if pg in DEFAULT_PG_NAMES:
                members = range(getattr(context, "total_npus", 0) or domain)
            else:
                try:
                    members = (getattr(context, "comm_groups", None) or {}).get(int(pg))
                except (TypeError, ValueError):
                    members = None
            spans = self._group_nodes[pg] = None if not members else len({m // domain for m in members})
        return bool(spans and spans > 1)  # a group defined only inside the trace: taken as one node

    def busy(self, rank):
        """(SMs, HBM share) the rank's running communication takes now, or None if none runs. SMs add up over
        the running collectives and sends (capped at ``sm_count - 1``), and so do per-transfer HBM shares
        (capped at :data:`MAX_DEFAULT_HBM_SHARE`)."""
        nodes = self._nodes_in_flight(rank) if self._nodes_in_flight is not None else None
        return self._state(nodes, rank) if nodes else None

    def _state(self, nodes, rank):
        """:meth:`busy` of the communication ``nodes`` (not empty)."""
        sms = min(self.gpu.sm_count - 1, sum(self.node_sms(n, rank) for n in nodes))
        if not self.per_transfer:
            return sms, self.hbm_share
        share = sum(self.node_hbm_share(n, rank) for n in nodes)
        return sms, round(min(MAX_DEFAULT_HBM_SHARE, share), 4)

    def bind_run(self, run):
        """Read the running collectives' ends from the run (``run.collective_end_ns``, the lifecycle hooks'
        view): without it every kernel issued beside communication is slowed for its whole duration."""
        self._end_of = getattr(run, "collective_end_ns", None)

    def segments(self, rank):
        """``[(state, until_ns), ...]``: the rank's running communication (:meth:`busy`'s state, None when none
        runs) from now on, changing at each running collective's end where that is already fixed (a timed
        phase: ``--platform-collective nccl``); the last entry's ``until_ns`` is None. An operation whose end is
        not known (a send, a collective of packets or still to start) runs to the end of the kernel."""
        nodes = self._nodes_in_flight(rank) if self._nodes_in_flight is not None else None
        if not nodes:
            return [(None, None)]
        end_of = self._end_of
        now = self._engine.now if self._engine is not None else None
        ends = {}
        if end_of is not None and now is not None:
            for n in nodes:
                if n.type == T.COMM_COLL_NODE:
                    end = end_of(rank, n.id)
                    if end is not None and end > now:
                        ends[n.id] = end
        if not ends:
            return [(self._state(nodes, rank), None)]
        out = []
        for until in sorted(set(ends.values())):
            out.append((self._state(nodes, rank), until))
            nodes = [n for n in nodes if ends.get(n.id, until + 1) > until]
        out.append((self._state(nodes, rank) if nodes else None, None))
        return out

    def _contended(self, state):
        entry = self._slowed.get(state)
        if entry is None:
            entry = self._slowed[state] = (contended_gpu(self.gpu, *state), {})
        return entry

    def node_margin(self, node, rank):
        """SMs the compute ``node`` leaves free by launch (its ``sm_margin`` attribute; 0 without one)."""
        if "sm_margin" not in node.attrs:
            return 0
        return _sm_attr(node, "sm_margin", rank, "compute", self.gpu.sm_count - 1, "SMs the kernel leaves free")

    def time_node(self, model, node, rank):
        """Time ``node`` with ``model`` on the whole or the contended GPU, piecewise over :meth:`segments` (it
        progresses at each state's rate while that state lasts); record the pieces it ran."""
        measured = self.mode == "measured"
        margin = self.node_margin(node, rank) if "sm_margin" in node.attrs else 0
        nodes = self._nodes_in_flight(rank) if self._nodes_in_flight is not None else None
        if not nodes and not margin:  # the common case, no communication and no margin: the whole GPU, one piece
            duration = model._compute_time_ns(node, rank)
            if duration is None:
                return None
            engine = self._engine
            if duration and engine is not None:  # (one piece on the whole GPU: the path of most nodes)
                start = engine.now
                intervals = self._started(rank, start, duration, measured)
                nbytes = 0 if measured else self._bytes(model, node, rank)
                hbm = min(1.0, nbytes / (duration * 1e-9 * self.gpu.hbm_bytes_per_s)) if nbytes else 0.0
                intervals.add(start, start + duration, self.gpu.sm_count, -1, hbm)
            return duration
        segments = self.segments(rank) if nodes else [(None, None)]
        full = model._compute_time_ns(node, rank) if measured else None  # the whole GPU's time
        durations = {}

        def timed(state):  # (duration, SMs the kernel leaves to the state, HBM share) on one state
            if state not in durations:
                durations[state] = (self._measured(model, node, rank, state, margin, full) if measured
                                    else self._on_state(model, node, rank, state, margin, full))
            return durations[state]

        first = timed(segments[0][0])
        if first[0] is None:  # the node runs no kernel
            return None
        start = self._engine.now if self._engine is not None else 0
        if len(segments) == 1 or first[0] <= segments[0][1] - start:  # over before the first change
            pieces = [(first, start, start + first[0])]
        else:
            pieces = piecewise(start, [(timed(state), until) for state, until in segments])
        duration = pieces[-1][2] - start
        if any(sms is not None for (_d, sms, _s), _a, _b in pieces):
            self.contended_nodes += 1
        if duration:
            self._record(model, node, rank, measured, duration,
                         [(timing, a - start, b - start) for timing, a, b in pieces])
        return duration

    def _record(self, model, node, rank, measured, duration, pieces):
        """Record a kernel issued now that runs ``duration`` ns (> 0) as ``pieces``: ``((duration on the state,
        SMs taken or None, HBM share), from, to)``, in ns from now."""
        engine = self._engine
        if engine is None:
            return
        start = engine.now
        intervals = self._started(rank, start, duration, measured)
        nbytes = 0 if measured else self._bytes(model, node, rank)
        sm_count = self.gpu.sm_count
        for (d, sms, share), a, b in pieces:
            if b > a:
                hbm = min(1.0 - share, nbytes / (d * 1e-9 * self.gpu.hbm_bytes_per_s)) if nbytes and d else 0.0
                intervals.add(start + a, start + b, sm_count - (sms or 0), -1 if sms is None else sms, hbm)

    def _started(self, rank, start, duration, measured):
        """Note a kernel of ``rank`` running from ``start`` for ``duration`` ns among its running kernels (measured
        model only: it alone slows a collective beside running kernels, :meth:`compute_busy_until`); returns the
        rank's compute intervals, to record its pieces in."""
        if measured:
            running = self._running.get(rank)
            if running is None:
                running = self._running[rank] = []
            if running and (len(running) > 1 or running[0][1] <= start):  # (bounded by the kernels running at once;
                running[:] = [k for k in running if k[1] > start]         # most often one, still running)
            running.append((start, start + duration))
        intervals = self.compute.get(rank)
        if intervals is None:
            intervals = self.compute[rank] = _Intervals()
        return intervals

    def compute_busy_until(self, rank):
        """When the last compute kernel of ``rank`` running now ends, or None: the one test of whether a collective
        starting now is slowed (:meth:`slowed_collective_ns`). None outside the measured model (which alone records
        the kernels) and when none runs; kernels issued before this nanosecond only (a kernel issued in it is timed
        at its end, after the events that may start a collective, so it is left out whatever the order of the
        nanosecond's events)."""
        running = self._running.get(rank)
        if not running or self._engine is None:  # (empty outside the measured model: _on_node records none)
            return None
        now = self._engine.now
        ends = [end for issued, end in running if issued < now < end]
        return max(ends) if ends else None

    def slowed_collective_ns(self, until_ns, total_ns, bandwidth_ns):
        """The time of a collective starting now that takes ``total_ns`` alone, ``bandwidth_ns`` of it its bandwidth
        part, beside compute kernels of its rank that run until ``until_ns`` (:meth:`compute_busy_until`, not None:
        the caller asked it once). Until then (``W`` ns) the collective does its work at the rate of
        ``S = total + (f - 1) x bandwidth`` ns for the whole (``f`` = :data:`COMM_SLOWDOWN_BESIDE_COMPUTE`: its latency
        part unslowed, spread evenly), and the rest at full speed: ``S`` when ``S <= W``, else
        ``W + total x (1 - W / S)``, rounded half up to the ns."""
        if total_ns <= 0 or bandwidth_ns <= 0:
            return total_ns
        window = until_ns - self._engine.now
        slowed = total_ns + (COMM_SLOWDOWN_BESIDE_COMPUTE - 1) * min(bandwidth_ns, total_ns)
        span = slowed if slowed <= window else window + total_ns * (1 - Fraction(window) / slowed)
        return (2 * span.numerator + span.denominator) // (2 * span.denominator)

    def _on_state(self, model, node, rank, state, margin, _full):
        """(duration, SMs taken or None, HBM share) of ``node`` on the GPU that ``state``'s communication and
        its own ``sm_margin`` leave."""
        if margin and (state is None or state[0] < margin):
            state = (margin, 0.0 if state is None else state[1])
        if state is None:
            return model._compute_time_ns(node, rank), None, 0.0
        saved = model.gpu, model._cache
        model.gpu, model._cache = self._contended(state)
        try:
            duration = model._compute_time_ns(node, rank)
        finally:
            model.gpu, model._cache = saved
        return duration, state[0], state[1]

    def _measured(self, model, node, rank, state, margin, full):
        """``--gpu-contention-model measured`` on one state: the whole GPU's time ``full``, slowed by the measured
        factor for the SMs the running communication takes (compute-bound and memory-bound kernels apart), or,
        for a kernel launched leaving SMs free (``sm_margin``) at least as many as the communication takes, by
        the measured cost of that carve-out."""
        if full is None or (state is None and not margin):
            return full, None, 0.0
        taken = state[0] if state is not None else 0
        kind = self._kind(model, node, rank)
        if margin and margin >= taken:
            factor = measured_slowdown("carveout", margin / self.gpu.sm_count) if kind == "compute" else 1.0
            sms = margin
        else:
            factor = measured_slowdown(kind, taken / self.gpu.sm_count)
            sms = taken
        return int(round(full * factor)), sms, 0.0

    def _kind(self, model, node, rank):
        """``compute`` (GEMMs, attention, convolutions, kernels of unknown ops) or ``memory``."""
        source = node if node.name.startswith("aten::") else model._launcher(node, rank)
        name = canonical_name(source.name) if source is not None else None
        if name is None or name in COMPUTE_BOUND_OPS:
            return "compute"
        return "memory"

    def _bytes(self, model, node, rank):
        """Estimated HBM bytes the kernel moves (0 when unknown, e.g. replayed nodes)."""
        source = node if node.name.startswith("aten::") else model._launcher(node, rank)
        if source is not None:
            shapes, types, values = node_io(source)
            grouped = model._grouped(node) if source is node else None
            key = (source.name, shapes, types, values, source is not node, grouped)
            nbytes = self._bytes_cache.get(key)
            if nbytes is None:
                nbytes = self._bytes_cache[key] = self._op_bytes(model, key)
            if nbytes >= 0:
                return nbytes
        size = node.attrs.get("tensor_size")
        return size if isinstance(size, int) and not isinstance(size, bool) else 0

    @staticmethod
    def _op_bytes(model, key):
        """HBM bytes of the ATen op ``key`` = (name, shapes, types, values, launched kernel, grouped); -1 if
        unknown. A grouped GEMM (``grouped``: ``(dim, sizes)``) reads every group with work's own matrix."""
        name, shapes, types, values, launched, grouped = key
        try:
            op = classify(name, shapes, types, values, model.default_dtype, launched)
        except (OpError, ValueError, TypeError, KeyError):  # an estimate only
            return -1
        if op is None:
            return -1
        if op.kind == "gemm":
            in_bytes = DTYPE_BYTES.get(op.dtype, 2)
            if grouped is not None and op.batch == 1 and sum(grouped[1]) == (op.m if grouped[0] == "m" else op.k):
                shapes = group_shapes(op.m, op.n, op.k, *grouped)
                return sum((m * k + k * n) * in_bytes + m * n * op.out_bytes for m, n, k in shapes if m and k)
            return op.batch * ((op.m * op.k + op.k * op.n) * in_bytes + op.m * op.n * op.out_bytes)
        return op.nbytes

    def record_node(self, rank, node, start_ns, end_ns):
        # collectives and sends, as in the timing (a receive is posted long before its data comes; the
        # send's interval covers the transfer)
        if node.type in COMM_TYPES and not node.attrs.get("is_cpu_op") and end_ns > start_ns:
            intervals = self.comm.get(rank)
            if intervals is None:
                intervals = self.comm[rank] = _Intervals()
            intervals.add(start_ns, end_ns, 0, self.node_sms(node, rank), self.node_hbm_share(node, rank))

    # ------------------------------------------------------------------ report
    def summary(self, finish_ns_of_rank, arrays=None):
        """``{rank: {sm_busy_fraction, hbm_busy_fraction, contended_compute_ns, timeline, ...}}``.

        Timeline rows ``[start_ns, end_ns, compute_sms, comm_sms, hbm_share]`` (comm_sms: the running
        collectives' and sends' SMs; hbm_share: comm's share when any communication runs plus
        the compute kernel's estimated share), consecutive segments where something runs, capped at
        :data:`TIMELINE_CAP` rows per rank. Fractions are over ``[0, rank finish]``. ``arrays``: sweep in numpy
        (True), in Python (False), or by size (None: numpy from :data:`ARRAY_SUMMARY_MIN_ROWS` intervals); both
        give the same numbers, to the bit (:meth:`_rank_summary_arrays`)."""
        out = {}
        for rank, finish in finish_ns_of_rank.items():
            compute = self.compute.get(rank, _NO_INTERVALS)
            comm = self.comm.get(rank, _NO_INTERVALS)
            use = arrays if arrays is not None else len(compute.start) + len(comm.start) >= ARRAY_SUMMARY_MIN_ROWS
            summarise = self._rank_summary_arrays if use else self._rank_summary
            out[rank] = summarise(compute, comm, finish)
        return out

    def _rank_summary(self, compute, comm, finish):
        """One rank's :meth:`summary`, swept in Python."""
        sms = self.gpu.sm_count
        events = {}
        for start, end, c_sms, _k, c_hbm in compute.rows():
            for t, sign in ((start, 1), (end, -1)):
                e = events.setdefault(t, [0, 0.0, 0, 0, 0.0])
                e[0] += sign * c_sms
                e[1] += sign * c_hbm
        for start, end, _c, k, k_hbm in comm.rows():
            for t, sign in ((start, 1), (end, -1)):
                e = events.setdefault(t, [0, 0.0, 0, 0, 0.0])
                e[2] += sign
                e[3] += sign * k
                e[4] += sign * k_hbm
        points = sorted(events)
        rows = []
        sm_time = hbm_time = 0.0
        c_sms = n_comm = comm_sms = 0
        c_hbm = k_hbm = 0.0
        for a, b in zip(points, points[1:]):
            d = events[a]
            c_sms += d[0]
            c_hbm += d[1]
            n_comm += d[2]
            comm_sms += d[3]
            k_hbm += d[4]
            comm_on = n_comm > 0
            k_sms = min(sms - 1, comm_sms) if comm_on else 0
            if not c_sms and not k_sms:
                continue
            comm_hbm = (min(MAX_DEFAULT_HBM_SHARE, max(0.0, k_hbm)) if self.per_transfer else self.hbm_share) \
                if comm_on else 0.0
            hbm = min(1.0, max(0.0, c_hbm) + comm_hbm)
            sm_time += min(sms, c_sms + k_sms) * (b - a)
            hbm_time += hbm * (b - a)
            row = [a, b, min(c_sms, sms), k_sms, round(hbm, 4)]
            if rows and rows[-1][1] == a and rows[-1][2:] == row[2:]:
                rows[-1][1] = b
            else:
                rows.append(row)
        span = finish or (points[-1] if points else 0)
        return _rank_entry(sms, sm_time, hbm_time, span, compute, rows[:TIMELINE_CAP], len(rows) > TIMELINE_CAP)

    def _rank_summary_arrays(self, compute, comm, finish):
        """:meth:`_rank_summary` in numpy, the same floats to the bit: a time's float changes are summed in the
        Python sweep's order (intervals in order, start before end; position by position in numpy, so each
        sum is the same sequence of additions), the running sums are sequential (``cumsum``), the products and
        bounds elementwise, and the timeline's rows (Python's ``round``) are built only up to the cap."""
        import numpy as np

        sms = self.gpu.sm_count
        c_start, c_end = np.frombuffer(compute.start, np.int64), np.frombuffer(compute.end, np.int64)
        k_start, k_end = np.frombuffer(comm.start, np.int64), np.frombuffer(comm.end, np.int64)
        durations = c_end - c_start
        totals = (int(durations[np.frombuffer(compute.comm_sms, np.int16) >= 0].sum()), int(durations.sum()))
        points = np.unique(np.concatenate((c_start, c_end, k_start, k_end)))
        n = len(points)
        if n < 2:
            span = finish or (int(points[-1]) if n else 0)
            return _rank_entry(sms, 0.0, 0.0, span, totals, [], False)
        c_sms_d = _at_points(points, c_start, c_end, np.frombuffer(compute.compute_sms, np.int16).astype(np.int64))
        c_hbm_d = _float_at_points(points, c_start, c_end, np.frombuffer(compute.hbm, np.float32).astype(np.float64))
        n_comm_d = _at_points(points, k_start, k_end, np.ones(len(k_start), np.int64))
        k_sms_d = _at_points(points, k_start, k_end, np.frombuffer(comm.comm_sms, np.int16).astype(np.int64))
        k_hbm_d = _float_at_points(points, k_start, k_end, np.frombuffer(comm.hbm, np.float32).astype(np.float64))
        # the running values over each interval [points[i], points[i + 1])
        c_sms = np.cumsum(c_sms_d)[:-1]
        c_hbm = np.cumsum(c_hbm_d)[:-1]
        comm_on = np.cumsum(n_comm_d)[:-1] > 0
        k_sms = np.where(comm_on, np.minimum(sms - 1, np.cumsum(k_sms_d)[:-1]), 0)
        k_hbm = np.cumsum(k_hbm_d)[:-1]
        lengths = np.diff(points)
        kept = (c_sms != 0) | (k_sms != 0)
        if self.per_transfer:
            comm_hbm = np.minimum(MAX_DEFAULT_HBM_SHARE, np.maximum(0.0, k_hbm))
        else:
            comm_hbm = np.full(len(k_hbm), self.hbm_share, dtype=np.float64)
        comm_hbm = np.where(comm_on, comm_hbm, 0.0)
        hbm = np.minimum(1.0, np.maximum(0.0, c_hbm) + comm_hbm)
        sm_time = float(int((np.minimum(sms, c_sms + k_sms) * lengths)[kept].sum()))
        hbm_time = float(np.cumsum(hbm[kept] * lengths[kept])[-1]) if kept.any() else 0.0
        rows = []
        starts, ends = points[:-1], points[1:]
        for i in np.flatnonzero(kept).tolist():
            a = int(starts[i])
            row = [a, int(ends[i]), min(int(c_sms[i]), sms), int(k_sms[i]), round(float(hbm[i]), 4)]
            if rows and rows[-1][1] == a and rows[-1][2:] == row[2:]:
                rows[-1][1] = row[1]
            else:
                if len(rows) == TIMELINE_CAP:  # one row more: the timeline is truncated, the kept rows final
                    return _rank_entry(sms, sm_time, hbm_time, finish or int(points[-1]), totals, rows, True)
                rows.append(row)
        return _rank_entry(sms, sm_time, hbm_time, finish or int(points[-1]), totals, rows, False)


def piecewise(start, segments):
    """The pieces ``[(timing, a, b), ...]`` a kernel issued at ``start`` runs: ``segments`` is ``[((duration, ...),
    until_ns), ...]``, the kernel's whole duration on each state of the GPU and when that state ends (None for the
    last). The kernel does ``1 / duration`` of its work per ns of each state, so it ends in the first state where
    its remaining work fits; the time in that last piece is rounded to the nearest ns (halves up), the others are
    whole. Exact (fractions), deterministic, and the one state's duration when the kernel ends before the first
    change."""
    pieces = []
    done = Fraction(0)  # fraction of the work done
    at = start
    for timing, until in segments:
        duration = timing[0]
        rest = duration if not done else (1 - done) * duration
        if until is None or rest <= until - at:
            if done:
                rest = (2 * rest.numerator + rest.denominator) // (2 * rest.denominator)
            pieces.append((timing, at, at + rest))
            return pieces
        pieces.append((timing, at, until))
        done += Fraction(until - at, duration)
        at = until
    raise ValueError("segments must end with an open state (until None)")


#: intervals (compute kernels and communication) from which a rank's summary is swept in numpy
ARRAY_SUMMARY_MIN_ROWS = 4096


def _rank_entry(sms, sm_time, hbm_time, span, compute, timeline, truncated):
    """One rank's summary entry (:meth:`Contention.summary`); ``compute``: its kernels' intervals, or their
    ``(contended_compute_ns, compute_ns)``."""
    if isinstance(compute, tuple):
        contended, busy = compute
    else:
        contended = sum(e - b for b, e, _c, k, _h in compute.rows() if k >= 0)
        busy = sum(e - b for b, e, *_ in compute.rows())
    return {
        "sm_busy_fraction": round(sm_time / (sms * span), 4) if span else 0.0,
        "hbm_busy_fraction": round(hbm_time / span, 4) if span else 0.0,
        "contended_compute_ns": contended,
        "compute_ns": busy,
        "timeline": timeline,
        "timeline_truncated": truncated,
    }


def _at_points(points, starts, ends, values):
    """The integer change at each of ``points``: + ``values`` at the starts, - at the ends."""
    import numpy as np

    out = np.zeros(len(points), np.int64)
    np.add.at(out, np.searchsorted(points, starts), values)
    np.add.at(out, np.searchsorted(points, ends), -values)
    return out


def _float_at_points(points, starts, ends, values):
    """The float change at each of ``points`` as the Python sweep sums it: from 0.0, interval by interval, the
    start's + value before the end's - value; equal times are summed one position at a time, in that order."""
    import numpy as np

    count = len(starts)
    at = np.empty(2 * count, np.int64)
    at[0::2] = np.searchsorted(points, starts)
    at[1::2] = np.searchsorted(points, ends)
    change = np.empty(2 * count, np.float64)
    change[0::2] = values
    change[1::2] = -values
    order = np.argsort(at, kind="stable")  # by point, in the sweep's order within one
    at, change = at[order], change[order]
    first = np.searchsorted(at, at)  # where each event's point begins in the sorted list
    position = np.arange(2 * count) - first
    out = np.zeros(len(points), np.float64)
    by_position = np.argsort(position, kind="stable")
    bounds = np.searchsorted(position[by_position], np.arange(int(position.max(initial=-1)) + 2))
    for k in range(len(bounds) - 1):
        chosen = by_position[bounds[k]:bounds[k + 1]]
        out[at[chosen]] += change[chosen]  # at most one event per point at each position
    return out


__all__ = ["Contention", "contended_gpu", "piecewise", "default_hbm_share", "link_hbm_share", "DEFAULT_COMM_SMS",
           "COMM_SLOWDOWN_BESIDE_COMPUTE"]
