"""Communication run by PyTorch's CPU backends (gloo): the ``c10d::*`` host ops.

On gloo PyTorch records no ``record_param_comms`` op and no kernel: a collective or a send/recv is only the
dispatcher op ``c10d::allreduce_`` (``send``, ``recv_``, ``_allgather_base_``, ...) that issued it, with its
tensors, its arguments (for p2p, the peer's group rank and the tag) and its ``op_schema``, plus a
``gloo:<operation>`` record_function scope (the *marker*) that lasts from the work's start to its end, on the
issuing thread for a blocking send/recv, on one of the group's ``pt_gloo_runloop`` worker threads otherwise. Each
such op becomes a COMM_COLL / COMM_SEND / COMM_RECV node here; a ``c10d::*`` op that has a ``record_param_comms``
or an NCCL op under it is NCCL's and is left to :mod:`.pytorch_nccl`.

- **Arguments** are read by name from ``op_schema`` (``c10d::send(Tensor[] tensors, ProcessGroup process_group,
  int dstRank, int tag) -> Work``), else at the positions of torch/csrc/distributed/c10d/Ops.cpp.
- **Sizes** (``comm_size``, bytes): the tensors the rank contributes: ``tensors`` (all-reduce, broadcast,
  send/recv), the input side of all-gather (bytes each rank contributes, the simulator's meaning), reduce-scatter
  and all-to-all (the whole input), summed over tensor lists. An ``alltoall_base_`` / ``all_to_all_single`` with
  uneven ``input_split_sizes`` / ``output_split_sizes`` is one send and one receive per peer instead
  (:mod:`.pytorch_alltoall`), which the op's waiter waits for.
- **Process group**: the op's ``ProcessGroup`` argument is recorded as ``<Object>``, so the group is inferred from
  the groups the trace declares (``## process_group:init ##``, else Kineto's ``distributedInfo.pg_config``): those
  that contain this rank and fit what the op says about its group (a p2p peer must be one of its ranks; an
  all-gather's output is group-size times its input; an all-to-all's split sizes have one entry per rank). Groups
  with the same ranks are interchangeable (the first declared is taken); groups with different ranks that all fit
  are an error naming the op and the candidates. A trace that declares no group runs on the world group.
- **Peers and tags**: the peer argument is a group rank (torch.distributed maps ``dst``/``src`` with
  ``get_group_rank``), mapped to a global rank through the group's ranks. gloo matches a send with a receive by
  peer and tag within the group, so ``comm_tag`` is derived from the group's name and the user tag, the same on
  both ranks (see :func:`p2p_tag`).
- **Blocking**: a blocking op (``dist.send``, ``dist.all_reduce`` without ``async_op``) holds its thread until the
  communication ends, so the op that follows it in its thread waits for the node; an asynchronous one (DDP's
  bucket all-reduces, ``isend``) lets the thread go on, and the first later op that reads or writes one of its
  tensors' storages (DDP's copy of the reduced bucket back into the gradients) waits for it. Whether an op
  blocked is read from the Kineto trace when it times the op and its marker (the thread started nothing else
  between the op's end and the marker's end), else from its ``async_op`` argument, else it is taken as blocking
  (``send``/``recv_`` have no such argument; ``isend``/``irecv`` then need the Kineto trace).
- **Functional collectives** (``_c10d_functional::all_reduce``, ``all_gather_into_tensor``,
  ``reduce_scatter_tensor``, ``all_to_all_single``, ``broadcast``, their in-place and coalesced forms; DTensor and
  ``torch.distributed._functional_collectives`` issue them) name their group (``group_name``), which must be one
  the trace declares, and are asynchronous: the ``_c10d_functional::wait_tensor`` on their output (the first op to
  touch it) waits for them.
- **Not simulated**: ``reduce_``, ``gather_``, ``scatter_`` (the simulator has no REDUCE, GATHER or SCATTER) and
  ``recv_any_source_`` (no peer): they stay CPU ops and are counted in the summary. ``barrier`` and
  ``monitored_barrier_`` synchronize all ranks: an all-reduce of the barrier's tensor (gloo's barrier is one).
"""

from __future__ import annotations

import bisect
import re
import zlib
from collections import namedtuple

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError

from .pytorch_alltoall import is_uneven, peer_messages, row_bytes
from .pytorch_host import _as_rank, _attr_map, _node
from .pytorch_kineto import is_comm_marker, thread_went_on

