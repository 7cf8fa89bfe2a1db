"""Registers the energy accounting (``stats.energy``), the power-limit and clock-lock options and their metrics.

A run timed by the gpu compute model on a GPU with power data gets ``stats.energy`` (see docs/energy.md). With
``--power-limit-w`` or ``--gpu-clock-mhz`` the GPU's op classes settle at a lower clock, and the gpu model's compute
rates are scaled by it before the first event (``GpuComputeModel.set_clock_ratios``), so the step itself slows.
"""

from __future__ import annotations

from astra_sim import hookimpl
from astra_sim.errors import ConfigError

_STATE = "energy"


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("energy (power, clocks, joules per step and token)")
    group.add_argument("--power-limit-w", type=float, default=None, metavar="W",
                       help="the GPUs' board power limit, as nvidia-smi -pl sets it (default: the TDP); phases that "
                            "would draw more run at a lower clock, which lengthens compute-bound work")
    group.add_argument("--gpu-clock-mhz", type=float, default=None, metavar="MHZ",
                       help="lock the GPUs' SM clock at most at MHZ, as nvidia-smi -lgc does (the power limit still "
                            "applies)")
    group.add_argument("--power-timeline", default=None, metavar="PATH",
                       help="write power over time as Chrome trace counters (Perfetto): one track per class of "
                            "identical ranks and the cluster's total")
    group.add_argument("--pue", type=float, default=None, metavar="F",
                       help="the facility's power usage effectiveness for stats.energy.facility_energy_mj (default: "
                            "1.58, the Uptime Institute's 2023 average; 1 gives IT energy)")


def _gpu_model(run):
    import sys

    # a run on the gpu model has imported its module; other runs need not pay for importing it here
    module = sys.modules.get("astra_gpu_model.model")
    model = run.compute_model
    return model if module is not None and isinstance(model, module.GpuComputeModel) else None


def _platform(run):
    """``(name, GPUs per node)`` of the run's ``--platform`` (a name or a Platform object), or ``(None, None)``."""
    platform = run.options.get("platform")
    if platform is None:
        return None, None
    if isinstance(platform, str):
        from astra_sim import get_platform
        from astra_sim.errors import AstraError

        try:
            platform = get_platform(platform)
        except AstraError:
            return None, None
    return getattr(platform, "name", None), getattr(platform, "gpus_per_node", None)


def _gemm_class(model, dtype):
    return "gemm_fp32" if dtype == "fp32" and not model.tf32 else "gemm"


@hookimpl
def astra_run_start(run):
    options = run.options
    limit, clock, pue = options.get("power_limit_w"), options.get("gpu_clock_mhz"), options.get("pue")
    if pue is not None and not 1.0 <= pue < float("inf"):
        raise ConfigError(f"--pue {pue:g}: expected a finite number >= 1 (facility energy over IT energy)")
    model = _gpu_model(run)
    capped = limit is not None or clock is not None
    if model is None:
        if capped:
            raise ConfigError("--power-limit-w / --gpu-clock-mhz need the gpu compute model (--compute-model gpu or a "
                              "GPU --platform): it scales the compute rates with the clock")
        return
    from astra_energy.power import CLASSES, gpu_power_of  # (only a run on the gpu model has energy)

    power = gpu_power_of(model.gpu)
    if power is None:  # no preset with power data, and a GPU YAML without tdp_w and boost_clock_mhz: no stats.energy
        if capped:
            from astra_energy.power import known_gpus

            raise ConfigError(f"--power-limit-w / --gpu-clock-mhz: no power data for GPU {model.gpu.name!r} (known: "
                              f"{', '.join(known_gpus())}; a GPU YAML needs tdp_w and boost_clock_mhz)")
        return
    power.check_limits(limit, clock)
    gemm_class = _gemm_class(model, model.default_dtype)
    ratios = {"gemm": power.time_clock_ratio(gemm_class, limit, clock),
              "attention": power.time_clock_ratio("attention", limit, clock),
              "memory": power.time_clock_ratio("memory", limit, clock)}
    if capped or any(r != 1.0 for r in ratios.values()):  # (a board whose default limit is below its TDP)
        model.set_clock_ratios(ratios)
    class_w = {cls: power.watts(cls, power.settled_clock_ratio(cls, limit, clock)) for cls in CLASSES}
    # For other plugins (a timeline's power lane): watts by the breakdown's compute classes, comm and idle.
    op_class_power_w = {"gemm": class_w[gemm_class], "attention": class_w["attention"],
                        "elementwise": class_w["memory"], "other": class_w["memory"], "comm": class_w["comm"],
                        "idle": class_w["idle"]}
    from astra_energy.utilisation import NodePower

    node_power = NodePower(model, power, class_w, gemm_class)
    if node_power.active:  # a compute node's own power (memory-bound kernels by their bandwidth, launch gaps idle)
        op_class_power_w["node"] = node_power.watts
    run.plugin_state[_STATE] = {"power": power, "limit": limit, "clock": clock, "time_ratios": ratios,
                                "op_class_power_w": op_class_power_w}


@hookimpl(trylast=True)
def astra_run_finish(run, report):
    """``stats.energy`` (after the other plugins' finish hooks: it reads ``stats.throughput``'s tokens)."""
    state = run.plugin_state.get(_STATE)
    if not state:
        return
    if any(r.breakdown is None for r in report.ranks):
        report.warnings.append("energy: the run has no per-rank breakdown (--no-breakdown, or the analysis "
                               "plugin blocked with -p no:analysis); the report has no stats.energy")
        return
    from astra_energy.report import energy_stats
    from astra_energy.system import default_pue, system_power

    model = _gpu_model(run)
    throughput = report.stats.get("throughput") if isinstance(report.stats.get("throughput"), dict) else {}
    dtype = throughput.get("dtype") or model.default_dtype
    name, per_node = _platform(run)
    system = system_power(name, per_node)
    pue = run.options.get("pue") or default_pue()
    from astra_energy.utilisation import NodePower, part_watts

    gemm_class = _gemm_class(model, dtype)
    report.stats["energy"] = energy_stats(
        report, state["power"], system, pue=pue, power_limit_w=state["limit"], clock_mhz=state["clock"],
        gemm_class=gemm_class, tokens=throughput.get("tokens_per_step", 0), mode=throughput.get("mode"),
        part_watts=lambda class_w: part_watts(run, NodePower(model, state["power"], class_w, gemm_class)))


@hookimpl
def astra_register_metrics(registry):
    from astra_energy.report import METRICS

    for key, unit, what in METRICS:
        registry.metric(f"stats.energy.{key}", unit, what)


@hookimpl
def astra_register_output_formats(registry):
    from astra_energy.power_timeline import power_timeline

    registry.output_format("power_timeline", power_timeline, options=("power_timeline",),
                           description="power over time per class of ranks and for the cluster (Chrome trace counters)")
