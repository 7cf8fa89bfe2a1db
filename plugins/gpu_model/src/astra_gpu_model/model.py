"""The ``gpu`` compute model: times GPU COMP nodes on a described GPU from what the trace says.

For each GPU COMP node (the kernel replays CPU ops itself), in this order:

1. **the op and its shapes**: an ATen op name (``aten::mm``, ``aten::_scaled_dot_product_flash_attention``,
   ``aten::add``, ...) with ``inputs.shapes``/``inputs.types`` on the node itself, or, for a GPU kernel node
   from the PyTorch converter (named after the CUDA kernel), on the CPU op that launched it (its
   ``ctrl_deps`` parent). GEMMs use :mod:`astra_gpu_model.gemm`, or :mod:`astra_gpu_model.grouped` for a
   grouped GEMM (a node with ``grouped_gemm_dim``/``grouped_gemm_sizes``: an MoE layer's experts);
   attention is FLOPs at ``attention_efficiency`` x peak (or, for a node naming its ``attention_kernel`` on
   Hopper, that kernel's published efficiency: :mod:`astra_gpu_model.attention`) with wave quantisation over
   ``B*H*ceil(S_q/128)`` CTAs, or HBM-bound;
   everything else is memory-bound: bytes moved at ``hbm_efficiency`` x the HBM bandwidth. Every kernel
   costs at least ``launch_us``. When one CPU op launched several kernels, each gets an equal share of
   the op's time plus its own launch cost;
2. **``num_ops`` / ``tensor_size``** (FLOPs, bytes): ``launch + max(num_ops / (compute_efficiency x peak),
   tensor_size / (hbm_efficiency x HBM))``, the peak of ``--gpu-default-dtype`` (achievable rates, not
   the peaks the kernel's ``roofline`` model uses);
3. **``duration_micros``** replayed as measured (0 -> 1 ns, as the kernel's ``replay``).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import replace
from typing import NamedTuple

from astra_sim.chakra import types as T
from astra_sim.compute import node_work

from astra_gpu_model.attention import (KERNELS as ATTENTION_KERNELS, amd_efficiency, band_work, blackwell_efficiency,
                                       check_fp8_attention, decode_params, effective_head_dim, fp8_efficiency,
                                       is_hopper, kernel_efficiency)
from astra_gpu_model.gemm import gemm_time_s
from astra_gpu_model.gpu import BLOCK_SCALED, DTYPE_BYTES, DTYPES, load_gpu
from astra_gpu_model.grouped import group_shapes, grouped_gemm_time_s, grouped_params
from astra_gpu_model.ops import ATTENTION_OPS, CONV_OPS, OpError, canonical_name, classify, node_io
from astra_gpu_model.power_clock import sustained_gemm_factor

#: The GPU's idle time between two consecutive kernels of a replayed CUDA graph (ns; ``--gpu-kernel-gap-ns``, which
#: astra serve's graph steps set to it). Source: sgl-project/sglang-omni issue #760 (2026-06-14, "decode-only nsys
#: split", a steady decode step replayed as a CUDA graph, nsys --cuda-graph-trace=node): "1065 graph nodes/step",
#: "wall time / step 18.6 ms", "GPU-busy (union) 18.2 ms (98%)", "inter-kernel gap 0.40 ms": 0.40 ms / 1065 = 376 ns.
#: Corroborated by NVIDIA/Megatron-LM PR #6064 (4 x GB200 decode): "855 of ~900 per-step gaps are sub-microsecond
#: and sum to ~0.45 ms" (about 500 ns). Neither is an A100 or an H100 (their front end is assumed alike). The
#: kernels' fitted times (Vidur's record_function profiles, the GEMM fit's data) are kernel durations alone.
GRAPH_KERNEL_GAP_NS = 376
#: Op.kind -> the breakdown's compute class
_OP_CLASSES = {"gemm": "gemm", "attention": "attention", "memory": "elementwise", "none": "other"}


class OpBound(NamedTuple):
    """:meth:`GpuComputeModel.op_bound`: which resource bounds an op's time; its tensor and HBM times (seconds, at the
    run's clocks, launch and fixed costs apart), the HBM bytes it moves and its FLOPs (a GEMM's ``2 M N K batch``)."""

    bound: str  # "memory" | "compute"
    compute_s: float
    memory_s: float
    hbm_bytes: float
    flops: float


@functools.lru_cache(maxsize=None)
def _data_json(name):
    """``data/NAME`` of this package, parsed once per process."""
    import json
    from pathlib import Path

    with open(Path(__file__).with_name("data") / name) as handle:
        return json.load(handle)


@functools.lru_cache(maxsize=None)
def memory_op_rates():
    """``(rates, reference)``: the measured SM-side rate (bytes/s) of memory-bound ATen ops and the GPU they
    were measured on (``data/memops_fit.json``, written by ``fit/fit_memops.py`` from one H200's
    measurements)."""
    data = _data_json("memops_fit.json")
    rates = {name.split("::", 1)[1]: float(rate) for name, rate in data["rates_bytes_per_s"].items()}
    return rates, data["reference"]


def memory_op_floors():
    """``{"floors_us": {ATen op: us}, "default_us": us}``: the fixed time of a small memory-bound kernel on Hopper,
    measured on one H200 in a CUDA graph (``data/memops_floor.json``, written by ``fit/fit_memops_floor.py``)."""
    return _data_json("memops_floor.json")


class GpuComputeModel:
    """Registered as compute model ``gpu``. Options (``context.options``): ``gpu`` (preset or YAML),
    ``gpu_tf32`` (fp32 GEMMs on TF32 tensor cores), ``gpu_default_dtype`` (dtype when a trace names none)."""

    name = "gpu"
    #: a node's time depends on the node and the rank's own running communication, not on its number
    foldable = True

    @property
    def reads_comm_in_flight(self):
        """Whether a node's time depends on the communication running when it is issued (--gpu-contention)."""
        return self.contention is not None

    def __init__(self, context=None, gpu=None, *, tf32=None, default_dtype=None):
        options = dict(getattr(context, "options", None) or {})
        self.gpu = load_gpu(gpu if gpu is not None else options.get("gpu"))
        self.tf32 = bool(options.get("gpu_tf32")) if tf32 is None else bool(tf32)
        default_dtype = default_dtype or options.get("gpu_default_dtype") or "bf16"
        if default_dtype not in DTYPES:
            from astra_sim.errors import ConfigError

            raise ConfigError(f"--gpu-default-dtype must be one of {', '.join(DTYPES)}, got {default_dtype!r}")
        self.default_dtype = default_dtype
        # Memory-bound ops run at most at their measured SM-side rate, scaled by SMs x clock (memops_fit.json);
        # --gpu-memory-op-rates off streams every one at hbm_efficiency x HBM as before.
        self.memory_op_rates = options.get("gpu_memory_op_rates", "measured") != "off"
        self.kernel_gap_ns = int(options.get("gpu_kernel_gap_ns") or 0)
        if self.kernel_gap_ns < 0:
            from astra_sim.errors import ConfigError

            raise ConfigError(f"--gpu-kernel-gap-ns must be 0 or more, got {self.kernel_gap_ns}")
        self._warn = getattr(context, "warn", None) or (lambda message: None)
        self.cudnn_version = self._cudnn_version(options.get("cudnn_version"))
        self._cache = {}
        self.clock_ratios = {}  # set_clock_ratios: a power limit's or clock lock's SM clock, per op kind
        # A sustained GEMM phase's rate over a burst-fitted one at the board's limit (power_clock): the platform's
        # (a rack tray's, which it implies as gpu_board_power_w), else the preset's TDP; under --power-limit-w the
        # energy plugin scales from the preset's TDP, so this is taken at the TDP then.
        self.board_power_w = ((options.get("gpu_board_power_w") or self.gpu.tdp_w)
                              if options.get("power_limit_w") is None else self.gpu.tdp_w)
        self._sustained = {}  # dtype -> power_clock.sustained_gemm_factor
        self._grouped_warned = False
        self._kernel_warned = False
        self._window_warned = False
        self._ops = {}  # (name, IOInfo, launched) -> Op or False (op_class, node_details)
        # rank -> {id: EtNode}: lets a GPU kernel node find the CPU op that launched it.
        self._nodes_of = getattr(context, "rank_nodes", None)
        self._gpu_children = {}  # rank -> {cpu op id: number of GPU COMP nodes it launched}
        self.counts = Counter()  # how nodes were timed
        self._unknown = Counter()
        # --gpu-contention: comm kernels take SMs and HBM share from overlapping compute (contention.py)
        from astra_gpu_model.contention import Contention

        self.contention = Contention.from_options(self.gpu, context, options)
        observe = getattr(context, "add_node_observer", None)
        if self.contention is not None and observe is not None:
            observe(self.contention.record_node)  # communication intervals for the utilisation report

    # ------------------------------------------------------------------ binding to a run
    def rank_node(self, rank, node_id):
        """Node ``node_id`` of ``rank``'s trace, or None when the run gave no access to the nodes (the NCCL
        collective reads its node's ``comm_sms`` CTA cap through this)."""
        if self._nodes_of is None:
            return None
        return self._nodes_of(rank).get(node_id)

    def bind_nodes(self, nodes_of_rank):
        """``nodes_of_rank(rank) -> {id: EtNode}``: lets a GPU kernel node find the CPU op that launched it."""
        self._nodes_of = nodes_of_rank
        self._gpu_children = {}

    def describe(self):
        d = self.gpu.describe()
        d.update({"tf32": self.tf32, "default_dtype": self.default_dtype})
        if self.memory_op_rates:
            d["memory_op_rates"] = ("measured SM-side rates of memory-bound ops (data/memops_fit.json, one "
                                    f"{memory_op_rates()[1]['gpu']}), scaled by SMs x clock, at most "
                                    "hbm_efficiency x HBM")
        if self.contention is not None:
            d["contention"] = self.contention.describe()
        if self.kernel_gap_ns:
            d["kernel_gap_ns"] = self.kernel_gap_ns
        if self.clock_ratios:
            d["clock_ratios"] = dict(self.clock_ratios)  # a power limit's or clock lock's (set_clock_ratios)
        factors = {dtype: self._sustained_factor(dtype) for dtype in ("bf16", "fp8")}
        if any(f != 1.0 for f in factors.values()):
            d["sustained_gemm"] = {"board_power_w": self.board_power_w, "factor": factors}
        return d

    def stats(self):
        return dict(self.counts)

    def set_clock_ratios(self, ratios):
        """Run at a lower SM clock, as a power limit or clock lock makes the GPU do (the energy plugin's
        ``--power-limit-w`` / ``--gpu-clock-mhz``): ``{"gemm": r, "attention": r, "memory": r}``, the clock over the
        one the rates were calibrated at, ``0 < r <= 1`` (a kind not named keeps 1). GEMM and attention FLOP rates
        (and ``num_ops`` nodes', as ``gemm``) and memory-bound ops' SM-side rates scale by ``r``; HBM bandwidth and
        launch costs do not (the memory clock is separate), so memory-bound work barely slows."""
        for kind, ratio in ratios.items():
            if kind not in ("gemm", "attention", "memory") or not 0 < ratio <= 1:
                raise ValueError(f"clock ratio {kind}={ratio!r}: kinds gemm, attention, memory; 0 < ratio <= 1")
        self.clock_ratios = dict(ratios)
        self._cache.clear()

    def _sustained_factor(self, dtype):
        """The fitted GEMM peak's multiplier in a sustained phase of ``dtype`` GEMMs (power_clock)."""
        factor = self._sustained.get(dtype)
        if factor is None:
            factor = self._sustained[dtype] = sustained_gemm_factor(self.gpu, dtype, self.board_power_w)
        return factor

    # ------------------------------------------------------------------ the compute model interface
    def compute_time_ns(self, node, rank):
        """The node's time in ns, with ``--gpu-kernel-gap-ns`` before it (a node that runs no kernel, None, has
        none). Collectives keep NCCL's own fixed latency, which covers their kernels' start."""
        if self.contention is not None:
            ns = self.contention.time_node(self, node, rank)
        else:
            ns = self._compute_time_ns(node, rank)
        if self.kernel_gap_ns and ns is not None:
            ns += self.kernel_gap_ns
        return ns

    def _compute_time_ns(self, node, rank):
        name = node.name
        if name.startswith("aten::"):
            io = node_io(node)
            grouped, kernel, window = self._grouped(node), self._attention_kernel(node), self._attention_window(node)
            # all the time of a node timed by its own op depends on besides the GPU, whose cache holds it (_cache:
            # swapped with the GPU by contention, cleared by set_clock_ratios; one entry per distinct op)
            key = (name, io, grouped, kernel, window)
            ns = self._cache.get(key)
            if ns is None:
                seconds = self._op_seconds(name, *io, False, grouped, kernel, window)
                if seconds is not None:
                    ns = self._cache[key] = 0 if seconds == 0.0 else self._ns(seconds)
            if ns is not None:
                self.counts["op_shapes"] += 1
                return ns or None
        parent = self._launcher(node, rank)
        if parent is not None:
            shapes, types, values = node_io(parent)
            seconds = self._op_seconds(parent.name, shapes, types, values, True)
            if seconds is not None:
                share = self._gpu_children_of(rank).get(parent.id, 1)
                launch = self.gpu.gemm.launch_us * 1e-6
                if share > 1:
                    seconds = (seconds - launch) / share + launch
                self.counts["launcher_op_shapes"] += 1
                return self._ns(seconds)
        seconds = self._roofline_seconds(node)
        if seconds is not None:
            self.counts["num_ops_tensor_size"] += 1
            return self._ns(seconds)
        self.counts["replay_duration"] += 1
        return node.duration_micros * 1000 if node.duration_micros else 1

    # ------------------------------------------------------------------ for the breakdown and timelines
    def op_class(self, node, rank):
        """``gemm``, ``attention``, ``elementwise`` (memory-bound ops) or ``other`` (no GPU work) for a node the
        model reads by its op; None for the others (the kernel then classifies by name)."""
        op = self._node_op(node, rank)
        return None if op is None else _OP_CLASSES[op.kind]

    def node_details(self, node, rank, duration_ns):
        """What the timeline shows of a compute node: its FLOPs (or HBM bytes) and the modelled efficiency,
        achieved rate over the GPU's peak of the resource that bounds it (tensor FLOP/s, or HBM bandwidth)."""
        op = self._node_op(node, rank)
        seconds = duration_ns * 1e-9
        out = {}
        if op is not None and op.kind in ("gemm", "attention"):
            flops = 2.0 * op.m * op.n * op.k * op.batch if op.kind == "gemm" else op.flops
            dtype = op.dtype if op.dtype in DTYPE_BYTES else self.default_dtype
            out["op_class"] = op.kind
            out["dtype"] = dtype
            out["flops"] = int(flops)
            if seconds > 0:
                out["efficiency"] = round(flops / seconds / self.gpu.peak_flops(self._rate_dtype(dtype)), 4)
        elif op is not None and op.kind == "memory":
            out["op_class"] = "elementwise"
            out["hbm_bytes"] = int(op.nbytes)
            if seconds > 0:
                out["efficiency"] = round(op.nbytes / seconds / self.gpu.hbm_bytes_per_s, 4)
        else:
            num_ops = node.attrs.get("num_ops")
            if isinstance(num_ops, int) and not isinstance(num_ops, bool) and num_ops > 0:
                out["flops"] = num_ops
                if seconds > 0:
                    peak = self.gpu.peak_flops(self._rate_dtype(self.default_dtype))
                    out["efficiency"] = round(num_ops / seconds / peak, 4)
        return out

    def node_op(self, node, rank):
        """The :class:`astra_gpu_model.ops.Op` the model times ``node`` by (its own ATen op, else the CPU op that
        launched it), or None (a node timed by ``num_ops`` / ``tensor_size`` or replayed). Public for the energy plugin
        (with :meth:`op_bound`: a kernel's power by its work)."""
        return self._node_op(node, rank)

    def _node_op(self, node, rank):
        """The :class:`Op` the model times ``node`` by (its own ATen op, else its launcher's), or None."""
        if node.name.startswith("aten::"):
            op = self._classified(node.name, node_io(node), False)
            if op is not None:
                return op
        parent = self._launcher(node, rank)
        return None if parent is None else self._classified(parent.name, node_io(parent), True)

    def _classified(self, name, io, launched_kernel):
        key = (name, io, launched_kernel)
        op = self._ops.get(key)
        if op is None:
            try:
                op = classify(name, *io, self.default_dtype, launched_kernel)
            except OpError:
                op = False
            self._ops[key] = op
        return op or None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _ns(seconds):
        return max(1, int(math.ceil(seconds * 1e9)))

    def _launcher(self, node, rank):
        if self._nodes_of is None or not node.ctrl_deps:
            return None
        try:
            nodes = self._nodes_of(rank)
        except (IndexError, KeyError, AttributeError):
            return None
        for pid in node.ctrl_deps:
            parent = nodes.get(pid)
            if parent is not None and parent.name.startswith("aten::"):
                return parent
        return None

    def _gpu_children_of(self, rank):
        counts = self._gpu_children.get(rank)
        if counts is None:
            counts = {}
            for n in self._nodes_of(rank).values():
                if n.type == T.COMP_NODE and not n.attrs.get("is_cpu_op") and n.ctrl_deps:
                    pid = n.ctrl_deps[0]
                    counts[pid] = counts.get(pid, 0) + 1
            self._gpu_children[rank] = counts
        return counts

    def _grouped(self, node):
        """``(dim, sizes)`` of a grouped GEMM node (attributes ``grouped_gemm_dim``: ``"m"`` or ``"k"``,
        ``grouped_gemm_sizes``: that dimension per group), or None. Malformed attributes are warned about and
        the node is timed as one GEMM."""
        attrs = node.attrs
        dim, sizes = attrs.get("grouped_gemm_dim"), attrs.get("grouped_gemm_sizes")
        if dim is None and sizes is None:
            return None
        if dim not in ("m", "k") or not isinstance(sizes, (list, tuple)) or not sizes \
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in sizes):
            if not self._grouped_warned:  # once per run (every such node is timed the same way)
                self._grouped_warned = True
                self._warn(f"gpu model: node {node.id} ({node.name}): grouped_gemm_dim must be 'm' or 'k' and "
                           "grouped_gemm_sizes a non-empty list of integers >= 0; such nodes are timed as one GEMM")
            return None
        return dim, tuple(sizes)

    def _attention_kernel(self, node):
        """The node's ``attention_kernel`` attribute (one of :data:`.attention.KERNELS`), or None. Another value is
        warned about once and the node timed at the preset's ``attention_efficiency``."""
        kernel = node.attrs.get("attention_kernel")
        if kernel is None or kernel in ATTENTION_KERNELS:
            return kernel
        if not self._kernel_warned:
            self._kernel_warned = True
            self._warn(f"gpu model: node {node.id} ({node.name}): attention_kernel must be one of "
                       f"{', '.join(ATTENTION_KERNELS)}, got {kernel!r}; such nodes are timed at the GPU's "
                       "attention_efficiency")
        return None

    def _attention_window(self, node):
        """The node's ``attention_window`` attribute (the keys a query sees in the band the node stands for: the LLM
        generator's sliding-window layers), or None. Another value (not an int >= 1) is warned about once and
        ignored."""
        window = node.attrs.get("attention_window")
        if window is None or (isinstance(window, int) and not isinstance(window, bool) and window >= 1):
            return window
        if not self._window_warned:
            self._window_warned = True
            self._warn(f"gpu model: node {node.id} ({node.name}): attention_window must be an integer >= 1, got "
                       f"{window!r}; such nodes are timed as the block their shapes give")
        return None

    def _op_seconds(self, name, shapes, types, values, launched_kernel, grouped=None, kernel=None, window=None):
        """Seconds for ATen op ``name`` with these IOInfo strings, or None when they cannot be used
        (0.0: the op does no GPU work). ``grouped``: ``(dim, sizes)`` of a grouped GEMM (:meth:`_grouped`);
        ``kernel``: the attention kernel the node names (:meth:`_attention_kernel`); ``window``: its band
        (:meth:`_attention_window`)."""
        op_name = canonical_name(name)
        if op_name is None:
            return None
        needs_values = op_name in ATTENTION_OPS or op_name in CONV_OPS or op_name.startswith("_to")
        key = (name, shapes, types, values if needs_values else None, launched_kernel, grouped, kernel, window)
        cached = self._cache.get(key)
        if cached is not None:
            return cached if cached >= 0 else None
        try:
            op = classify(name, shapes, types, values, self.default_dtype, launched_kernel)
        except OpError as exc:
            if shapes:
                self._warn(f"gpu model: cannot use the shapes of {name} ({exc}); such nodes fall back to "
                           "num_ops/tensor_size or duration_micros")
            self._cache[key] = -1.0
            return None
        if grouped is not None:
            total = op.m if grouped[0] == "m" else op.k
            if op.kind != "gemm" or op.batch != 1 or sum(grouped[1]) != total:
                self._warn(f"gpu model: {name} with shapes {shapes}: grouped_gemm_sizes add up to "
                           f"{sum(grouped[1])}, not to the GEMM's {grouped[0]} ({total}), or it is no single "
                           "GEMM; timed as one GEMM")
                grouped = None
        if window and op.kind == "attention":
            op = replace(op, window=window)
        seconds = self.op_seconds(op, grouped, kernel)
        self._cache[key] = seconds
        return seconds

    def _rate_dtype(self, dtype):
        if dtype in BLOCK_SCALED:  # its rate, or a ConfigError naming the GPU and the format (no fallback)
            return self.gpu.rate_dtype(dtype)
        if dtype == "fp32" and self.tf32:
            dtype = "tf32"
        if dtype not in self.gpu.tensor_tflops:
            used = self.gpu.rate_dtype(dtype)
            self._warn(f"gpu model: {self.gpu.name} has no {dtype} throughput (tensor_tflops.{dtype}); "
                       f"{used} rates are used for {dtype} ops")
            return used
        return dtype

    def op_seconds(self, op, grouped=None, kernel=None):
        """Seconds for an :class:`astra_gpu_model.ops.Op` on this GPU; ``grouped``: ``(dim, sizes)`` when the GEMM
        is a grouped GEMM (:mod:`astra_gpu_model.grouped`); ``kernel``: the attention kernel (``fa2``, ``fa3``,
        ``cudnn``), timed at its published efficiency on Hopper (:mod:`astra_gpu_model.attention`)."""
        gpu = self.gpu
        params = gpu.gemm
        launch = params.launch_us * 1e-6
        bw = params.hbm_efficiency * gpu.hbm_bytes_per_s
        if op.kind == "none":
            return 0.0
        if op.kind == "memory":
            return self._memory_floor(op.name, launch) + op.nbytes / self._memory_rate(op.name, bw)
        dtype = op.dtype if op.dtype in DTYPE_BYTES else self.default_dtype
        if op.kind == "attention" and dtype == "fp8":
            check_fp8_attention(gpu, kernel, op.backward)  # (no fallback to another dtype's rate)
        rate = self._rate_dtype(dtype)
        peak = gpu.peak_flops(rate) * self.clock_ratios.get(op.kind, 1.0)
        if op.kind == "gemm":
            return self._gemm_seconds(op, dtype, rate, peak, grouped)
        if op.kind == "attention":
            waves = -(-op.ctas // gpu.sm_count) if op.ctas else 1
            utilisation = op.ctas / (waves * gpu.sm_count) if op.ctas else 1.0
            band = self._band(op, kernel, dtype) if op.window else None
            flops, efficiency = band or (op.flops, self._attention_efficiency(op, kernel))
            t_c = flops / (efficiency * peak * utilisation)
            decode = decode_params(gpu) if op.seq_q == 1 and not op.backward and dtype != "fp8" else None
            if decode is not None:  # paged decode attention: its measured fixed time + the cache at its rate
                floor, rate = decode
                return max(floor + op.nbytes / rate, launch + t_c)
            t_m = op.nbytes / bw
            return launch + max(t_c, t_m)
        raise ValueError(f"unknown op kind {op.kind!r}")

    def _gemm_seconds(self, op, dtype, rate, peak, grouped, detail=False):
        """:meth:`op_seconds` of a GEMM (``peak``: the dtype's peak at the run's clock); ``detail``: with the chosen
        configuration's ``compute_s`` / ``memory_s`` and its HBM rate (``hbm_rate``), for :meth:`op_bound`."""
        gpu = self.gpu
        peak *= self._sustained_factor(dtype if dtype in BLOCK_SCALED else rate)
        gemm_params = gpu.gemm_params(dtype if dtype in BLOCK_SCALED else rate)  # a block-scaled format: its own
        if grouped is not None:
            fit = grouped_params()
            stream = fit.stream_rate(gpu.sm_count, gpu.boost_clock_mhz)
            out = grouped_gemm_time_s(group_shapes(op.m, op.n, op.k, *grouped), peak_flops=peak,
                                      sm_count=gpu.sm_count, hbm_bytes_per_s=gpu.hbm_bytes_per_s,
                                      in_bytes=DTYPE_BYTES.get(dtype, 2), out_bytes=op.out_bytes,
                                      params=gemm_params, tiles=gpu.gemm_tiles, group_us=fit.group_us,
                                      stream_bytes_per_s=stream, detail=detail)
            bw = gemm_params.hbm_efficiency * gpu.hbm_bytes_per_s
            bw = bw if stream is None else min(bw, stream)
        else:
            out = gemm_time_s(op.m, op.n, op.k, op.batch, peak_flops=peak, sm_count=gpu.sm_count,
                              hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=DTYPE_BYTES.get(dtype, 2),
                              out_bytes=op.out_bytes, params=gemm_params, tiles=gpu.gemm_tiles,
                              schedule=gpu.gemm_schedule, detail=detail)
            bw = gemm_params.hbm_efficiency * gpu.hbm_bytes_per_s
        if detail:
            out[1]["hbm_rate"] = bw
        return out

    def op_bound(self, op, grouped=None):
        """What bounds ``op``'s time on this GPU at the run's clocks, as :meth:`op_seconds` times it: an
        :class:`OpBound`, or None for an op the model does not split so (attention, an op with no GPU work).
        A GEMM is ``memory``-bound when its chosen configuration's HBM time exceeds its tensor time (a decode step's
        GEMMs, which stream their weights); a memory-bound op always is. Public for the energy plugin, which charges
        a memory-bound kernel by the bytes it moves (``astra_energy.utilisation``). ``grouped``: as :meth:`op_seconds`
        (a grouped GEMM whose sizes do not add up to its dimension is taken as one GEMM, as it is timed)."""
        if op.kind == "memory":
            rate = self._memory_rate(op.name, self.gpu.gemm.hbm_efficiency * self.gpu.hbm_bytes_per_s)
            return OpBound("memory", 0.0, op.nbytes / rate, float(op.nbytes), 0.0)
        if op.kind != "gemm":
            return None
        if grouped is not None and (op.batch != 1 or sum(grouped[1]) != (op.m if grouped[0] == "m" else op.k)):
            grouped = None
        dtype = op.dtype if op.dtype in DTYPE_BYTES else self.default_dtype
        rate = self._rate_dtype(dtype)
        peak = self.gpu.peak_flops(rate) * self.clock_ratios.get("gemm", 1.0)
        info = self._gemm_seconds(op, dtype, rate, peak, grouped, detail=True)[1]
        if info.get("empty"):
            return OpBound("compute", 0.0, 0.0, 0.0, 0.0)
        compute_s, memory_s = info["compute_s"], info["memory_s"]
        return OpBound("memory" if memory_s > compute_s else "compute", compute_s, memory_s,
                       memory_s * info["hbm_rate"], 2.0 * op.m * op.n * op.k * op.batch)

    def _cudnn_version(self, version):
        """``--cudnn-version``, checked against the preset's measured releases when the model is made (a release older
        than all of them: ConfigError); says, once, which measured release times attention when it is not the one
        asked, or that the preset's attention is not timed by release."""
        if version is None:
            return None
        from astra_gpu_model.cudnn_versions import attention_file, known, parse

        chosen = attention_file(self.gpu.name, version)
        if chosen is None:
            self._warn(f"gpu model: --cudnn-version {version}: {self.gpu.name}'s attention is not timed by cuDNN "
                       f"release (measured: {known()}); no effect")
        elif parse(chosen[1]) != parse(version):
            self._warn(f"gpu model: --cudnn-version {version}: {self.gpu.name} attention timed at the rows measured "
                       f"with cuDNN {chosen[1]}, the newest measured at or below it")
        return version

    def _attention_efficiency(self, op, kernel):
        """The fraction of peak an attention op runs at: the named kernel's published efficiency at the op's key
        length and head dimension on Hopper (FA2 and cuDNN past 8k keys at the H200's own measurement:
        :func:`.attention.long_factor`), cuDNN's published one on Blackwell
        (:func:`.attention.blackwell_efficiency`), else the preset's ``attention_efficiency``; FP8 attention:
        :func:`.attention.fp8_efficiency`."""
        if op.dtype == "fp8":
            return fp8_efficiency(self.gpu, kernel, op.causal, op.seq_k, op.head_dim, op.backward, self.cudnn_version)
        if (op.dtype if op.dtype in DTYPE_BYTES else self.default_dtype) in ("bf16", "fp16"):
            measured = blackwell_efficiency(self.gpu, kernel, "bf16", op.backward, op.seq_k, op.causal,
                                            self.cudnn_version)
            if measured is None:
                measured = amd_efficiency(self.gpu, op.causal, op.backward, op.seq_k)  # (None off AMD's measured GPUs)
            if measured is not None:
                return measured
        if kernel is None or not is_hopper(self.gpu):
            return self.gpu.attention_efficiency
        from astra_gpu_model.cudnn_versions import hopper_table  # --cudnn-version on the H100 SXM5 / H200

        return kernel_efficiency(kernel, op.backward, op.causal, op.seq_k,
                                 effective_head_dim(op.head_dim, op.head_dim_v),
                                 hopper_table(self.gpu.name, self.cudnn_version))

    def _band(self, op, kernel, dtype):
        """``(FLOPs, efficiency)`` of an attention node marked as a band (``op.window``, :func:`.attention.band_work`):
        the executed tiles of a named kernel on Hopper at its dense rate without the mask at the loop length, or
        cuDNN's measured window rate on a Blackwell preset with cuDNN rows (a node naming ``cudnn`` or no kernel) or
        where NVIDIA measured that window. None elsewhere (the preset's efficiency, AMD's aiter: whose band tiles
        are not known): the node is the q x w block its shapes give, as before. The node's FLOP count (num_ops)
        stays the model's; only the time moves."""
        gpu = self.gpu
        if is_hopper(gpu) and kernel in ATTENTION_KERNELS:
            rule = kernel
        elif blackwell_efficiency(gpu, kernel, "bf16", op.backward, op.seq_q) is not None:
            rule = "cudnn"
        else:
            return None
        how, pairs, value = band_work(gpu, rule, op.backward, op.seq_q, op.window, op.head_dim,
                                      dtype in ("bf16", "fp16"))
        flops = op.heads * pairs * 2.0 * (op.head_dim + (op.head_dim_v or op.head_dim)) * (2.5 if op.backward else 1)
        if how == "measured":
            return flops, value
        return flops, self._attention_efficiency(replace(op, seq_k=max(1, round(value)), causal=False), kernel)

    def _memory_floor(self, name, launch):
        """Seconds a memory-bound kernel costs besides its bytes: on Hopper, the op's floor measured on the H200 in a
        CUDA graph (``data/memops_floor.json``, ``fit/fit_memops_floor.py``: an add 0.79 us, a LayerNorm 6.92 us, an
        op not measured the median 2.26 us), else ``launch`` (the GEMM fit's ``launch_us``, 2.34 us on the A100)."""
        if not is_hopper(self.gpu):
            return launch
        floors = memory_op_floors()
        return floors["floors_us"].get(name, floors["default_us"]) * 1e-6

    def _memory_rate(self, name, hbm_rate):
        """Bytes/s of a memory-bound op: HBM's (``hbm_rate``) unless its SMs are slower, as measured for
        layer norms, softmax, dropout ... (scaled from the measuring GPU by SMs x boost clock)."""
        if not self.memory_op_rates:
            return hbm_rate
        rates, reference = memory_op_rates()
        rate = rates.get(name)
        if rate is None:
            return hbm_rate
        gpu = self.gpu
        clock = gpu.boost_clock_mhz or reference["boost_clock_mhz"]
        scale = gpu.sm_count * clock / (reference["sm_count"] * reference["boost_clock_mhz"])
        return min(hbm_rate, rate * scale * self.clock_ratios.get("memory", 1.0))

    def _roofline_seconds(self, node):
        work = node_work(node)
        if work is None:
            return None
        num_ops, tensor_size = work
        if num_ops == 0 and tensor_size == 0:
            return None
        gpu = self.gpu
        params = gpu.gemm
        rate = self._rate_dtype(self.default_dtype)
        peak = gpu.peak_flops(rate) * self.clock_ratios.get("gemm", 1.0) * self._sustained_factor(rate)
        t_c = num_ops / (params.compute_efficiency * peak)
        t_m = tensor_size / (params.hbm_efficiency * gpu.hbm_bytes_per_s)
        return params.launch_us * 1e-6 + max(t_c, t_m)


__all__ = ["GpuComputeModel", "OpBound"]
