"""NCCL communication in PyTorch traces: GPU kernels (collectives, send/recv, batched p2p) and
``record_param_comms`` host ops, their process groups, peers and tags."""

from __future__ import annotations

import re
import zlib

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError

from .pytorch_host import (
    _PROCESS_ROOT, _THREAD_ROOT, _ancestors, _as_int, _as_rank, _attr_map, _group_by_id, _node, _rank_list,
    _short, _tensor_bytes,
)

_COLL_WORDS = (("allreduce", T.ALL_REDUCE), ("alltoall", T.ALL_TO_ALL), ("allgather", T.ALL_GATHER),
               ("reducescatter", T.REDUCE_SCATTER), ("broadcast", T.BROADCAST))
_PARAM_COMMS = "record_param_comms"
# node type -> (record_param_comms collective name, Kineto key of the peer's global rank, Chakra attribute, word)
_P2P = {T.COMM_SEND_NODE: ("send", "Dst Rank", "comm_dst", "destination"),
        T.COMM_RECV_NODE: ("recv", "Src Rank", "comm_src", "source")}
# ProcessGroupNCCL's profiling title of a p2p op: "nccl:send <my group rank>-><peer>" / "nccl:recv <me><-<peer>"
_TITLE_RE = re.compile(r"nccl:(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")
_TAG_SPACE = 1 << 28  # comm_tag stays an int32 below the simulator's collective tag base (500,000,000)


# _comm_kind's comm_type for a SendRecv kernel that runs a whole batch_isend_irecv (see _batch_members)
BATCHED_P2P = "batched p2p"


def _is_batch_op(name):
    """Whether a host op (name) groups p2p ops into one kernel: ProcessGroupNCCL's "nccl:coalesced" or a
    batch_isend_irecv scope."""
    low = name.lower()
    return "coalesc" in low or "batch_isend_irecv" in low


def _comm_kind(kernel, launcher_names, path, where):
    """(node type, comm_type or None) of a GPU kernel; (COMP, None) for non-NCCL kernels, (None, BATCHED_P2P)
    for a SendRecv kernel under a coalesced or batch_isend_irecv op (several sends and receives in one kernel)."""
    low = kernel.lower()
    if "nccl" not in low:
        return T.COMP_NODE, None
    flat = low.replace("_", "")
    if "sendrecv" in flat:
        if any("all_to_all" in n or "alltoall" in n for n in launcher_names):
            return T.COMM_COLL_NODE, T.ALL_TO_ALL
        if any(_is_batch_op(n) for n in launcher_names):
            return None, BATCHED_P2P
        send = any("send" in n for n in launcher_names)
        recv = any("recv" in n for n in launcher_names)
        if send != recv:
            return (T.COMM_SEND_NODE if send else T.COMM_RECV_NODE), None
        why = ("both a send and a receive, and none a coalesced or batch_isend_irecv op, so it is neither one p2p "
               "op nor a batch" if send
               else "none of them names send, recv, all_to_all, coalesced or batch_isend_irecv")
        raise ConfigError(f"{path}: {where}: NCCL kernel {_short(kernel)!r} is a SendRecv launched by "
                          f"{launcher_names}: {why}")
    for word, ctype in _COLL_WORDS:
        if word in flat:
            return T.COMM_COLL_NODE, ctype
    raise ConfigError(f"{path}: {where}: NCCL kernel {kernel!r}: cannot tell the collective (expected AllReduce, "
                      "AllGather, ReduceScatter, AllToAll, Broadcast or SendRecv in its name)")



