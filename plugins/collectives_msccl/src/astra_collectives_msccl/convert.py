"""``astra msccl to-chakra``: MSCCL-IR XML to the per-rank Chakra ETs the reference accepts.

``astra msccl to-chakra ALGO.xml -o PREFIX --size BYTES`` writes ``PREFIX.<gpu>.et`` for every
``<gpu>``: a graph of ``COMM_SEND_NODE``, ``COMM_RECV_NODE`` and ``COMP_NODE`` nodes with data
dependencies only, which is all ASTRA-sim 2.x's ``CustomAlgorithm`` (and the ``chakra_custom`` format
of this plugin) runs. Name the prefix in the system config:
``"all-reduce-implementation-custom": ["PREFIX"]``.

Per step (peers come from the threadblock: ``comm_dst = tb.send``, ``comm_src = tb.recv``,
``comm_tag = tb.chan``):

======  ===========================================================
``s``     send
``r``     recv
``rcs``   recv, then send (forwarding)
``rrs``   recv, then COMP (reduce), then send
``rrc``   recv, then COMP (reduce)
``rrcs``  recv, then COMP (reduce), then send
``re``    COMP (reduce); ``ra`` (residual add) likewise
``cpy``   COMP (copy)
``nop``   no node: its dependency is carried to the next step
======  ===========================================================

The nodes of one step form a chain. A step's first node depends on the previous step of its
threadblock (program order) and on its cross-threadblock dependency (``depid``/``deps``: the last
node of that step). A ``nop`` stands for "the previous step and the nop's dependency", so the step
after it inherits both (chains of nops accumulate). Node ids are numbered per GPU in threadblock,
step, part order, so an XML that only uses ``s``/``r``/``rrc``/``nop`` gives the same graphs, ids
and names as the reference's converter (``collectiveapi/chakra_converter``), which rejects every
other opcode.

Sizes: a message (and the data a COMP node works on) is ``buffer x cnt // nchunksperloop`` bytes
(at least 1), where ``buffer`` is the buffer the XML's ``nchunksperloop`` chunks tile: ``--size``
itself for all-reduce, reduce-scatter, all-to-all and custom algorithms, and ``--size x ngpus`` for
``coll="allgather"``, because ``--size`` is meant as the workload node's ``comm_size``, which for an
all-gather is what each rank contributes while the XML's chunks tile the gathered output. (Same
convention as the ``msccl`` format, so converting and running the XML directly agree.) The sizes
are written into the nodes: the ETs are for that one collective size (the reference uses a custom
ET's ``comm_size`` whatever the workload node says).

COMP durations (``duration_micros``, whole microseconds; the reference runs 0 as 1 ns): ``--reduce-us``
and ``--copy-us`` set them directly; otherwise ``--local-mem-bw GB/s`` derives them like the
reference's converter and reduction model, ``3 x trunc(bytes / bw)`` ns for a reduction (write and
two reads) and ``2 x trunc(bytes / bw)`` ns for a copy, truncated to microseconds; with neither
they are 0 (free). ASTRA-sim's converter always times them from a bandwidth: its shipped example
(``custom_ring_allreduce_8npus_1MB``) has 7 us per 131072-byte reduction, which ``--local-mem-bw 50``
reproduces byte for byte; the command says so when it writes free reductions.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from astra_sim.chakra import ChakraError, make_metadata, make_node, write_et
from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError
from astra_sim.cliutil import number
from astra_sim.safeio import ensure_parent_dir

__all__ = ["convert_msccl", "write_chakra", "register_command", "run_to_chakra", "SCHEMA"]

#: GlobalMetadata ``schema`` the reference's converter writes.
SCHEMA = "1.0.2-chakra.0.0.4"

_COLLECTIVE_KEY = {
    "allreduce": "all-reduce",
    "allgather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "reducescatter": "reduce-scatter",
    "alltoall": "all-to-all",
}

# What each opcode becomes, in order: "recv", "reduce", "copy", "send".
_PARTS = {
    "s": ("send",),
    "r": ("recv",),
    "rcs": ("recv", "send"),
    "rrs": ("recv", "reduce", "send"),
    "rrc": ("recv", "reduce"),
    "rrcs": ("recv", "reduce", "send"),
    "re": ("reduce",),
    "ra": ("reduce",),
    "cpy": ("copy",),
    "nop": (),
}


def message_bytes(algo, size, cnt):
    """Bytes of ``cnt`` chunks for a collective of ``size`` bytes (see the module docstring)."""
    buffer = size * algo.ngpus if algo.coll == "allgather" else size
    return max(1, buffer * cnt // algo.nchunksperloop)


def comp_micros(kind, nbytes, reduce_us=None, copy_us=None, local_mem_bw=None):
    """``duration_micros`` of a COMP node that reduces or copies ``nbytes``."""
    explicit = reduce_us if kind == "reduce" else copy_us
    if explicit is not None:
        return explicit
    if local_mem_bw:
        factor = 3 if kind == "reduce" else 2
        return factor * int(nbytes / (local_mem_bw * 1e9) * 1e9) // 1000
    return 0


def convert_msccl(algo, size, *, reduce_us=None, copy_us=None, local_mem_bw=None):
    """Build the Chakra nodes of every GPU of a parsed :class:`~astra_collectives_msccl.msccl_ir.MscclAlgorithm`.

    Returns ``{gpu id: [EtNode, ...]}`` (file order). ``size``: the collective size in bytes.
    """
    if size <= 0:
        raise ConfigError(f"--size must be a positive number of bytes, got {size}")
    for name, value in (("--reduce-us", reduce_us), ("--copy-us", copy_us)):
        if value is not None and value < 0:
            raise ConfigError(f"{name} must be >= 0 microseconds, got {value}")
    if local_mem_bw is not None and local_mem_bw <= 0:
        raise ConfigError(f"--local-mem-bw must be > 0 GB/s, got {local_mem_bw}")
    out = {}
    for gpu in algo.gpus:
        out[gpu.id] = _convert_gpu(algo, gpu, size, reduce_us, copy_us, local_mem_bw)
    return out


def _convert_gpu(algo, gpu, size, reduce_us, copy_us, local_mem_bw):
    nodes = []
    last = {}  # (tb, s) -> id of the step's last node (real steps only)
    first = []  # (node, tb, step): the first node of each real step, to get its dependencies
    for tb in gpu.threadblocks:
        for step in tb.steps:
            parts = _PARTS.get(step.type)
            if parts is None:
                raise ConfigError(f"MSCCL-IR {algo.path}: gpu {gpu.id}, tb {tb.id}, step {step.s}: "
                                  f"unknown opcode {step.type!r}")
            if not parts:
                continue
            nbytes = message_bytes(algo, size, step.cnt)
            previous = None
            for part in parts:
                node_id = len(nodes)
                if part == "send":
                    node = make_node(node_id, f"COMM_SEND_NODE_tb{tb.id}_step{step.s}", T.COMM_SEND_NODE, attrs={
                        "comm_type": T.COMM_SEND_NODE, "comm_size": nbytes, "comm_dst": tb.send, "comm_tag": tb.chan})
                elif part == "recv":
                    node = make_node(node_id, f"COMM_RECV_NODE_tb{tb.id}_step{step.s}", T.COMM_RECV_NODE, attrs={
                        "comm_type": T.COMM_RECV_NODE, "comm_size": nbytes, "comm_src": tb.recv, "comm_tag": tb.chan})
                else:
                    node = make_node(node_id, f"COMP_NODE_tb{tb.id}_step{step.s}", T.COMP_NODE,
                                     duration_micros=comp_micros(part, nbytes, reduce_us, copy_us, local_mem_bw))
                if previous is None:
                    first.append((node, tb, step))
                else:
                    node.data_deps.append(previous.id)
                nodes.append(node)
                previous = node
            last[(tb.id, step.s)] = previous.id
    tbs = {tb.id: tb for tb in gpu.threadblocks}
    done = {}  # (tb, s) -> sorted node ids whose completion means "this step is done"

    def step_done(tb_id, s):
        """Node ids that stand for step ``s`` of threadblock ``tb_id`` having completed."""
        key = (tb_id, s)
        if key in done:
            return done[key]
        # Iterative: a nop is done when its predecessor and its dependency are (msccl_ir checked
        # that these references exist and do not form a cycle).
        stack = [key]
        while stack:
            k = stack[-1]
            if k in done:
                stack.pop()
                continue
            if k in last:
                done[k] = (last[k],)
                stack.pop()
                continue
            step = tbs[k[0]].steps[k[1]]
            needs = _step_parents(k[0], step)
            missing = [n for n in needs if n not in done]
            if missing:
                stack.extend(missing)
                continue
            ids = set()
            for n in needs:
                ids.update(done[n])
            done[k] = tuple(sorted(ids))
            stack.pop()
        return done[key]

    for node, tb, step in first:
        ids = set()
        for k in _step_parents(tb.id, step):
            ids.update(step_done(*k))
        node.data_deps.extend(sorted(ids))
    return nodes


def _step_parents(tb_id, step):
    """The steps a step waits for: its predecessor in the threadblock and its dependency."""
    needs = []
    if step.s > 0:
        needs.append((tb_id, step.s - 1))
    if step.depid >= 0 and (step.depid, step.deps) not in needs:
        needs.append((step.depid, step.deps))
    return needs


def write_chakra(prefix, algo, nodes_by_gpu, input_text=None):
    """Write ``<prefix>.<gpu>.et`` for every GPU; returns the paths. A write that fails (a full disk) removes the
    files it wrote (no partial set is left) and raises its OSError."""
    if input_text is None:
        try:
            with open(algo.path, encoding="utf-8") as handle:
                input_text = handle.read()
        except OSError:
            input_text = ""
    metadata = make_metadata(version="", attrs={"schema": SCHEMA, "input_file": input_text, "collective": algo.coll})
    ensure_parent_dir(prefix)  # like every -o: missing folders are made
    paths = []
    for gpu_id in sorted(nodes_by_gpu):
        path = f"{prefix}.{gpu_id}.et"
        try:
            write_et(path, metadata, nodes_by_gpu[gpu_id])
        except ChakraError as exc:
            for done in paths:
                with contextlib.suppress(OSError):
                    os.unlink(done)
            if isinstance(exc.__context__, OSError):  # what write_et could not write
                raise exc.__context__ from None
            raise ConfigError(str(exc)) from None
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- command line


def register_command(subparsers):
    """Add ``astra msccl`` with its ``to-chakra`` sub-command."""
    msccl = subparsers.add_parser(
        "msccl",
        help="MSCCL-IR tools: to-chakra (convert an XML algorithm to per-rank Chakra ETs)",
        description="Tools for MSCCL-IR (MSCCLang XML) collective algorithms.",
    )
    sub = msccl.add_subparsers(dest="msccl_command", metavar="SUBCOMMAND")
    msccl.set_defaults(run_command=lambda args: _usage(msccl))
    conv = sub.add_parser(
        "to-chakra",
        help="write PREFIX.<gpu>.et, the custom-collective ETs ASTRA-sim's CustomAlgorithm runs",
        description=(
            "Convert an MSCCL-IR XML algorithm to one Chakra ET per GPU (PREFIX.<gpu>.et) of COMM_SEND, "
            "COMM_RECV and COMP nodes, the input of ASTRA-sim's custom collectives (and of the "
            "chakra_custom format). Fused opcodes are split (rcs: recv+send; rrs/rrcs: recv+COMP+send; "
            "rrc: recv+COMP; re/cpy: COMP); the tag of a message is its channel."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "message bytes = size x cnt / nchunksperloop (size x ngpus for coll=\"allgather\": --size is the\n"
            "workload node's comm_size, i.e. each rank's contribution, and the chunks tile the gathered output).\n"
            "Then name PREFIX in the system config, e.g. \"all-reduce-implementation-custom\": [\"PREFIX\"]."
        ),
    )
    conv.add_argument("xml", metavar="ALGO.xml", help="MSCCL-IR XML file")
    conv.add_argument("-o", "--output", required=True, metavar="PREFIX", help="write PREFIX.<gpu>.et")
    conv.add_argument("--size", required=True, type=number(int, 0, exclusive=True, what='a whole number of bytes'), metavar="BYTES",
                      help="collective size in bytes (the workload node's comm_size)")
    conv.add_argument("--local-mem-bw", type=number(float, 0, exclusive=True, what='GB/s'), metavar="GB/s",
                      help="derive COMP durations: reduce 3 x bytes/bw, copy 2 x bytes/bw (truncated to us)")
    conv.add_argument("--reduce-us", type=number(int, 0, what='whole microseconds'), metavar="US",
                      help="duration of every reduction COMP node, microseconds (overrides --local-mem-bw). "
                           "Without it and --local-mem-bw reductions take 0 us; ASTRA-sim's converter times them "
                           "from a bandwidth (7 us per 128 KiB in its shipped example: --local-mem-bw 50)")
    conv.add_argument("--copy-us", type=number(int, 0, what='whole microseconds'), metavar="US",
                      help="duration of every copy COMP node, microseconds (overrides --local-mem-bw)")
    conv.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    conv.set_defaults(run_command=run_to_chakra)
    return msccl


def _usage(parser):
    parser.print_help(sys.stderr)
    return 2


def _reductions(algo):
    """How many reduction COMP nodes the conversion writes."""
    return sum((_PARTS.get(step.type) or ()).count("reduce")
               for gpu in algo.gpus for tb in gpu.threadblocks for step in tb.steps)


def run_to_chakra(args):
    from astra_sim.outputs import check_writable_folder

    from astra_collectives_msccl.msccl_ir import parse_msccl

    check_writable_folder(os.path.dirname(os.path.abspath(args.output)), f"--output {args.output}")
    algo = parse_msccl(args.xml)
    nodes = convert_msccl(algo, args.size, reduce_us=args.reduce_us, copy_us=args.copy_us,
                          local_mem_bw=args.local_mem_bw)
    try:
        paths = write_chakra(args.output, algo, nodes)
    except OSError as exc:  # late (a full disk): the whole set is written again into a recovered folder
        from astra_sim.safeio import recover

        name = os.path.basename(args.output)
        recover(f"astra msccl to-chakra: could not write --output {args.output} ({exc.strerror or exc})", name,
                lambda kept: write_chakra(os.path.join(kept, name), algo, nodes), "astra msccl to-chakra", "--output",
                folder=True)
    if not args.quiet:
        counts = {}
        for gpu_nodes in nodes.values():
            for node in gpu_nodes:
                counts[node.type] = counts.get(node.type, 0) + 1
        key = _COLLECTIVE_KEY.get(algo.coll, "all-reduce")
        buffer = args.size * algo.ngpus if algo.coll == "allgather" else args.size
        reductions = _reductions(algo)
        if reductions and args.reduce_us is None and not args.local_mem_bw:
            print(f"note: the {reductions} reduction COMP nodes take 0 us: no --local-mem-bw or --reduce-us was "
                  "given, so reductions are free. ASTRA-sim's converter times them from a local memory bandwidth "
                  "(its shipped example, 1 MiB on 8 GPUs at 50 GB/s: 7 us each); pass --local-mem-bw GB/s to do "
                  "the same, or --reduce-us US", file=sys.stderr)
        if buffer % algo.nchunksperloop:
            print(f"note: {buffer} bytes do not split into nchunksperloop={algo.nchunksperloop} equal chunks; "
                  f"a chunk is {buffer // algo.nchunksperloop} bytes (the remainder is dropped)", file=sys.stderr)
        print(
            f"wrote {len(paths)} files {paths[0]} .. {paths[-1]} ({algo.coll}, {algo.ngpus} GPUs): "
            f"{counts.get(T.COMM_SEND_NODE, 0)} sends, {counts.get(T.COMM_RECV_NODE, 0)} receives, "
            f"{counts.get(T.COMP_NODE, 0)} COMP nodes in all\n"
            f"system config: \"{key}-implementation-custom\": [\"{os.path.abspath(args.output)}\"]"
        )
    return 0
