"""Which cuDNN release's measurements time attention on Blackwell (``--cudnn-version X.Y[.Z]``).

:func:`.attention.blackwell_efficiency` times cuDNN's fused attention from NVIDIA's published runs of one benchmark
(NVIDIA/cudnn-frontend ``benchmark/sdpa_benchmark_training``), each at the cuDNN its run printed: B200 and GB300
(preset B300) at 9.13.1, GB200 at 9.17.0 (``data/published_attention_blackwell.csv``, the default). A run on older
software ran an older cuDNN; the same benchmark was published earlier on the B200 at 9.10.2 (artifacts at 9793df56:
same script, same GPU, only the software differs; ``data/published_attention_blackwell_cudnn_9.10.2.csv``).
``--cudnn-version`` times attention from the rows measured at that release, or at the newest measured release below
it (the model says which, once); a release older than every measurement of the preset is refused, naming the ones
measured. Not used, and why: GB300 at 9.17.0 (artifacts at b372d398) was timed by another script (torch profiler
kernel times after an L2 flush, not CUDA events): 461 against 9.13.1's 176 TFLOP/s at 512 keys, more than a cuDNN
release explains; the 2024 Hopper CSVs (cuDNN 9.1.0 / 9.4.0) name no GPU and another shape (16 heads). Other GPUs,
and Hopper's attention, are not timed by release: there the option changes nothing.
"""

from __future__ import annotations

from astra_sim.errors import ConfigError

#: the preset -> {cuDNN release measured: the table of its rows}; the first table is the default
#: (attention.BLACKWELL_ATTENTION's rows of that preset)
DEFAULT_FILE = "published_attention_blackwell.csv"
MEASURED = {
    "B200": {(9, 13, 1): DEFAULT_FILE, (9, 10, 2): "published_attention_blackwell_cudnn_9.10.2.csv"},
    "B300": {(9, 13, 1): DEFAULT_FILE},
    "GB200": {(9, 17, 0): DEFAULT_FILE},
}
#: every table (the default's and the versioned ones), for the benchmark's shape (attention.BENCH_HEADS)
FILES = tuple(sorted({f for rows in MEASURED.values() for f in rows.values()}))


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
                       help="the cuDNN release the run used: cuDNN attention on Blackwell is timed from NVIDIA's rows "
                            "measured at it, or at the newest measured release below it (measured: " + known()
                            + "); default: the newest rows of each GPU; other GPUs: no effect")


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


__all__ = ["DEFAULT_FILE", "MEASURED", "FILES", "known", "parse", "version_arg", "add_cudnn_argument",
           "attention_file"]