def _param_comms(node):
    """What a ``record_param_comms`` host op says about its collective, or None if it cannot be read.

    The host op's ``inputs.values`` are the ``paramList`` of PyTorch's RECORD_PARAM_COMMS(_DATA) macros
    (torch/csrc/distributed/c10d/ParamCommsUtils.hpp), which changed over releases:

    - old (ProcessGroupNCCL::send/recv at pytorch/pytorch@0007e752, and the sample trace's all_gather ops):
      ``[tensors, seq, pg_id, rank, coll_name, in_split, out_split, world_size]``, pg_id being
      ``this->getID()`` of the backend (an integer, different on every process);
    - newer (the macro's paramList in later ParamCommsUtils.hpp, and ProcessGroupNCCL::send/recv passing
      ``std::make_tuple(pg_uid_, pg_desc_)``; read from copies of those sources, not pinned to a commit):
      ``[tensors, seq, (pg_name, pg_desc), rank, coll_name, in_split, out_split, global_rank_start,
      global_rank_stride, world_size]`` (``seq`` may itself be a ``(seq, is_p2p)`` tuple, and the newest add
      ``is_async_op`` at the end); inNelems/outNelems/dtype go to the debug info only, not to the inputs;
    - RECORD_PARAM_COMMS (no data, e.g. "wait", "barrier") has no leading tensor list;
    - even older releases (e.g. pytorch/pytorch@cf1380df) record no record_param_comms for send/recv at all, and
      name the op plain ``nccl:send``/``nccl:recv``: only Kineto can give the peer then.

    So the collective name is found as the first string preceded by an integer (the rank) at index >= 2, and the
    other fields are read relative to it: ``in_split``/``out_split`` are the two lists after it (an
    ``all_to_allv``'s dim-0 rows per group rank, ``[]`` for other collectives), None when absent. For p2p, ``rank`` is the *peer* in the group's own numbering:
    ProcessGroupNCCL::send / ProcessGroupNCCL::recv (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) pass
    ``dstRank`` / ``srcRank``, which distributed_c10d.send/recv/isend/irecv have already turned into a group rank
    (``get_group_rank``), and the profiler's saveNcclMeta (torch/csrc/profiler/util.cpp) maps it to the global
    "Dst Rank" / "Src Rank" with ``groupRanks[rank]``. Newer execution traces also copy the collective properties
    into attributes (collective_name, pg_name, pg_desc, pg_size, global_rank_start, global_rank_stride), used
    here when the inputs lack them.
    """
    vals = node.get("inputs", {}).get("values", [])
    info = {"coll": None, "peer": None, "pg_name": None, "pg_desc": None, "pg_id": None, "size": None,
            "start": None, "stride": None, "in_split": None, "out_split": None}
    for i in range(2, len(vals)):
        if isinstance(vals[i], str) and isinstance(vals[i - 1], int) and not isinstance(vals[i - 1], bool):
            info["coll"] = vals[i].lower()
            info["peer"] = vals[i - 1]
            pg = vals[i - 2]
            if isinstance(pg, list) and pg and all(isinstance(x, str) for x in pg):
                info["pg_name"] = pg[0]
                info["pg_desc"] = pg[1] if len(pg) > 1 else None
            elif isinstance(pg, int) and not isinstance(pg, bool):
                info["pg_id"] = pg
            splits = [v if _int_list(v) else None for v in vals[i + 1:i + 3]]
            info["in_split"], info["out_split"] = (splits + [None, None])[:2]
            ints = [x for x in vals[i + 1:] if isinstance(x, int) and not isinstance(x, bool)]
            if len(ints) >= 3:
                info["start"], info["stride"], info["size"] = ints[0], ints[1], ints[2]
            elif len(ints) == 1:
                info["size"] = ints[0]
            break
    a = _attr_map(node)
    for key, attr in (("coll", "collective_name"), ("pg_name", "pg_name"), ("pg_desc", "pg_desc")):
        if info[key] is None and isinstance(a.get(attr), str):
            info[key] = a[attr].strip('"').lower() if key == "coll" else a[attr].strip('"')
    for key, attr in (("size", "pg_size"), ("start", "global_rank_start"), ("stride", "global_rank_stride")):
        if info[key] is None and _as_rank(a.get(attr)) is not None:
            info[key] = _as_rank(a[attr])
    return info if info["coll"] is not None else None


def _int_list(value):
    """Whether ``value`` is a list of integers (a split-size list; ``[]`` when the op had none)."""
    return isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value)


def _find_param_comms(launcher, by_id, children, is_gpu, coll):
    """The record_param_comms host op(s) of a p2p kernel: the launcher itself, else the ones under it whose
    collective is ``coll``, else the nearest one above it (PyTorch nests ``nccl:send a->b`` and
    record_param_comms either way round, depending on the release and on which op launched the kernel)."""
    if launcher["name"] == _PARAM_COMMS:
        return [launcher]
    found = []
    stack = list(children.get(launcher["id"], []))
    while stack:
        c = stack.pop()
        if is_gpu[c["id"]]:
            continue
        if c["name"] == _PARAM_COMMS:
            info = _param_comms(c)
            if info is not None and info["coll"] == coll:
                found.append(c)
        stack.extend(children.get(c["id"], []))
    if found:
        return sorted(found, key=lambda c: c["id"])
    for a in _ancestors(by_id, launcher["id"]):
        if a["name"] in (_THREAD_ROOT, _PROCESS_ROOT):
            break
        if a["name"] == _PARAM_COMMS:
            return [a]
    return []



