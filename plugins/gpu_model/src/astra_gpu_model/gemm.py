"""Analytical GEMM time: tiles, waves, split-K, a size-dependent efficiency, and HBM traffic.

A GEMM ``C[b, M, N] = A[b, M, K] @ B[b, K, N]`` is modelled the way a tuned library (cuBLAS, hipBLASLt)
runs it. For every candidate kernel configuration (tile ``tm x tn`` with ``occ`` tiles resident per SM, or one
tile on a pair of SMs (``sms = 2``: Blackwell's 2-SM MMA), split-K factor ``s``):

* ``ctas  = b * ceil(M / tm) * ceil(N / tn) * s`` tiles run in
  ``waves = ceil(ctas / slots)`` waves, ``slots = floor(SMs * occ / sms)`` (**wave quantisation**: a GEMM one
  tile larger than a full wave pays a whole extra wave; **tile quantisation**: partial edge tiles cost as much
  as full ones);
* one wave keeps every SM busy for ``occ * 2 * tm * tn * (Ks + k0) / (eta * e_tile * sms * peak_per_SM)`` where
  ``Ks = ceil(K / s)`` rounded up to the K step (64), ``k0`` is the fixed per-tile cost (prologue, epilogue,
  pipeline fill) in units of K, ``eta`` the achievable fraction of the dense tensor peak and
  ``e_tile = (1 + c / 128 + c / 256) / (1 + c / tm + c / tn)`` the relative efficiency of smaller tiles
  (lower data reuse per loaded byte; ``c`` is fitted). Together these make the efficiency **size dependent**:
  small K, small M/N and ragged shapes all run below the big-GEMM rate;
* HBM traffic is ``b * (M*K + K*N) * in_bytes + b * M*N * out_bytes`` (operands read once, as when the
  L2 cache catches the re-reads), plus ``2 * s * b * M*N * 4`` bytes of fp32 partial sums when ``s > 1``,
  at ``hbm_efficiency`` x the peak HBM bandwidth;
* compute and memory time overlap: ``t = (t_c^p + t_m^p)^(1/p)`` (``p`` fitted; ``p -> inf`` is a max);
* the library is assumed to pick the fastest configuration; a fixed ``launch_us`` is added once. Every
  configuration's time grows with M, N, K and b and the set of configurations does not depend on the
  shape, so the chosen (minimum) time is monotonic in every dimension (data-parallel; a stream-K schedule need
  not be: CUTLASS's switches at half a wave, and on B200 8192 x 128 x 1280 takes 10 % longer than 8192 x 200 x
  1280 with it).

No shape runs faster than ``eta * max(e_tile) * peak`` (:func:`peak_fraction_bound`): a wave's
``slots * 2 * tm * tn * Ks`` FLOPs take at least ``unit * Ks``. ``calibration.fit_peak_efficiency`` holds that
bound to a GPU's published maximum achievable rate.

The tile set is the GPU's libraries' (``GpuSpec.gemm_tiles``, the preset's ``gemm_tiles``); the default is the
Ampere/Hopper one below. ``docs/hardware.md`` (GEMM section) names each vendor's set and its source.

**The last partial wave** (``schedule``, the preset's ``gemm_schedule``). ``data-parallel`` (the default) runs one
tile per slot, wave after wave, as above. A stream-K library (Osama et al., PPoPP 2023) shares the last partial wave
and one full wave before it (``dp_waves = floor(ctas / slots) - 1`` full waves stay data-parallel) as an even share
of their ``sk_tiles * L`` K iterations (``L = Ks / 64``) over ``sk_units`` slots; the longest share takes
``unit * (ceil(sk_tiles * L / sk_units) * 64 + touched * k0)``, ``touched`` the tiles it works on (each pays its
fixed cost), and every share leaves one fp32 partial tile that another reads back (the fix-up):
``8 * tm * tn`` bytes of HBM traffic each. Split-K configurations stay candidates. :data:`STREAM_K_CUTLASS` is
CUTLASS's SM90/SM100 ``StreamKScheduler`` heuristic (data-parallel when the tail is at least half a wave or
``L <= 8``; ``sk_units = min(slots, sk_tiles * L / 8)``); :data:`STREAM_K_HIPBLASLT` is hipBLASLt's stream-K kernels
(every slot shares the tiles, and its grid model keeps the faster of that and data-parallel). Sources:
``docs/hardware.md``, GEMM section. A stream-K shape is never faster than ``peak_fraction_bound``: the longest share
is at least the average, ``sk_tiles * L / slots``.

The parameters (``GemmParams``) are fitted per GPU family on measured GEMM times
(``fit/fit_gemm.py``). :func:`gemm_time_s` is the scalar version the compute model calls;
:func:`gemm_time_s_np` is the same formula over numpy arrays (used by the fit and the error tables).
Both must stay identical (``tests/test_gpu_gemm.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

#: Candidate CTA tiles ``(tm, tn, CTAs resident per SM)``: the shapes cuBLAS/CUTLASS tensor-core kernels
#: use on Ampere and Hopper (smaller tiles allow more resident CTAs). A tile may carry a fourth element, the SMs
#: one tile runs on (2: a Blackwell 2-SM MMA tile, CUTLASS ``KernelTmaWarpSpecialized2SmSm100``); absent, 1.
DEFAULT_TILES = ((128, 256, 1), (256, 128, 1), (128, 128, 1), (128, 64, 2), (64, 128, 2), (64, 64, 4))
#: Split-K factors the model may choose.
DEFAULT_SPLITS = (1, 2, 4, 8, 16)
#: K is processed in steps of this many elements (the CTA's K tile).
K_STEP = 64
#: The reference tile whose efficiency is ``eta``.
REF_TILE = (128, 256)
#: How a library schedules the tiles of one GEMM (the module docstring; ``docs/hardware.md``, GEMM section).
DATA_PARALLEL, STREAM_K_CUTLASS, STREAM_K_HIPBLASLT = "data-parallel", "stream-k-cutlass", "stream-k-hipblaslt"
SCHEDULES = (DATA_PARALLEL, STREAM_K_CUTLASS, STREAM_K_HIPBLASLT)
#: CUTLASS's least K iterations per stream-K unit (``min_iters_per_sk_unit_ = 8u``,
#: include/cutlass/gemm/kernel/tile_scheduler_params.h, NVIDIA/cutlass at 7107b05)
SK_MIN_ITERS = 8


@dataclass(frozen=True)
class GemmParams:
    """Fitted GEMM efficiency parameters of one GPU family (see the module docstring)."""

    compute_efficiency: float  #: eta: achieved / peak dense tensor FLOP/s of the reference tile's main loop
    tile_penalty: float  #: c (elements): efficiency loss of small tiles, e = (1 + c/128 + c/256)/(1 + c/tm + c/tn)
    k_overhead: float  #: k0 (elements of K): fixed per-tile cost (prologue, epilogue, pipeline fill)
    hbm_efficiency: float  #: achievable / peak HBM bandwidth
    launch_us: float  #: fixed per-kernel time (launch, ramp-up, tail), microseconds
    overlap_exponent: float  #: p: t = (t_c^p + t_m^p)^(1/p)

    @classmethod
    def from_dict(cls, data, where="GEMM parameters"):
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        return cls(**{n: float(data[n]) for n in names})

    def to_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _tile_efficiency(c, tm, tn):
    rm, rn = REF_TILE
    return (1.0 + c / rm + c / rn) / (1.0 + c / tm + c / tn)


def tile_config(tile):
    """``(tm, tn, occ, sms)`` of a tile given as ``(tm, tn, occ)`` or ``(tm, tn, occ, sms)``."""
    return (tile[0], tile[1], tile[2], tile[3] if len(tile) > 3 else 1)


def tile_slots(sm_count, occ, sms):
    """Tiles one wave runs: ``occ`` per SM, each on ``sms`` SMs."""
    return max(1, (sm_count * occ) // sms)


def wave_seconds_per_k(params, tm, tn, occ, peak_sm, sms=1):
    """Seconds one wave of ``tm x tn`` tiles (``occ`` per SM, each on ``sms`` SMs) takes per element of K
    (times ``Ks + k0``)."""
    return occ * 2.0 * tm * tn / (params.compute_efficiency * _tile_efficiency(params.tile_penalty, tm, tn)
                                  * sms * peak_sm)


def peak_fraction_bound(params, tiles=DEFAULT_TILES):
    """The largest fraction of the dense peak any GEMM shape reaches in this model: ``eta * max(e_tile)`` over
    ``tiles`` (reached only by a shape of whole waves of the best tile, K -> infinity, no memory time)."""
    return params.compute_efficiency * max(_tile_efficiency(params.tile_penalty, t[0], t[1]) for t in tiles)


def stream_k_split(schedule, ctas, slots, k_iters):
    """``(dp_waves, sk_tiles, sk_units)``: how ``schedule`` shares ``ctas`` tiles of ``k_iters`` K steps over ``slots``
    slots, or None where it runs them data-parallel (whole waves, ``schedule`` data-parallel, or CUTLASS's heuristic
    declines: ``get_num_sk_tiles`` / ``get_num_sk_units`` in CUTLASS's tile_scheduler_params.h)."""
    full, tail = divmod(ctas, slots)
    if schedule == DATA_PARALLEL or tail == 0:
        return None
    if schedule not in SCHEDULES:
        raise ValueError(f"GEMM schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    dp_waves = full - 1 if full >= 1 else 0  # the tail and one full wave are shared
    sk_tiles = ctas - dp_waves * slots
    if schedule == STREAM_K_HIPBLASLT:  # TENSILE_STREAMK_FULL_TILES = 1: the remainder and one full grid
        return dp_waves, sk_tiles, slots
    if k_iters <= SK_MIN_ITERS or 2 * tail >= slots:
        return None
    sk_units = min(slots, sk_tiles * k_iters // SK_MIN_ITERS)
    return (dp_waves, sk_tiles, sk_units) if sk_units else None


def stream_k_steps(dp_waves, sk_tiles, sk_units, k_iters, k0):
    """The longest slot's time in elements of K (times :func:`wave_seconds_per_k`'s unit): its data-parallel waves,
    then its share of the stream-K iterations plus one fixed cost ``k0`` per tile the share touches."""
    share = -(-(sk_tiles * k_iters) // sk_units)
    touched = -(-share // k_iters) + (1 if share % k_iters else 0)
    return dp_waves * (k_iters * K_STEP + k0) + share * K_STEP + touched * k0


def gemm_time_s(m, n, k, batch, *, peak_flops, sm_count, hbm_bytes_per_s, in_bytes, out_bytes, params,
                tiles=DEFAULT_TILES, splits=DEFAULT_SPLITS, schedule=DATA_PARALLEL, detail=False):
    """Seconds for ``batch`` GEMMs of ``(m x k) @ (k x n)``.

    ``peak_flops``: dense peak FLOP/s for the operand dtype; ``hbm_bytes_per_s``: peak HBM bandwidth;
    ``in_bytes``/``out_bytes``: element sizes; ``schedule``: one of :data:`SCHEDULES` (the last partial wave).
    With ``detail=True`` returns ``(seconds, info)`` where ``info`` names the chosen tile, split, waves
    (stream-K: ``stream_k`` = ``(dp_waves, sk_tiles, sk_units)``) and the compute / memory times.
    """
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        t = params.launch_us * 1e-6
        return (t, {"empty": True}) if detail else t
    k0 = params.k_overhead
    p = params.overlap_exponent
    bw = params.hbm_efficiency * hbm_bytes_per_s
    peak_sm = peak_flops / sm_count
    base_bytes = batch * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    best = None
    for tile in tiles:
        tm, tn, occ, sms = tile_config(tile)
        unit = wave_seconds_per_k(params, tm, tn, occ, peak_sm, sms)
        tiles_mn = batch * (-(-m // tm)) * (-(-n // tn))
        slots = tile_slots(sm_count, occ, sms)
        k_iters = -(-k // K_STEP)
        shared = stream_k_split(schedule, tiles_mn, slots, k_iters)
        for s in splits:
            ks = -(-k // s)
            ks = -(-ks // K_STEP) * K_STEP
            waves = -(-(tiles_mn * s) // slots)
            t_c = waves * unit * (ks + k0)
            nbytes = base_bytes + (8.0 * s * batch * m * n if s > 1 else 0.0)
            t_m = nbytes / bw
            t = (t_c ** p + t_m ** p) ** (1.0 / p)
            sk = None
            if s == 1 and shared is not None:
                sk_c = unit * stream_k_steps(*shared, k_iters, k0)
                sk_m = (base_bytes + 8.0 * tm * tn * shared[2]) / bw  # the fix-up's partial tiles
                sk_t = (sk_c ** p + sk_m ** p) ** (1.0 / p)
                if schedule == STREAM_K_CUTLASS or sk_t < t:  # CUTLASS's heuristic decides; hipBLASLt's grid the faster
                    t, t_c, t_m, waves, sk = sk_t, sk_c, sk_m, shared[0] + shared[1] / slots, shared
            if best is None or t < best[0]:
                best = (t, tm, tn, occ, sms, s, waves, t_c, t_m, sk)
    total = best[0] + params.launch_us * 1e-6
    if not detail:
        return total
    t, tm, tn, occ, sms, s, waves, t_c, t_m, shared = best
    info = {"tile": (tm, tn), "ctas_per_sm": occ, "sms_per_tile": sms, "split_k": s, "waves": waves,
            "compute_s": t_c, "memory_s": t_m}
    if shared is not None:
        info["stream_k"] = shared
    return total, info


def gemm_time_s_np(m, n, k, batch, *, peak_flops, sm_count, hbm_bytes_per_s, in_bytes, out_bytes, params,
                   tiles=DEFAULT_TILES, splits=DEFAULT_SPLITS, schedule=DATA_PARALLEL):
    """:func:`gemm_time_s` over numpy arrays ``m, n, k, batch`` (same shape); returns seconds."""
    import numpy as np

    if schedule not in SCHEDULES:
        raise ValueError(f"GEMM schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    m = np.asarray(m, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    batch = np.asarray(batch, dtype=np.float64)
    k0 = params.k_overhead
    p = params.overlap_exponent
    bw = params.hbm_efficiency * hbm_bytes_per_s
    peak_sm = peak_flops / sm_count
    base_bytes = batch * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    k_iters = np.ceil(k / K_STEP)
    best = np.full(m.shape, np.inf)
    for tile in tiles:
        tm, tn, occ, sms = tile_config(tile)
        unit = wave_seconds_per_k(params, tm, tn, occ, peak_sm, sms)
        tiles_mn = batch * np.ceil(m / tm) * np.ceil(n / tn)
        slots = tile_slots(sm_count, occ, sms)
        sk_t = None
        if schedule != DATA_PARALLEL:  # stream_k_split and stream_k_steps, elementwise
            full = np.floor(tiles_mn / slots)
            tail = tiles_mn - full * slots
            dp_waves = np.maximum(full - 1.0, 0.0)
            sk_tiles = tiles_mn - dp_waves * slots
            if schedule == STREAM_K_HIPBLASLT:
                units = np.full(m.shape, float(slots))
                on = tail > 0
            else:
                units = np.minimum(slots, np.floor(sk_tiles * k_iters / SK_MIN_ITERS))
                on = (tail > 0) & (k_iters > SK_MIN_ITERS) & (2.0 * tail < slots) & (units > 0)
            share = np.ceil(sk_tiles * k_iters / np.maximum(units, 1.0))
            touched = np.ceil(share / k_iters) + (np.mod(share, k_iters) != 0)
            sk_c = unit * (dp_waves * (k_iters * K_STEP + k0) + share * K_STEP + touched * k0)
            sk_m = (base_bytes + 8.0 * tm * tn * units) / bw
            sk_t = (sk_c ** p + sk_m ** p) ** (1.0 / p)
        for s in splits:
            ks = np.ceil(np.ceil(k / s) / K_STEP) * K_STEP
            waves = np.ceil(tiles_mn * s / slots)
            t_c = waves * unit * (ks + k0)
            nbytes = base_bytes + (8.0 * s * batch * m * n if s > 1 else 0.0)
            t_m = nbytes / bw
            t = (t_c ** p + t_m ** p) ** (1.0 / p)
            if s == 1 and sk_t is not None:
                t = np.where(on & ((schedule == STREAM_K_CUTLASS) | (sk_t < t)), sk_t, t)
            best = np.minimum(best, t)
    return best + params.launch_us * 1e-6


def gemm_flops(m, n, k, batch=1):
    return 2.0 * m * n * k * batch


__all__ = ["GemmParams", "gemm_time_s", "gemm_time_s_np", "gemm_flops", "wave_seconds_per_k", "tile_config",
           "tile_slots", "peak_fraction_bound", "stream_k_split", "stream_k_steps", "DEFAULT_TILES", "DEFAULT_SPLITS",
           "K_STEP", "SCHEDULES", "DATA_PARALLEL", "STREAM_K_CUTLASS", "STREAM_K_HIPBLASLT", "SK_MIN_ITERS"]

