"""Sustained clocks under the board's power limit: how fast a long GEMM phase runs, against the short bursts a GEMM
calibration may have been timed in.

A dense GEMM that fills the SMs draws more than the board's limit at the boost clock, so the clock settles lower; a
short burst after an idle gap runs at the boost clock. Stas Bekman's mamf-finder v4 measured both on one node and one
software stack (stas00/ml-engineering, branch ``fast-mamf``, commit 082816f, 2026-08-10, compute/accelerator/README.md,
"Maximum Achievable Matmul FLOPS comparison table"): MAMF, a boost-validated burst, and MSMF, the rate a GEMM holds
"once the GPU is saturated at ~TDP and the clock has settled", with its power and clock (:data:`SUSTAINED_GEMM`).

**What the calibration already contains** decides the rule (a preset's ``sustained_gemm`` or ``sustained_gemm_cap``
key). The Blackwell presets' GEMM efficiencies are fitted to the MAMF table's earlier rows
(``data/published_peak_gemm.csv``: B200 1,745 BF16 and 3,432.5 FP8), which match the boost-validated burst of the same
GPU (1,770.9 and 3,435.2) and sit 17-19 % above its sustained rate (1,456.3 and 2,795.7): a burst state, so a sustained
phase is slower than the fit by the measured ratio (``sustained_gemm``). The Hopper SXM presets are fitted on Vidur's
per-layer timings (short kernels; FP8's scale on DeepGEMM's H800 block-scaled table), neither a validated burst nor a
soaked phase: at the MSMF shapes the model gives 753.6 BF16 and 1,261.9 FP8 TFLOP/s, between the H200's sustained rates
(708.5 and 1,288.7 at ~693 W; 714.8 and 1,300.2 moved to its 700 W limit) and its bursts (841.9, 1,491.9). So the rule
there is a cap (``sustained_gemm_cap``): the model's rate at a measured shape may not exceed the sustained rate there
at the board's limit, per GEMM class, and the factor that enforces it applies to every GEMM of the class. MSMF's shape
is the best of a search; a lent H200 at its 700 W limit measured six more (``calibration/nvidia-h200-2026-11-30``:
LLM shapes and squares, settled at 0.84-0.86 of their bursts within 100 ms), where the model sits 5-12 % above the
sustained rates. So the factor is the median over the measured shapes (BF16 0.915 on the H200 at 700 W over seven,
FP8 0.986 over four; MSMF's shape alone gave 0.9485 and 1: a power limit slows a kernel, it does not speed a slower
one up, so a factor stays at most 1). A GEMM the memory bounds (a decode step's) barely moves: its time is HBM's. The Ampere presets (Vidur, LLMCompass) and the other
Hopper boards (PCIe, NVL, H20) have no sustained measurement of their silicon and limit, nor do the AMD parts: nothing
is applied to them (the A100 model at 8192^3, 237 TFLOP/s, is under a randn cuBLAS run on a 400 W A100, 257: Horace He,
thonking.ai "Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!").

**A full board** (:data:`FULL_BOARD`). MSMF is measured on one GPU with its siblings idle; the same benchmark run
on all eight GPUs of the board at once settles lower, since they share the board's power and cooling budget (the
same commit's ``compute/accelerator/benchmarks/README.md``, "What we measured: alone vs all-8 concurrent", BF16,
torch 2.13.0+cu130: B200 1,455.7 alone against a mean of 1,426.4 over 8 GPUs x 5 rounds, -2.0 %, with a 10.4 %
spread across the GPUs). A training job fills its boards, so a burst-fitted preset's factor takes the all-eight
mean on the sustained rate before it is moved to a limit and bounded by the burst (bursts were not slowed by busy
siblings, so a limit that lets the boost clock hold is not). ASSUMPTIONS: FP8 (and the block-scaled formats) settle
as BF16 does (the FP8 MSMF draws the same ~990 W, not measured all-eight); a job on part of a board is priced as a
full one; the mean, not the slowest GPU that a synchronous step waits for, so this is the smaller bound of the
effect. The H200's all-eight mean (698.6 against 702.9, -0.6 %) is not applied to the Hopper cap: it is inside the
alone measurement's own run-to-run range (1.4 %, against the B200's -2.0 % over a 1.1 % range), and six of the cap's
seven shapes are the lent H200's runs, whose siblings' load was not recorded.

**The DVFS law** (the energy plugin's, docs/energy.md, ``astra_energy`` data/power.json ``clock_power``)::

    P(f) = P_idle + (P_boost - P_idle) * (f / f_max) ** ALPHA

dynamic power C V^2 f with the voltage rising with the clock, one exponent for both. Under a limit L a phase whose
P_boost exceeds L settles at f / f_max = ((L - P_idle) / (P_boost - P_idle)) ** (1 / ALPHA). Between two limits of
one GPU the settled clock scales by ((L - P_idle) / (L0 - P_idle)) ** (1 / ALPHA), P_boost cancelling: one measured
sustained point (L0, its clock) gives the clock at any other limit, at most the boost clock.

**A GEMM's rate against its clock** (:meth:`SustainedGemm.clock_curve`). The rate is not proportional to the SM
clock: the measured pairs lose much less rate than clock. B200 BF16: MSMF runs at 1,339 / 1,965 = 0.681 of the boost
clock and 1,456.3 / 1,770.9 = 0.822 of the burst rate (FP8: 0.677 and 0.814); the H200 pair 0.740 and 0.842. The
same holds for one shape on one board, where no search over shapes enters: this repository's lent H200 (calibration/
nvidia-h200-2026-11-30, README "Sustained load") ran bf16 8192^3 at 779 TFLOP/s at 1,980 MHz in its first chunk and
662.6 settled at 1,461 MHz (clock 0.738, rate 0.851), fp8 1,369 at 1,980 and 1,200.3 at 1,327 (0.670, 0.877). So the
rate follows ``1 / rate = a / f + b``: a part of a GEMM's time that the SM clock sets (``a / f``) and a part that it
does not (``b``: HBM's clock stays put under a power limit, 3,201 MHz in every sample of those runs), the two
constants taken through the pair's two measured points (the burst at the boost clock, the sustained rate at its
settled clock). It reproduces both points, where the proportional rule, anchored at the sustained point, reached the
burst rate already at 1,339 / 0.822 = 1,628 MHz, far below the boost clock the burst was measured at. Check
on a point not used: B200's curve at GB200's 2,062 MHz maximum clock (the same silicon) gives 1,810 BF16 and 3,515
FP8 TFLOP/s against GB200's MAMF rows 1,822 and 3,615.6 (the proportional rule: 1,858 and 3,605; those rows ran on
another torch, which alone moves B200's row by 1.5 %, so the check does not tell the two apart). ASSUMPTION: the two
parts add (no overlap that changes with the clock); the pair's two points are different shapes (MAMF's and MSMF's
best), which the model's own GEMM rates put 1.7 % (BF16) and 1.1 % (FP8) apart at one clock, far below the 21 %
(BF16) the points differ in rate per clock.

Reuse by the energy plugin: :func:`gemm_boost_power_w` is the power a sustained GEMM would draw at the boost clock
(1,557 W for B200 BF16, not the TDP that ``class_fraction_of_tdp.gemm = 1.0`` assumes), and
:func:`settled_clock_ratio` the clock its phase settles at under a limit; ``astra_energy.power`` could take both from
here for the burst-calibrated GPUs and its ``ALPHA`` from this module (it keeps its own copy today, the same 1.32).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the DVFS exponent: the energy plugin's fit (``python -m astra_energy.fit`` on factryze.ai's published "capping an H100
#: at 600 W typically loses 10 to 15 % step throughput", data/power.json ``clock_power.alpha``); the same number, so
#: the two models agree on a power limit's effect
ALPHA = 1.32
#: idle power as a fraction of the board's limit: ASSUMPTION, the energy plugin's (data/power.json ``unknown_gpu``:
#: "the presets' idle powers lie between 0.11 and 0.15 of their TDPs")
IDLE_FRACTION = 0.14


@dataclass(frozen=True)
class SustainedGemm:
    """One published pair: a GPU's best burst GEMM rate and the rate, power and clock a saturated GEMM settles at."""

    burst_tflops: float
    sustained_tflops: float
    sustained_w: float
    sustained_clock_mhz: float
    boost_clock_mhz: float
    limit_w: float
    source: str
    #: MSMF's shape (M, N, K): where a per-layer fit's rate is capped (:func:`sustained_gemm_factor`)
    shape: tuple = ()
    #: more shapes measured sustained on the same silicon and limit (:class:`ShapePoint`): a cap takes the median over
    #: all of them, since MSMF's shape is the best of a search and overstates the rate at the shapes a step runs
    more: tuple = ()

    @property
    def rate_ratio(self) -> float:
        """Sustained over burst rate at the measured board's limit."""
        return self.sustained_tflops / self.burst_tflops

    @property
    def idle_w(self) -> float:
        return IDLE_FRACTION * self.limit_w

    def clock_curve(self) -> tuple:
        """``(a, b)`` of ``1 / rate = a / clock + b`` (TFLOP/s, MHz) through the burst at the boost clock and the
        sustained rate at its settled clock: ``a / clock`` the part of a GEMM's time the SM clock sets, ``b`` the rest
        (the module docstring gives the evidence). Both must be positive: a rate that fell faster than its clock would
        need a negative part."""
        slope = ((1.0 / self.sustained_tflops - 1.0 / self.burst_tflops)
                 / (1.0 / self.sustained_clock_mhz - 1.0 / self.boost_clock_mhz))
        fixed = 1.0 / self.burst_tflops - slope / self.boost_clock_mhz
        if slope <= 0.0 or fixed <= 0.0:
            raise ValueError(f"{self.source}: the rate must fall less than in proportion to the clock "
                             f"(a = {slope:g}, b = {fixed:g})")
        return slope, fixed

    def tflops_at_clock(self, clock_mhz: float) -> float:
        """The GEMM rate at SM clock ``clock_mhz`` on :meth:`clock_curve`."""
        slope, fixed = self.clock_curve()
        return 1.0 / (slope / clock_mhz + fixed)

    def clock_at_tflops(self, tflops: float) -> float:
        """The SM clock at which :meth:`clock_curve` gives ``tflops`` (below the curve's limit ``1 / b``)."""
        slope, fixed = self.clock_curve()
        return slope / (1.0 / tflops - fixed)

    def sustained_tflops_at(self, board_power_w: float, alpha: float = ALPHA) -> float:
        """The sustained rate at limit ``board_power_w`` as the Hopper cap moves its measured points (MSMF's shape's,
        :meth:`ShapePoint.tflops_at`: the rate in proportion to the DVFS law's clock, at most the burst). A burst fit's
        factor takes :func:`sustained_rate_ratio`'s curve instead."""
        return self.shape_points()[0].tflops_at(self, board_power_w, alpha)

    def shape_points(self) -> tuple:
        """Every measured shape: MSMF's (this pair's own) and :attr:`more`."""
        return (ShapePoint(self.shape, self.sustained_tflops, self.sustained_w, self.source), *self.more)


