"""PyTorch execution traces (host ET, optionally with its Kineto device trace) to Chakra ETs.

Follows mlcommons Chakra 1.0.0's ``chakra_converter PyTorch`` (and, for the Kineto link, ``chakra_trace_link``):

- every host op except the process root becomes a node with its host id; ``## process_group:init ##`` becomes a
  METADATA node whose ``inputs.values`` is ``str(values)`` (``"['[{...}]']"``, what the simulator parses with
  ``json.loads(info[2:-2])``), everything else a COMP node with ``is_cpu_op`` True;
- GPU kernels (from Kineto, or ``cat`` nodes already linked into the host trace by chakra_trace_link) become nodes
  with fresh ids after the host ids: NCCL kernels COMM_COLL (``comm_type``, ``comm_size``, ``pg_name``) or
  COMM_SEND/RECV, others COMP with the kernel's measured duration; named ``<launching op> | <kernel>``, with the
  launching op's input and output shapes/types;
- COMM_SEND/RECV nodes also get the peer's global rank (``comm_dst`` / ``comm_src``, int32) and ``comm_tag``
  (int32), which Chakra's converter does not write (see ``_p2p_peer`` for where the peer comes from);
- every host op keeps its ``outputs`` IOInfo (``str()`` of values/shapes/types, as Chakra writes it);
- attributes rf_id, fw_parent, seq_id, scope, tid, fw_tid (int64), op_schema (string), is_cpu_op (bool),
  stream (int64);
- ``ctrl_deps`` = [parent] when the parent came earlier in the host file; ``data_deps``: a DFS over each thread
  root's call tree (children by id), every CPU op depending on the previous CPU op visited and every GPU op on
  its launching CPU op; plus, across threads, a dependency on the op that produced an input tensor (tensor id).
"""

from __future__ import annotations

import json
import os
import re
import zlib

from astra_sim.chakra import make_node, types as T
from astra_sim.chakra.writer import make_metadata
from astra_sim.errors import ConfigError

from .common import write_rank_files

__all__ = ["convert_pytorch", "convert_pytorch_trace", "load_host_trace", "load_kineto_trace"]

_PROCESS_ROOT = "[pytorch|profiler|execution_trace|process]"
_THREAD_ROOT = "[pytorch|profiler|execution_trace|thread]"
_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_COLL_WORDS = (("allreduce", T.ALL_REDUCE), ("alltoall", T.ALL_TO_ALL), ("allgather", T.ALL_GATHER),
               ("reducescatter", T.REDUCE_SCATTER), ("broadcast", T.BROADCAST))
_PARAM_COMMS = "record_param_comms"
# node type -> (record_param_comms collective name, Kineto key of the peer's global rank, Chakra attribute, word)
_P2P = {T.COMM_SEND_NODE: ("send", "Dst Rank", "comm_dst", "destination"),
        T.COMM_RECV_NODE: ("recv", "Src Rank", "comm_src", "source")}
# ProcessGroupNCCL's profiling title of a p2p op: "nccl:send <my group rank>-><peer>" / "nccl:recv <me><-<peer>"
_TITLE_RE = re.compile(r"nccl:(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")
_TAG_SPACE = 1 << 28  # comm_tag stays an int32 below the simulator's collective tag base (500,000,000)


def _load_json(path, what):
    """A JSON file, gzip-compressed or not (PyTorch and Kineto traces are often saved as ``.json.gz``)."""
    from astra_sim.safeio import MAX_INPUT_BYTES, decode_utf8, gunzip, parse_json, read_bytes

    raw = read_bytes(path, what, MAX_INPUT_BYTES)
    if raw[:2] == b"\x1f\x8b":
        raw = gunzip(raw, path, what)  # bounded: a gzip bomb stops at the input limit
    return parse_json(decode_utf8(raw, path, what), path, what)


# Host ET schema 1.0.1 (PyTorch 2.0/2.1) keeps a node's parent in "parent", its inputs and outputs as flat lists
# beside "input_shapes"/"input_types" ("output_..."), and its attributes as top-level fields; 1.0.2 and later use
# "ctrl_deps", {values, shapes, types} objects and an "attrs" list. Old nodes are rewritten to the new layout.
_OLD_ATTR_TYPES = {"rf_id": "uint64", "fw_parent": "uint64", "seq_id": "int64", "scope": "uint64", "tid": "uint64",
                   "fw_tid": "uint64", "op_schema": "string"}


