"""PyTorch execution traces (host ET, optionally with its Kineto device trace) to Chakra ETs.

Follows mlcommons Chakra 1.0.0's ``chakra_converter PyTorch`` (and, for the Kineto link, ``chakra_trace_link``):

- every host op except the process root becomes a node with its host id; ``## process_group:init ##`` becomes a
  METADATA node whose ``inputs.values`` is ``str(values)`` (``"['[{...}]']"``, what the simulator parses with
  ``json.loads(info[2:-2])``), everything else a COMP node with ``is_cpu_op`` True;
- GPU kernels (from Kineto, or ``cat`` nodes already linked into the host trace by chakra_trace_link) become nodes
  with fresh ids after the host ids: NCCL kernels COMM_COLL (``comm_type``, ``comm_size``, ``pg_name``) or
  COMM_SEND/RECV, others COMP with the kernel's measured duration; named ``<launching op> | <kernel>``, with the
  launching op's input shapes/types;
- attributes rf_id, fw_parent, seq_id, scope, tid, fw_tid (int64), op_schema (string), is_cpu_op (bool),
  stream (int64);
- ``ctrl_deps`` = [parent] when the parent came earlier in the host file; ``data_deps``: a DFS over each thread
  root's call tree (children by id), every CPU op depending on the previous CPU op visited and every GPU op on
  its launching CPU op; plus, across threads, a dependency on the op that produced an input tensor (tensor id).
"""

from __future__ import annotations

import json
import os

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


def _load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: the {what} is not valid JSON: {exc}") from None


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


def load_kineto_trace(path):
    """Read a Kineto trace; returns (GPU events, cpu_op events by External id)."""
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
        where = f"traceEvents[{i}] ({ev.get('name')!r})"
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
    return gpu, cpu_ops


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
        elif isinstance(t, str) and t.startswith("GenericList[Tensor"):
            out.extend(x[0] for x in v if isinstance(x, list) and x)
    return out


def _comm_kind(kernel, launcher_names, path, where):
    """(node type, comm_type or None) of a GPU kernel; (COMP, None) for non-NCCL kernels."""
    low = kernel.lower()
    if "nccl" not in low:
        return T.COMP_NODE, None
    flat = low.replace("_", "")
    if "sendrecv" in flat:
        if any("all_to_all" in n or "alltoall" in n for n in launcher_names):
            return T.COMM_COLL_NODE, T.ALL_TO_ALL
        if any("send" in n for n in launcher_names):
            return T.COMM_SEND_NODE, None
        if any("recv" in n for n in launcher_names):
            return T.COMM_RECV_NODE, None
        raise ConfigError(f"{path}: {where}: NCCL kernel {kernel!r} is a SendRecv but none of its launching ops "
                          f"{launcher_names} names send, recv or all_to_all")
    for word, ctype in _COLL_WORDS:
        if word in flat:
            return T.COMM_COLL_NODE, ctype
    raise ConfigError(f"{path}: {where}: NCCL kernel {kernel!r}: cannot tell the collective (expected AllReduce, "
                      "AllGather, ReduceScatter, AllToAll, Broadcast or SendRecv in its name)")


def _dur(value):
    return max(0, int(round(value or 0)))