# record_param_comms "dtype" attribute -> bytes per element (c10 ScalarType names)
_DTYPE_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "long": 8, "int": 4, "short": 2, "char": 1,
                "byte": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _param_comms_bytes(node):
    """in_msg_nelems x the dtype's size of a record_param_comms op (newer traces' attributes); 0 if unknown."""
    a = _attr_map(node)
    nelems = _as_rank(a.get("in_msg_nelems"))
    size = _DTYPE_BYTES.get(str(a.get("dtype", "")).strip('"').lower())
    return nelems * size if nelems is not None and nelems >= 0 and size else 0


def _host_comm_kind(info):
    """(node type, comm_type) of a record_param_comms host op (``info``: what :func:`_param_comms` read from it),
    or None when it is not a collective or send/recv the simulator models (wait, barrier, gather, scatter,
    reduce, ...)."""
    if info is None:
        return None
    flat = info["coll"].replace("_", "")
    if flat in ("send", "recv"):
        return (T.COMM_SEND_NODE if flat == "send" else T.COMM_RECV_NODE), None
    for word, ctype in _COLL_WORDS:
        if word in flat:
            return T.COMM_COLL_NODE, ctype
    return None


def _host_comm_ops(hnodes, by_id, groups, host_path, next_id):
    """For a host trace without GPU kernels (no Kineto trace, not linked by chakra_trace_link): one communication
    op per record_param_comms host op that names a collective or send/recv, in the form of the GPU op list of
    convert_pytorch_trace, as if a kernel launched by that op (ids from ``next_id`` on). Chakra's converter
    drops them (it only reads kernels), so a DDP trace would simulate no communication at all. A
    record_param_comms nested under another one (a coalesced or wrapped collective) is the same transfer and
    is skipped. ``groups``: the trace's :func:`_process_groups`."""
    infos = {n["id"]: _param_comms(n) for n in hnodes if n["name"] == _PARAM_COMMS}
    ops = []
    for n in hnodes:
        info = infos.get(n["id"])
        kind = _host_comm_kind(info)
        if kind is None:
            continue
        if any(_host_comm_kind(infos.get(a["id"])) is not None for a in _ancestors(by_id, n["id"])):
            continue
        pg = info["pg_name"]
        if pg is None and info["pg_id"] is not None:  # the old layout names the group by its backend id
            group = _group_by_id(groups, info["pg_id"])
            pg = str(group["pg_name"]) if group is not None else None
        where = f"record_param_comms host node id {n['id']} ({info['coll']!r})"
        ops.append((next_id + len(ops), info["coll"], n["id"], 0, 0, pg or "", host_path, where, {}, kind))
    return ops


def _group_tag(name):
    """comm_tag for a p2p op on process group ``name`` (see _p2p_peer): the group's number when PyTorch named it
    with a number (its default naming), else a CRC-32 of the name; 0 for an unnamed world group."""
    if name is None or name == "":
        return 0
    if re.fullmatch(r"\d+", name):
        return int(name) % _TAG_SPACE
    return zlib.crc32(name.encode("utf-8")) % _TAG_SPACE


