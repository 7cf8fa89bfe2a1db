"""A compute part's power from its kernels: memory-bound kernels by the HBM bandwidth they achieve (and a
memory-bound GEMM by its tensor work too), and the gaps between kernels at the idle power.

The class powers (:mod:`astra_energy.power`) are what a saturated kernel draws: for the GH100 boards the memory
class is an HBM copy at 4.25 TB/s (572 W). A memory-bound op (the gpu model's elementwise ops) that moves its bytes at
a fraction ``u`` of that copy's rate draws::

    P = P_idle + (P_memory - P_idle) * u,    u = min(1, bytes / (busy_s * copy_rate))

ASSUMPTION: HBM's and the memory pipeline's power scale with the bytes moved per second, and the two measured ends
(idle 81.9 W, the copy's 572 W) are its endpoints. A GEMM the gpu model times by its HBM traffic
(``GpuComputeModel.op_bound``: a decode step's GEMMs, streaming their weights) adds its tensor work's share of the
GEMM class, at most the class::

    P = P_idle + min(P_gemm - P_idle, (P_memory - P_idle) * u + (P_gemm - P_idle) * c),
    c = FLOPs / (busy_s * the GEMM class's settled rate, by dtype, at the run's GEMM clock)

the energy-roofline's sum of a per-byte and a per-FLOP energy above a constant power (Choi, Bedard, Fowler, Vuduc,
"A roofline model of energy", IPDPS 2013, doi:10.1109/IPDPS.2013.77, Sec. II: E = W eps_flop + Q eps_mem + pi_0 T), with both energies from the
H200's saturated phases (the copy: 115.4 pJ a byte; the bf16 GEMM at 700 W: 0.93 pJ a FLOP). Checked, not fitted, on
the H200's run-4 GEMMs (M x 8192 x 8192 bf16, ``fit/check_h200_sustained.py``): at the measured rates M 1 527 W
(535.6 measured), 16: 588 (586.7), 64: 696 (695.2), 128: the cap (694.2); the larger of the two shares alone, not
their sum, would miss M 16-128 by 10-32 %. A compute-bound GEMM and every attention kernel draw their class power,
decode attention included: PyTorch's flash decode (SDPA, 32/8 heads, 1k-8k keys) drew the 700 W cap at 2.3-3.6 TB/s
on the H200 (run 4). ASSUMPTION: a serving engine's paged decode kernel draws as much (FlashInfer's default decode
kernel runs on CUDA cores, not tensor cores, and nothing measures its power). Only where the GPU's memory class is a
measured copy (``GpuPower.copy_fraction_of_peak``) and the GEMM's dtype has a measured class rate
(``GpuPower.gemm_rate_fraction_of_peak``: bf16, fp16 as bf16, fp8); other GPUs' memory power is a decode-step
average, which already holds partial use.

A node's time holds the gpu model's ``kernel_gap_ns`` (``--gpu-kernel-gap-ns``: astra serve's CUDA-graph steps,
376 ns a kernel), the GPU's idle time between two kernels (the source measures it outside the GPU-busy union):
charged at the idle power. ASSUMPTION: the GPU draws its idle power in those sub-microsecond gaps (its clocks stay
up, so it draws somewhat more; no measurement).

Per rank, a part's power is its nodes' time-weighted mean, applied to the part's time in the breakdown. One pass
over each simulated (representative) rank's compute nodes; nothing where neither term applies.
"""

from __future__ import annotations

from astra_energy.account import part_class


