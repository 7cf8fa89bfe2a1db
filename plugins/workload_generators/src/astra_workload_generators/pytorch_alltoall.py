"""Uneven all-to-all (``all_to_all_single`` with split sizes): one send and one receive per peer.

``torch.distributed.all_to_all_single(out, inp, output_split_sizes, input_split_sizes)`` sends ``input_split_sizes[j]``
dim-0 rows of ``inp`` to group rank j and receives ``output_split_sizes[j]`` rows from it. ProcessGroupNCCL runs it
as one grouped ncclSend/ncclRecv per peer (one SendRecv kernel) and records it as a ``record_param_comms`` op named
``all_to_allv`` whose inputs carry both split lists (see :func:`.pytorch_nccl._param_comms`); an all-to-all without
splits is ``all_to_all`` with empty lists. On CPU backends (gloo) the split lists are the arguments of the
``c10d::alltoall_base_`` or ``_c10d_functional::all_to_all_single`` host op (:mod:`.pytorch_c10d` builds those
nodes with :func:`peer_messages`).

The simulator's ALL_TO_ALL collective has one size per rank and splits it evenly over the peers, so an uneven
exchange, whose ranks move different totals, cannot be one: its collective messages differ in size across the
ranks and the run stops with unmatched messages. So an all-to-all whose splits are not all equal becomes, on each
rank, a COMM_SEND of ``in_split[j] x row bytes`` to every peer j and a COMM_RECV of ``out_split[j] x row bytes``
from it (none for a zero split; the rank's own split is a local copy), all launched with the kernel so they run
concurrently, tagged with the group's p2p tag (:func:`.pytorch_nccl._group_tag`: the k-th exchange between two
ranks meets the k-th, as NCCL orders them on a communicator). Row bytes: the input tensor's bytes over its rows
(the sum of ``in_split``), else the output's.

An all-to-all whose splits are all equal stays one ALL_TO_ALL collective (as before), unless another rank of the
job has an uneven one (``force``, set by :func:`.pytorch.convert_pytorch` across the ranks it converts): the ranks
of an exchange must all run it as send/recv.
"""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError

from .pytorch_host import _THREAD_ROOT, _PROCESS_ROOT, _ancestors, _as_int, _node, _tensor_bytes
from .pytorch_nccl import _PARAM_COMMS, _group_tag, _map_local, _param_comms


def _is_all_to_all(info):
    return info is not None and info["coll"].replace("_", "") in ("alltoall", "alltoallv", "alltoallbase")


def find_splits(ctx, hid):
    """(record_param_comms host op, what :func:`._param_comms` read from it) of the all-to-all launched under host
    op ``hid`` when it carries split sizes, else None: the launcher itself, else the one op under it, else the
    nearest one above it."""
    by_id, children = ctx["by_id"], ctx["children"]
    candidates = [by_id[hid]]
    stack = list(children.get(hid, []))
    while stack:
        c = stack.pop()
        if not ctx["is_gpu"][c["id"]]:
            candidates.append(c)
            stack.extend(children.get(c["id"], []))
    for a in _ancestors(by_id, hid):
        if a["name"] in (_THREAD_ROOT, _PROCESS_ROOT):
            break
        candidates.append(a)
    for op in candidates:
        if op["name"] != _PARAM_COMMS:
            continue
        info = _param_comms(op)
        if _is_all_to_all(info) and info["in_split"] and info["out_split"]:
            return op, info
    return None


def is_uneven(info):
    """Whether the split sizes are not all one value (an even all-to-all runs as the collective)."""
    return len(set(info["in_split"]) | set(info["out_split"])) > 1


def peer_messages(rank, peers, in_split, out_split, row):
    """(node type, peer attribute, verb, peer, bytes) of every message ``rank`` exchanges with the group ranks
    ``peers`` (global ranks, in group order): a send of each nonzero input split, a receive of each nonzero output
    split, none with itself."""
    messages = [(T.COMM_SEND_NODE, "comm_dst", "send to", peer, rows * row) for peer, rows in zip(peers, in_split)]
    messages += [(T.COMM_RECV_NODE, "comm_src", "receive from", peer, rows * row)
                 for peer, rows in zip(peers, out_split)]
    return [m for m in messages if m[3] != rank and m[4] > 0]


