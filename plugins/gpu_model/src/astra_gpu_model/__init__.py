"""GPU descriptions and the ``gpu`` compute model for astra-sim-py."""

from astra_gpu_model.gemm import GemmParams, gemm_time_s
from astra_gpu_model.gpu import DEFAULT_GPU, GpuSpec, load_gpu, preset_names
from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import Op, classify

__all__ = ["GpuSpec", "load_gpu", "preset_names", "DEFAULT_GPU", "GpuComputeModel", "GemmParams", "gemm_time_s",
           "Op", "classify"]