def _p2p_peer(ctx, kind, gid, name, hid, pg, kargs, src, where):
    """(peer's global rank, comm_tag, group name or None) of a COMM_SEND/COMM_RECV kernel node.

    The peer, in this order:

    1. Kineto's "Dst Rank" (send) / "Src Rank" (recv) on the kernel or its cpu_op: already global;
    2. a group-local peer: Kineto's "Rank" (when its "Collective name" is send/recv), else the rank argument of
       the kernel's record_param_comms host op (:func:`_param_comms`), else the launching op's profiling title
       ``nccl:send <me>-><peer>`` / ``nccl:recv <me><-<peer>``;
       mapped to a global rank with Kineto's "Process Group Ranks", else the group's ranks in the
       ``## process_group:init ##`` metadata (found by pg_name, or by backend_id/pg_id for the old layout),
       else global_rank_start + local * global_rank_stride (stride > 0), else as is when the group is the
       world group (pg_name "0", pg_desc "default_pg", or a group as large as the known world);
    anything else is a ConfigError naming the file, the node and what was expected.

    comm_tag: the simulator matches a send to a receive by (tag, src, dst, size), first-in first-out per key,
    and NCCL runs the p2p ops between two ranks of one communicator in issue order. So the tag is a number
    derived from the process group's name (identical on both ranks): the k-th send A->B on a group meets the k-th
    receive at B from A on that group, and groups do not steal each other's messages.
    """
    coll, global_key, _attr, role = _P2P[kind]
    launcher = ctx["by_id"][hid]
    node_desc = (f"{src}: {where}: {'send' if kind == T.COMM_SEND_NODE else 'receive'} node {gid} ({name!r}, "
                 f"launched by host node id {hid} of {ctx['host_path']})")
    if ctx["shared"]:
        raise ConfigError(f"{node_desc}: a trace with point-to-point send/recv cannot be copied to "
                          f"{ctx['world']} ranks (each rank has its own peers); give one trace per rank with "
                          "'{rank}' in the file names, or convert one rank with --rank R")
    own = ctx["rank"]
    if own is None:
        raise ConfigError(f"{node_desc}: the rank of this trace is needed to check its peers; convert with "
                          "--rank R (or --ranks N and per-rank '{rank}' files)")
    group_name = pg if pg not in (None, "") else None
    peer = _as_rank(kargs.get(global_key))
    how = f"Kineto args {global_key!r}"
    # the record_param_comms op: the group-local peer, and the process group (also needed for the tag when Kineto
    # gives the global peer, so that both ranks derive the tag from the same group)
    info = None
    found = _find_param_comms(launcher, ctx["by_id"], ctx["children"], ctx["is_gpu"], coll)
    if len(found) > 1 and peer is None:
        raise ConfigError(f"{node_desc}: {len(found)} record_param_comms host ops {[f['id'] for f in found]} "
                          f"under it say {coll!r}; cannot tell which one is this kernel's peer")
    if len(found) == 1:
        info = _param_comms(found[0])
        if info is None or info["coll"] != coll:
            said = info["coll"] if info else "nothing readable"
            raise ConfigError(f"{node_desc}: its record_param_comms host node id {found[0]['id']} says "
                              f"{said!r}, expected collective name {coll!r} with the {role} rank before it")
        if group_name is None and info["pg_name"]:
            group_name = info["pg_name"]
        if group_name is None and info["pg_id"] is not None:
            group = _group_by_id(ctx["groups"], info["pg_id"])
            group_name = str(group["pg_name"]) if group is not None else None
    if peer is None:
        local = None
        kcoll = kargs.get("Collective name")
        if isinstance(kcoll, str) and kcoll.strip('"').lower() == coll and _as_rank(kargs.get("Rank")) is not None:
            local, how = _as_rank(kargs["Rank"]), "Kineto args 'Rank'"
        elif info is not None:
            local, how = info["peer"], f"record_param_comms host node id {found[0]['id']}"
        p, hops = hid, 0
        while local is None and p in ctx["by_id"] and hops < 8:
            m = _TITLE_RE.search(ctx["by_id"][p]["name"])
            if m and m.group(1) == coll:
                local, how = int(m.group(4)), f"the name of host node id {p}"
            q = ctx["by_id"][p]["ctrl_deps"]
            p, hops = (q if q != p else None), hops + 1
        if local is None:
            raise ConfigError(
                f"{node_desc}: cannot find the {role} rank: expected Kineto args {global_key!r} (or 'Rank' with "
                f"'Collective name' {coll!r}) on the kernel or its cpu_op, a record_param_comms host op (the "
                f"launcher, under it or above it) with collective name {coll!r} and the peer before it, or a "
                f"launching op named 'nccl:{coll} <rank>{'->' if coll == 'send' else '<-'}<peer>'")
        peer, group_name = _map_local(ctx, local, info, kargs, group_name, node_desc, how)
    if peer < 0 or peer == own or (ctx["world"] is not None and peer >= ctx["world"]):
        limit = f" (ranks 0..{ctx['world'] - 1})" if ctx["world"] is not None else ""
        reason = "is this rank itself" if peer == own else f"is not a rank of the job{limit}"
        raise ConfigError(f"{node_desc}: the {role} rank {peer} (from {how}) {reason}; this trace is rank {own}")
    return peer, _group_tag(group_name), group_name