def _row_bytes(op, info, where):
    ins, outs = op.get("inputs", {}), op.get("outputs", {})
    return row_bytes(_tensor_bytes(ins.get("values", []), ins.get("types", [])),
                     _tensor_bytes(outs.get("values", []), outs.get("types", [])), info, where)


def row_bytes(in_bytes, out_bytes, info, where):
    """Bytes of one dim-0 row: the input tensor's bytes over the rows its splits add up to, else the output's
    (0 when the rank moves nothing)."""
    sides = ((in_bytes, sum(info["in_split"]), "input"), (out_bytes, sum(info["out_split"]), "output"))
    for nbytes, rows, side in sides:
        if nbytes > 0 and rows > 0:
            if nbytes % rows:
                raise ConfigError(f"{where}: its {side} tensor has {nbytes} bytes, not a whole number of the "
                                  f"{rows} rows its split sizes add up to")
            return nbytes // rows
    if not sum(info["in_split"]) + sum(info["out_split"]):
        return 0  # the rank moves nothing in this exchange
    raise ConfigError(f"{where}: expected an input or output tensor with the rows its split sizes "
                      f"{info['in_split']} / {info['out_split']} move, found no tensor bytes")


def exchange_nodes(ctx, gid, name, hid, dur, stream, pg, kargs, src, where, spare_id):
    """The send/recv nodes of one uneven all-to-all (see the module docstring): the first keeps node id ``gid``,
    the others take ids from ``spare_id`` on. Returns [] when the rank neither sends nor receives anything."""
    op, info = find_splits(ctx, hid)
    desc = f"{src}: {where}: all-to-all node {gid} ({name!r}, record_param_comms host node id {op['id']})"
    if ctx["shared"] or ctx["rank"] is None:
        raise ConfigError(f"{desc}: an all-to-all with uneven split sizes needs the rank of its trace (each rank "
                          "has its own splits); give one trace per rank with '{rank}' in the file names, or "
                          "convert one rank with --rank R")
    if len(info["in_split"]) != len(info["out_split"]) or min(info["in_split"] + info["out_split"]) < 0:
        raise ConfigError(f"{desc}: expected input and output split sizes with one count >= 0 per group rank, got "
                          f"{info['in_split']} and {info['out_split']}")
    row = _row_bytes(op, info, desc)
    group_args = {k: v for k, v in kargs.items() if k == "Process Group Ranks"}
    group = pg if pg not in (None, "") else info["pg_name"]
    peers = []
    for local in range(len(info["in_split"])):
        peer, found = _map_local(ctx, local, info, group_args, group, desc, f"split position {local}")
        group = group if group is not None else found
        peers.append(peer)
    if ctx["rank"] not in peers:
        raise ConfigError(f"{desc}: this trace is rank {ctx['rank']}, not one of the group's ranks {peers}")
    tag = _group_tag(group)
    attrs = {"is_cpu_op": False, "stream": _as_int(stream, src, {"id": gid, "name": name}, "stream"),
             "comm_tag": tag}
    if group is not None:
        attrs["pg_name"] = str(group)
    out = []
    for k, (ntype, key, verb, peer, nbytes) in enumerate(peer_messages(ctx["rank"], peers, info["in_split"],
                                                                       info["out_split"], row)):
        nid = gid if k == 0 else spare_id + k - 1
        node_attrs = dict(attrs, comm_size=nbytes, **{key: peer})
        out.append(_node(nid, f"{name} | {verb} {peer}", ntype, [hid], [hid], dur, node_attrs,
                         op.get("inputs", {}), src, values=False, outs=op.get("outputs", {})))
    return out