@dataclass(frozen=True)
class ShapePoint:
    """One GEMM shape's sustained rate at a board's limit, and the power it drew there."""

    shape: tuple  # (M, N, K)
    sustained_tflops: float
    sustained_w: float
    source: str

    def tflops_at(self, pair: SustainedGemm, board_power_w: float, alpha: float = ALPHA) -> float:
        """This shape's sustained rate moved to limit ``board_power_w`` by the DVFS law (idle and the sustained over
        burst bound from ``pair``, the silicon's headline pair), in proportion to the clock: the Hopper cap's rule. Its
        points were measured at 691-694 W and move to the 700 W limit by at most 0.9 %, where
        :meth:`SustainedGemm.clock_curve` would give about half that; kept, so that the Hopper steps do not move."""
        gain = ((board_power_w - pair.idle_w) / (self.sustained_w - pair.idle_w)) ** (1.0 / alpha)
        return self.sustained_tflops * min(gain, 1.0 / pair.rate_ratio)


_MSMF = ("stas00/ml-engineering fast-mamf 082816f, compute/accelerator/README.md MAMF/MSMF table (torch 2.13.0+cu130, "
         "one GPU, siblings idle): ")
_H200_RUNS = ("plugins/gpu_model/calibration/nvidia-h200-2026-11-30 (one H200 SXM at its 700 W limit, torch 2.11.0+cu130, "
              "cuBLAS 13.1.0; fit/measure_gpu_sustained.py): ")


