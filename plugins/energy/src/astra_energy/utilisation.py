"""A compute part's power from its kernels: memory-bound kernels by the HBM bandwidth they achieve, and the gaps
between kernels at the idle power.

The class powers (:mod:`astra_energy.power`) are what a saturated kernel draws: for the GH100 boards the memory
class is an HBM copy at 4.25 TB/s (572 W). A memory-bound kernel that moves its bytes at a fraction ``u`` of that
copy's rate draws::

    P = P_idle + (P_memory - P_idle) * u,    u = min(1, bytes / (busy_s * copy_rate))

ASSUMPTION: HBM's and the memory pipeline's power scale with the bytes moved per second, and the two measured ends
(idle 81.9 W, the copy's 572 W) are its endpoints. It applies to the gpu model's memory-bound ops (elementwise) and
to decode attention (one query a sequence, forward: the KV cache read once, an HBM stream), where the GPU's memory
class is a measured copy (``GpuPower.copy_fraction_of_peak``; other GPUs' memory power is a decode-step average,
which already holds partial use). Every other kernel draws its class power while busy.

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
        self.node_op = getattr(model, "_node_op", None) if self.copy_rate is not None else None
        self.idle_w = class_w["idle"]
        self.memory_dyn_w = class_w["memory"] - self.idle_w
        self.dyn_w = {cls: class_w[part_class("compute:" + cls, gemm_class)] - self.idle_w
                      for cls in ("gemm", "attention", "elementwise", "other")}

    @property
    def active(self) -> bool:
        """Whether any node's power can differ from its class's."""
        return bool(self.gap_ns) or self.node_op is not None

    def above_idle_w(self, rep, node, ns: int, op_class: str):
        """``(W above idle, differs from the class's)`` of compute ``node`` of ``op_class`` running ``ns``."""
        busy = max(0, ns - self.gap_ns)
        changed = busy < ns
        if self.node_op is not None:
            op = self.node_op(node, rep)
            if op is not None and op.nbytes > 0 and (
                    op.kind == "memory" or (op.kind == "attention" and op.seq_q == 1 and not op.backward)):
                used = min(1.0, op.nbytes * 1e9 / (busy * self.copy_rate)) if busy else 0.0
                return self.memory_dyn_w * used * busy / ns, True
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