def _batch_members(ctx, hid, node_desc):
    """The send/recv ``record_param_comms`` host ops that one batched SendRecv kernel, launched under host op
    ``hid``, runs together (in issue order).

    ``torch.distributed.batch_isend_irecv`` opens an NCCL group (``ProcessGroupNCCL::startCoalescing``), records
    one record_param_comms per isend/irecv as ``ProcessGroupNCCL::send/recv`` queue it, and launches a single
    SendRecv kernel for all of them at ``ncclGroupEnd`` in ``endCoalescing``, under the profiling title
    ``nccl:coalesced`` (pytorch/pytorch#160680, #194693). Nothing in the host trace marks where a batch starts
    (facebookresearch/param#134). So the batch is the send/recv record_param_comms ops on the launching thread
    before the launching op (and that op itself, when it is one: a kernel hung on the batch's last op, see
    :func:`_batch_after`), back to the previous op that launched an NCCL kernel (or is under one) or the
    previous coalesced or batch op that the launcher is not under. A record_param_comms nested under another one
    is the same transfer."""
    by_id, order = ctx["by_id"], ctx["order"]
    chain = [by_id[hid]] + list(_ancestors(by_id, hid, limit=7))
    anchor = next((a for a in chain if _is_batch_op(a["name"])), None) or _batch_after(ctx, hid)
    containers = {a["id"] for a in _ancestors(by_id, hid, limit=64)}  # the ops the launcher is under
    i = _positions(ctx)[hid]
    thread = ctx["thread_of"][hid]
    members = []
    info = _param_comms(by_id[hid]) if by_id[hid]["name"] == _PARAM_COMMS else None
    if info is not None and info["coll"] in ("send", "recv"):  # the kernel hangs on the batch's last op
        members.append((by_id[hid], info))
    for j in range(i - 1, -1, -1):  # (indices: a slice would copy the whole order for every batch)
        nid = order[j]
        if ctx["thread_of"][nid] != thread:
            break
        if nid in containers:
            continue
        op = by_id[nid]
        above = [a for a in _ancestors(by_id, nid, limit=64) if a["id"] not in containers]
        if _is_batch_op(op["name"]) or any(x["id"] in ctx["nccl_launchers"] for x in [op] + above):
            break  # the previous batch, or an op that launched its own NCCL kernel
        if op["name"] != _PARAM_COMMS or any(a["name"] == _PARAM_COMMS for a in above):
            continue
        info = _param_comms(op)
        if info is not None and info["coll"] in ("send", "recv"):
            members.append((op, info))
    if not members:
        raise ConfigError(f"{node_desc}: no send/recv record_param_comms host op comes before "
                          f"{anchor['name']!r} (host node id {anchor['id']}) on its thread since the previous NCCL "
                          "kernel or batch, so which transfers the kernel runs is unknown")
    return members[::-1]


def _positions(ctx):
    """Host op id -> its index in the DFS order of the thread roots (computed once per trace)."""
    if "pos" not in ctx:
        ctx["pos"] = {nid: i for i, nid in enumerate(ctx["order"])}
    return ctx["pos"]


def _batch_after(ctx, hid):
    """The coalesced / batch_isend_irecv op that directly follows host op ``hid`` (and its sub-ops) on its thread,
    or None. A kernel hung on a send/recv record_param_comms followed by one ran that batch: chakra_trace_link
    skips "nccl:coalesced" when it looks for an NCCL kernel's launching op and takes the op before it."""
    order, by_id = ctx["order"], ctx["by_id"]
    for j in range(_positions(ctx)[hid] + 1, len(order)):
        nid = order[j]
        if ctx["thread_of"][nid] != ctx["thread_of"][hid]:
            return None
        if any(a["id"] == hid for a in _ancestors(by_id, nid, limit=64)):
            continue  # under the op itself
        return by_id[nid] if _is_batch_op(by_id[nid]["name"]) else None
    return None