def _h200_measured(rows, run):
    return tuple(ShapePoint(shape, tflops, watts, _H200_RUNS + f"{run}, phase gemm {shape}, settled rate")
                 for shape, tflops, watts in rows)


#: (silicon, GEMM class) -> the measured pair. GEMM class: ``bf16`` (BF16/FP16/TF32 inputs) or ``fp8`` (FP8, MXFP8,
#: FP4: ASSUMPTION for the block-scaled formats, which have no sustained measurement).
SUSTAINED_GEMM = {
    ("B200", "bf16"): SustainedGemm(1770.9, 1456.3, 994.0, 1339.0, 1965.0, 1000.0,
                                    _MSMF + "'NVIDIA B200 SXM | 1770.9 | 1456.3 | 2250 ... MAMF ~295 W @ 1965 MHz; "
                                    "MSMF 1456.3 @ 9472x8192x20480, ~994 W @ 1339 MHz' (HGX B200, 1000 W)",
                                    shape=(9472, 8192, 20480)),
    ("B200", "fp8"): SustainedGemm(3435.2, 2795.7, 990.0, 1331.0, 1965.0, 1000.0,
                                   _MSMF + "'NVIDIA B200 SXM | 3435.2 | 2795.7 | 4500 ... MAMF ~287 W @ 1965 MHz; MSMF "
                                   "2795.7 @ 9472x8192x16384, ~990 W @ 1331 MHz'",
                                   shape=(9472, 8192, 16384)),
    ("H200-SXM", "bf16"): SustainedGemm(841.9, 708.5, 693.0, 1465.0, 1980.0, 700.0,
                                        _MSMF + "'NVIDIA H200 SXM | 841.9 | 708.5 | 989 ... MAMF ~176 W @ 1980 MHz; "
                                        "MSMF 708.5 @ 8192x8448x20480, ~693 W @ 1465 MHz'",
                                        shape=(8192, 8448, 20480), more=(
        *_h200_measured([((8192, 8192, 8192), 662.6, 691.5)], "sustained_chunks.csv (run 1)"),
        *_h200_measured([((32768, 14336, 4096), 663.6, 692.0), ((32768, 6144, 4096), 665.3, 691.5),
                         ((8192, 6144, 12288), 679.4, 693.1), ((4096, 4096, 4096), 652.8, 691.4),
                         ((16384, 16384, 16384), 670.3, 691.5)], "sustained_chunks-run3.csv (run 3)"))),
    ("H200-SXM", "fp8"): SustainedGemm(1491.9, 1288.7, 693.0, 1374.0, 1980.0, 700.0,
                                       _MSMF + "'NVIDIA H200 SXM | 1491.9 | 1288.7 | 1979 ... MAMF ~172 W @ 1980 MHz; "
                                       "MSMF 1288.7 @ 8448x8192x16384, ~693 W @ 1374 MHz'",
                                       shape=(8448, 8192, 16384), more=(
        *_h200_measured([((8192, 8192, 8192), 1200.3, 692.3)], "sustained_chunks.csv (run 1)"),
        *_h200_measured([((32768, 14336, 4096), 1192.3, 691.9), ((32768, 4096, 14336), 1207.7, 693.6)],
                        "sustained_chunks-run3.csv (run 3)"))),
}