_FUNCTIONAL = "_c10d_functional::"
#: op -> (node type, comm_type, the argument holding what the rank contributes)
C10D_OPS = {
    "c10d::allreduce_": (T.COMM_COLL_NODE, T.ALL_REDUCE, "tensors"),
    "c10d::allreduce_coalesced_": (T.COMM_COLL_NODE, T.ALL_REDUCE, "tensors"),
    "c10d::broadcast_": (T.COMM_COLL_NODE, T.BROADCAST, "tensors"),
    "c10d::allgather_": (T.COMM_COLL_NODE, T.ALL_GATHER, "input_tensors"),
    "c10d::_allgather_base_": (T.COMM_COLL_NODE, T.ALL_GATHER, "input_tensor"),
    "c10d::allgather_coalesced_": (T.COMM_COLL_NODE, T.ALL_GATHER, "input_list"),
    "c10d::allgather_into_tensor_coalesced_": (T.COMM_COLL_NODE, T.ALL_GATHER, "inputs"),
    "c10d::reduce_scatter_": (T.COMM_COLL_NODE, T.REDUCE_SCATTER, "input_tensors"),
    "c10d::_reduce_scatter_base_": (T.COMM_COLL_NODE, T.REDUCE_SCATTER, "input_tensor"),
    "c10d::reduce_scatter_tensor_coalesced_": (T.COMM_COLL_NODE, T.REDUCE_SCATTER, "inputs"),
    "c10d::alltoall_": (T.COMM_COLL_NODE, T.ALL_TO_ALL, "input_tensors"),
    "c10d::alltoall_base_": (T.COMM_COLL_NODE, T.ALL_TO_ALL, "input"),
    "c10d::barrier": (T.COMM_COLL_NODE, T.ALL_REDUCE, "tensor"),
    "c10d::monitored_barrier_": (T.COMM_COLL_NODE, T.ALL_REDUCE, "tensor"),
    "c10d::send": (T.COMM_SEND_NODE, None, "tensors"),
    "c10d::recv_": (T.COMM_RECV_NODE, None, "tensors"),
    # functional collectives (torch.distributed._functional_collectives, DTensor; Functional.cpp): they name their
    # group ("group_name") and are waited for by _c10d_functional::wait_tensor
    _FUNCTIONAL + "all_reduce": (T.COMM_COLL_NODE, T.ALL_REDUCE, "input"),
    _FUNCTIONAL + "all_reduce_": (T.COMM_COLL_NODE, T.ALL_REDUCE, "input"),
    _FUNCTIONAL + "all_reduce_coalesced": (T.COMM_COLL_NODE, T.ALL_REDUCE, "inputs"),
    _FUNCTIONAL + "all_reduce_coalesced_": (T.COMM_COLL_NODE, T.ALL_REDUCE, "inputs"),
    _FUNCTIONAL + "all_gather_into_tensor": (T.COMM_COLL_NODE, T.ALL_GATHER, "input"),
    _FUNCTIONAL + "all_gather_into_tensor_out": (T.COMM_COLL_NODE, T.ALL_GATHER, "input"),
    _FUNCTIONAL + "all_gather_into_tensor_coalesced": (T.COMM_COLL_NODE, T.ALL_GATHER, "inputs"),
    _FUNCTIONAL + "reduce_scatter_tensor": (T.COMM_COLL_NODE, T.REDUCE_SCATTER, "input"),
    _FUNCTIONAL + "reduce_scatter_tensor_coalesced": (T.COMM_COLL_NODE, T.REDUCE_SCATTER, "inputs"),
    _FUNCTIONAL + "all_to_all_single": (T.COMM_COLL_NODE, T.ALL_TO_ALL, "input"),
    _FUNCTIONAL + "broadcast": (T.COMM_COLL_NODE, T.BROADCAST, "input"),
    _FUNCTIONAL + "broadcast_": (T.COMM_COLL_NODE, T.BROADCAST, "input"),
}
#: ops the simulator cannot run, and why
NOT_SIMULATED = {"c10d::reduce_": "no REDUCE collective", "c10d::gather_": "no GATHER collective",
                 "c10d::scatter_": "no SCATTER collective",
                 "c10d::recv_any_source_": "a receive from any rank has no peer"}