def _batched_p2p_nodes(ctx, gid, kname, hid, dur, stream, pg, src, where, kargs, spare_id):
    """One COMM_SEND/COMM_RECV node per transfer of a batched SendRecv kernel (:func:`_batch_members`), all
    launched with the kernel, so they run concurrently as NCCL runs a group: the first keeps the kernel's node id,
    the others take ids from ``spare_id`` on. Each has its own size, peer and tag from its record_param_comms op;
    the kernel's Kineto args describe the whole batch, so only its process group's name and ranks are used."""
    launcher = ctx["by_id"][hid]
    desc = (f"{src}: {where}: batched SendRecv kernel node {gid} ({launcher['name']} | {_short(kname)}, launched "
            f"by host node id {hid} of {ctx['host_path']})")
    members = _batch_members(ctx, hid, desc)
    group_args = {k: v for k, v in kargs.items() if k in ("Process Group Name", "Process Group Ranks")}
    out = []
    for k, (op, info) in enumerate(members):
        ntype = T.COMM_SEND_NODE if info["coll"] == "send" else T.COMM_RECV_NODE
        nid = gid if k == 0 else spare_id + k - 1
        name = f"{launcher['name']} | {kname} | {info['coll']} {k + 1}/{len(members)}"
        ins = op.get("inputs", {})
        peer, tag, group = _p2p_peer(ctx, ntype, nid, name, op["id"], pg or None, group_args, src, where)
        attrs = {"is_cpu_op": False, "stream": _as_int(stream, src, {"id": gid, "name": kname}, "stream"),
                 "comm_size": _tensor_bytes(ins.get("values", []), ins.get("types", [])) or _param_comms_bytes(op),
                 _P2P[ntype][2]: peer, "comm_tag": tag}
        if pg or group:
            attrs["pg_name"] = str(pg or group)
        out.append(_node(nid, name, ntype, [hid], [hid], dur, attrs, ins, src, values=False,
                         outs=op.get("outputs", {})))
    return out


def _map_local(ctx, local, info, kargs, group_name, node_desc, how):
    """(global rank, group name) of the group-local rank ``local`` (see _p2p_peer)."""
    if local < 0:
        raise ConfigError(f"{node_desc}: peer {local} (from {how}) is not a rank")
    listed = _rank_list(kargs.get("Process Group Ranks"))
    if listed is not None:
        ranks, complete = listed
        if 0 <= local < len(ranks):
            return ranks[local], group_name
        if complete:
            raise ConfigError(f"{node_desc}: peer {local} (from {how}) is outside its process group, whose "
                              f"{len(ranks)} ranks are {ranks} (Kineto args 'Process Group Ranks')")
    group = None
    if group_name is not None:
        group = next((g for g in ctx["groups"] if str(g["pg_name"]) == group_name), None)
    if group is None and info is not None and info["pg_id"] is not None:
        group = _group_by_id(ctx["groups"], info["pg_id"])
    if group is not None:
        name = str(group["pg_name"])
        members = group.get("ranks") or []
        if not members:  # the group spans every rank: group ranks are global ranks
            return local, name
        if not 0 <= local < len(members):
            raise ConfigError(f"{node_desc}: peer {local} (from {how}) is outside process group {name!r}, whose "
                              f"{len(members)} ranks are {members} (from '## process_group:init ##')")
        if _as_rank(members[local]) is None:
            raise ConfigError(f"{node_desc}: process group {name!r} in '## process_group:init ##' lists "
                              f"{members[local]!r} as a rank")
        return _as_rank(members[local]), name
    if info is not None and info["stride"] is not None and info["stride"] > 0 and info["start"] is not None \
            and info["start"] >= 0:
        if info["size"] is not None and not 0 <= local < info["size"]:
            raise ConfigError(f"{node_desc}: peer {local} (from {how}) is outside its process group of "
                              f"{info['size']} ranks")
        return info["start"] + local * info["stride"], group_name
    desc = info["pg_desc"] if info is not None else None
    size = info["size"] if info is not None else None
    if group_name == "0" or desc == "default_pg" or (size is not None and size == ctx["world"]):
        return local, group_name
    known = ", ".join(repr(str(g["pg_name"])) for g in ctx["groups"]) or "none"
    group = (repr(group_name) if group_name is not None else
             f"id {info['pg_id']}" if info is not None and info["pg_id"] is not None else "(unnamed)")
    raise ConfigError(f"{node_desc}: peer {local} (from {how}) is a rank of process group {group}, which is not "
                      f"the world group and whose global ranks are unknown: expected Kineto args 'Process Group "
                      f"Ranks', the group in a '## process_group:init ##' node (groups there: {known}), or "
                      "global_rank_start/global_rank_stride in its record_param_comms")