def _is_old_layout(n):
    return "ctrl_deps" not in n and "parent" in n and isinstance(n.get("inputs", []), list)


def _upgrade_old_node(n):
    """A schema-1.0.1 host node in the 1.0.2+ layout (see _OLD_ATTR_TYPES)."""
    new = {k: v for k, v in n.items() if k not in _OLD_ATTR_TYPES and k not in (
        "parent", "inputs", "input_shapes", "input_types", "outputs", "output_shapes", "output_types")}
    new["ctrl_deps"] = n["parent"]
    for key in ("input", "output"):
        new[key + "s"] = {"values": n.get(key + "s", []), "shapes": n.get(key + "_shapes", []),
                          "types": n.get(key + "_types", [])}
    new["attrs"] = [{"name": k, "type": t, "value": n[k]} for k, t in _OLD_ATTR_TYPES.items() if k in n]
    return new


def _int_field(path, rec, where, key, default=None):
    value = rec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        if value is None and default is None:
            raise ConfigError(f"{path}: {where}: missing integer field {key!r}")
        raise ConfigError(f"{path}: {where}: field {key!r} must be an integer, got {value!r}")
    return value


def load_host_trace(path):
    """Read and check a PyTorch host ET; returns (header dict, list of node dicts in file order)."""
    data = _load_json(path, "PyTorch host execution trace")
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ConfigError(f"{path}: not a PyTorch host execution trace (expected an object with a 'nodes' list)")
    seen = set()
    for i, n in enumerate(data["nodes"]):
        where = f"nodes[{i}]"
        if not isinstance(n, dict):
            raise ConfigError(f"{path}: {where}: expected an object, got {type(n).__name__}")
        if _is_old_layout(n):
            n = data["nodes"][i] = _upgrade_old_node(n)
        nid = _int_field(path, n, where, "id")
        where = f"nodes[{i}] (id {nid})"
        if nid in seen:
            raise ConfigError(f"{path}: {where}: duplicate node id {nid}")
        seen.add(nid)
        if not isinstance(n.get("name"), str):
            raise ConfigError(f"{path}: {where}: missing string field 'name'")
        _int_field(path, n, where, "ctrl_deps")
        for key in ("inputs", "outputs"):
            io = n.get(key, {})
            if not isinstance(io, dict) or not all(isinstance(io.get(k, []), list)
                                                   for k in ("values", "shapes", "types")):
                raise ConfigError(f"{path}: {where} {n['name']!r}: {key!r} must be an object of "
                                  "'values'/'shapes'/'types' lists")
        attrs = n.get("attrs", [])
        if not isinstance(attrs, list) or not all(isinstance(a, dict) and "name" in a for a in attrs):
            raise ConfigError(f"{path}: {where} {n['name']!r}: 'attrs' must be a list of {{name, type, value}}")
    return data, data["nodes"]