#: argument positions when a node has no op_schema (torch/csrc/distributed/c10d/Ops.cpp, Functional.cpp)
_POSITIONS = {"tensors": 0, "tensor": 0, "input_tensors": 1, "input_tensor": 1, "input_list": 1, "inputs": 1,
              "input": 1, "output_tensors": 0, "output_tensor": 0, "output": 0, "peer": 2, "tag": 3,
              "output_split_sizes": 3, "input_split_sizes": 4}
_FUNCTIONAL_POSITIONS = {"input": 0, "inputs": 0, "output_split_sizes": 1, "input_split_sizes": 2}
_TAG_SPACE = 1 << 28  # comm_tag stays an int32 below the simulator's collective tag base (500,000,000)

#: one communication op found in the host trace (see find_c10d_comms)
#: ``splits``: for an all-to-all with split sizes, (its _param_comms-like info with in_split / out_split, row
#: bytes, the group's global ranks); None otherwise
C10dComm = namedtuple("C10dComm", "launcher marker op ntype ctype size group peer tag storages splits",
                      defaults=(None,))


def c10d_op(name):
    """``name`` when it is a communication op this module reads (or knows it cannot simulate), else None."""
    return name if name in C10D_OPS or name in NOT_SIMULATED else None


def schema_args(schema):
    """Argument names of an ``op_schema`` string, in order (``[]`` when it cannot be read)."""
    if not isinstance(schema, str) or "(" not in schema:
        return []
    depth, body = 0, []
    for ch in schema[schema.index("(") + 1:]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        body.append(ch)
    names = []
    for arg in "".join(body).split(","):
        words = arg.split("=")[0].split()
        if len(words) >= 2:
            names.append(words[-1])
        elif words and words[0] != "*":
            return []  # an argument without a type: not a schema
    return names


def _arg(node, names, key):
    """(found, value, type) of argument ``key`` of a c10d host op, by schema name or by position."""
    values = node.get("inputs", {}).get("values", [])
    types = node.get("inputs", {}).get("types", [])
    functional = node["name"].startswith(_FUNCTIONAL)
    if key == "group_name" and not names:  # no schema: a functional collective's only string argument
        strings = [i for i, t in enumerate(types) if t == "String"]
        idx = strings[-1] if functional and strings else None
    elif names:
        if key == "peer":
            idx = next((i for i, n in enumerate(names) if re.fullmatch(r"(?i)(dst|src)(_?rank)?", n)), None)
        elif key == "async":
            idx = next((i for i, n in enumerate(names) if n in ("async_op", "asyncOp")), None)
        else:
            idx = names.index(key) if key in names else None
    elif key == "async":  # no schema: the only Bool argument, if there is exactly one
        bools = [i for i, t in enumerate(types) if t == "Bool"]
        idx = bools[0] if len(bools) == 1 else None
    else:
        idx = (_FUNCTIONAL_POSITIONS if functional else _POSITIONS).get(key)
    if idx is None or idx >= len(values):
        return False, None, None
    return True, values[idx], types[idx] if idx < len(types) else None


def _tensor_records(value, type_name):
    """Tensor records ``[id, storage, offset, numel, elem_bytes, device]`` in an argument whose type is a tensor, a
    list of them, or a list of lists of them (``Tensor(float)``, ``GenericList[Tensor(float)]``, ...)."""
    if not isinstance(type_name, str) or "Tensor" not in type_name:
        return []
    return _records(value)


def _records(value):
    if isinstance(value, list) and len(value) >= 5 and all(isinstance(x, int) and not isinstance(x, bool)
                                                             for x in value[:5]):
        return [value]
    if isinstance(value, list):
        return [r for item in value for r in _records(item)]
    return []


def _all_records(node, key="inputs"):
    io = node.get(key, {})
    return [r for v, t in zip(io.get("values", []), io.get("types", [])) for r in _tensor_records(v, t)]


def _bytes(records):
    return sum(max(0, r[3]) * max(0, r[4]) for r in records)


def p2p_tag(group, user_tag):
    """comm_tag of a gloo send/recv on process group ``group`` with tag ``user_tag``: the group's own tag (as
    :mod:`.pytorch_nccl` gives NCCL p2p, whose kernels take no tag) for tag 0, else a CRC-32 of both. The
    simulator matches a send with a receive by (tag, source, destination, size), first in first out, as gloo
    matches them by (peer, tag) within a group."""
    name = "" if group is None else str(group)
    if user_tag == 0:
        if name == "":
            return 0
        return int(name) % _TAG_SPACE if re.fullmatch(r"\d+", name) else zlib.crc32(name.encode()) % _TAG_SPACE
    return zlib.crc32(f"{name}/{user_tag}".encode()) % _TAG_SPACE