class NodePower:
    """A compute node's power (W) while it runs: :meth:`watts`; ``class_w`` holds each class's settled power."""

    def __init__(self, model, power, class_w: dict, gemm_class: str = "gemm"):
        self.gap_ns = int(getattr(model, "kernel_gap_ns", 0) or 0)
        fraction = power.copy_fraction_of_peak
        self.copy_rate = fraction * model.gpu.hbm_bytes_per_s if fraction else None
        # the gpu model's public accessors (astra_gpu_model.model); a model without them charges class powers
        self.node_op = getattr(model, "node_op", None) if self.copy_rate is not None else None
        self.op_bound = getattr(model, "op_bound", None)
        # the GEMM class's settled rate by dtype at the run's GEMM clock (a power limit slows both alike)
        clock = getattr(model, "clock_ratios", {}).get("gemm", 1.0)
        self.gemm_rate = {dtype: f * model.gpu.peak_flops(dtype) * clock
                          for dtype, f in (power.gemm_rate_fraction_of_peak or {}).items()}
        self._bounds = {}  # Op -> (HBM bytes, FLOPs) of a memory-bound GEMM, or None
        self.idle_w = class_w["idle"]
        self.memory_dyn_w = class_w["memory"] - self.idle_w
        self.dyn_w = {cls: class_w[part_class("compute:" + cls, gemm_class)] - self.idle_w
                      for cls in ("gemm", "attention", "elementwise", "other")}

    @property
    def active(self) -> bool:
        """Whether any node's power can differ from its class's."""
        return bool(self.gap_ns) or self.node_op is not None

    def _memory_bound_gemm(self, op):
        """``(HBM bytes, FLOPs, the class's rate)`` of a GEMM the gpu model times by its HBM traffic, else None."""
        if op in self._bounds:
            return self._bounds[op]
        out = None
        rate = self.gemm_rate.get(op.dtype)  # a dtype without a measured class rate (fp32, block-scaled): the class
        if rate and self.op_bound is not None:
            bound = self.op_bound(op)
            if bound is not None and bound.bound == "memory" and bound.hbm_bytes > 0:
                out = (bound.hbm_bytes, bound.flops, rate)
        self._bounds[op] = out
        return out

    def above_idle_w(self, rep, node, ns: int, op_class: str):
        """``(W above idle, differs from the class's)`` of compute ``node`` of ``op_class`` running ``ns``."""
        busy = max(0, ns - self.gap_ns)
        changed = busy < ns
        if self.node_op is not None and busy:
            op = self.node_op(node, rep)
            if op is not None and op.kind == "memory" and op.nbytes > 0:
                used = min(1.0, op.nbytes * 1e9 / (busy * self.copy_rate))
                return self.memory_dyn_w * used * busy / ns, True
            gemm = self._memory_bound_gemm(op) if op is not None and op.kind == "gemm" else None
            if gemm is not None and op_class == "gemm":
                nbytes, flops, rate = gemm
                used = min(1.0, nbytes * 1e9 / (busy * self.copy_rate))
                share = flops * 1e9 / (busy * rate)
                cap = self.dyn_w["gemm"]
                return min(cap, self.memory_dyn_w * used + cap * share) * busy / ns, True
        return self.dyn_w.get(op_class, self.dyn_w["other"]) * busy / ns, changed

    def watts(self, rep, node, ns: int, op_class: str) -> float:
        """The node's power (W) over its ``ns``, the gap included (for a timeline's power lane)."""
        return self.idle_w + self.above_idle_w(rep, node, ns, op_class)[0] if ns > 0 else self.idle_w


def part_watts(run, node_power):
    """``{rank: {part: watts}}`` for the compute parts whose power differs from their class's (None: no rank's
    does, or the run has no spans)."""
    if not node_power.active:
        return None
    from astra_analysis.views import analysis_of

    analysis = analysis_of(run)
    if analysis is None:
        return None
    symmetry = analysis.symmetry
    by_rep = {}
    out = {}
    for rank in range(analysis.total):
        rep = symmetry.representative(rank) if symmetry is not None else rank
        watts = by_rep.get(rep)
        if watts is None:
            watts = by_rep[rep] = _rep_watts(analysis, node_power, rep)
        if watts:
            out[rank] = watts
    return out or None


def _rep_watts(analysis, node_power, rep):
    """``{part: watts}`` of one simulated rank (parts whose mean power equals the class's are left out)."""
    from astra_sim.chakra.types import COMP_NODE

    sums = {}  # part -> [ns, W x ns above idle, changed]
    for node, start, end in analysis.view(rep).records():
        ns = end - start
        if ns <= 0 or node.type != COMP_NODE or node.attrs.get("is_cpu_op"):
            continue
        op_class = analysis.op_class(rep, node)
        acc = sums.get(op_class)
        if acc is None:
            acc = sums[op_class] = [0, 0.0, False]
        above, changed = node_power.above_idle_w(rep, node, ns, op_class)
        acc[0] += ns
        acc[1] += above * ns
        acc[2] = acc[2] or changed
    idle_w = node_power.idle_w
    return {"compute:" + cls: idle_w + acc[1] / acc[0] for cls, acc in sums.items() if acc[2] and acc[0]}


__all__ = ["NodePower", "part_watts"]