def load_kineto_trace(path, *, with_info=False):
    """Read a Kineto trace; returns (GPU events, cpu_op events by External id), plus its ``distributedInfo`` dict
    ({} if none) when ``with_info``."""
    data = _load_json(path, "Kineto trace")
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise ConfigError(f"{path}: not a Kineto trace (expected an object with a 'traceEvents' list)")
    gpu, cpu_ops = [], {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise ConfigError(f"{path}: traceEvents[{i}]: expected an object, got {type(ev).__name__}")
        cat = ev.get("cat")
        if cat not in _GPU_CATS and cat != "cpu_op":
            continue
        where = f"traceEvents[{i}] ({_short(ev.get('name'))!r})"
        args = ev.get("args", {})
        if not isinstance(args, dict):
            raise ConfigError(f"{path}: {where}: 'args' must be an object")
        ext = args.get("External id")
        if cat == "cpu_op":
            if ext is not None:
                cpu_ops.setdefault(ext, ev)
            continue
        dur = ev.get("dur")
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or dur < 0:
            raise ConfigError(f"{path}: {where}: GPU event needs a duration 'dur' >= 0 (µs), got {dur!r}")
        if not isinstance(ev.get("name"), str):
            raise ConfigError(f"{path}: {where}: GPU event needs a string 'name'")
        if ext is None:
            raise ConfigError(f"{path}: {where}: GPU event has no args 'External id' to find its launching op")
        gpu.append((i, ev))
    if with_info:
        info = data.get("distributedInfo")
        return gpu, cpu_ops, info if isinstance(info, dict) else {}
    return gpu, cpu_ops


def _short(name, limit=100):
    """A kernel name cut for an error message (templated CUDA kernel names run to thousands of characters)."""
    return name if not isinstance(name, str) or len(name) <= limit else name[:limit - 3] + "..."


def _attr_map(node):
    return {a["name"]: a.get("value") for a in node.get("attrs", [])}


def _tensor_bytes(values, types):
    """Sum of numel*elem_bytes over tensor inputs ([id, storage, offset, numel, elem_bytes, device])."""
    total = 0

    def one(v):
        if isinstance(v, list) and len(v) >= 5 and all(isinstance(x, int) for x in v[3:5]):
            return v[3] * v[4]
        return 0

    for v, t in zip(values, types):
        if isinstance(t, str) and t.startswith("Tensor"):
            total += one(v)
        elif isinstance(t, str) and t.startswith("GenericList[Tensor"):
            total += sum(one(x) for x in v if isinstance(x, list))
    return total


def _tensor_ids(values, types, prefix="Tensor"):
    out = []
    for v, t in zip(values, types):
        if isinstance(t, str) and t.startswith(prefix) and isinstance(v, list) and v:
            out.append(v[0])
        elif isinstance(t, str) and t.startswith("GenericList[Tensor") and isinstance(v, list):
            out.extend(x[0] for x in v if isinstance(x, list) and x)
    return [i for i in out if isinstance(i, (int, str))]  # tensor ids; anything else is not a tensor record


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


def _as_rank(value):
    """``value`` as an integer rank (a JSON int, or a decimal string as Kineto writes some of them), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _rank_list(value):
    """Kineto's "Process Group Ranks" ("[2, 3]", or a list) as (leading ints, complete?); PyTorch truncates long
    lists to 30 entries followed by "...". None when absent or empty."""
    if isinstance(value, list):
        items = value
    elif isinstance(value, str):
        items = value.strip().strip('"').strip("[]").split(",")
    else:
        return None
    out = []
    for item in items:
        r = _as_rank(item)
        if r is None:
            return (out, False) if out else None  # "..." (truncated) or junk: keep what came before
        out.append(r)
    return (out, True) if out else None


def _process_groups(hnodes):
    """The process groups declared by ``## process_group:init ##`` host ops: dicts with at least pg_name and ranks.

    PyTorch's ``_World.pg_config_info`` (torch/distributed/distributed_c10d.py) records, per group, ``pg_name``,
    ``ranks`` (the group's *global* ranks in group-rank order, ``[]`` when the group spans every rank),
    ``group_size`` and, in older releases, ``backend_id`` (what the old record_param_comms layout passes as its
    process-group argument; the sample trace shows the same number in both places) or ``pg_id``; newer ones
    ``pg_desc``. The value is a JSON string inside ``inputs.values``."""
    groups = []
    for n in hnodes:
        if "process_group:init" not in n["name"]:
            continue
        for value in n.get("inputs", {}).get("values", []):
            items = value
            if isinstance(value, str):
                try:
                    items = json.loads(value)
                except ValueError:
                    continue
            if not isinstance(items, list):
                continue
            for item in items:
                if isinstance(item, dict) and "pg_name" in item and isinstance(item.get("ranks", []), list):
                    groups.append(item)
    return groups


def _group_by_id(groups, pg_id):
    """The ``## process_group:init ##`` group whose backend_id (or pg_id) is ``pg_id``: the old record_param_comms
    layout names its group by that number (different on every process). None if none is."""
    return next((g for g in groups if pg_id in (g.get("backend_id"), g.get("pg_id"))), None)


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
    other fields are read relative to it. For p2p, ``rank`` is the *peer* in the group's own numbering:
    ProcessGroupNCCL::send / ProcessGroupNCCL::recv (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp) pass
    ``dstRank`` / ``srcRank``, which distributed_c10d.send/recv/isend/irecv have already turned into a group rank
    (``get_group_rank``), and the profiler's saveNcclMeta (torch/csrc/profiler/util.cpp) maps it to the global
    "Dst Rank" / "Src Rank" with ``groupRanks[rank]``. Newer execution traces also copy the collective properties
    into attributes (collective_name, pg_name, pg_desc, pg_size, global_rank_start, global_rank_stride), used
    here when the inputs lack them.
    """
    vals = node.get("inputs", {}).get("values", [])
    info = {"coll": None, "peer": None, "pg_name": None, "pg_desc": None, "pg_id": None, "size": None,
            "start": None, "stride": None}
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


def _ancestors(by_id, node_id, limit=8):
    """The host ops above ``node_id``, its parent first: at most ``limit``, stopping before a root (a node that
    is its own parent) or a parent missing from the trace."""
    p = by_id[node_id]["ctrl_deps"]
    for _ in range(limit):
        if p not in by_id or p == by_id[p]["ctrl_deps"]:
            return
        yield by_id[p]
        p = by_id[p]["ctrl_deps"]


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


def _dur(value):
    return max(0, int(round(value or 0)))


def convert_pytorch_trace(host_path, kineto_path=None, *, rank=None, world_size=None, shared=False,
                          comms_from_host=False):
    """Convert one rank's host trace (+ Kineto) into (GlobalMetadata, nodes sorted by id, summary).

    ``rank``: the global rank this trace is (needed for send/recv; otherwise taken from a ``rank`` field of the
    host trace header or Kineto's ``distributedInfo``, which must agree with it when given). ``world_size``: the
    number of ranks, when known (bounds the p2p peers). ``shared``: the trace is copied to several ranks, so
    send/recv nodes are an error and the header rank is not checked. ``comms_from_host``: for a host trace without
    GPU kernels, turn its record_param_comms ops into collective and send/recv nodes (see _host_comm_ops);
    otherwise they are left out as Chakra's converter does, and counted in the summary's ``dropped_comms``."""
    header, hnodes = load_host_trace(host_path)
    rank = _own_rank(header, host_path, rank, "rank", "the host trace header", shared)
    by_id = {n["id"]: n for n in hnodes}
    children = {}
    for n in hnodes:
        if n["ctrl_deps"] != n["id"]:
            children.setdefault(n["ctrl_deps"], []).append(n)
    is_gpu = {n["id"]: "cat" in n for n in hnodes}

    # GPU ops: the host trace's own (chakra_trace_link output) plus Kineto kernels, each with its launcher id.
    gpu = []  # (id, name, launcher host id, dur, stream, pg_name, where)
    for n in hnodes:
        if is_gpu[n["id"]]:
            where = f"node id {n['id']} ({n['name']!r})"
            gpu.append((n["id"], n["name"], n["ctrl_deps"], _dur(n.get("exclusive_dur", n.get("inclusive_dur"))),
                        n.get("stream", 0), n.get("pg_name", ""), host_path, where, {}, None))
    cpu_dur = {}
    if kineto_path is not None:
        events, cpu_ops, dist = load_kineto_trace(kineto_path, with_info=True)
        rank = _own_rank(dist, kineto_path, rank, "rank", "Kineto's distributedInfo", shared)
        if world_size is None and _as_rank(dist.get("world_size")) is not None:
            world_size = _as_rank(dist["world_size"])
        if events and cpu_ops and not any("Record function id" in op.get("args", {}) for op in cpu_ops.values()):
            raise ConfigError(
                f"{kineto_path}: its cpu_op events carry no 'Record function id', which is what links a Kineto op "
                f"to the rf_id of a host op in {host_path} ('External id' is unrelated to rf_id); the profiler "
                "writes it since pytorch/pytorch#122948 (April 2024, after PyTorch 2.2), so this trace cannot be "
                "linked. Convert the host trace without --kineto (with --comms-from-host, its collectives then come "
                "from its record_param_comms ops), or record both traces again with a newer PyTorch")
        rf_ids = {op.get("args", {}).get("Record function id") for op in cpu_ops.values()}
        if events and rf_ids <= {0, "0", None}:
            raise ConfigError(
                f"{kineto_path}: every cpu_op has 'Record function id' 0, which is what the profiler writes when "
                "no execution-trace observer ran in the same profiling session, so its kernels cannot be matched "
                f"with the host ops of {host_path}: record both in one session (torch.profiler.profile("
                "execution_trace_observer=ExecutionTraceObserver().register_callback(...))), or convert the host "
                "trace without --kineto (with --comms-from-host for its collectives)")
        by_rf = {}
        for n in hnodes:
            rf = _attr_map(n).get("rf_id")
            if rf is not None and n["name"] not in (_PROCESS_ROOT, _THREAD_ROOT):  # (the roots have rf_id 0)
                by_rf.setdefault(rf, n["id"])
        for op in cpu_ops.values():
            hid = by_rf.get(op.get("args", {}).get("Record function id"))
            if hid is not None and isinstance(op.get("dur"), (int, float)):
                cpu_dur[hid] = op["dur"]
        next_id = max(by_id, default=0) + 1
        for i, ev in events:
            where = f"traceEvents[{i}] ({_short(ev['name'])!r})"
            args = ev.get("args", {})
            op = cpu_ops.get(args["External id"])
            hid = by_rf.get(op.get("args", {}).get("Record function id")) if op else None
            if hid is None:
                raise ConfigError(f"{kineto_path}: {where}: no cpu_op with External id {args['External id']!r} "
                                  f"matching a host op of {host_path} (by 'Record function id' = rf_id)")
            kargs = dict(op.get("args", {}))
            kargs.update(args)  # the kernel's own args first, then its cpu_op's (NCCL metadata may be on either)
            pg = kargs.get("Process Group Name", "")
            gpu.append((next_id, ev["name"], hid, _dur(ev["dur"]), args.get("stream", 0), pg, kineto_path, where,
                        kargs, None))
            next_id += 1
        # exclusive CPU durations: inclusive minus the matched host children's inclusive durations
        inclusive = dict(cpu_dur)
        for hid, inc in inclusive.items():
            kids = sum(inclusive.get(c["id"], 0) for c in children.get(hid, []))
            cpu_dur[hid] = max(0.0, inc - kids)
    groups = _process_groups(hnodes)
    host_comms = dropped_comms = 0
    if kineto_path is None and not gpu:
        found = _host_comm_ops(hnodes, by_id, groups, host_path, max(by_id, default=0) + 1)
        if comms_from_host:
            gpu.extend(found)
            host_comms = len(found)
        else:
            dropped_comms = len(found)
    elif comms_from_host:
        raise ConfigError(f"{host_path}: --comms-from-host is for host traces without GPU kernels, but "
                          + ("a Kineto trace was given" if kineto_path is not None else
                             f"this one has {len(gpu)} (linked by chakra_trace_link)")
                          + ": the kernels already give the collectives")
    gpu_children = {}
    for g in gpu:
        if g[2] not in by_id:
            raise ConfigError(f"{g[6]}: {g[7]}: launching op {g[2]} is not in {host_path}")
        gpu_children.setdefault(g[2], []).append(g)

    # data dependencies: DFS per thread root, CPU ops chained, GPU ops after their launcher
    data_deps = {}
    order = []
    producer = {}
    thread_of = {}
    roots = [n for n in hnodes if n["name"] == _THREAD_ROOT] or \
        [n for n in hnodes if n["ctrl_deps"] not in by_id or by_id[n["ctrl_deps"]]["name"] == _PROCESS_ROOT
         or n["ctrl_deps"] == n["id"]]
    roots = sorted((r for r in roots if r["name"] != _PROCESS_ROOT), key=lambda r: r["id"])
    visited = set()
    for t, root in enumerate(roots):
        last = None
        stack = [root]
        while stack:
            n = stack.pop()
            if n["id"] in visited or is_gpu[n["id"]]:
                continue
            visited.add(n["id"])
            thread_of[n["id"]] = t
            deps = [] if last is None else [last]
            ins = n.get("inputs", {})
            for tid in _tensor_ids(ins.get("values", []), ins.get("types", [])):
                p = producer.get(tid)
                if p is not None and thread_of[p] != t and p not in deps:
                    deps.append(p)
            data_deps[n["id"]] = deps
            order.append(n["id"])
            outs = n.get("outputs", {})
            for tid in _tensor_ids(outs.get("values", []), outs.get("types", [])):
                producer[tid] = n["id"]
            for g in gpu_children.get(n["id"], []):
                data_deps[g[0]] = [n["id"]]
            last = n["id"]
            stack.extend(sorted(children.get(n["id"], []), key=lambda c: c["id"], reverse=True))
    unreached = [n for n in hnodes if n["id"] not in visited and not is_gpu[n["id"]] and n["name"] != _PROCESS_ROOT]
    if unreached:
        n = unreached[0]
        raise ConfigError(f"{host_path}: node id {n['id']} ({n['name']!r}): not under any "
                          f"'{_THREAD_ROOT}' root (its parent {n['ctrl_deps']} does not lead to one)")

    # ctrl deps: the parent, when it came earlier in the file (Chakra's converter builds them in file order)
    ctrl = {}
    seen = set()
    for n in hnodes:
        p = n["ctrl_deps"]
        if p in seen and by_id[p]["name"] != _PROCESS_ROOT:
            ctrl[n["id"]] = [p]
        seen.add(n["id"])

    nodes = []
    counts = {"cpu": 0, "gpu_comp": 0, "coll": 0, "p2p": 0, "metadata": 0}
    for n in hnodes:
        if n["name"] == _PROCESS_ROOT or is_gpu[n["id"]]:
            continue
        a = _attr_map(n)
        attrs = {k: _as_int(a.get(k, 0), host_path, n, k) for k in _ATTRS}
        attrs["op_schema"] = str(a.get("op_schema", ""))
        attrs["is_cpu_op"] = True
        attrs["stream"] = 0
        ins = n.get("inputs", {})
        ntype = T.METADATA_NODE if "process_group:init" in n["name"] else T.COMP_NODE
        counts["metadata" if ntype == T.METADATA_NODE else "cpu"] += 1
        dur = 0 if n["name"].startswith("Optimizer.step") else _dur(n.get("exclusive_dur", cpu_dur.get(n["id"], 0)))
        nodes.append(_node(n["id"], n["name"], ntype, data_deps.get(n["id"], []), ctrl.get(n["id"], []), dur,
                           attrs, ins, host_path, outs=n.get("outputs", {})))
    ctx = {"by_id": by_id, "children": children, "is_gpu": is_gpu, "groups": groups,
           "rank": rank, "world": world_size, "shared": shared, "host_path": host_path, "order": order,
           "thread_of": thread_of, "nccl_launchers": {g[2] for g in gpu if "nccl" in g[1].lower()}}
    spare_id = max([n["id"] for n in hnodes] + [g[0] for g in gpu], default=0) + 1  # for batched p2p's extra nodes
    for gid, kname, hid, dur, stream, pg, src, where, kargs, kind in gpu:
        launcher = by_id[hid]
        names = [launcher["name"].lower()] + [a["name"].lower() for a in _ancestors(by_id, hid, limit=7)]
        if kind is None and launcher["name"] == _PARAM_COMMS and "sendrecv" in kname.lower().replace("_", "") \
                and _batch_after(ctx, hid) is not None:
            ntype, ctype = None, BATCHED_P2P  # hung on the batch's last op, before nccl:coalesced
        else:
            ntype, ctype = kind if kind is not None else _comm_kind(kname, names, src, where)
        if ctype == BATCHED_P2P:
            batch = _batched_p2p_nodes(ctx, gid, kname, hid, dur, stream, pg, src, where, kargs, spare_id)
            spare_id += len(batch) - 1
            nodes.extend(batch)
            counts["p2p"] += len(batch)
            continue
        ins = launcher.get("inputs", {})
        attrs = {"is_cpu_op": False, "stream": _as_int(stream, src, {"id": gid, "name": kname}, "stream")}
        name = f"{launcher['name']} | {kname}"
        if ntype in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE):
            if ntype == T.COMM_COLL_NODE:
                attrs["comm_type"] = ctype
            attrs["comm_size"] = _tensor_bytes(ins.get("values", []), ins.get("types", []))
            if kind is not None and attrs["comm_size"] == 0:
                attrs["comm_size"] = _param_comms_bytes(launcher)
            pg = None if pg in (None, "") else str(pg)
            p2p = None
            if ntype != T.COMM_COLL_NODE:
                p2p = _p2p_peer(ctx, ntype, gid, name, hid, pg, kargs, src, where)
                pg = pg or p2p[2]  # the group found for the peer, when Kineto did not name it
            if pg is not None:
                attrs["pg_name"] = pg
            if p2p is not None:
                attrs[_P2P[ntype][2]] = p2p[0]  # comm_dst for a send, comm_src for a receive
                attrs["comm_tag"] = p2p[1]
            counts["coll" if ntype == T.COMM_COLL_NODE else "p2p"] += 1
        else:
            counts["gpu_comp"] += 1
        nodes.append(_node(gid, name, ntype, data_deps.get(gid, [hid]), [hid], dur, attrs, ins, src,
                           values=False, outs=launcher.get("outputs", {})))
    nodes.sort(key=lambda x: x.id)
    meta = {}
    for key in ("schema", "pid", "time", "start_ts", "finish_ts"):
        if key in header:
            meta[key] = header[key]
    types = {"schema": "string_val", "pid": "uint64_val", "time": "string_val", "start_ts": "uint64_val",
             "finish_ts": "uint64_val"}
    try:
        gm = make_metadata(version="", attrs={k: (str(v) if types[k] == "string_val" else v) for k, v in meta.items()},
                           attr_types={k: types[k] for k in meta})
    except Exception as exc:  # a header value of the wrong type
        raise ConfigError(f"{host_path}: trace header {meta!r}: {exc}") from None
    counts["nodes"] = len(nodes)
    counts["host_comms"] = host_comms
    counts["dropped_comms"] = dropped_comms
    return gm, nodes, counts


def _own_rank(record, path, rank, key, what, shared):
    """``rank`` checked against ``record[key]`` (a header's rank): they must agree; None stays None unless the record
    says. A trace copied to several ranks (``shared``) is not checked."""
    said = _as_rank(record.get(key)) if isinstance(record, dict) else None
    if said is None or shared:
        return rank
    if rank is not None and said != rank:
        raise ConfigError(f"{path}: {what} says rank {said}, but it is being converted as rank {rank} "
                          "(check --rank / the '{rank}' file index)")
    return said


def _as_int(value, path, node, key):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: node id {node['id']} ({node['name']!r}): attribute {key!r} must be an integer, "
                          f"got {value!r}")
    return value