def is_nccl_backed(launcher, children, nccl_launchers=()):
    """Whether a c10d host op is NCCL's: a record_param_comms or ``nccl:*`` op under it (two levels), or an NCCL
    kernel launched by it or by an op under it (``nccl_launchers``: their host ids)."""
    level = [launcher]
    for _ in range(3):
        if any(n["id"] in nccl_launchers for n in level):
            return True
        level = [c for n in level for c in children.get(n["id"], [])]
        if any(c["name"] == "record_param_comms" or c["name"].startswith("nccl:") for c in level):
            return True
    return False


def find_c10d_comms(hnodes, children, groups, rank, world, path, nccl_launchers=()):
    """The communication ops of a host trace run by a CPU backend: (list of :data:`C10dComm` in id order,
    {c10d op name: count} of those the simulator cannot run). ``groups``: the process groups the trace declares
    (dicts with pg_name and ranks, [] = every rank); ``rank``: this trace's global rank (None when unknown or
    copied to several ranks); ``world``: the number of ranks, when known; ``nccl_launchers``: the host ids that
    launched NCCL kernels."""
    ops, skipped = [], {}
    markers = sorted((n for n in hnodes if is_comm_marker(n["name"])), key=lambda n: n["id"])
    marker_ids = [m["id"] for m in markers]
    taken = set()
    for n in sorted(hnodes, key=lambda n: n["id"]):
        op = c10d_op(n["name"])
        if op is None or is_nccl_backed(n, children, nccl_launchers):
            continue
        if op in NOT_SIMULATED:
            skipped[op] = skipped.get(op, 0) + 1
            continue
        ops.append(_read_op(n, op, (markers, marker_ids), taken, groups, rank, world, path))
    return ops, skipped


def _read_op(n, op, markers, taken, groups, rank, world, path):
    where = f"{path}: node id {n['id']} ({n['name']!r})"
    ntype, ctype, size_arg = C10D_OPS[op]
    names = schema_args(_attr_map(n).get("op_schema"))
    found, value, vtype = _arg(n, names, size_arg)
    records = _tensor_records(value, vtype) if found else []
    if not found or (not records and ntype != T.COMM_COLL_NODE):
        raise ConfigError(f"{where}: expected the tensors it {'sends' if ntype == T.COMM_SEND_NODE else 'moves'} "
                          f"in argument {size_arg!r}, got {value!r}")
    all_records = _all_records(n) + _all_records(n, "outputs")
    peer = tag = None
    if ntype != T.COMM_COLL_NODE:
        for key in ("peer", "tag"):
            ok, v, _ = _arg(n, names, key)
            if not ok or _as_rank(v) is None:
                what = "the peer's group rank" if key == "peer" else "the tag"
                raise ConfigError(f"{where}: expected {what} as an integer argument {key!r} "
                                  f"({'dstRank' if ntype == T.COMM_SEND_NODE else 'srcRank'}, tag), got {v!r}")
            if key == "peer":
                peer = _as_rank(v)
            else:
                tag = _as_rank(v)
    if op.startswith(_FUNCTIONAL):
        group = _named_group(n, names, groups, where)
    else:
        group = _group_of(n, op, names, peer, groups, rank, world, where)
    if peer is not None:
        peer = _global_peer(peer, group, rank, world, where, ntype)
    markers, marker_ids = markers
    first = bisect.bisect_right(marker_ids, n["id"])
    marker = next((markers[k] for k in range(first, len(markers))
                   if markers[k]["id"] not in taken and _shares_tensor(markers[k], all_records)), None)
    if marker is not None:
        taken.add(marker["id"])
    splits = _splits(n, names, records, group, world, where) if ctype == T.ALL_TO_ALL else None
    return C10dComm(n["id"], marker["id"] if marker is not None else None, op, ntype, ctype, _bytes(records),
                    None if group is None else str(group["pg_name"]), peer, tag,
                    {r[1] for r in all_records}, splits)