@dataclass(frozen=True)
class FullBoard:
    """One silicon's sustained rate with every GPU of its board busy, against one GPU with idle siblings."""

    alone_tflops: float
    all_busy_tflops: float
    source: str

    @property
    def ratio(self) -> float:
        """The all-busy mean over the alone rate."""
        return self.all_busy_tflops / self.alone_tflops


_ALL8 = ("stas00/ml-engineering fast-mamf 082816f, compute/accelerator/benchmarks/README.md, 'What we measured: alone "
         "vs all-8 concurrent' (mamf-finder --search auto, BF16, torch 2.13.0+cu130): ")

#: silicon -> its full-board measurement (:class:`FullBoard`): the mean MSMF over all eight GPUs of the board running
#: at once (8 GPUs x 5 rounds, n = 40) over GPU0 alone (n = 5). Applied to a burst-fitted preset naming that silicon's
#: pair (``sustained_gemm``: B200, and B300 and GB200, ASSUMPTION as their pair is), every GEMM class (FP8:
#: ASSUMPTION); not to the Hopper cap (the module docstring says why).
FULL_BOARD = {
    "B200": FullBoard(1455.7, 1426.4, _ALL8 + "'B200 bf16 ... GPU0 alone (n=5) | 1455.7 ... All 8 GPUs x 5 rounds "
                                              "(n=40) | 1426.4 (-2.0%) | 10.4%'"),
}


