"""Analytical grouped-GEMM time: the routed experts of a mixture-of-experts layer as one grouped kernel.

A grouped GEMM runs G independent GEMMs ``C_g[M_g, N_g] = A_g[M_g, K_g] @ B_g[K_g, N_g]`` in one launch
(CUTLASS's grouped / ptr-array kernels, ``torch._grouped_mm``, Megatron's GroupedMLP, DeepGEMM's contiguous
layout). It is timed from the per-group shapes with the fitted dense-GEMM parameters of :mod:`.gemm`, for every
candidate tile ``tm x tn`` with ``occ`` per SM, each on ``sms`` SMs (one tile for all groups, as these kernels are
built):

* **tile quantisation per group**: group g has ``ceil(M_g / tm) * ceil(N_g / tn)`` tiles, so an expert with 3
  tokens pays a whole ``tm``-row tile, and a batch of small experts costs far more than one GEMM of their rows;
* **wave quantisation across all groups**: the ``T`` tiles of every group share the ``SMs * occ / sms`` slots of one
  persistent kernel, ``waves = ceil(T / slots)``, each wave as long as the average tile
  (``unit * (ceil(K_g / 64) * 64 + k0)`` for a tile of group g, as in :mod:`.gemm`), and never shorter than the
  longest tile;
* **the memory floor**: every group's operands, ``sum_g (M_g K_g + K_g N_g) * in + M_g N_g * out`` bytes
  (every active expert's weights: a decode step's few tokens still read a whole expert per token), streamed at
  a rate that depends on the kernel (``kernel``, :data:`KERNELS`):

  - ``fused-moe`` (the default): the fused / grouped MoE kernels serving engines run (vLLM's and SGLang's
    fused_moe Triton kernel, DeepGEMM's masked layout) stream the touched experts' weights as a dense GEMM
    streams its operands, at ``hbm_efficiency x HBM``. Source: vLLM PR #44152 (github.com/vllm-project/vllm/
    pull/44152, an H20 with 78 SMs and 4.0 TB/s HBM, bf16, tuned fused_moe_kernel, Mixtral 8x7B's w1
    ``E=8, N=14336, K=4096, top-2``): 32 tokens touch all 8 experts' 939.5 MB of weights in 0.279 ms, 3.37 TB/s,
    84 % of HBM, launch included; one token touches 2 experts' 234.9 MB in 0.076 ms, 3.09 TB/s. A stream rate
    scaled by SMs x clock from torch._grouped_mm's below would allow that H20 1.72 TB/s, half of what it did:
    the cap is the kernel's, not the GPU's;
  - ``torch._grouped_mm``: PyTorch's grouped kernel, at ``min(hbm_efficiency x HBM, stream rate)``, the stream
    rate measured on one H200 (``data/grouped_gemm_fit.json``: 2.7-3.3 TB/s at 16-64 tokens per expert, 57-68 %
    of its 4.8 TB/s) and scaled by SMs x boost clock, as the memory-bound ops' rates are
    (``data/memops_fit.json``). Applied to serving decode steps it made their grouped GEMMs take 1.55-1.6x (H200)
    to 2.3x (B200) the time to stream their weights;
* compute and memory overlap as in :mod:`.gemm` (``t = (t_c^p + t_m^p)^(1/p)``), no split-K (grouped kernels
  have none); ``launch_us`` once, plus ``group_us`` per group with work (the kernel's per-problem set-up:
  problem-shape reads, tensor-map updates), fitted on the same measurements.

Groups with no work (an expert no token was routed to) cost nothing: no tiles, no bytes, no overhead.
Groups that split M (forward and input-gradient GEMMs: E experts with m_g tokens each) take at least as long as
the one dense GEMM of all their rows (every tile configuration has at least as many tiles and bytes, no split-K
and a stream rate no faster), approach it when every group is large, and are weight-bandwidth bound when every
group is small (``tests/test_gpu_grouped.py``). Groups that split K (weight gradients) may be faster than the
dense GEMM without split-K, as each expert's partial product is its own output.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from astra_gpu_model.gemm import DEFAULT_TILES, K_STEP, tile_config, tile_slots, wave_seconds_per_k


#: The grouped kernels the model times (see the module docstring).
FUSED_MOE, TORCH_GROUPED_MM = "fused-moe", "torch._grouped_mm"
KERNELS = (FUSED_MOE, TORCH_GROUPED_MM)


@dataclass(frozen=True)
class GroupedParams:
    """The grouped kernel's own fitted parameters (``data/grouped_gemm_fit.json``)."""

    stream_bytes_per_s: float  #: HBM bytes/s the grouped kernel sustains on the reference GPU
    group_us: float  #: per group with work, microseconds
    reference_sm_count: int
    reference_clock_mhz: float

    def stream_rate(self, sm_count, boost_clock_mhz, kernel=FUSED_MOE):
        """The HBM bytes/s ``kernel`` streams at on a GPU with these SMs and clock: None (no cap: the dense GEMM's
        ``hbm_efficiency x HBM``) for ``fused-moe``, the measured rate scaled from the reference GPU for
        ``torch._grouped_mm``."""
        if kernel not in KERNELS:
            raise ValueError(f"grouped GEMM kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        if kernel == FUSED_MOE:
            return None
        clock = boost_clock_mhz or self.reference_clock_mhz
        return self.stream_bytes_per_s * sm_count * clock / (self.reference_sm_count * self.reference_clock_mhz)


FIT_FILE = Path(__file__).with_name("data") / "grouped_gemm_fit.json"
_PARAMS = None


def grouped_params():
    """The fitted :class:`GroupedParams` (read once)."""
    global _PARAMS
    if _PARAMS is None:
        with open(FIT_FILE) as handle:
            data = json.load(handle)
        ref = data["reference"]
        _PARAMS = GroupedParams(float(data["params"]["stream_bytes_per_s"]), float(data["params"]["group_us"]),
                                int(ref["sm_count"]), float(ref["boost_clock_mhz"]))
    return _PARAMS


def group_shapes(m, n, k, dim, sizes):
    """The per-group ``(M, N, K)`` of a GEMM ``[m,k] x [k,n]`` whose dimension ``dim`` (``"m"`` or ``"k"``) is
    split into groups of ``sizes`` (the generator's ``grouped_gemm_dim``/``grouped_gemm_sizes``)."""
    if dim == "m":
        return [(s, n, k) for s in sizes]
    if dim == "k":
        return [(m, n, s) for s in sizes]
    raise ValueError(f"grouped_gemm_dim must be 'm' or 'k', got {dim!r}")


def grouped_gemm_time_s(shapes, *, peak_flops, sm_count, hbm_bytes_per_s, in_bytes, out_bytes, params,
                        stream_bytes_per_s, group_us, tiles=DEFAULT_TILES, detail=False):
    """Seconds for one grouped GEMM of the groups ``shapes`` (an iterable of ``(M, N, K)``).

    ``params``: the dense :class:`astra_gpu_model.gemm.GemmParams`; ``stream_bytes_per_s``: the grouped
    kernel's stream rate on this GPU (:meth:`GroupedParams.stream_rate`; None: the dense GEMM's
    ``hbm_efficiency x HBM``); ``group_us``: per group with work.
    With ``detail=True`` returns ``(seconds, info)``."""
    counts = Counter((m, n, k) for m, n, k in shapes if m > 0 and n > 0 and k > 0)
    active = sum(counts.values())
    launch = params.launch_us * 1e-6
    if not active:
        return (launch, {"empty": True}) if detail else launch
    k0, p = params.k_overhead, params.overlap_exponent
    bw = params.hbm_efficiency * hbm_bytes_per_s
    if stream_bytes_per_s is not None:
        bw = min(bw, stream_bytes_per_s)
    peak_sm = peak_flops / sm_count
    nbytes = sum(g * ((m * k + k * n) * in_bytes + m * n * out_bytes) for (m, n, k), g in counts.items())
    t_m = nbytes / bw
    best = None
    for tile in tiles:
        tm, tn, occ, sms = tile_config(tile)
        unit = wave_seconds_per_k(params, tm, tn, occ, peak_sm, sms)
        n_tiles, work, longest = 0, 0.0, 0.0
        for (m, n, k), g in counts.items():
            per_group = (-(-m // tm)) * (-(-n // tn))
            cost = -(-k // K_STEP) * K_STEP + k0
            n_tiles += g * per_group
            work += g * per_group * cost
            longest = max(longest, cost)
        waves = -(-n_tiles // tile_slots(sm_count, occ, sms))
        t_c = unit * max(waves * work / n_tiles, longest)
        t = (t_c ** p + t_m ** p) ** (1.0 / p)
        if best is None or t < best[0]:
            best = (t, tm, tn, occ, sms, waves, t_c)
    total = best[0] + launch + active * group_us * 1e-6
    if not detail:
        return total
    t, tm, tn, occ, sms, waves, t_c = best
    return total, {"tile": (tm, tn), "ctas_per_sm": occ, "sms_per_tile": sms, "waves": waves, "groups": active, "compute_s": t_c,
                   "memory_s": t_m, "bytes": nbytes}


__all__ = ["FUSED_MOE", "KERNELS", "TORCH_GROUPED_MM", "GroupedParams", "grouped_params", "group_shapes",
           "grouped_gemm_time_s"]