def _splits(n, names, records, group, world, where):
    """The split sizes of an all-to-all (``alltoall_base_``, ``all_to_all_single``): (info, row bytes, the
    group's global ranks), or None when it has none (``[]``: an even all-to-all)."""
    lists = []
    for key in ("input_split_sizes", "output_split_sizes"):
        ok, value, _ = _arg(n, names, key)
        if not ok or not isinstance(value, list) or not value:
            return None
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value):
            raise ConfigError(f"{where}: expected {key} as a list of counts >= 0, got {value!r}")
        lists.append(value)
    info = {"in_split": lists[0], "out_split": lists[1]}
    if len(lists[0]) != len(lists[1]):
        raise ConfigError(f"{where}: expected input and output split sizes with one count per group rank, got "
                          f"{lists[0]} and {lists[1]}")
    peers = _members(group, world) if group is not None else (list(range(world)) if world else None)
    if peers is None or len(peers) != len(lists[0]):
        raise ConfigError(f"{where}: its split sizes have {len(lists[0])} entries, but its process group's ranks "
                          f"are {peers if peers is not None else 'unknown (give --ranks N)'}")
    _, out_value, out_type = _arg(n, names, "output")
    out_bytes = _bytes(_tensor_records(out_value, out_type)) or _bytes(_all_records(n, "outputs"))
    return info, row_bytes(_bytes(records), out_bytes, info, where), peers


def _shares_tensor(marker, records):
    """Whether a gloo marker belongs to the op with tensor ``records``: a tensor in common (or none on either)."""
    mine = {r[0] for r in _all_records(marker)}
    return (not mine and not records) or bool(mine & {r[0] for r in records})


def _members(group, world):
    """The group's global ranks (None when it spans every rank and the world size is unknown)."""
    ranks = [_as_rank(r) for r in group.get("ranks") or []]
    if ranks:
        return ranks
    return list(range(world)) if world else None


def _named_group(n, names, groups, where):
    """The declared group a functional collective names in its ``group_name`` argument (None: no group declared,
    the world group)."""
    ok, name, _ = _arg(n, names, "group_name")
    if not ok or not isinstance(name, str):
        raise ConfigError(f"{where}: expected the process group's name as a string argument 'group_name', "
                          f"got {name!r}")
    group = next((g for g in groups if str(g["pg_name"]) == name), None)
    if group is None and groups:
        raise ConfigError(f"{where}: process group {name!r} is not among the groups the trace declares: "
                          f"{[str(g['pg_name']) for g in groups]}")
    return group


def _group_size(op, n, names):
    """The group size the op's own arguments imply, or None."""
    if op.startswith(_FUNCTIONAL):
        ok, size, _ = _arg(n, names, "group_size")
        return _as_rank(size) if ok and _as_rank(size) and _as_rank(size) > 0 else None
    op = op[len("c10d::"):]
    if op in ("_allgather_base_", "_reduce_scatter_base_"):
        o, i = (_bytes(_tensor_records(*_arg(n, names, key)[1:])) for key in ("output_tensor", "input_tensor"))
        if o and i:
            big, small = (o, i) if op == "_allgather_base_" else (i, o)
            return big // small if big % small == 0 else None
    if op == "allgather_":
        _, out, otype = _arg(n, names, "output_tensors")
        if isinstance(out, list) and len(out) == 1 and isinstance(out[0], list) \
                and all(len(_tensor_records(x, otype)) == 1 for x in out[0]):
            return len(out[0]) or None
    if op == "alltoall_base_":
        ok, splits, _ = _arg(n, names, "input_split_sizes") if names else (False, None, None)
        if ok and isinstance(splits, list) and splits:
            return len(splits)
    return None


def _group_of(n, op, names, peer, groups, rank, world, where):
    """The declared group an op ran on (see the module docstring); None when the trace declares none."""
    if not groups:
        return None
    size = _group_size(op, n, names)
    fits = []
    for g in groups:
        members = _members(g, world)
        if rank is not None and members is not None and rank not in members:
            continue
        count = len(members) if members is not None else _as_rank(g.get("group_size", g.get("pg_size")))
        if size is not None and count is not None and count != size:
            continue
        if peer is not None and count is not None and not 0 <= peer < count:
            continue
        fits.append(g)
    if not fits:
        said = f"group size {size}" if size is not None else f"peer {peer}" if peer is not None else "this rank"
        raise ConfigError(f"{where}: no declared process group fits ({said}, rank {rank}); groups: "
                          f"{[(g['pg_name'], g.get('ranks')) for g in groups]}")
    distinct = {tuple(_members(g, world) or ()) for g in fits}
    if len(distinct) > 1:
        raise ConfigError(f"{where}: the trace records the op's process group as <Object>, and "
                          f"{len(fits)} declared groups of this rank fit it: "
                          f"{[(g['pg_name'], g.get('ranks')) for g in fits]}; cannot tell which one it ran on")
    return fits[0]


