"""Which cuDNN release's measurements time attention on Blackwell and on the H100 SXM5 / H200
(``--cudnn-version X.Y[.Z]``).

:func:`.attention.blackwell_efficiency` times cuDNN's fused attention from NVIDIA's published runs of one benchmark
(NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training``), each at the cuDNN its run printed: B200 and GB300
(preset B300) at 9.13.1, GB200 at 9.17.0 (``data/published_attention_blackwell.csv``, the default). A run on older
software ran an older cuDNN; the same benchmark was published earlier on the B200 at 9.10.2 (artifacts at 9793df56:
same script, same GPU, only the software differs; ``data/published_attention_blackwell_cudnn_9.10.2.csv``).
``--cudnn-version`` times attention from the rows measured at that release, or at the newest measured release below
it (the model says which, once); a release older than every measurement of the preset is refused, naming the ones
measured. Not used, and why: GB300 at 9.17.0 (artifacts at b372d398) was timed by another script (torch profiler
kernel times after an L2 flush, not CUDA events): 461 against 9.13.1's 176 TFLOP/s at 512 keys, more than a cuDNN
release explains; the 2024 Hopper CSVs (cuDNN 9.1.0 / 9.4.0) name no GPU and another shape (16 heads).

Hopper (presets H100-SXM5-80GB and H200-SXM: the same SMs, clocks, tensor rates and 700 W limit), cuDNN attention (a
node naming ``cudnn``), two measured releases:

- **9.1.1** (the "2024, FlashAttention-3 paper" state): the paper's bars (``attention.MEASURED_TFLOPS`` and the head
  dimension rows), every length, clamped at 16k keys where they end. arXiv:2407.08608, Appendix C.1 "System and
  libraries": "CUDA 12.3, cuDNN 9.1.1.17, CUTLASS 3.5, FlashAttention 2.5.8, Triton nightly
  3.0.0.post20240424212437, PyTorch 2.3.0", an H100 80GB SXM5 (700 W), "we fix the GPU clock speed to 1830MHz"
  (the PDF of 2024-07-16 whose abstract gives 740 TFLOPs/s, as v2 does).
- **9.19.0**: this project's H200 (torch 2.11.0+cu130, cuDNN 9.19.0 in both runs): 2k-8k keys from
  ``calibration/nvidia-h200-2026-11-26/attention.csv`` (training shapes, CUDA-graph replays, causal; :func:`short_table`
  writes :data:`HOPPER_919`) and 16k-128k keys from ``calibration/nvidia-h200-2026-11-30/attention_long.csv``
  (``attention.LONG_ATTENTION``'s cuDNN rows). :func:`.attention.hopper_cudnn_factor` times it.

Without the option Hopper keeps what it had (the paper's bars up to 8k keys, the 9.19.0 measurement from 16k:
``attention.long_factor``), which is neither release alone. FlashAttention-2 and -3 are not cuDNN: the option does
not move them. FP8 attention stays at NVIDIA's H200 rows (cuDNN 9.19.1) at every
release (``attention.fp8_efficiency``: the paper has no FP8 backward). Clocks, as measured, not rescaled: the paper's at a fixed
1,830 MHz, the 2k-8k rows near the boost clock (1,920-1,965 MHz read at the run's end), the 16k+ cuDNN rows at the
700 W cap (1,672-1,683 MHz). Other GPUs (and the other Hopper presets) are not timed by release: there the option
changes nothing.
"""

from __future__ import annotations

import functools

from astra_sim.errors import ConfigError

#: the preset -> {cuDNN release measured: the table of its rows}; the first table is the default
#: (attention.BLACKWELL_ATTENTION's rows of that preset)
DEFAULT_FILE = "published_attention_blackwell.csv"
BLACKWELL = {
    "B200": {(9, 13, 1): DEFAULT_FILE, (9, 10, 2): "published_attention_blackwell_cudnn_9.10.2.csv"},
    "B300": {(9, 13, 1): DEFAULT_FILE},
    "GB200": {(9, 17, 0): DEFAULT_FILE},
}
#: Hopper's states: the FlashAttention-3 paper's bars (no file: ``attention.MEASURED_TFLOPS``) and cuDNN 9.19.0's rows
HOPPER_PAPER = "fa3-paper-2024"
HOPPER_919 = "measured_attention_hopper_cudnn_9.19.0.csv"
HOPPER = {preset: {(9, 1, 1): HOPPER_PAPER, (9, 19, 0): HOPPER_919}
          for preset in ("H100-SXM5-80GB", "H200-SXM")}
MEASURED = {**BLACKWELL, **HOPPER}
#: every Blackwell table (the default's and the versioned ones), for the benchmark's shape (attention.BENCH_HEADS)
FILES = tuple(sorted({f for rows in BLACKWELL.values() for f in rows.values()}))
#: the calibration run the 9.19.0 rows up to 8k keys come from (:func:`short_table`)
SHORT_SOURCE = "plugins/gpu_model/calibration/nvidia-h200-2026-11-26/attention.csv"


def _text(version):
    return ".".join(str(p) for p in version)