def full_board_ratio(silicon: str | None) -> float:
    """The sustained rate's all-eight-busy mean over its alone rate for ``silicon`` (1 where none is measured)."""
    board = FULL_BOARD.get(silicon)
    return board.ratio if board is not None else 1.0


#: Which presets name a pair: ``sustained_gemm`` (burst fits, :class:`astra_gpu_model.gpu.GpuSpec`): B200 its own; B300
#: and GB200 B200's (ASSUMPTION: the same BF16/FP8 peaks and bursts, no sustained measurement of their own).
#: ``sustained_gemm_cap`` (per-layer fits): H200 SXM its own; H100 SXM5, H800 SXM5 and Grand Teton's H100 96 GB H200's
#: (ASSUMPTION: the same GH100 die, SMs, clocks and 700 W limit; no MSMF of theirs is published). Ampere, the other
#: Hopper boards and the AMD parts name none (no sustained measurement); a user's YAML inherits its ``base:``'s.

_GEMM_CLASS = {"bf16": "bf16", "fp16": "bf16", "tf32": "bf16", "fp8": "fp8", "int8": "fp8", "mxfp8": "fp8",
               "nvfp4": "fp8", "mxfp4": "fp8", "fp4": "fp8", "mxfp6": "fp8", "fp6": "fp8"}


def settled_clock_ratio(boost_power_w: float, idle_w: float, limit_w: float, alpha: float = ALPHA) -> float:
    """The clock over the boost clock that a phase drawing ``boost_power_w`` at the boost clock settles at under
    ``limit_w`` (1 when it fits)."""
    if boost_power_w <= limit_w:
        return 1.0
    return ((limit_w - idle_w) / (boost_power_w - idle_w)) ** (1.0 / alpha)


def gemm_boost_power_w(point: SustainedGemm, alpha: float = ALPHA) -> float:
    """The power a saturated GEMM would draw at the boost clock, from its measured settled point (the DVFS law
    solved for P_boost)."""
    clock = point.sustained_clock_mhz / point.boost_clock_mhz
    return point.idle_w + (point.sustained_w - point.idle_w) / clock ** alpha


def sustained_rate_ratio(point: SustainedGemm, board_power_w: float, alpha: float = ALPHA,
                         full_board: float = 1.0) -> float:
    """A sustained GEMM phase's rate over the burst rate at limit ``board_power_w``. The measured sustained rate (times
    ``full_board``, :func:`full_board_ratio`, for a board whose GPUs are all busy) sits at a clock on the pair's
    :meth:`SustainedGemm.clock_curve`; the DVFS law moves that clock to the limit (at most the boost clock, where the
    burst holds), and the curve gives the rate there."""
    idle = point.idle_w
    if board_power_w <= idle:
        raise ValueError(f"board power {board_power_w:g} W: must be above the idle power ({idle:g} W)")
    gain = ((board_power_w - idle) / (point.sustained_w - idle)) ** (1.0 / alpha)
    clock_mhz = point.clock_at_tflops(point.sustained_tflops * full_board) * gain
    if clock_mhz >= point.boost_clock_mhz:
        return 1.0
    return min(1.0, point.tflops_at_clock(clock_mhz) / point.burst_tflops)


def board_power_w(gpu, platform=None) -> float | None:
    """The limit ``gpu`` (a GpuSpec) runs at: its platform's ``board_power_w`` (a rack tray's,
    :class:`astra_gpu_model.platforms.Platform`, which a run on it implies as the option ``gpu_board_power_w``), else
    its ``tdp_w``. ``platform``: a registered name or a Platform object (None: the preset alone)."""
    if isinstance(platform, str):
        from astra_sim.platforms import get_platform

        platform = get_platform(platform)
    return getattr(platform, "board_power_w", None) or gpu.tdp_w