def _global_peer(peer, group, rank, world, where, ntype):
    role = "destination" if ntype == T.COMM_SEND_NODE else "source"
    members = _members(group, world) if group is not None else None
    if members is not None:
        if not 0 <= peer < len(members):
            raise ConfigError(f"{where}: {role} group rank {peer} is outside process group "
                              f"{group['pg_name']!r} (ranks {members})")
        peer = members[peer]
    if peer is None or peer < 0 or (world is not None and peer >= world):
        raise ConfigError(f"{where}: {role} rank {peer} is not a rank of the job"
                          + (f" (ranks 0..{world - 1})" if world else ""))
    if rank is None:
        raise ConfigError(f"{where}: the rank of this trace is needed for its send/recv; convert with --rank R "
                          "or --ranks N and per-rank '{rank}' files (a send/recv trace cannot be copied to every "
                          "rank)")
    if peer == rank:
        raise ConfigError(f"{where}: the {role} rank {peer} is this rank itself")
    return peer


def blocking(comm, node, spans, starts):
    """Whether ``comm`` held its thread until it ended (see the module docstring)."""
    span, mspan = spans.get(comm.launcher), spans.get(comm.marker)
    if span is not None and mspan is not None:
        return not thread_went_on(starts, span, mspan.end, skip={comm.marker})
    if comm.op.startswith(_FUNCTIONAL):
        return False  # waited for by _c10d_functional::wait_tensor, which touches its output
    found, value, _ = _arg(node, schema_args(_attr_map(node).get("op_schema")), "async")
    if found and isinstance(value, bool):
        return not value
    return True


#: bytes of gloo's "ready to receive" notification (its op preamble: a handful of 64-bit fields)
READY_BYTES = 64
_READY_TAG_BIT = 1 << 27  # the notification's comm_tag: the message's, with this bit flipped


