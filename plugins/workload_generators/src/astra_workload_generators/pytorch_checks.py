"""Checks across the ranks of a converted PyTorch job: what would make the simulation hang or run the ranks apart.

The simulator matches a send with a receive by (tag, source, destination, size), first in first out, and runs the
collectives of a communicator group in the order each rank issues them. So:

- the k-th send from rank A to rank B with tag T must meet the k-th receive on B from A with tag T, of the same
  size;
- the ranks of a group must issue the same collectives (type and size) on it, in the same order;
- a job of several ranks with no communication at all simulates its ranks independently, which is rarely what the
  trace was.

Each finding is one warning line naming the ranks and node ids (the conversion still writes the files).
"""

from __future__ import annotations

import json

from astra_sim.chakra import types as T

_SHOWN = 3  # mismatches detailed per check


def check_ranks(ranks):
    """Warnings (strings) for the converted ``ranks`` = {global rank: node list}."""
    warnings = []
    comm = {r: [n for n in nodes if n.type in (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)]
            for r, nodes in ranks.items()}
    if len(ranks) > 1 and not any(comm.values()):
        warnings.append(f"no collective or send/recv in any of the {len(ranks)} ranks: they will simulate as "
                        "independent ranks that never exchange a message")
        return warnings
    warnings += _check_p2p(ranks, comm)
    warnings += _check_collectives(ranks, comm)
    return warnings


def _check_p2p(ranks, comm):
    sends, recvs = {}, {}
    for r, nodes in comm.items():
        for n in sorted(nodes, key=lambda n: n.id):
            tag = n.attrs.get("comm_tag")
            if n.type == T.COMM_SEND_NODE and n.attrs.get("comm_dst") is not None:
                sends.setdefault((r, n.attrs["comm_dst"], tag), []).append(n)
            elif n.type == T.COMM_RECV_NODE and n.attrs.get("comm_src") is not None:
                recvs.setdefault((n.attrs["comm_src"], r, tag), []).append(n)
    problems = []
    for key in sorted(set(sends) | set(recvs), key=repr):
        src, dst, tag = key
        if src not in ranks or dst not in ranks:
            continue  # the other end was not converted
        out, into = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(out), len(into))):
            s = out[k] if k < len(out) else None
            v = into[k] if k < len(into) else None
            if s is not None and v is not None and s.attrs.get("comm_size") == v.attrs.get("comm_size"):
                continue
            what = (f"send #{k + 1} from rank {src} to rank {dst} (tag {tag}"
                    + (f", node id {s.id}, {s.attrs.get('comm_size')} bytes)" if s is not None else ")"))
            if v is None:
                problems.append(f"{what} has no matching receive on rank {dst}")
            elif s is None:
                problems.append(f"{what}: rank {dst} expects it (node id {v.id}, {v.attrs.get('comm_size')} bytes) "
                                f"but rank {src} never sends it")
            else:
                problems.append(f"{what} meets a receive of {v.attrs.get('comm_size')} bytes on rank {dst} "
                                f"(node id {v.id})")
    return _summarize(problems, "point-to-point messages that do not match across ranks (the run would hang)")


def _groups(ranks):
    """pg_name -> global ranks, from the METADATA nodes' process groups ([] = every converted rank)."""
    out = {}
    for nodes in ranks.values():
        for n in nodes:
            if n.type != T.METADATA_NODE or not n.inputs_values:
                continue
            try:
                items = json.loads(n.inputs_values[2:-2])
            except ValueError:
                continue
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and "pg_name" in item and isinstance(item.get("ranks", []), list):
                    out.setdefault(str(item["pg_name"]), item.get("ranks") or sorted(ranks))
    return out


def _check_collectives(ranks, comm):
    groups = _groups(ranks)
    seqs = {}  # pg_name -> rank -> [(type, size, node id)]
    for r, nodes in comm.items():
        for n in sorted(nodes, key=lambda n: n.id):
            if n.type == T.COMM_COLL_NODE:
                pg = str(n.attrs.get("pg_name", "") or "")
                pg = "0" if pg in ("", "0") else pg
                seqs.setdefault(pg, {}).setdefault(r, []).append(
                    (n.attrs.get("comm_type"), n.attrs.get("comm_size"), n.id))
    problems = []
    for pg, per_rank in sorted(seqs.items()):
        members = [r for r in (groups.get(pg) or (sorted(ranks) if pg == "0" else sorted(per_rank))) if r in ranks]
        if len(members) < 2:
            continue
        base = members[0]
        ref = per_rank.get(base, [])
        for r in members[1:]:
            mine = per_rank.get(r, [])
            for k in range(max(len(ref), len(mine))):
                a = ref[k] if k < len(ref) else None
                b = mine[k] if k < len(mine) else None
                if a is not None and b is not None and a[:2] == b[:2]:
                    continue
                desc = lambda x, who: (f"rank {who} has none" if x is None else
                                       f"rank {who} node id {x[2]}: {T.comm_type_name(x[0])} of {x[1]} bytes")
                problems.append(f"collective #{k + 1} on group {pg!r}: {desc(a, base)}, {desc(b, r)}")
                break
    return _summarize(problems, "collectives that differ across the ranks of a group (the run would hang or "
                                "pair different collectives)")


def _summarize(problems, what):
    if not problems:
        return []
    shown = "; ".join(problems[:_SHOWN])
    more = f"; and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
    return [f"{len(problems)} {what}: {shown}{more}"]
