"""Reading PyTorch host execution traces: the JSON file (plain or gzip), the old 1.0.1 layout, node checks, and
the helpers that read node fields (attributes, tensor records, ranks, process groups) for the converter."""

from __future__ import annotations

import json
import re

from astra_sim.chakra import make_node
from astra_sim.errors import ConfigError

_PROCESS_ROOT = "[pytorch|profiler|execution_trace|process]"
_THREAD_ROOT = "[pytorch|profiler|execution_trace|thread]"


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


def _ancestors(by_id, node_id, limit=8):
    """The host ops above ``node_id``, its parent first: at most ``limit``, stopping before a root (a node that
    is its own parent) or a parent missing from the trace."""
    p = by_id[node_id]["ctrl_deps"]
    for _ in range(limit):
        if p not in by_id or p == by_id[p]["ctrl_deps"]:
            return
        yield by_id[p]
        p = by_id[p]["ctrl_deps"]


def _dur(value):
    return max(0, int(round(value or 0)))


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
