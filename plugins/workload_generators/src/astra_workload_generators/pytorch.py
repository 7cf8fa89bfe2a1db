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
- the communication of CPU backends (gloo), which has no kernel and no ``record_param_comms``, comes from the
  ``c10d::*`` host ops (:mod:`.pytorch_c10d`): COMM_COLL / COMM_SEND / COMM_RECV nodes after the other ids;
- CPU durations are the Kineto events' exclusive times (:mod:`.pytorch_kineto`), cpu_ops and user annotations
  alike, as chakra_trace_link gives them, but the profiler step, the optimizer step's scope and gloo's
  ``gloo:*`` scopes (whose time is their communication's);
- ``ctrl_deps`` = [parent] for every op whose parent is converted (wherever the file has it); ``data_deps``: a DFS
  over each thread root's call tree (children by id), every CPU op depending on the previous CPU op visited and
  every GPU op on its launching CPU op; across threads, a dependency on the op that produced an input tensor
  (tensor id); and on a CPU backend's communication, the op that waited for it.
"""

from __future__ import annotations

import os

from astra_sim.chakra import types as T
from astra_sim.chakra.writer import make_metadata
from astra_sim.errors import ConfigError

from .common import write_rank_files
from .pytorch_host import (
    _PROCESS_ROOT, _THREAD_ROOT, _ancestors, _as_int, _as_rank, _attr_map, _dur, _node, _own_rank,
    _process_groups, _tensor_bytes, _tensor_ids, load_host_trace,
)
from .pytorch_alltoall import exchange_nodes, find_splits, is_uneven
from .pytorch_checks import check_ranks
from .pytorch_c10d import blocking, comm_nodes, comm_waiters, find_c10d_comms
from .pytorch_kineto import is_comm_marker, link_kineto, load_kineto_trace, read_kineto_trace
from .pytorch_nccl import (
    _P2P, _PARAM_COMMS, BATCHED_P2P, _batch_after, _batched_p2p_nodes, _comm_kind, _host_comm_ops,
    _p2p_peer, _param_comms_bytes,
)

__all__ = ["convert_pytorch", "convert_pytorch_trace", "load_host_trace", "load_kineto_trace"]

_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
# host ops whose own time is not simulated, as in Chakra: the profiler's step scope (chakra_trace_link ignores it:
# its gaps are waits as much as work) and the optimizer step's scope (its ops are timed on their own)
_UNTIMED = ("ProfilerStep#", "Optimizer.step")


def convert_pytorch_trace(host_path, kineto_path=None, *, rank=None, world_size=None, shared=False,
                          comms_from_host=False, force_exchange=False):
    """Convert one rank's host trace (+ Kineto) into (GlobalMetadata, nodes sorted by id, summary).

    ``rank``: the global rank this trace is (needed for send/recv; otherwise taken from a ``rank`` field of the
    host trace header or Kineto's ``distributedInfo``, which must agree with it when given). ``world_size``: the
    number of ranks, when known (bounds the p2p peers). ``shared``: the trace is copied to several ranks, so
    send/recv nodes are an error and the header rank is not checked. ``comms_from_host``: for a host trace without
    GPU kernels, turn its record_param_comms ops into collective and send/recv nodes (see _host_comm_ops);
    otherwise they are left out as Chakra's converter does, and counted in the summary's ``dropped_comms``.
    ``force_exchange``: run even all-to-alls with split sizes as send/recv too (:mod:`.pytorch_alltoall`)."""
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
    cpu_dur, spans, starts = {}, {}, {}
    groups = _process_groups(hnodes)
    if kineto_path is not None:
        kineto = read_kineto_trace(kineto_path)
        dist = kineto.info
        rank = _own_rank(dist, kineto_path, rank, "rank", "Kineto's distributedInfo", shared)
        if world_size is None and _as_rank(dist.get("world_size")) is not None:
            world_size = _as_rank(dist["world_size"])
        if not groups and isinstance(dist.get("pg_config"), list):  # the host trace has no process_group:init
            groups = [g for g in dist["pg_config"] if isinstance(g, dict) and "pg_name" in g
                      and isinstance(g.get("ranks", []), list)]
        kernels, cpu_dur, spans, starts = link_kineto(kineto, kineto_path, host_path, hnodes, children,
                                                       max(by_id, default=0) + 1)
        gpu.extend(kernels)
    host_comms = dropped_comms = 0
    if not gpu:  # no kernels at all: a host trace alone, or a CPU job's Kineto trace
        found = _host_comm_ops(hnodes, by_id, groups, host_path, max(by_id, default=0) + 1)
        if comms_from_host:
            gpu.extend(found)
            host_comms = len(found)
        else:
            dropped_comms = len(found)
    elif comms_from_host:
        source = "from the Kineto trace" if kineto_path is not None else "linked by chakra_trace_link"
        raise ConfigError(f"{host_path}: --comms-from-host is for traces without GPU kernels, but this one has "
                          f"{len(gpu)} ({source}): the kernels already give the collectives")
    # communication of the CPU backends (gloo): c10d host ops with no NCCL op under them
    nccl_launchers = {g[2] for g in gpu if "nccl" in g[1].lower()}
    c10d, not_simulated = find_c10d_comms(hnodes, children, groups, rank, world_size, host_path, nccl_launchers)
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

    # ctrl deps: the parent, wherever the file has it (torch 2.x writes an op when it ends, after its children;
    # Chakra's tools see parents first because chakra_trace_link sorts the nodes by id); the process root is left out
    ctrl = {n["id"]: [n["ctrl_deps"]] for n in hnodes
            if n["ctrl_deps"] in visited and n["ctrl_deps"] != n["id"] and not is_gpu[n["id"]]}

    # CPU-backend communication: the ops that wait for it (blocking: the next op of the thread; asynchronous: the
    # first op that touches its tensors), and its nodes, with ids after every host and GPU id
    spare_id = max([n["id"] for n in hnodes] + [g[0] for g in gpu], default=0) + 1
    issued = [(c, spare_id + k, blocking(c, by_id[c.launcher], spans, starts)) for k, c in enumerate(c10d)]
    positions = {nid: i for i, nid in enumerate(order)}

    def subtree_end(hid):
        end, stack = positions[hid] + 1, [hid]
        while stack:
            for c in children.get(stack.pop(), []):
                if c["id"] in positions:
                    end = max(end, positions[c["id"]] + 1)
                    stack.append(c["id"])
        return end

    c10d_nodes, ready, used, exchanged = comm_nodes(c10d, by_id, spans, spare_id, spare_id + len(c10d), host_path,
                                                    rank, force_exchange)
    for waiter, comm_ids in comm_waiters(issued, order, subtree_end, thread_of, by_id).items():
        # (an all-to-all run as an exchange is waited for by all its sends and receives)
        data_deps[waiter] = data_deps.get(waiter, []) + [i for g in comm_ids for i in exchanged.get(g, [g])]
    spare_id += len(c10d) + used

    nodes = []
    counts = {"cpu": 0, "gpu_comp": 0, "coll": 0, "p2p": 0, "metadata": 0, "a2a_uneven": 0, "a2a_even_splits": 0}
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
        if n["name"].startswith(_UNTIMED) or is_comm_marker(n["name"]):
            dur = 0  # (a comm marker's time is its communication's, given to the comm node)
        else:
            dur = _dur(n.get("exclusive_dur", cpu_dur.get(n["id"], 0)))
        nodes.append(_node(n["id"], n["name"], ntype, data_deps.get(n["id"], []), ctrl.get(n["id"], []), dur,
                           attrs, ins, host_path, outs=n.get("outputs", {})))
    ctx = {"by_id": by_id, "children": children, "is_gpu": is_gpu, "groups": groups,
           "rank": rank, "world": world_size, "shared": shared, "host_path": host_path, "order": order,
           "thread_of": thread_of, "nccl_launchers": nccl_launchers}
    nodes.extend(c10d_nodes)
    counts["coll"] += sum(1 for n in c10d_nodes if n.type == T.COMM_COLL_NODE)
    counts["p2p"] += sum(1 for n in c10d_nodes if n.type != T.COMM_COLL_NODE)
    for c in c10d:
        if c.splits is not None:
            counts["a2a_uneven" if is_uneven(c.splits[0]) else "a2a_even_splits"] += 1
    for gid, kname, hid, dur, stream, pg, src, where, kargs, kind in gpu:
        launcher = by_id[hid]
        names = [launcher["name"].lower()] + [a["name"].lower() for a in _ancestors(by_id, hid, limit=7)]
        if kind is None and launcher["name"] == _PARAM_COMMS and "sendrecv" in kname.lower().replace("_", "") \
                and _batch_after(ctx, hid) is not None:
            ntype, ctype = None, BATCHED_P2P  # hung on the batch's last op, before nccl:coalesced
        else:
            ntype, ctype = kind if kind is not None else _comm_kind(kname, names, src, where)
        if ctype == T.ALL_TO_ALL and ntype == T.COMM_COLL_NODE:
            found = find_splits(ctx, hid)
            if found is not None:
                uneven = is_uneven(found[1])
                counts["a2a_uneven" if uneven else "a2a_even_splits"] += 1
                if uneven or force_exchange:
                    exchange = exchange_nodes(ctx, gid, f"{launcher['name']} | {kname}", hid, dur, stream, pg,
                                              kargs, src, where, spare_id)
                    spare_id += max(0, len(exchange) - 1)
                    nodes.extend(exchange)
                    counts["p2p"] += len(exchange)
                    continue
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
    counts["cpu_backend_comms"] = len(c10d)
    counts["blocking_comms"] = sum(1 for _, _, block in issued if block)
    counts["rendezvous_notes"] = ready
    counts["not_simulated"] = not_simulated
    return gm, nodes, counts




def _per_rank(path, rank):
    return os.fspath(path).replace("{rank}", str(rank)) if path is not None else None


def convert_pytorch(host, output, *, kineto=None, rank=None, ranks=None, comms_from_host=False):
    """Write ``<output>.<r>.et``. ``rank``: convert this one rank's trace into ``<output>.<rank>.et``. ``ranks``:
    write ranks 0..N-1; when ``host`` (and ``kineto``) contain ``{rank}`` each rank reads its own files, otherwise
    the one trace is copied to every rank (a data-parallel assumption, refused for traces with send/recv, whose
    peers are rank-specific). The rank (R or the ``{rank}`` index) is checked against the trace's own, if it says
    one, and used to check the send/recv peers. Returns a summary dict: the first rank's counts (nodes, cpu, gpu_comp,
    coll, p2p, metadata, host_comms, dropped_comms, cpu_backend_comms, blocking_comms, rendezvous_notes,
    not_simulated, a2a_uneven, a2a_even_splits: all-to-alls with split sizes run as send/recv or kept as the
    collective), ``per_rank`` (every rank's counts), ``ranks``, ``paths``, ``files`` (traces converted) and
    ``warnings`` (:func:`.pytorch_checks.check_ranks` across the ranks written)."""
    if (rank is None) == (ranks is None):
        raise ConfigError("give exactly one of --rank R or --ranks N")
    wanted = [rank] if rank is not None else list(range(ranks))
    per_rank = "{rank}" in os.fspath(host) or (kineto is not None and "{rank}" in os.fspath(kineto))
    # a trace copied to several ranks has no rank of its own (send/recv are then an error)
    shared = rank is None and not per_rank and ranks > 1
    cache = {}
    keys = [(_per_rank(host, r), _per_rank(kineto, r), None if shared else r) for r in wanted]
    for key in keys:
        if key not in cache:
            cache[key] = convert_pytorch_trace(key[0], key[1], rank=key[2], world_size=ranks, shared=shared,
                                               comms_from_host=comms_from_host)
    # an uneven all-to-all on one rank makes every rank's all-to-all with splits an exchange of sends and receives
    # (a rank whose own splits happen to be even would otherwise wait in a collective its peers never join)
    if any(c[2]["a2a_uneven"] for c in cache.values()):
        for key, (_, _, counts) in list(cache.items()):
            if counts["a2a_even_splits"]:
                cache[key] = convert_pytorch_trace(key[0], key[1], rank=key[2], world_size=ranks, shared=shared,
                                                   comms_from_host=comms_from_host, force_exchange=True)
    metas, lists, per_rank_counts = [], [], []
    for key in keys:
        gm, nodes, counts = cache[key]
        metas.append(gm)
        lists.append(nodes)
        per_rank_counts.append(counts)
    warnings = check_ranks(dict(zip(wanted, lists)))
    from .common import ensure_parent
    from astra_sim.chakra import write_et

    ensure_parent(output)
    paths = []
    if rank is not None:
        path = f"{output}.{rank}.et"
        write_et(path, metas[0], lists[0])  # its ChakraError names the file (a full disk: the set is kept elsewhere)
        paths.append(path)
    else:
        paths = write_rank_files(output, metas, lists)
    return dict(per_rank_counts[0], paths=paths, files=len(cache), ranks=wanted, per_rank=per_rank_counts,
                warnings=warnings)
