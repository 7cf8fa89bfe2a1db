"""Messages left without their other half when a run ends, described for people.

A real NCCL or MPI job whose send is never received hangs; the reference's analytical frontend completes the send
and exits 0, as if the job were correct. Here such a run is an error (exit 3) naming every one, or with
``--allow-unmatched`` a warning, the list kept in the report's ``unmatched_messages``.
"""

from __future__ import annotations

from astra_sim.errors import SimulationError
from astra_sim.system.frontend import COLLECTIVE_TAG_BASE, RENDEZVOUS_TAG_BASE

#: Messages listed in an error or warning message (the report keeps every one).
SHOWN = 20


class UnmatchedMessagesError(SimulationError):
    """The run finished, but some sends were never received (or receives never sent)."""


def describe_unmatched(unmatched, workloads):
    """A dict per :class:`~astra_sim.system.frontend.Unmatched` message, naming the trace node that posted it if any."""
    out = []
    for item in unmatched:
        message = item.message
        sent = message.posted
        fn, arg = (message.send_fn, message.send_arg) if sent else (message.recv_fn, message.recv_arg)
        rank = item.src if sent else item.dst
        entry = {"src": item.src, "dst": item.dst, "size": item.size, "tag": item.tag,
                 "kind": _kind(item.tag, sent), "state": item.what, "rank": rank}
        node = _trace_node(fn, arg, workloads, rank)
        if node is not None:
            entry.update(node)
        out.append(entry)
    return out


def _kind(tag, sent):
    if tag >= RENDEZVOUS_TAG_BASE:
        return "rendezvous handshake"
    if tag >= COLLECTIVE_TAG_BASE:
        return "collective message"
    return "send" if sent else "receive"


def _trace_node(fn, arg, workloads, rank):
    """The trace node whose completion ``fn(arg)`` signals: a workload's send or receive node."""
    owner = getattr(fn, "__self__", None)
    if owner is None or not 0 <= rank < len(workloads) or workloads[rank] is not owner:
        return None
    node = owner.nodes.get(arg) if isinstance(arg, int) else None
    if node is None:
        return None
    return {"node": node.id, "node_name": node.name, "trace": str(owner.path)}


def line(entry):
    """``rank 0 (t.0.et) node 5 ('orphan'): send 0 -> 1, 64 bytes, tag 2: arrived, never received``."""
    where = f"rank {entry['rank']}"
    if "node" in entry:
        where += f" ({entry['trace']}) node {entry['node']} ({entry['node_name']!r})"
    return (f"{where}: {entry['kind']} {entry['src']} -> {entry['dst']}, {entry['size']} bytes, "
            f"tag {entry['tag']}: {entry['state']}")


def lines(entries, limit=SHOWN):
    shown = [f"  {line(entry)}" for entry in entries[:limit]]
    if len(entries) > limit:
        shown.append(f"  ... and {len(entries) - limit} more (all in --report-json's unmatched_messages "
                     "with --allow-unmatched)")
    return shown


def unmatched_error(entries):
    """The error of a run that finished with unmatched messages (exit 3)."""
    return UnmatchedMessagesError("\n".join([
        f"unmatched messages: the run finished, but {len(entries)} message(s) were never matched "
        "(a real NCCL/MPI job would hang here; --allow-unmatched reports them as a warning instead):",
        *lines(entries)]))


def unmatched_warning(entries):
    first = line(entries[0])
    more = f" and {len(entries) - 1} more (report: unmatched_messages)" if len(entries) > 1 else ""
    return (f"{len(entries)} unmatched message(s) (--allow-unmatched): {first}{more}; "
            "a real NCCL/MPI job would hang here")