def _node(nid, name, ntype, data_deps, ctrl_deps, dur, attrs, ins, path, values=True, outs=None):
    """A Chakra node with the host op's inputs and outputs IOInfo as ``str()`` of its lists (as Chakra's converter
    writes them); ``values=False`` (GPU kernels) leaves out ``values``, keeping shapes and types."""
    from astra_sim.chakra import ChakraError

    outs = outs or {}
    try:
        return make_node(nid, name, ntype, data_deps=data_deps, ctrl_deps=ctrl_deps, duration_micros=dur,
                         attrs=attrs, inputs_values=str(ins.get("values", [])) if values else None,
                         inputs_shapes=str(ins.get("shapes", [])), inputs_types=str(ins.get("types", [])),
                         outputs_values=str(outs.get("values", [])) if values else None,
                         outputs_shapes=str(outs.get("shapes", [])), outputs_types=str(outs.get("types", [])))
    except ChakraError as exc:
        raise ConfigError(f"{path}: node id {nid} ({name!r}): {exc}") from None


def _per_rank(path, rank):
    return os.fspath(path).replace("{rank}", str(rank)) if path is not None else None


def convert_pytorch(host, output, *, kineto=None, rank=None, ranks=None, comms_from_host=False):
    """Write ``<output>.<r>.et``. ``rank``: convert this one rank's trace into ``<output>.<rank>.et``. ``ranks``:
    write ranks 0..N-1; when ``host`` (and ``kineto``) contain ``{rank}`` each rank reads its own files, otherwise
    the one trace is copied to every rank (a data-parallel assumption, refused for traces with send/recv, whose
    peers are rank-specific). The rank (R or the ``{rank}`` index) is checked against the trace's own, if it says
    one, and used to check the send/recv peers. Returns a summary dict."""
    if (rank is None) == (ranks is None):
        raise ConfigError("give exactly one of --rank R or --ranks N")
    wanted = [rank] if rank is not None else list(range(ranks))
    per_rank = "{rank}" in os.fspath(host) or (kineto is not None and "{rank}" in os.fspath(kineto))
    # a trace copied to several ranks has no rank of its own (send/recv are then an error)
    shared = rank is None and not per_rank and ranks > 1
    cache = {}
    metas, lists, summary = [], [], None
    for r in wanted:
        key = (_per_rank(host, r), _per_rank(kineto, r), None if shared else r)
        if key not in cache:
            cache[key] = convert_pytorch_trace(key[0], key[1], rank=key[2], world_size=ranks, shared=shared,
                                               comms_from_host=comms_from_host)
        gm, nodes, counts = cache[key]
        metas.append(gm)
        lists.append(nodes)
        summary = summary or counts
    from .common import ensure_parent
    from astra_sim.chakra import ChakraError, write_et

    ensure_parent(output)
    paths = []
    if rank is not None:
        path = f"{output}.{rank}.et"
        try:
            write_et(path, metas[0], lists[0])
        except ChakraError as exc:
            raise ConfigError(str(exc)) from None
        paths.append(path)
    else:
        paths = write_rank_files(output, metas, lists)
    return dict(summary, paths=paths, files=len(cache))