def convert_pytorch_trace(host_path, kineto_path=None):
    """Convert one rank's host trace (+ Kineto) into (GlobalMetadata, nodes sorted by id, summary)."""
    header, hnodes = load_host_trace(host_path)
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
                        n.get("stream", 0), n.get("pg_name", ""), host_path, where))
    cpu_dur = {}
    if kineto_path is not None:
        events, cpu_ops = load_kineto_trace(kineto_path)
        by_rf = {}
        for n in hnodes:
            rf = _attr_map(n).get("rf_id")
            if rf is not None:
                by_rf.setdefault(rf, n["id"])
        for op in cpu_ops.values():
            hid = by_rf.get(op.get("args", {}).get("Record function id"))
            if hid is not None and isinstance(op.get("dur"), (int, float)):
                cpu_dur[hid] = op["dur"]
        next_id = max(by_id, default=0) + 1
        for i, ev in events:
            where = f"traceEvents[{i}] ({ev['name']!r})"
            args = ev.get("args", {})
            op = cpu_ops.get(args["External id"])
            hid = by_rf.get(op.get("args", {}).get("Record function id")) if op else None
            if hid is None:
                raise ConfigError(f"{kineto_path}: {where}: no cpu_op with External id {args['External id']!r} "
                                  f"matching a host op of {host_path} (by 'Record function id' = rf_id)")
            pg = args.get("Process Group Name", op.get("args", {}).get("Process Group Name", ""))
            gpu.append((next_id, ev["name"], hid, _dur(ev["dur"]), args.get("stream", 0), pg, kineto_path, where))
            next_id += 1
        # exclusive CPU durations: inclusive minus the matched host children's inclusive durations
        inclusive = dict(cpu_dur)
        for hid, inc in inclusive.items():
            kids = sum(inclusive.get(c["id"], 0) for c in children.get(hid, []))
            cpu_dur[hid] = max(0.0, inc - kids)
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
                           attrs, ins, host_path))
    for gid, kname, hid, dur, stream, pg, src, where in gpu:
        launcher = by_id[hid]
        names = [launcher["name"].lower()]
        p = launcher["ctrl_deps"]
        while p in by_id and p != by_id[p]["ctrl_deps"] and len(names) < 8:
            names.append(by_id[p]["name"].lower())
            p = by_id[p]["ctrl_deps"]
        ntype, ctype = _comm_kind(kname, names, src, where)
        ins = launcher.get("inputs", {})
        attrs = {"is_cpu_op": False, "stream": _as_int(stream, src, {"id": gid, "name": kname}, "stream")}
        if ntype in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE):
            if ntype == T.COMM_COLL_NODE:
                attrs["comm_type"] = ctype
            attrs["comm_size"] = _tensor_bytes(ins.get("values", []), ins.get("types", []))
            if pg not in (None, ""):
                attrs["pg_name"] = str(pg)
            counts["coll" if ntype == T.COMM_COLL_NODE else "p2p"] += 1
        else:
            counts["gpu_comp"] += 1
        name = f"{launcher['name']} | {kname}"
        nodes.append(_node(gid, name, ntype, data_deps.get(gid, [hid]), [hid], dur, attrs, ins, src,
                           values=False))
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
    return gm, nodes, counts


def _as_int(value, path, node, key):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: node id {node['id']} ({node['name']!r}): attribute {key!r} must be an integer, "
                          f"got {value!r}")
    return value


def _node(nid, name, ntype, data_deps, ctrl_deps, dur, attrs, ins, path, values=True):
    from astra_sim.chakra import ChakraError

    vals = ins.get("values", [])
    shapes = ins.get("shapes", [])
    types = ins.get("types", [])
    try:
        return make_node(nid, name, ntype, data_deps=data_deps, ctrl_deps=ctrl_deps, duration_micros=dur,
                         attrs=attrs, inputs_values=str(vals) if values else None, inputs_shapes=str(shapes),
                         inputs_types=str(types))
    except ChakraError as exc:
        raise ConfigError(f"{path}: node id {nid} ({name!r}): {exc}") from None


def _per_rank(path, rank):
    return os.fspath(path).replace("{rank}", str(rank)) if path is not None else None


def convert_pytorch(host, output, *, kineto=None, rank=None, ranks=None):
    """Write ``<output>.<r>.et``. ``rank``: convert this one rank's trace into ``<output>.<rank>.et``. ``ranks``:
    write ranks 0..N-1; when ``host`` (and ``kineto``) contain ``{rank}`` each rank reads its own files, otherwise
    the one trace is copied to every rank (a data-parallel assumption). Returns a summary dict."""
    if (rank is None) == (ranks is None):
        raise ConfigError("give exactly one of --rank R or --ranks N")
    wanted = [rank] if rank is not None else list(range(ranks))
    cache = {}
    metas, lists, summary = [], [], None
    for r in wanted:
        key = (_per_rank(host, r), _per_rank(kineto, r))
        if key not in cache:
            cache[key] = convert_pytorch_trace(*key)
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
