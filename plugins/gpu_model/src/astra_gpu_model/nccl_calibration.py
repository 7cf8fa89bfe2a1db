"""The NCCL model's measured-time calibration (step 2 of :mod:`astra_gpu_model.nccl`): what corrects NCCL's own
latency and ``nBytes / algBw`` terms of the chosen pair to measured times.

Up to the fitted sizes (64 MB: Vidur's sweeps) each architecture has an overhead, a latency scale and a factor on
NCCL's algBw per ``link/algo/proto``, fitted on measured all-reduce times (``data/nccl_fit.json``, written by
``fit/fit_nccl.py``); past them, the factor that gives the published peak bus bandwidths (:data:`PEAK_STATEMENTS`,
:func:`beyond_fit_efficiency`). ``astra validate --cv`` refits without a source (:func:`calibration_override`).
Kept apart from the model's choice of the pair, which reads none of this; :mod:`astra_gpu_model.nccl` re-exports
every name here (where fit/fit_nccl.py, validation's --cv and the tests import them).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

#: :data:`astra_gpu_model.nccl.RING`, ``NVLS`` and ``SIMPLE`` (that module imports this one, so they are named here).
RING, NVLS, SIMPLE = "ring", "nvls", "Simple"


#: Architectures without their own calibration borrow the nearest one (documented in the README). Blackwell has no
#: published sweep up to 64 MB: it borrows Hopper's fitted factors there, and has its own past them (its peak
#: statements, :data:`PEAK_STATEMENTS`).
CALIBRATION_ARCH = {"volta": "ampere", "ampere": "ampere", "hopper": "hopper", "blackwell": "blackwell",
                    "cdna3": "cdna3"}
#: The architecture whose fit up to 64 MB an architecture without a sweep of its own borrows.
BORROWED_FIT = {"blackwell": "hopper"}


@dataclass(frozen=True)
class NcclCalibration:
    """Measured-time correction of one architecture (see :func:`astra_gpu_model.nccl.collective_time_us`)."""

    overhead_us: float
    latency_scale: float
    efficiency: dict  # "link/algo/proto" -> factor on NCCL's algBw
    #: The largest size fitted (bytes) and, past it, the factor on NCCL's algBw each further byte costs, per
    #: "link/algo/proto": NCCL keeps gaining bandwidth well past 64 MB on NVSwitch, so the fitted factor
    #: (which holds the ramp up to the largest fitted size) would understate it there.
    fitted_max_bytes: int | None = None
    beyond_fit: dict = field(default_factory=dict)

    def efficiency_for(self, link, algo, proto):
        """The fitted factor, else the mean of this link's fitted factors, else of all of them
        (the network, never measured, keeps NCCL's constants: 1.0)."""
        key = f"{link}/{algo}/{proto}"
        if key in self.efficiency:
            return self.efficiency[key]
        same_link = [v for k, v in self.efficiency.items() if k.startswith(link + "/")]
        if not same_link and link == "net":
            return 1.0
        pool = same_link or list(self.efficiency.values())
        return sum(pool) / len(pool)


@dataclass(frozen=True)
class PeakStatement:
    """One published peak bus bandwidth (GB/s) of an 8-GPU NVSwitch all-reduce with one (algorithm, protocol), and
    where it comes from (``source_id``: the registry's name of the statement, the unit ``--cv`` leaves out)."""

    source_id: str
    arch: str
    preset: str
    algo: str
    proto: str
    busbw_gbps: float
    quote: str


#: NVIDIA's "effective NVLink bandwidth" under NCCL's Simple protocol, as a share of the line rate: "450GB/s is the
#: line rate. With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (S. Jeaugey,
#: NVIDIA, NVIDIA/nccl-tests#212, 2024-05-06). The overhead is the protocol's (headers, flags, chunking), so it is
#: applied to A100's NVLink 3 line rate (12 links x 25 GB/s = 300 GB/s per direction) as well.
SIMPLE_PROTOCOL_SHARE = 370.0 / 450.0
A100_NVLINK_GBPS = 300.0

#: Past the fitted sizes (``data/nccl_fit.json``'s ``fitted_max_bytes``, 64 MB: Vidur's sweeps stop there), NCCL on
#: NVSwitch keeps gaining bandwidth up to a peak bus bandwidth (8 GPUs) that NVIDIA states. Each byte past the fitted
#: sizes costs what the mean of the statements says for its architecture, algorithm and protocol (the fitted line,
#: extrapolated, stays 20-30 % below them: 350 against 480 GB/s for NVLS, 167 against ~247 GB/s for A100's ring).
#: ``fit/fit_nccl.py`` turns these into ``beyond_fit`` (:func:`beyond_fit_efficiency`); ``astra validate --cv``
#: re-runs that without a source (registry case ``nccl-allreduce-h100-8gpu-nvls`` is #212's statement).
PEAK_STATEMENTS = (
    PeakStatement("NVIDIA/nccl-tests#212", "hopper", "H100-SXM5-80GB", RING, SIMPLE, 370.0,
                  "S. Jeaugey (NVIDIA), 2024-05-06: rings reach 'an effective NVLink bandwidth of 370GB/s'"),
    PeakStatement("NVIDIA/nccl-tests#212", "hopper", "H100-SXM5-80GB", NVLS, SIMPLE, 480.0,
                  "S. Jeaugey (NVIDIA), 2024-05-06: 'On 8 GPUs, you should reach a peak busBw of ~480GB/s'"),
    PeakStatement("NVIDIA GTC 2024 S62129", "hopper", "H100-SXM5-80GB", NVLS, SIMPLE, 480.0,
                  "GTC 2024 talk S62129: NVLink4 SHARP all-reduce intra-node bus bandwidth 480GB/s (quoted in "
                  "NVIDIA/nccl#1374, 2024-07-24)"),
    PeakStatement("NVIDIA/nccl-tests#212", "ampere", "A100-SXM4-80GB", RING, SIMPLE,
                  round(A100_NVLINK_GBPS * SIMPLE_PROTOCOL_SHARE, 1),
                  "#212's Simple-protocol share of the line rate (370 / 450) on A100's 300 GB/s NVLink 3"),
    # AMD Instinct MI300X (RCCL, 8 GPUs, Infinity Fabric mesh): the largest row of the published sweep the cdna3
    # calibration is fitted on (data/published_rccl_all_reduce_mi300x.csv), not a registry case's source.
    PeakStatement("hisohara/ai-scripts rccl-smoketest", "cdna3", "MI300X", RING, SIMPLE, 315.69,
                  "github.com/hisohara/ai-scripts training/01_rccl-smoketest/README.md (3ae89cf), rccl-tests "
                  "develop:a7809b3 on 8 MI300X, `mpirun -np 8 ... all_reduce_perf -b 8 -e 8G -f 2 -g 1`: 8589934592 B "
                  "out-of-place 47617 us, busbw 315.69 GB/s"),
    # Blackwell (NVLink 5): two measurements of an 8-GPU NVLS all-reduce, neither from a registry case's source.
    PeakStatement("NVIDIA/nccl#1807", "blackwell", "B200", NVLS, SIMPLE, 830.0,
                  "pzcyyj, 2025-08-13, NCCL 2.27.1 on 8 B200 in one machine: 'should the all_reduce_perf performance "
                  "of 8 B200s in a single machine reach 900+? Ours is 830+.'"),
    PeakStatement("lixueduan.com GB200 MNNVL", "blackwell", "B200", NVLS, SIMPLE, 811.0,
                  "https://www.lixueduan.com/posts/ai/13-gb200-mnnvl-nccl-test: 2 GB200 compute trays (8 GPUs) over "
                  "multi-node NVLink, NCCL micro-benchmark: '2 节点 8 GPU 配置下,MNNVL 实测带宽 811GB/s'"),
)


def peak_busbw(statements=PEAK_STATEMENTS, excluded=()):
    """``{arch: (preset, {(algo, proto): GB/s})}``: the mean of the statements per architecture and pair, leaving out
    those of the ``excluded`` source ids (a pair with no statement left has no peak: its fitted line extrapolates)."""
    grouped = {}
    for st in statements:
        if st.source_id not in excluded:
            grouped.setdefault(st.arch, (st.preset, {}))[1].setdefault((st.algo, st.proto), []).append(st.busbw_gbps)
    return {arch: (preset, {pair: sum(v) / len(v) for pair, v in pairs.items()})
            for arch, (preset, pairs) in grouped.items()}


#: The peaks the checked-in ``beyond_fit`` is fitted on (every statement).
PEAK_BUSBW = peak_busbw()
#: The source ids of the statements (``astra validate --cv`` leaves each out in turn).
PEAK_BUSBW_SOURCES = tuple(dict.fromkeys(st.source_id for st in PEAK_STATEMENTS))


def beyond_fit_efficiency(peaks=None, n=8, size=8 << 30):
    """``{arch: {"nvswitch/algo/proto": factor}}``: NCCL's own algBw times the factor gives the published peak bus
    bandwidth (``peaks``, default :data:`PEAK_BUSBW`) of an ``n``-GPU all-reduce of ``size`` bytes
    (busbw = algbw x 2(n-1)/n). The fit of ``data/nccl_fit.json``'s ``beyond_fit``, re-run by ``--cv``."""
    from astra_gpu_model.nccl import config_for_gpu, predict

    out = {}
    for arch, (preset, arch_peaks) in (PEAK_BUSBW if peaks is None else peaks).items():
        raw = config_for_gpu(preset, calibrated=False)
        cands = {(c[1], c[2]): c for c in predict("all_reduce", size, n, raw)}
        out[arch] = {}
        for (algo, proto), peak in arch_peaks.items():
            raw_busbw = size * 2 * (n - 1) / n / (cands[(algo, proto)][4] * 1e3)
            out[arch][f"nvswitch/{algo}/{proto}"] = round(peak / raw_busbw, 5)
    return out


_CALIBRATION = None


@contextmanager
def calibration_override(calibration):
    """Run with ``calibration`` (``{arch: NcclCalibration}``) instead of the checked-in fit; used by
    ``astra validate --cv`` to predict a source's cases with the constants refitted without that source."""
    global _CALIBRATION
    saved = load_calibration()
    _CALIBRATION = calibration
    try:
        yield calibration
    finally:
        _CALIBRATION = saved


def load_calibration(path=None):
    """``{arch: NcclCalibration}`` from ``data/nccl_fit.json`` (or ``path``)."""
    import json
    from pathlib import Path

    global _CALIBRATION
    if path is None and _CALIBRATION is not None:
        return _CALIBRATION
    source = Path(path) if path else Path(__file__).with_name("data") / "nccl_fit.json"
    with open(source) as fh:
        raw = json.load(fh)
    beyond = raw.get("beyond_fit", {})
    fits = dict(raw["architectures"])
    fits.update({arch: raw["architectures"][lender] for arch, lender in BORROWED_FIT.items()})
    out = {arch: NcclCalibration(float(v["overhead_us"]), float(v["latency_scale"]),
                                 {k: float(e) for k, e in v["efficiency"].items()},
                                 int(beyond["fitted_max_bytes"]) if beyond else None,
                                 {k: float(e) for k, e in beyond.get("efficiency", {}).get(arch, {}).items()})
           for arch, v in fits.items()}
    if path is None:
        _CALIBRATION = out
    return out


__all__ = ["CALIBRATION_ARCH", "BORROWED_FIT", "NcclCalibration", "PeakStatement", "SIMPLE_PROTOCOL_SHARE",
           "A100_NVLINK_GBPS", "PEAK_STATEMENTS", "peak_busbw", "PEAK_BUSBW", "PEAK_BUSBW_SOURCES",
           "beyond_fit_efficiency", "calibration_override", "load_calibration"]