def model_tflops_at_shape(gpu, gemm_class: str, shape) -> float:
    """The GEMM model's TFLOP/s on ``gpu`` (a GpuSpec) at ``shape`` (M, N, K) for ``gemm_class`` (``bf16``: BF16 in
    and out, as MSMF's ``torch.mm``; ``fp8``: E4M3 in and out, as its ``torch._scaled_mm``), with no sustained
    factor: the rate a cap compares with the measured one."""
    from astra_gpu_model.gemm import gemm_time_s

    dtype = gpu.rate_dtype(gemm_class)
    m, n, k = shape
    seconds = gemm_time_s(m, n, k, 1, peak_flops=gpu.peak_flops(dtype), sm_count=gpu.sm_count,
                          hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=gpu.dtype_bytes(dtype),
                          out_bytes=gpu.dtype_bytes(dtype), params=gpu.gemm_params(dtype), tiles=gpu.gemm_tiles,
                          schedule=gpu.gemm_schedule)
    return 2.0 * m * n * k / seconds / 1e12


def cap_reference_tflops(gpu) -> dict:
    """``{GEMM class: (the model's TFLOP/s at each measured shape, in :meth:`SustainedGemm.shape_points` order)}`` for
    a preset with ``sustained_gemm_cap`` (its whole board, as it loads), for the classes measured and rated on it."""
    return {gemm_class: tuple(model_tflops_at_shape(gpu, gemm_class, p.shape) for p in point.shape_points())
            for (silicon, gemm_class), point in SUSTAINED_GEMM.items()
            if silicon == gpu.sustained_gemm_cap and gemm_class in gpu.tensor_tflops}


def _median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def cap_ratio(point: SustainedGemm, model_tflops: tuple, board_w: float) -> float:
    """The median over the measured shapes of (sustained rate at limit ``board_w`` / the model's rate there)."""
    return _median(p.tflops_at(point, board_w) / model for p, model in zip(point.shape_points(), model_tflops))


def sustained_gemm_factor(gpu, dtype: str, board_w: float | None) -> float:
    """What the fitted GEMM peak of ``gpu`` (a GpuSpec) is multiplied by in a sustained phase of ``dtype`` GEMMs at
    limit ``board_w``. A burst fit (the preset's ``sustained_gemm`` names the measured pair): the measured sustained
    over burst ratio at that limit. A per-layer fit (``sustained_gemm_cap``): the fit's rate at the shape MSMF
    measured may not exceed the sustained rate there, so ``min(1, sustained rate at the limit / the model's rate
    at that shape)``, the median over every shape measured on that silicon (:meth:`SustainedGemm.shape_points`), one
    factor per GEMM class (a fit below the sustained rate is left: a power limit slows a kernel, it does not speed one
    up). A burst fit's sustained rate is a full board's (:func:`full_board_ratio`, :data:`FULL_BOARD`). Else 1."""
    gemm_class = _GEMM_CLASS.get(dtype)
    if gemm_class is None or not board_w:
        return 1.0
    if gpu.sustained_gemm is not None:
        return sustained_rate_ratio(SUSTAINED_GEMM[(gpu.sustained_gemm, gemm_class)], float(board_w),
                                    full_board=full_board_ratio(gpu.sustained_gemm))
    model_tflops = (getattr(gpu, "sustained_cap_tflops", None) or {}).get(gemm_class)
    if model_tflops is None:
        return 1.0
    point = SUSTAINED_GEMM[(gpu.sustained_gemm_cap, gemm_class)]
    return min(1.0, cap_ratio(point, model_tflops, float(board_w)))


__all__ = ["ALPHA", "FULL_BOARD", "FullBoard", "SUSTAINED_GEMM", "ShapePoint", "SustainedGemm", "full_board_ratio",
           "board_power_w", "cap_ratio", "cap_reference_tflops", "gemm_boost_power_w", "model_tflops_at_shape",
           "settled_clock_ratio", "sustained_gemm_factor", "sustained_rate_ratio"]
