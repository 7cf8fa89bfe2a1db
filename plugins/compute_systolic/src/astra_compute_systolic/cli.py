"""``astra workload systolic`` (ASTRA-sim 1.0's generator) and ``astra compute systolic`` (SCALE-sim's report; the
top-level ``astra systolic`` is its deprecated alias, removed in the next release)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from astra_sim.cliutil import positive_int

from astra_compute_systolic.linesim import VERSIONS
from astra_compute_systolic.workload import PARALLELISMS


def _dims(text):
    try:
        dims = [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NPUs per dimension such as 8,2, got {text!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"expected NPUs per dimension such as 8,2, got {text!r}")
    return dims


def add_commands(subparsers):
    from astra_sim.cliutil import subcommands

    _, sub = subcommands(subparsers, "workload", "workload_command",
                         help="make workload traces: convert ASTRA-sim 1.0 text workloads, microbenchmarks, scaling",
                         description="Make Chakra workload traces (<prefix>.<rank>.et).")
    p = sub.add_parser(
        "systolic", help="ASTRA-sim 1.0's workload generator: layer GEMMs + a SCALE-sim config -> text workload",
        description="Write the ASTRA-sim 1.0 text workload that gen_astrasim_workload_input.py writes for the MNK "
        "file (forward, input-gradient and weight-gradient cycles from SCALE-sim's model, the generator's "
        "communication sizes), without running SCALE-sim. --chakra writes Chakra traces instead.")
    p.add_argument("mnk", metavar="MNK_FILE", help="CSV: a header, then name,m,n,k (,parallelism for HYBRID_CUSTOMIZED)")
    p.add_argument("--config", required=True, metavar="FILE.cfg", help="SCALE-sim config (e.g. google.cfg)")
    p.add_argument("--npus", type=positive_int, required=True, metavar="N", help="total NPUs")
    p.add_argument("--packages", type=positive_int, default=1, metavar="P", help="packages (default 1)")
    p.add_argument("--parallel", required=True, choices=PARALLELISMS, help="parallelism of every layer")
    p.add_argument("--datatype-size", type=positive_int, default=2, metavar="BYTES", help="bytes per element (default 2)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the text workload file (with --chakra: the trace prefix, OUT.<rank>.et)")
    p.add_argument("--chakra", action="store_true", help="write Chakra traces OUT.<rank>.et instead of text")
    p.add_argument("--dims", type=_dims, metavar="N0,N1,...",
                   help="--chakra: NPUs per network dimension (default: all NPUs in one)")
    p.add_argument("--scalesim", choices=VERSIONS, default="2021",
                   help="SCALE-sim arithmetic: 2021 (default: scale-sim-v2 c28fd1b, the generator's submodule; "
                        "column 2 of its report is Total Cycles) or 3.0.0 (PyPI; column 2 is Total Cycles incl. "
                        "prefetch)")
    p.add_argument("--exact-generator", action="store_true",
                   help="reproduce the generator byte for byte, including its bug: every pass gets the weight "
                        "gradient's cycles (it reads one overwritten COMPUTE_REPORT.csv three times)")
    p.set_defaults(run_command=_cmd_workload)

    _, compute = subcommands(subparsers, "compute", "compute_command",
                             help="compute models' own tools: astra compute systolic (SCALE-sim's report)",
                             description="The compute models' own commands.")
    _add_report_command(compute.add_parser(
        "systolic", help="SCALE-sim's COMPUTE_REPORT.csv for a topology file, from the cycle model",
        description=REPORT_DESCRIPTION), _cmd_report)
    _add_report_command(subparsers.add_parser(
        "systolic", help="deprecated: use astra compute systolic (removed in the next release)",
        description="Deprecated alias of astra compute systolic (removed in the next release). " + REPORT_DESCRIPTION),
        _cmd_report_alias)


#: the description of ``astra compute systolic`` (and of its deprecated alias ``astra systolic``)
REPORT_DESCRIPTION = ("Print SCALE-sim's COMPUTE_REPORT.csv for every layer of a SCALE-sim topology file on a "
                      "SCALE-sim config (as SCALE-sim would write it), in milliseconds instead of hours. With several "
                      "--config, a table of total cycles per layer and config.")
#: what ``astra systolic`` prints before it runs
DEPRECATION = ("'astra systolic' is deprecated; use 'astra compute systolic' (it will be removed in the next "
               "release)")


def _add_report_command(p, run):
    p.add_argument("topology", metavar="TOPOLOGY.csv")
    p.add_argument("--config", action="append", required=True, metavar="FILE.cfg", help="repeatable")
    p.add_argument("--gemm", action="store_true", help="rows are name,M,N,K (SCALE-sim's -i gemm)")
    p.add_argument("--scalesim", choices=VERSIONS, default="3.0.0",
                   help="SCALE-sim arithmetic and report layout (default 3.0.0)")
    p.add_argument("-o", "--output", metavar="REPORT.csv", help="write the report there (one --config)")
    p.set_defaults(run_command=run)


@contextlib.contextmanager
def _writing(path):
    """-o's folder (of a file, or of the prefix of OUT.<rank>.et) is checked before any work; a write that fails
    later (a full disk) is a one-line error naming -o."""
    from astra_sim.errors import ConfigError
    from astra_sim.outputs import check_writable_folder

    check_writable_folder(os.path.dirname(os.path.abspath(path)), f"--output {path}")
    try:
        yield
    except OSError as exc:
        raise ConfigError(f"--output {path}: cannot write: {exc.strerror or exc}") from None


def _cmd_report_alias(args):
    from astra_sim.cliutil import warning

    warning(DEPRECATION)
    return _cmd_report(args)


def _cmd_workload(args):
    from astra_compute_systolic.config import load_config
    from astra_compute_systolic.workload import Split, write_workload

    from astra_workload_generators.cli import output_prefix

    config = load_config(args.config)
    split = Split(args.npus, args.packages, args.datatype_size)

    def write(output):
        return write_workload(args.mnk, config, split, args.parallel, output, version=args.scalesim,
                              same_report=args.exact_generator, chakra=args.chakra, npus_per_dim=args.dims)
    with output_prefix(args.output, redo=write, command="astra workload systolic"):  # late failure: kept elsewhere
        summary = write(args.output)
    if args.chakra:
        print(f"{args.parallel}: {summary['layers']} layers -> {summary['nodes_per_rank']} nodes per rank; wrote "
              f"{args.output}.0.et .. {args.output}.{args.npus - 1}.et")
    else:
        print(f"{args.parallel}: {summary['layers']} layers; wrote {args.output}")
    return 0


def _cmd_report(args):
    from astra_sim.errors import ConfigError

    from astra_compute_systolic.config import load_config
    from astra_compute_systolic.cycles import compute_cycles
    from astra_compute_systolic.topology import read_topology, report_text

    layers = read_topology(args.topology, gemm=args.gemm)
    configs = [load_config(path) for path in args.config]
    if len(configs) == 1:
        if not args.output:
            sys.stdout.write(report_text(layers, configs[0], args.scalesim))
            return 0
        from astra_sim.safeio import write_or_recover

        with _writing(args.output):
            text = report_text(layers, configs[0], args.scalesim)
            write_or_recover(args.output, text.encode(), "astra systolic", "--output")
        return 0
    if args.output:
        raise ConfigError("-o writes one config's report; give one --config")
    from astra_sim.termtable import Column, print_table

    names = [f"{c.rows}x{c.cols} {c.dataflow}" for c in configs]
    columns = [Column("layer")] + [Column(f"{n}\ncycles", number=True) for n in names]
    rows, totals = [], [0] * len(configs)
    for layer in layers:
        row = [layer.name]
        for i, config in enumerate(configs):
            r = compute_cycles(layer, config, args.scalesim)
            cycles = r.total_cycles_with_prefetch if args.scalesim == "3.0.0" else r.total_cycles
            totals[i] += cycles
            row.append(f"{cycles:,}")
        rows.append(row)
    rows.append(["total"] + [f"{t:,}" for t in totals])
    what = "Total Cycles (incl. prefetch)" if args.scalesim == "3.0.0" else "Total Cycles"
    print_table(f"{args.topology}: SCALE-sim {args.scalesim} {what}", columns, rows)
    return 0
