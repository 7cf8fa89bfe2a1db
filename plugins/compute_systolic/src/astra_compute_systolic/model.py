"""The ``systolic`` compute model: COMP nodes timed on a systolic array with SCALE-sim's cycle model.

A node's operator and shapes are read exactly as the ``gpu`` model reads them (``astra_gpu_model.ops``):

* GEMMs (``aten::mm``, ``addmm``, ``bmm``, ``matmul``, ``linear``, ``_scaled_mm``, ``mv``) and convolutions
  (as their implicit GEMM, batch = groups) cost ``batch x`` SCALE-sim's cycles of ``M x N x K``, mapped the
  way SCALE-sim and ASTRA-sim 1.0 map a GEMM; with ``--systolic-hbm-gbps``, at least the time HBM takes to
  carry each operand once (``gemm_hbm_floor_ns``: a TPU platform feeds the array from VMEM, so HBM enters here);
* attention (flash / efficient / cuDNN SDPA) is its GEMMs per batch x head: ``QK^T`` and ``PV`` forward,
  five GEMMs backward (``S`` recomputed, ``dP``, ``dV``, ``dQ``, ``dK``); a causal mask saves nothing (the
  array computes the full tile);
* other ATen ops are memory-bound: bytes moved over ``--systolic-hbm-gbps`` (set by ``--platform``); without
  it they replay their traced duration; views take no time;
* nodes without shapes: ``num_ops`` at the array's peak (2 FLOPs per MAC per PE per cycle) against
  ``tensor_size`` over HBM, else ``duration_micros``.

Cycles become ns at ``--systolic-ghz`` (rounded up). Results are memoised per shape and config.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

from astra_sim.compute import node_work
from astra_sim.errors import ConfigError

from astra_compute_systolic.config import load_config
from astra_compute_systolic.cycles import compute_cycles
from astra_compute_systolic.geometry import Layer

CYCLE_KINDS = ("with-prefetch", "total")


def parse_ghz(value) -> Fraction:
    """The clock in GHz as an exact fraction (``1.05`` -> 21/20), > 0 and at most 100."""
    try:
        ghz = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"--systolic-ghz must be a number of GHz, got {value!r}") from None
    if not 0 < ghz <= 100:
        raise ConfigError(f"--systolic-ghz must be in (0, 100] GHz, got {value!r}")
    return ghz


class SystolicArray:
    """A config plus a clock: layer cycles (memoised) and their duration in ns."""

    def __init__(self, config, ghz=1, cycles="with-prefetch"):
        if cycles not in CYCLE_KINDS:
            raise ConfigError(f"--systolic-cycles must be one of {', '.join(CYCLE_KINDS)}, got {cycles!r}")
        self.config = config
        self.ghz = parse_ghz(ghz)
        self.cycle_kind = cycles
        self._memo = {}

    def layer(self, layer: Layer):
        key = (layer.ifmap_h, layer.ifmap_w, layer.filter_h, layer.filter_w, layer.channels, layer.num_filters,
               layer.stride_h, layer.stride_w)
        result = self._memo.get(key)
        if result is None:
            result = compute_cycles(layer, self.config)
            self._memo[key] = result
        return result

    def gemm_cycles(self, m, n, k) -> int:
        r = self.layer(Layer.gemm(m, n, k))
        return r.total_cycles_with_prefetch if self.cycle_kind == "with-prefetch" else r.total_cycles

    def ns(self, cycles) -> int:
        return max(1, math.ceil(Fraction(cycles) / self.ghz))

    @property
    def peak_flops_per_cycle(self) -> int:
        return 2 * self.config.rows * self.config.cols


def attention_gemms(name, shapes_text, types_text):
    """``[(batch, M, N, K), ...]`` of an SDPA op (forward 2 GEMMs, backward 5), or None."""
    from astra_gpu_model.ops import ATTENTION_OPS as ATTENTION_DETAILS, parse_list, tensor_args
    from astra_sim.ops import ATTENTION_OPS, canonical_name

    op = canonical_name(name)
    if op not in ATTENTION_OPS:
        return None
    _, layout, backward = ATTENTION_DETAILS[op]
    shapes = parse_list(shapes_text, "inputs.shapes") or []
    types = parse_list(types_text, "inputs.types") if types_text else None
    tensors = [a for a in tensor_args(shapes, types, "bf16") if a is not None and not isinstance(a, list)]
    first = 1 if backward else 0
    if len(tensors) < first + 3:
        return None
    q, k, v = (tensors[first + i][0] for i in range(3))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    if layout == "BHSD":
        b, h, sq, d = q
        sk, dv = k[2], v[3]
    else:
        b, sq, h, d = q
        sk, dv = k[1], v[3]
    bh = b * h
    if not backward:
        return [(bh, sq, sk, d), (bh, sq, dv, sk)]
    return [(bh, sq, sk, d), (bh, sq, sk, dv), (bh, sk, dv, sq), (bh, sq, d, sk), (bh, sk, d, sq)]


class SystolicComputeModel:
    """Registered as compute model ``systolic``. Options: ``systolic_config`` (SCALE-sim .cfg, required),
    ``systolic_ghz`` (clock, default 1), ``systolic_cycles`` (``with-prefetch`` or ``total``),
    ``systolic_hbm_gbps`` (memory-bound ops; set by ``--platform``)."""

    name = "systolic"
    #: a node's time depends on the node only, never on the rank's number
    foldable = True

    def __init__(self, context=None, array=None, hbm_gbps=None):
        options = dict(getattr(context, "options", None) or {})
        if array is None:
            path = options.get("systolic_config")
            if not path:
                raise ConfigError("--compute-model systolic needs --systolic-config FILE.cfg (a SCALE-sim config) "
                                  "or --platform tpu-v3 / tpu-v4")
            array = SystolicArray(load_config(path), options.get("systolic_ghz") or 1,
                                  options.get("systolic_cycles") or "with-prefetch")
        self.array = array
        hbm = hbm_gbps if hbm_gbps is not None else options.get("systolic_hbm_gbps")
        if hbm is not None:
            try:
                hbm = float(hbm)
            except (TypeError, ValueError):
                raise ConfigError(f"--systolic-hbm-gbps must be a number of GB/s, got {hbm!r}") from None
            if not 0 < hbm <= 1e6:
                raise ConfigError(f"--systolic-hbm-gbps must be in (0, 1e6] GB/s, got {hbm!r}")
        self.hbm_gbps = hbm
        self._warn = getattr(context, "warn", None) or (lambda message: None)
        self._ops = {}
        self.counts = Counter()

    def describe(self):
        d = self.array.config.describe()
        d.update({"clock_ghz": float(self.array.ghz), "cycles": self.array.cycle_kind,
                  "hbm_gbps": self.hbm_gbps})
        return d

    def stats(self):
        return dict(self.counts)

    # ------------------------------------------------------------------ the compute model interface
    def compute_time_ns(self, node, rank):
        name = node.name
        if name.startswith("aten::"):
            timed = self._op(node)
            if timed is not None:
                kind, ns = timed
                self.counts[kind] += 1
                return ns
        ns = self._roofline(node)
        if ns is not None:
            self.counts["num_ops_tensor_size"] += 1
            return ns
        self.counts["replay_duration"] += 1
        return node.duration_micros * 1000 if node.duration_micros else 1

    # ------------------------------------------------------------------ helpers
    def _op(self, node):
        from astra_gpu_model.ops import OpError, classify, node_io

        shapes, types, values = node_io(node)
        key = (node.name, shapes, types, values)
        if key in self._ops:
            return self._ops[key]
        result = None
        try:
            gemms = attention_gemms(node.name, shapes, types)
            if gemms is not None:
                cycles = sum(b * self.array.gemm_cycles(m, n, k) for b, m, n, k in gemms)
                result = ("attention", self.array.ns(cycles))
            else:
                op = classify(node.name, shapes, types, values)
                if op.kind == "gemm":
                    if min(op.m, op.n, op.k, op.batch) < 1:
                        result = ("none", None)
                    else:
                        ns = self.array.ns(op.batch * self.array.gemm_cycles(op.m, op.n, op.k))
                        result = ("gemm", max(ns, self.gemm_hbm_floor_ns(op)))
                elif op.kind == "none":
                    result = ("none", None)
                elif op.kind == "memory" and self.hbm_gbps is not None:
                    result = ("memory", max(1, math.ceil(op.nbytes / self.hbm_gbps)))
        except OpError as exc:
            if shapes:
                self._warn(f"systolic model: cannot use the shapes of {node.name} ({exc}); such nodes fall back "
                           "to num_ops/tensor_size or duration_micros")
        self._ops[key] = result
        return result

    def gemm_hbm_floor_ns(self, op) -> int:
        """The least time HBM needs for a GEMM: ``batch x (M K + K N + M N)`` elements read or written once, at
        the output's element size (the inputs' for every GEMM but ``_scaled_mm``), over ``--systolic-hbm-gbps``
        (GB/s = bytes per ns); 0 without it. A compiler's tiles reuse an operand out of on-chip memory, so this
        is a floor, not an estimate: it matters where a GEMM is too thin to be compute-bound."""
        if self.hbm_gbps is None:
            return 0
        elements = op.batch * (op.m * op.k + op.k * op.n + op.m * op.n)
        return math.ceil(elements * op.out_bytes / self.hbm_gbps)

    def _roofline(self, node):
        work = node_work(node)
        if work is None:
            return None
        num_ops, tensor_size = work
        if num_ops == 0 and (tensor_size == 0 or self.hbm_gbps is None):
            return None
        compute = self.array.ns(-(-num_ops // self.array.peak_flops_per_cycle)) if num_ops else 0
        memory = math.ceil(tensor_size / self.hbm_gbps) if self.hbm_gbps else 0
        return max(1, compute, memory)


__all__ = ["SystolicComputeModel", "SystolicArray", "attention_gemms", "parse_ghz", "CYCLE_KINDS"]