def comm_nodes(comms, by_id, spans, first_id, spare_id, path, rank=None, force_exchange=False):
    """The Chakra nodes of the :data:`C10dComm` ops: returns (nodes, number of rendezvous notifications, spare ids
    used, {op's node id: the node ids it became} for the all-to-alls run as exchanges).

    Each op's node has id ``first_id + k``: named ``<c10d op> | <marker>``, launched by (data and control
    dependency on) its c10d op, with the op's shapes and types, ``comm_size``, ``pg_name`` and, for p2p, the peer's
    global rank and ``comm_tag``; ``duration_micros`` is the marker's measured time (what the operation took in the
    traced run; the simulator models it instead).

    gloo's send/recv are a rendezvous (gloo/transport/tcp/pair.cc: a send waits for the peer's NOTIFY_RECV_READY,
    which the receiver sends when it posts the receive), so each receive also gets a ``READY_BYTES`` send of that
    notification to its source, launched with it, and each send a receive of it that the data send waits for (ids
    from ``spare_id`` on, tag :func:`ready_tag`). A blocking ``dist.send`` thus waits for the receiver, as it did.

    An all-to-all with uneven split sizes (or any split sizes, with ``force_exchange``) becomes one send and one
    receive per peer (see :mod:`.pytorch_alltoall`; gloo's alltoallv posts every receive at once, so no
    rendezvous notification is added), tagged :func:`p2p_tag` of its group and ``"all_to_all"``: the first keeps
    id ``first_id + k``, the others take spare ids."""
    out = []
    ready = used = 0
    exchanged = {}
    for k, c in enumerate(comms):
        launcher = by_id[c.launcher]
        marker = by_id.get(c.marker)
        mspan = spans.get(c.marker)
        if c.splits is not None and (force_exchange or is_uneven(c.splits[0])):
            info, row, peers = c.splits
            name = f"{launcher['name']} | {marker['name'] if marker is not None else 'communication'}"
            if rank is None or rank not in peers:
                raise ConfigError(f"{path}: node id {c.launcher} ({launcher['name']!r}): an all-to-all with uneven "
                                  f"split sizes needs the rank of its trace, one of its group's ranks {peers} (got "
                                  f"{rank}); give one trace per rank with '{{rank}}' in the file names")
            attrs = {"is_cpu_op": False, "comm_tag": p2p_tag(c.group, "all_to_all")}
            if c.group is not None:
                attrs["pg_name"] = c.group
            ids = []
            for ntype, key, verb, peer, nbytes in peer_messages(rank, peers, info["in_split"],
                                                                info["out_split"], row):
                nid = first_id + k if not ids else spare_id + used
                used += 1 if ids else 0
                ids.append(nid)
                out.append(_node(nid, f"{name} | {verb} {peer}", ntype, [c.launcher], [c.launcher], 0,
                                 dict(attrs, comm_size=nbytes, **{key: peer}), launcher.get("inputs", {}), path,
                                 values=False, outs=launcher.get("outputs", {})))
            exchanged[first_id + k] = ids
            continue
        attrs = {"is_cpu_op": False}
        if c.ntype == T.COMM_COLL_NODE:
            attrs["comm_type"] = c.ctype
        attrs["comm_size"] = c.size
        if c.group is not None:
            attrs["pg_name"] = c.group
        name = f"{launcher['name']} | {marker['name'] if marker is not None else 'communication'}"
        deps = [c.launcher]
        if c.ntype != T.COMM_COLL_NODE:
            tag = p2p_tag(c.group, c.tag)
            note = dict(attrs, comm_size=READY_BYTES, comm_tag=ready_tag(tag))
            if c.ntype == T.COMM_SEND_NODE:
                attrs.update(comm_dst=c.peer, comm_tag=tag)
                note.update(comm_src=c.peer)
                ntype, nname = T.COMM_RECV_NODE, f"{name} | wait until ready to receive"
            else:
                attrs.update(comm_src=c.peer, comm_tag=tag)
                note.update(comm_dst=c.peer)
                ntype, nname = T.COMM_SEND_NODE, f"{name} | ready to receive"
            out.append(_node(spare_id + used, nname, ntype, [c.launcher], [c.launcher], 0, note, {}, path,
                             values=False))
            deps = [spare_id + used] if c.ntype == T.COMM_SEND_NODE else deps
            ready += 1
            used += 1
        dur = max(0, int(round(mspan.end - mspan.start))) if mspan is not None else 0
        out.append(_node(first_id + k, name, c.ntype, deps, [c.launcher], dur, attrs,
                         launcher.get("inputs", {}), path, values=False, outs=launcher.get("outputs", {})))
    return out, ready, used, exchanged


def ready_tag(tag):
    """comm_tag of the ready-to-receive notification of a gloo message with tag ``tag``."""
    return tag ^ _READY_TAG_BIT


def comm_waiters(issued, order, subtree_end, thread_of, by_id):
    """{host op id: [comm node ids it waits for]} for ``issued`` = [(C10dComm, its node id, blocking?)]: for a
    blocking op, the first op of its thread's chain (``order``, the DFS order of the host ops) after the launching
    op's subtree (``subtree_end(host id)``: the position in ``order`` after it); for an asynchronous one, the first
    later op of that thread that reads or writes one of its storages. Comm markers never wait."""
    waits = {}
    touching = None  # storage -> positions in ``order`` of the (non-marker) ops that touch it, built when needed
    thread_end = {}
    for i, nid in enumerate(order):
        thread_end[thread_of[nid]] = i + 1
    for c, gid, block in issued:
        thread = thread_of.get(c.launcher)
        if thread is None:
            continue
        start, end = subtree_end(c.launcher), thread_end[thread]
        target = None
        if block:
            target = next((order[j] for j in range(start, end) if not is_comm_marker(by_id[order[j]]["name"])),
                          None)
        else:
            if touching is None:
                touching = _touch_index(order, by_id)
            hits = [lst[k] for lst in (touching.get(st, []) for st in c.storages)
                    for k in (bisect.bisect_left(lst, start),) if k < len(lst)]
            if hits and min(hits) < end:
                target = order[min(hits)]
        if target is not None:
            waits.setdefault(target, []).append(gid)
    return waits


def _touch_index(order, by_id):
    index = {}
    for i, nid in enumerate(order):
        node = by_id[nid]
        if is_comm_marker(node["name"]):
            continue
        for st in {r[1] for key in ("inputs", "outputs") for r in _all_records(node, key)}:
            index.setdefault(st, []).append(i)
    return index


