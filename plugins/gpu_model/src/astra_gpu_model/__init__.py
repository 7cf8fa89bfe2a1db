"""GPU descriptions and the ``gpu`` compute model for astra-sim-py."""

from importlib import import_module

from astra_gpu_model.names import DEFAULT_GPU, preset_names

#: names loaded on first use (PEP 562), so that a run without the gpu model imports neither the model nor the GPU
#: description (importing the plugin's module imports this package first)
_LAZY = {"GpuComputeModel": "model", "Op": "ops", "classify": "ops", "GpuSpec": "gpu", "load_gpu": "gpu",
         "GemmParams": "gemm", "gemm_time_s": "gemm"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'astra_gpu_model' has no attribute {name!r}")
    return getattr(import_module(f"astra_gpu_model.{_LAZY[name]}"), name)


__all__ = ["GpuSpec", "load_gpu", "preset_names", "DEFAULT_GPU", "GpuComputeModel", "GemmParams", "gemm_time_s",
           "Op", "classify"]
