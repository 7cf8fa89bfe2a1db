"""Registers the ``gpu`` compute model and its ``astra run`` options."""

import sys
from importlib import import_module

from astra_sim import hookimpl

from astra_gpu_model.names import COLLECTIVES, DEFAULT_GPU, DTYPES, SCALE_OUT_KINDS, preset_names


def _gpu_model(context):
    """The compute model, its module imported only by a run that uses it."""
    from astra_gpu_model.model import GpuComputeModel

    return GpuComputeModel(context)


def _is_gpu_model(model):
    loaded = sys.modules.get("astra_gpu_model.model")  # (not imported: no run made one)
    return loaded is not None and isinstance(model, loaded.GpuComputeModel)


@hookimpl
def astra_register_compute_models(registry):
    registry.compute_model(
        "gpu",
        _gpu_model,
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
    group.add_argument("--gpu-memory-op-rates", choices=("measured", "off"), default="measured",
                       help="measured (default): memory-bound ops (norms, softmax, dropout, activations, the "
                            "optimizer) run at most at the rate their SMs reach, measured on an H200 and scaled "
                            "by SMs x clock; off: every one at hbm_efficiency x HBM")
    group.add_argument("--gpu-contention", action="store_true",
                       help="a COMP node issued while the rank's communication runs gets the SMs and HBM "
                            "bandwidth the collective leaves (default: off, overlap is free)")
    group.add_argument("--gpu-contention-model", choices=("sm-hbm", "measured", "off"), default=None,
                       help="under --gpu-contention: sm-hbm (default: the kernel runs on the SMs and HBM bandwidth "
                            "the communication leaves) or measured (the slowdowns measured on a Hopper GPU beside "
                            "a communication kernel of as many SMs; --platform's default) or off (overlap is free, also under "
                            "--platform)")
    group.add_argument("--gpu-comm-sms", type=int, default=None, metavar="N",
                       help="SMs a collective or send without a comm_sms attribute occupies under "
                            "--gpu-contention (default: 32); concurrent ones add up")
    group.add_argument("--gpu-comm-hbm-share", type=float, default=None, metavar="F",
                       help="one HBM bandwidth share for whatever communication runs under --gpu-contention "
                            "(default: per transfer, 2 x its link's rate (NVLink, or the NIC across nodes) / HBM "
                            "bandwidth, added up to at most 0.5; without a NIC rate 2 x scale-up / HBM)")
    group.add_argument("--gpu-kernel-gap-ns", type=int, default=0, metavar="NS",
                       help="the GPU's idle time before each compute kernel it starts back to back, as in a "
                            "replayed CUDA graph (astra serve's graph steps: 376, measured; default: 0, the "
                            "kernels' fitted times only)")
    group.add_argument("--allow-oom", action="store_true",
                       help="a rank whose estimated peak memory (the generator's, in the trace's metadata) exceeds "
                            "the GPU's HBM is a warning, not an error")
    group.add_argument("--no-gpu-utilization", action="store_true",
                       help="leave the report's stats.gpu_utilization out (--gpu-contention's per-rank SM and HBM "
                            "busy time: astra serve's steps, which read only their time and energy)")


@hookimpl
def astra_run_start(run):
    if run.options.get("scale_out") is not None and not run.options.get("scale_out_applied"):
        from astra_sim.errors import ConfigError

        raise ConfigError(f"--scale-out {run.options['scale_out']}: needs a GPU --platform with --nodes >= 2 (it sets "
                          "the platform's generated scale-out network and NCCL's NIC rate)")
    model = run.compute_model
    contention = getattr(model, "contention", None)  # also through a wrapper (astra-cluster's slowed ranks)
    if contention is not None:
        from astra_gpu_model.contention import Contention

        if isinstance(contention, Contention):  # kernels slowed only until the running collectives' known ends
            contention.bind_run(run)
    if _is_gpu_model(model):
        from astra_gpu_model.capacity import check

        # a GPU whose GEMM efficiencies are borrowed says so in the terminal and the report's warnings
        calibration = model.gpu.calibration_warning()
        if calibration:
            run.warn(calibration)
        # The HBM check's summary, kept for this run's report (the run itself is read-only).
        run.plugin_state["gpu_model"] = {"memory": check(run, model.gpu, bool(run.options.get("allow_oom")),
                                                         run.warn)}


@hookimpl
def astra_run_finish(run, report):
    model = run.compute_model
    if _is_gpu_model(model):
        # A folded run (the folding plugin) timed the class representatives only: every rank of a class
        # did what its representative did.
        symmetry = run.symmetry
        report.settings["gpu_model"] = model.describe()
        memory = run.plugin_state.get("gpu_model", {}).get("memory")
        if memory is not None:
            report.settings["memory"] = memory
            report.stats["memory"] = {"summary_line": memory["summary_line"]}  # printed after the run
        counts = model.stats()
        if symmetry is not None:
            counts = {how: n * symmetry.order for how, n in counts.items()}
        report.stats["gpu_model_nodes"] = counts
        if model.contention is not None and not run.options.get("no_gpu_utilization"):
            simulated = [r for r in report.ranks if symmetry is None or symmetry.is_representative(r.rank)]
            utilization = model.contention.summary({r.rank: r.finish_ns for r in simulated})
            if symmetry is not None:
                utilization = {r.rank: utilization[symmetry.representative(r.rank)] for r in report.ranks}
            report.stats["gpu_utilization"] = utilization


def _imported_at_first_use(module, name):
    """A collective factory whose module (NCCL's model, the load-store models) a run imports only when it makes one."""
    found = []

    def factory(com_type, rank, topo, data_size, direction, window):
        if not found:
            found.append(getattr(import_module(f"astra_gpu_model.{module}"), name))
        return found[0](com_type, rank, topo, data_size, direction, window)

    return factory


@hookimpl
def astra_register_collective_algorithms(registry):
    from astra_sim.api import CollectiveAlgorithmSpec

    nccl_factory = _imported_at_first_use("nccl", "nccl_factory")
    # NCCL's and the load-store models' times depend only on the group's size and the nodes it spans, both
    # unchanged by any relabelling that keeps the network's dimensions: symmetry "any".
    registry.collective_algorithm(
        "nccl", CollectiveAlgorithmSpec("one", nccl_factory, whole_group=True, symmetry="any", exchanges_messages=False),
        "NCCL tuning model (ring/tree/NVLS x LL/LL128/Simple, fastest predicted), one wait per chunk; GPU from --gpu",
    )

    oneshot_factory, twoshot_factory, nvls_factory, direct_factory = (
        _imported_at_first_use("loadstore", name) for name in ("oneshot_factory", "twoshot_factory", "nvls_factory",
                                                               "direct_factory"))
    registry.collective_algorithm(
        "ls_oneshot", CollectiveAlgorithmSpec("one", oneshot_factory, symmetry="any", exchanges_messages=False),
        "load-store one-shot all-reduce (every GPU loads all peers' buffers over NVLink), cache-line model; --gpu",
    )
    registry.collective_algorithm(
        "ls_twoshot", CollectiveAlgorithmSpec("one", twoshot_factory, symmetry="any", exchanges_messages=False),
        "load-store two-shot all-reduce (reduce-scatter then all-gather by loads), cache-line model; --gpu",
    )
    registry.collective_algorithm(
        "nvls", CollectiveAlgorithmSpec("one", nvls_factory, symmetry="any", exchanges_messages=False),
        "NVLS/multimem all-reduce (NVSwitch reduces: ld_reduce + multicast store), cache-line model; --gpu",
    )
    registry.collective_algorithm(
        "ls_direct", CollectiveAlgorithmSpec("one", direct_factory, symmetry="any", exchanges_messages=False),
        "load-store all-gather / reduce-scatter by direct stores to peers, cache-line model; --gpu",
    )


# ------------------------------------------------------------------------------ platforms (--platform)
@hookimpl(specname="astra_add_run_options")
def platform_run_options(parser):
    group = parser.add_argument_group(
        "GPU platforms (--platform dgx-a100, hgx-h100, ...)",
        "A GPU platform is simulated as it is: compute is timed on its GPU by the gpu compute model and "
        "collectives by NCCL's model, unless --compute-model, --gpu or --platform-collective say otherwise (the "
        "report's settings.platform_defaults says what was implied and why).")
    group.add_argument("--platform-collective", default=None, choices=COLLECTIVES,
                       help="collective of the generated system config on every dimension: nccl (NCCL's model in "
                            "the node, NCCL across nodes on the NICs; the default with --platform) or the "
                            "kernel's ring")
    group.add_argument("--nccl-nic-gbps", type=float, default=None, metavar="GB_S",
                       help="NIC bandwidth per GPU (GB/s per direction) that the nccl collective uses when its "
                            "ranks span several nodes (scale-up domains = the network's first dimension); "
                            "--platform sets it; default 50 (400 Gb/s)")
    from astra_gpu_model.nccl_tuning import add_env_arguments, add_release_arguments

    add_release_arguments(group)
    add_env_arguments(group)
    from astra_gpu_model.cudnn_versions import add_cudnn_argument

    add_cudnn_argument(group)
    group.add_argument("--scale-out", default=None, choices=SCALE_OUT_KINDS, metavar="KIND",
                       help=f"the scale-out fabric's technology ({', '.join(SCALE_OUT_KINDS)}): its NIC rate, "
                            "achievable share, share under load past one leaf switch and per-switch latency "
                            "(sourced, or marked ASSUMPTION: astra fabric --scale-out); default: the generic model "
                            "(line rate, no load)")


@hookimpl
def astra_register_commands(subparsers):
    from astra_gpu_model.platform_command import add_platforms_command

    add_platforms_command(subparsers)


@hookimpl
def astra_register_platforms(registry):
    from astra_gpu_model.platforms import PLATFORMS

    for platform in PLATFORMS.values():
        registry.platform(platform)


@hookimpl
def astra_register_metrics(registry):
    registry.metric("stats.gpu_model_nodes.*", "count", "compute nodes the gpu model timed, by how (op shapes, "
                    "num_ops, duration)")
    registry.metric("stats.gpu_utilization.*.compute_ns", "ns", "the rank's compute time (--gpu-contention)")
    registry.metric("stats.gpu_utilization.*.contended_compute_ns", "ns", "compute time slowed by communication "
                    "kernels beside it")
    registry.metric("stats.gpu_utilization.*.sm_busy_fraction", "fraction", "SM-time busy over the rank's step")
    registry.metric("stats.gpu_utilization.*.hbm_busy_fraction", "fraction", "HBM bandwidth-time busy over the step")
    for index, (unit, what) in enumerate((("ns", "segment start"), ("ns", "segment end"),
                                          ("count", "SMs computing"), ("count", "SMs communicating"),
                                          ("fraction", "HBM share"))):
        registry.metric(f"stats.gpu_utilization.*.timeline.*.{index}", unit, f"utilisation timeline row: {what}")