def known():
    """``'B200 9.10.2, 9.13.1; B300 9.13.1; GB200 9.17.0'``: what the errors name."""
    return "; ".join(f"{preset} {', '.join(_text(v) for v in sorted(rows))}" for preset, rows in MEASURED.items())


def parse(text):
    """``'9.13.1'`` / ``'9.13'`` / ``'91301'`` (cuDNN's own integer, cudnnGetVersion) -> (9, 13, 1); a missing patch is
    0. ConfigError (one line, naming the option and the releases measured) otherwise."""
    raw = str(text).strip().lstrip("v")
    parts = raw.split(".")
    try:
        if len(parts) == 1 and len(raw) >= 5:  # 91301: major x 10000 + minor x 100 + patch (cuDNN 9)
            number = int(raw)
            return number // 10000, number // 100 % 100, number % 100
        if 2 <= len(parts) <= 4:
            major, minor, patch = (int(p) for p in (parts + ["0"])[:3])
            if major >= 0 and minor >= 0 and patch >= 0:
                return major, minor, patch
    except ValueError:
        pass
    raise ConfigError(f"--cudnn-version {text!r}: not a cuDNN release (X.Y or X.Y.Z); measured: {known()}")


def version_arg(text):
    """``--cudnn-version``'s argparse type: the text as given, once :func:`parse` reads it."""
    try:
        parse(text)
    except ConfigError as exc:
        import argparse

        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_cudnn_argument(group):
    """``--cudnn-version``, one of the GPU platform options of ``astra run``."""
    group.add_argument("--cudnn-version", default=None, metavar="X.Y.Z", type=version_arg,
                       help="the cuDNN release the run used: cuDNN attention on Blackwell, the H100 SXM5 and the H200 "
                            "is timed from the rows measured at it, or at the newest measured release below it "
                            "(measured: " + known() + "; Hopper 9.1.1 = the FlashAttention-3 paper's bars); default: "
                            "each GPU's default rows; other GPUs: no effect")


def attention_file(preset, version):
    """``(table, release measured)`` that times ``preset``'s cuDNN attention under ``--cudnn-version version``: the
    newest release measured at or below it. None for a preset without versioned rows (the option does not apply);
    ConfigError where every measurement of the preset is newer than ``version``."""
    rows = MEASURED.get(preset)
    if rows is None or version is None:
        return None
    wanted = parse(version)
    below = [v for v in rows if v <= wanted]
    if not below:
        raise ConfigError(f"--cudnn-version {version}: no {preset} attention was measured at or below it; measured: "
                          f"{known()}")
    chosen = max(below)
    return rows[chosen], _text(chosen)


def short_table(text):
    """The 9.19.0 rows up to 8k keys from :data:`SHORT_SOURCE`'s text, by the long table's rule
    (:func:`.attention.measured_table`, as ``fit/check_attention_long.py``'s ``long_table``): the cuDNN training rows
    of at least the FA3 paper's 2,048 thread blocks, each shape's TFLOP/s over its wave utilisation on 132 SMs, the
    median over the shapes at each (pass, mask, head dimension, key length). ``[(pass, mask, head_dim, seq_k,
    tflops_full_waves, shapes)]``, sorted."""
    import csv

    from astra_gpu_model.attention import measured_table

    rows = [r for r in csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
            if r["backend"] == "cudnn" and r["kind"] == "train" and r["status"] == "ok"]
    return [(way, mask, dim, sk, round(full, 1), shapes) for _, way, mask, dim, sk, _, full, shapes
            in measured_table(rows, label=lambda r: f"b{r['batch']} h{r['heads_q']}/{r['heads_kv']}")]


@functools.lru_cache(maxsize=None)
def hopper_rows(file=HOPPER_919):
    """``{(backward, causal, head_dim): ((lengths...), (TFLOP/s in full waves...))}``: cuDNN 9.19.0 on the H200, the
    rows of ``file`` (up to 8k keys) and the cuDNN rows of ``attention.LONG_ATTENTION`` (16k-128k)."""
    from astra_gpu_model.attention import data_rows, long_rows

    points = {}
    for r in data_rows(file):
        key = (r["pass"] == "bwd", r["mask"] == "causal", int(r["head_dim"]))
        points.setdefault(key, {})[int(r["seq_k"])] = float(r["tflops_full_waves"])
    for (kernel, backward, causal, dim), (lengths, tflops) in long_rows().items():
        if kernel == "cudnn":
            points.setdefault((backward, causal, dim), {}).update(zip(lengths, tflops))
    return {key: tuple(zip(*sorted(p.items()))) for key, p in points.items()}


def hopper_table(preset, version):
    """The Hopper state ``--cudnn-version version`` selects on ``preset`` (:data:`HOPPER_PAPER` or
    :data:`HOPPER_919`); None without the option or off :data:`HOPPER`'s presets (Hopper's default then)."""
    if version is None or preset not in HOPPER:
        return None
    return attention_file(preset, version)[0]


__all__ = ["DEFAULT_FILE", "MEASURED", "FILES", "BLACKWELL", "HOPPER", "HOPPER_PAPER", "HOPPER_919", "SHORT_SOURCE",
           "short_table", "hopper_rows", "hopper_table", "known", "parse", "version_arg", "add_cudnn_argument",
           "attention_file"]
