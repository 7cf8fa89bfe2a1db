"""``astra workload ...``: convert-text, micro, scale, compare, convert-pytorch, llm, expand."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os

from astra_sim.errors import ConfigError

from astra_sim.cliutil import non_negative_int, number, positive_int

integer = number(int, what="an integer")


def _scale(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return int(value) if value.is_integer() else value


def _dims(text):
    try:
        dims = [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NPUs per dimension such as 4,2, got {text!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"expected NPUs per dimension such as 4,2, got {text!r}")
    return dims


@contextlib.contextmanager
def output_prefix(prefix, flag="--output", folder=False, redo=None, command="astra workload"):
    """Where a command writes ``PREFIX.*`` (``folder``: into the folder PREFIX) is checked before any work; a write
    that fails later (a full disk) is a one-line error, and the files of PREFIX this command made are removed (no
    partial set of rank files is left). With ``redo(new_prefix)``, the whole set is written again under a recovered
    folder (:func:`astra_sim.safeio.recover`) and the error says where: the work is not lost with the write."""
    from astra_sim.outputs import check_writable_folder
    from astra_sim.safeio import recover

    where = os.path.abspath(prefix) if folder else os.path.dirname(os.path.abspath(prefix))
    check_writable_folder(where, f"{flag} {prefix}")
    start = "" if folder else os.path.basename(prefix) + "."
    before = set(_named(where, start))
    try:
        yield
    except BaseException as exc:
        for name in set(_named(where, start)) - before:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(where, name))
        failure = _write_failure(exc, os.path.join(where, start))
        if failure is None:
            raise
        if redo is None:
            raise ConfigError(f"{flag} {prefix}: cannot write: {failure.strerror or failure}") from None
        name = os.path.basename(os.path.normpath(prefix))

        def into(kept):  # a place that fails too (the Chakra writer's error included) lets recover try the next
            try:
                redo(os.path.join(kept, name))
            except Exception as again:
                raise _write_failure(again, kept + os.sep) or again
        recover(f"{command}: could not write {flag} {prefix} ({failure.strerror or failure})", name, into,
                command, flag, folder=True)


def _write_failure(exc, start):
    """The OSError of a write that failed: ``exc`` itself, or what the Chakra writer's error about a file whose path
    starts with ``start`` (one of the output's) came from; None for any other error."""
    if isinstance(exc, OSError):
        return exc
    path = getattr(exc, "path", None)
    if isinstance(exc.__context__, OSError) and path and os.path.abspath(path).startswith(start):
        return exc.__context__
    return None


def _named(folder, start):
    try:
        return [name for name in os.listdir(folder) if name.startswith(start)]
    except OSError:
        return []


def writes_output(command):
    """``command(args)`` writing -o PREFIX (``--chakra-suite``: into the folder -o) inside :func:`output_prefix`;
    a late write failure runs it again into a recovered folder."""
    @functools.wraps(command)
    def run(args):
        def redo(prefix):  # after a late write failure: the same command into the recovered folder
            command(argparse.Namespace(**{**vars(args), "output": prefix}))
        with output_prefix(args.output, folder=bool(getattr(args, "chakra_suite", False)), redo=redo,
                           command=f"astra workload {getattr(args, 'workload_command', '')}".strip()):
            return command(args)
    return run


#: ``astra workload``'s help; other plugins add their sub-commands to the same group (astra_sim.cliutil.subcommands)
WORKLOAD_HELP = "make workload traces: convert ASTRA-sim 1.0 text workloads, microbenchmarks, scaling"
WORKLOAD_DESCRIPTION = "Make Chakra workload traces (<prefix>.<rank>.et)."


def add_commands(subparsers):
    from astra_sim.cliutil import subcommands

    _, sub = subcommands(subparsers, "workload", "workload_command", help=WORKLOAD_HELP,
                         description=WORKLOAD_DESCRIPTION)

    p = sub.add_parser(
        "convert-text", help="convert an ASTRA-sim 1.0 text workload (FILE.txt) to Chakra traces",
        description="Convert an ASTRA-sim 1.0 text workload into PREFIX.<rank>.et, one file per NPU. Every "
        "parallelism type is accepted, including those Chakra's converter rejects (HYBRID_TRANSFORMER, "
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD, HYBRID_CUSTOMIZED, DISTRIBUTED_INFERENCE).")
    p.add_argument("file", metavar="FILE.txt")
    p.add_argument("--npus", type=positive_int, required=True, metavar="N", help="number of NPUs (rank files)")
    p.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.<rank>.et")
    p.add_argument("--num-passes", type=positive_int, default=1, metavar="P", help="training iterations (default 1)")
    p.add_argument("--style", choices=("astra-sim", "chakra"), default="astra-sim",
                   help="astra-sim (default): involved_dim per collective, empty collectives left out, ids from 0 "
                   "in every file; chakra: the exact bytes of Chakra's Text converter")
    p.add_argument("--dims", type=_dims, metavar="N0,N1,...",
                   help="NPUs per network dimension (default: N in one dimension); places the model-parallel group "
                   "of the HYBRID_TRANSFORMER types")
    p.add_argument("--compute-scale", type=_scale, default=1, metavar="X", help="multiply compute times (default 1)")
    p.add_argument("--comm-scale", type=_scale, default=1, metavar="X", help="multiply comm sizes (default 1)")
    p.add_argument("--keep-empty-comms", action="store_true",
                   help="astra-sim style: keep collectives that move nothing (NONE, 0 bytes, no involved dimension) "
                   "as Chakra does (NONE becomes ALL_REDUCE)")
    p.add_argument("--first-id", type=non_negative_int, default=0, metavar="K", help="first node id (default 0)")
    p.add_argument("--schema", default=None, metavar="S",
                   help="GlobalMetadata 'schema' attribute (default 1.0.2-chakra.1.0.0, Chakra 1.0.0's)")
    p.set_defaults(run_command=writes_output(_cmd_convert_text))

    p = sub.add_parser(
        "micro", help="write a microbenchmark trace (one collective, p2p pattern, compute, memory, or a graph spec)",
        description="Write a microbenchmark trace PREFIX.<rank>.et, byte for byte as ASTRA-sim's generator "
        "scripts (--style astra-sim, default) or mlcommons chakra_generator (--style chakra) write it.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--collective", choices=("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                               "broadcast", "barrier"))
    what.add_argument("--p2p", choices=("shift", "pairs", "send", "recv"),
                      help="shift: r sends to r+K and receives from r-K; pairs: 2k<->2k+1; send/recv: chakra's "
                      "lone node without peer (--style chakra)")
    what.add_argument("--compute", type=non_negative_int, metavar="US", help="COMP node(s) of US microseconds")
    what.add_argument("--mem-load", metavar="SIZE", help="one remote-memory load of SIZE")
    what.add_argument("--mem-store", metavar="SIZE", help="one remote-memory store of SIZE")
    what.add_argument("--metadata-all-types", action="store_true",
                      help="chakra_generator's METADATA node with every attribute type")
    what.add_argument("--graph", metavar="SPEC", help="a small graph described in JSON/YAML (see README)")
    what.add_argument("--chakra-suite", action="store_true",
                      help="everything chakra_generator writes (14 microbenchmarks) into the folder -o")
    p.add_argument("--npus", type=positive_int, required=True, metavar="N")
    p.add_argument("-o", "--output", required=True, metavar="PREFIX")
    p.add_argument("--size", metavar="SIZE", help="bytes: 1024, 64KiB, 1MiB, 1GB (KB/MB/GB are powers of 1024)")
    p.add_argument("--style", choices=("astra-sim", "chakra"), default="astra-sim")
    p.add_argument("--name", metavar="NAME", help="node name (default: the style's)")
    p.add_argument("--shift", type=integer, default=1, metavar="K", help="--p2p shift distance (default 1)")
    p.add_argument("--tag", type=integer, default=0, metavar="T", help="comm_tag of p2p nodes (default 0)")
    p.add_argument("--count", type=positive_int, default=1, metavar="K", help="--compute: nodes per rank")
    p.add_argument("--dependent", action="store_true", help="--compute: chain the nodes")
    p.add_argument("--ids", choices=("per-file", "global"),
                   help="per-file: every rank file numbers from --first-id (astra-sim default); global: one counter "
                   "across the files (chakra default, and ASTRA-sim's shipped examples)")
    p.add_argument("--first-id", type=non_negative_int, default=0, metavar="K")
    p.add_argument("--et-version", metavar="V", help="GlobalMetadata version (default 0.0.4 / 1.0.0 by style)")
    p.add_argument("--runtime", type=non_negative_int, default=5, metavar="US", help="--chakra-suite: compute time")
    p.add_argument("--tensor-size", type=non_negative_int, default=1024, metavar="B",
                   help="--chakra-suite: memory/send/recv size")
    p.add_argument("--comm-size", type=non_negative_int, default=65536, metavar="B",
                   help="--chakra-suite: collective size")
    p.set_defaults(run_command=writes_output(_cmd_micro))

    p = sub.add_parser(
        "scale", help="replicate a data-parallel trace to another number of NPUs",
        description="Copy a trace whose ranks are all the same graph to M NPUs (ids keep the input's per-rank "
        "offset; names containing '<N>npus' get the new count).")
    p.add_argument("prefix", metavar="PREFIX")
    p.add_argument("--to-npus", type=positive_int, required=True, metavar="M")
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    p.add_argument("--from-npus", type=positive_int, metavar="N",
                   help="ranks to read (default: every PREFIX.<r>.et from 0)")
    p.add_argument("--keep-names", action="store_true", help="do not rewrite '<N>npus' in node names")
    p.set_defaults(run_command=writes_output(_cmd_scale))

    p = sub.add_parser(
        "compare", help="compare two traces node by node, ignoring id numbering",
        description="Compare PREFIX_A.<r>.et with PREFIX_B.<r>.et for every rank: node types, names, durations, "
        "attributes and dependency structure (ids may differ; files with different node counts are aligned on "
        "their node types and names). Reports every difference: per rank, their number by kind, then the first "
        "--details of them. Exit 0 when equal, 1 otherwise.")
    p.add_argument("a", metavar="PREFIX_A")
    p.add_argument("b", metavar="PREFIX_B")
    p.add_argument("--ignore-names", action="store_true")
    p.add_argument("--ignore-attr", action="append", default=[], metavar="NAME",
                   help="leave this attribute out (repeatable), e.g. involved_dim")
    p.add_argument("--details", type=non_negative_int, default=10, metavar="N",
                   help="differences shown in full per rank (default 10; all are counted)")
    p.set_defaults(run_command=_cmd_compare)

    p = sub.add_parser(
        "convert-pytorch", help="convert a PyTorch host execution trace (+ Kineto trace) to Chakra traces",
        description="Convert a PyTorch host ET (and its Kineto device trace) into PREFIX.<rank>.et as Chakra's "
        "PyTorch converter does: GPU kernels become COMP/collective/send/recv nodes with measured durations. "
        "With --ranks N, a HOST path containing {rank} is read per rank; otherwise it is copied to every rank.")
    p.add_argument("host", metavar="HOST.json")
    p.add_argument("--kineto", metavar="KINETO.json",
                   help="the matching Kineto device trace; with --ranks N a path containing {rank} "
                   "(e.g. kineto.{rank}.json) is read per rank, like HOST")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--rank", type=non_negative_int, metavar="R", help="write only PREFIX.R.et")
    which.add_argument("--ranks", type=positive_int, metavar="N", help="write PREFIX.0.et .. PREFIX.N-1.et")
    p.add_argument("-o", "--output", required=True, metavar="PREFIX")
    p.add_argument("--comms-from-host", action="store_true",
                   help="for a host trace without GPU kernels (no --kineto): turn its record_param_comms ops into "
                   "collective and send/recv nodes (Chakra's converter drops them); GPU compute is then not timed")
    p.set_defaults(run_command=writes_output(_cmd_convert_pytorch))

    from .llm import add_llm_command
    add_llm_command(sub)

    p = sub.add_parser(
        "expand", help="write one Chakra file per rank from a compact workload (PREFIX.workload.json)",
        description="Write OUT.<rank>.et for every rank of a compact workload (each distinct trace once plus a "
        "rank map, as astra workload llm writes by default; docs/compact-workload.md), for tools that need one "
        "Chakra file per rank; OUT.groups.json too when the workload names a groups file.")
    p.add_argument("prefix", metavar="PREFIX", help="the compact workload's prefix (PREFIX.workload.json)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="write OUT.<rank>.et")
    p.set_defaults(run_command=writes_output(_cmd_expand))


def _cmd_expand(args):
    from astra_workload_compact import expand_workload, is_compact

    if not is_compact(args.prefix):
        raise ConfigError(f"{args.prefix}.workload.json does not exist: not a compact workload")
    count = expand_workload(args.prefix, args.output)
    print(f"wrote {args.output}.0.et .. {args.output}.{count - 1}.et")
    return 0


def _cmd_convert_text(args):
    from .text import CHAKRA_SCHEMA, convert_text

    summary = convert_text(
        args.file, args.output, args.npus, num_passes=args.num_passes, style=args.style, npus_per_dim=args.dims,
        compute_scale=args.compute_scale, comm_scale=args.comm_scale, keep_empty_comms=args.keep_empty_comms,
        first_id=args.first_id, schema=args.schema or CHAKRA_SCHEMA)
    extra = f", {summary['left_out']} empty collective(s) left out" if summary["left_out"] else ""
    print(f"{summary['parallelism']}: {summary['layers']} layers x {summary['passes']} pass(es) -> "
          f"{summary['nodes_per_rank']} nodes per rank{extra}; wrote {args.output}.0.et .. "
          f"{args.output}.{args.npus - 1}.et")
    return 0


def _cmd_micro(args):
    from .micro import MICRO_OPTIONS, generate_micro

    s = generate_micro(args.output, **{key: getattr(args, key) for key in MICRO_OPTIONS})
    if s["nodes_per_rank"] is None:
        print(f"wrote {len(s['paths'])} files into {args.output}")
    else:
        print(f"wrote {args.output}.0.et .. {args.output}.{args.npus - 1}.et "
              f"({s['nodes_per_rank']} node(s) per rank)")
    return 0


def _cmd_scale(args):
    from .scale import scale_trace

    summary = scale_trace(args.prefix, args.to_npus, args.output, from_npus=args.from_npus,
                          keep_names=args.keep_names)
    ids = {0: "the same ids in every file", None: "rank 0's ids in every file (the input's had no regular offset)"}
    how = ids.get(summary["id_step"], f"ids offset by {summary['id_step']} per rank")
    print(f"{summary['from_npus']} -> {summary['to_npus']} NPUs, {summary['nodes_per_rank']} nodes per rank, "
          f"{how}{', names updated' if summary['renamed'] else ''}; wrote {args.output}.0.et .. "
          f"{args.output}.{args.to_npus - 1}.et")
    return 0


def _cmd_compare(args):
    from .compare import compare_traces

    differences = compare_traces(args.a, args.b, names=not args.ignore_names, drop_attrs=tuple(args.ignore_attr),
                                 details=args.details)
    if not differences:
        print("same graphs on every rank")
        return 0
    for line in differences:
        print(line)
    return 1


def _cmd_convert_pytorch(args):
    from astra_sim.cliutil import warning

    from .pytorch import convert_pytorch

    s = convert_pytorch(args.host, args.output, kineto=args.kineto, rank=args.rank, ranks=args.ranks,
                        comms_from_host=args.comms_from_host)
    for line in convert_pytorch_summary(s):
        print(line)
    for line in convert_pytorch_warnings(s):
        warning(line)
    return 0


_KINDS = (("cpu", "CPU ops"), ("gpu_comp", "GPU kernels"), ("coll", "collectives"), ("p2p", "send/recv"),
          ("metadata", "metadata"))


def _breakdown(c):
    return ", ".join(f"{c[k]} {word}" for k, word in _KINDS)


def convert_pytorch_summary(s):
    """The lines convert-pytorch prints for its summary ``s`` (see :func:`.pytorch.convert_pytorch`)."""
    paths = f"{', '.join(s['paths'][:2])}{' ..' if len(s['paths']) > 2 else ''}"
    per_rank = s.get("per_rank") or [s]
    ranks = s.get("ranks") or list(range(len(per_rank)))
    shapes = {tuple(c[k] for k, _ in _KINDS) + (c["nodes"],) for c in per_rank}
    if len(shapes) == 1:
        lines = [f"{s['nodes']} nodes {'per rank' if len(per_rank) > 1 else 'in rank ' + str(ranks[0])} "
                 f"({_breakdown(s)}); wrote {paths}"]
    else:
        counts = [c["nodes"] for c in per_rank]
        lines = [f"{min(counts)} to {max(counts)} nodes per rank; wrote {paths}"]
        lines += [f"  rank {r}: {c['nodes']} nodes ({_breakdown(c)})" for r, c in zip(ranks, per_rank)]
    if any(c.get("cpu_backend_comms") for c in per_rank):
        rdv = [c.get("rendezvous_notes", 0) for c in per_rank]
        count = str(rdv[0]) if len(set(rdv)) == 1 else f"{min(rdv)} to {max(rdv)}"
        lines.append("note: the communication comes from the c10d host ops of a CPU backend (gloo)"
                     + (f"; as in gloo, every receive first tells its sender that it is ready ({count} of the "
                        "send/recv nodes per rank)" if max(rdv) else ""))
    if s["host_comms"]:
        lines.append(f"note: {s['host_comms']} collectives and send/recv come from record_param_comms host ops "
                     "(--comms-from-host); GPU compute is not timed without kernels")
    return lines


def convert_pytorch_warnings(s):
    """The warnings convert-pytorch prints on stderr for its summary ``s``."""
    out = []
    if s["dropped_comms"]:
        out.append(f"the trace has no GPU kernels, so its {s['dropped_comms']} record_param_comms collectives and "
                   "send/recv are left out, as Chakra's converter does; give the Kineto trace of a GPU job, or "
                   "--comms-from-host to simulate them")
    skipped = {}
    for c in s.get("per_rank") or [s]:
        for op, count in c.get("not_simulated", {}).items():
            skipped[op] = max(skipped.get(op, 0), count)
    if skipped:
        from .pytorch_c10d import NOT_SIMULATED

        out.append("left as CPU ops, not simulated as communication: " + ", ".join(
            f"{count} {op} ({NOT_SIMULATED[op]})" for op, count in sorted(skipped.items())))
    out += s.get("warnings", [])
    return out
