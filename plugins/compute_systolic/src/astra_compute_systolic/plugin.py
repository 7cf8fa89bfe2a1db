"""Hooks: the ``systolic`` compute model, its run options, TPU platforms, and the commands."""

import sys

from astra_sim import hookimpl


def _systolic_model(context):
    """The compute model, its module (SCALE-sim's cycles) imported only by a run that uses it."""
    from astra_compute_systolic.model import SystolicComputeModel

    return SystolicComputeModel(context)


@hookimpl
def astra_register_compute_models(registry):
    registry.compute_model(
        "systolic", _systolic_model,
        "GEMM / conv / attention COMP nodes on a systolic array with SCALE-sim's cycles (--systolic-config FILE.cfg "
        "or --platform tpu-v3/tpu-v4); memory-bound ops over --systolic-hbm-gbps; else num_ops or duration_micros",
    )


def _torus_factory(com_type, rank, topo, data_size, direction, window):
    """The torus collective, its module imported by the first run that uses it."""
    from astra_compute_systolic.torus import torus_factory

    return torus_factory(com_type, rank, topo, data_size, direction, window)


@hookimpl
def astra_register_collective_algorithms(registry):
    from astra_sim.api import CollectiveAlgorithmSpec

    # The time depends on the group's size per torus axis only: any permutation of an axis' coordinates keeps it.
    registry.collective_algorithm(
        "torus", CollectiveAlgorithmSpec("one", _torus_factory, whole_group=True, symmetry="any",
                                         exchanges_messages=False),
        "a TPU slice's ICI torus: every axis the group spans at once, each a bidirectional ring (the scaling "
        "book's cost rule); link rate and hop latency from --platform tpu-*",
    )


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("systolic compute model (--compute-model systolic)")
    group.add_argument("--systolic-config", default=None, metavar="FILE.cfg",
                       help="SCALE-sim config: array, dataflow, SRAM sizes, interface bandwidth (--platform tpu-* "
                            "writes one)")
    group.add_argument("--systolic-ghz", default=None, metavar="GHZ",
                       help="accelerator clock in GHz: cycles -> ns (default 1; --platform sets the chip's)")
    group.add_argument("--systolic-cycles", default="with-prefetch", choices=("with-prefetch", "total"),
                       help="SCALE-sim's 'Total Cycles (incl. prefetch)' (default) or 'Total Cycles' (stalls, no "
                            "initial SRAM fill)")
    group.add_argument("--systolic-hbm-gbps", type=float, default=None, metavar="GB_S",
                       help="HBM bandwidth (10^9 B/s) for memory-bound ops, and a floor under each GEMM (its "
                            "operands and output moved once); without it memory-bound ops replay their duration")
    group.add_argument("--tpu-topology", default=None, metavar="AxB[xC]",
                       help="--platform tpu-*: chips per ICI torus dimension (default tpu-v3 4x4, tpu-v4 4x4x4)")


@hookimpl
def astra_register_platforms(registry):
    from astra_compute_systolic.platforms import PRESETS

    for preset in PRESETS.values():
        registry.platform(preset)


@hookimpl
def astra_register_commands(subparsers):
    from astra_compute_systolic.cli import add_commands

    add_commands(subparsers)


@hookimpl
def astra_run_finish(run, report):
    # (a run without the systolic model never imported it: the model's module is read only when it is loaded)
    loaded = sys.modules.get("astra_compute_systolic.model")
    model = run.compute_model
    if loaded is not None and isinstance(model, loaded.SystolicComputeModel):
        symmetry = run.symmetry   # a folded run timed one rank per class (the folding plugin)
        counts = model.stats()
        if symmetry is not None:
            counts = {how: n * symmetry.order for how, n in counts.items()}
        report.settings["systolic_model"] = model.describe()
        report.stats["systolic_model_nodes"] = counts


@hookimpl
def astra_register_metrics(registry):
    registry.metric("stats.systolic_model_nodes.*", "count", "compute nodes the systolic model timed, by kind")
