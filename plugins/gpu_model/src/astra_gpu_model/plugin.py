"""Registers the ``gpu`` compute model and its ``astra run`` options."""

from astra_sim import hookimpl

from astra_gpu_model.gpu import DEFAULT_GPU, preset_names
from astra_gpu_model.model import DTYPES, GpuComputeModel


@hookimpl
def astra_register_compute_models(registry):
    registry.compute_model(
        "gpu",
        GpuComputeModel,
        "GPU COMP nodes from op + shapes (GEMM tiles/waves, attention, HBM-bound ops) on a described GPU "
        "(--gpu); else num_ops/tensor_size at achievable rates; else duration_micros",
    )


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("gpu compute model (--compute-model gpu)")
    group.add_argument(
        "--gpu", default=DEFAULT_GPU, metavar="NAME_OR_YAML",
        help=f"GPU preset ({', '.join(preset_names())}) or a GPU YAML file (default: {DEFAULT_GPU})",
    )
    group.add_argument("--gpu-tf32", action="store_true",
                       help="fp32 GEMMs run on TF32 tensor cores (torch allow_tf32); default: fp32 CUDA cores")
    group.add_argument("--gpu-default-dtype", default="bf16", choices=DTYPES,
                       help="dtype for ops whose trace names none, and for num_ops (default: bf16)")


@hookimpl
def astra_run_start(run):
    model = getattr(run, "compute_model", None)
    if isinstance(model, GpuComputeModel):
        workloads = run.workloads
        model.bind_nodes(lambda rank: workloads[rank].nodes)


@hookimpl
def astra_run_finish(run, report):
    model = getattr(run, "compute_model", None)
    if isinstance(model, GpuComputeModel):
        report.settings["gpu_model"] = model.describe()
        report.stats["gpu_model_nodes"] = model.stats()


@hookimpl
def astra_register_collective_algorithms(registry):
    from astra_sim.api import CollectiveAlgorithmSpec

    from astra_gpu_model.nccl import nccl_factory

    registry.collective_algorithm(
        "nccl", CollectiveAlgorithmSpec("one", nccl_factory),
        "NCCL tuning model (ring/tree/NVLS x LL/LL128/Simple, fastest predicted), one wait per chunk; GPU from --gpu",
    )

    from astra_gpu_model.loadstore import direct_factory, nvls_factory, oneshot_factory, twoshot_factory

    registry.collective_algorithm(
        "ls_oneshot", CollectiveAlgorithmSpec("one", oneshot_factory),
        "load-store one-shot all-reduce (every GPU loads all peers' buffers over NVLink), cache-line model; --gpu",
    )
    registry.collective_algorithm(
        "ls_twoshot", CollectiveAlgorithmSpec("one", twoshot_factory),
        "load-store two-shot all-reduce (reduce-scatter then all-gather by loads), cache-line model; --gpu",
    )
    registry.collective_algorithm(
        "nvls", CollectiveAlgorithmSpec("one", nvls_factory),
        "NVLS/multimem all-reduce (NVSwitch reduces: ld_reduce + multicast store), cache-line model; --gpu",
    )
    registry.collective_algorithm(
        "ls_direct", CollectiveAlgorithmSpec("one", direct_factory),
        "load-store all-gather / reduce-scatter by direct stores to peers, cache-line model; --gpu",
    )
