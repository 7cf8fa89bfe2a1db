"""The names ``astra run``'s options offer: dtypes, collectives, the default GPU, the shipped presets and the
scale-out kinds. Kept apart from the GPU description (gpu.py, gemm.py) and the scale-out kinds themselves
(scale_out.py) so that building the parser imports none of them: a run that does not use the gpu model skips about
2 % of its instructions. gpu.py re-exports these; tests/test_startup54.py checks the kinds against scale_out.KINDS."""

from __future__ import annotations

import os

#: ``--gpu-default-dtype``'s and ``--platform-collective``'s choices
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
COLLECTIVES = ("ring", "nccl")
DEFAULT_GPU = "H100-SXM5-80GB"
#: ``--scale-out``'s choices: :data:`astra_gpu_model.scale_out.KINDS`' names, in its order
SCALE_OUT_KINDS = ("ib-ndr", "ib-xdr", "spectrum-x", "roce", "efa", "efa-p5en")


def preset_dir():
    from importlib import resources  # (here: a run that never reads a preset skips importing it, 2-3 ms)

    return resources.files("astra_gpu_model") / "presets"


def preset_names():
    """The shipped presets (file stems), sorted: read from the package's folder (every run's ``--help`` text lists
    them; ``importlib.resources``, which :func:`preset_dir` needs, costs a run that uses no GPU 2-3 % of its start-up)."""
    try:
        names = os.listdir(os.path.join(os.path.dirname(__file__), "presets"))
    except OSError:  # a zipped package: only importlib.resources sees inside it, as gpu._read_yaml expects
        names = [entry.name for entry in preset_dir().iterdir()]
    return sorted(name[:-5] for name in names if name.endswith(".yaml"))
