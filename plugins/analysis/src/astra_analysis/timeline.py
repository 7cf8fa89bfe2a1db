"""``--timeline PATH.json[.gz]``: the run as Chrome trace events (the Perfetto UI and chrome://tracing open it).

* one process per rank (``rank N``; labelled with its node when the network has a scale-up dimension, i.e.
  more than one), sorted by rank;
* one thread per stream: ``compute``, ``cpu``, ``remote memory``, the communication stream (with
  ``comm-streams: per-communicator`` one per communicator and one per send destination, as the ranks ran
  them) and receive lanes (receives that wait at once go on separate lanes);
* every executed node is a complete event (``ph: X``) named by its ``label`` attribute or its name, with
  ``args``: node id, type, op, bytes, communicator and group, collective and algorithm, peer and tag, and for
  compute nodes the op class and, from the ``gpu`` model, FLOPs and the modelled efficiency;
* a phase of a collective that a switch reduced or multicast (``inSwitch``) is also a slice of its own, category
  ``in_switch``, named ``in-switch reduce`` (reduce-scatter), ``in-switch multicast`` (all-gather) or
  ``in-switch reduce + multicast`` (all-reduce), on the rank's ``in-switch`` tracks (one more lane per phase that
  overlaps another: chunks run in parallel), with the collective node, dimension, bytes and communicator;
* a send and the receive it matched are joined by a flow (``ph: s`` / ``f``) when both ranks are written;
* backends with links add a ``network`` process with one counter track per link: the share of the link's
  bandwidth in use, per time bin;
* a run with power data (the energy plugin's ``run.plugin_state["energy"]["op_class_power_w"]``: each compute
  class's, communication's and idle watts at the run's settled clocks) gives each rank a ``power W`` counter: the
  power of the highest-power activity it runs at each instant (a compute class; exposed communication; remote
  memory at the element-wise power), else idle, to the step's end. Its integral is the rank's share of the energy
  plugin's step energy (communication beside compute shows as the compute, as there).

Times are microseconds with three decimals (exact nanoseconds). The file is written as it is generated,
rank by rank, through a temporary name (gzip when the name ends in ``.gz``): memory does not grow with the
number of events.
"""

from __future__ import annotations

import gzip
import json
import os

from astra_analysis.events import (
    TID_IN_SWITCH, TID_RECV, Messages, NodeDescriber, in_switch_events, recv_lanes, track,
)
from astra_analysis.views import K_COLL, K_COMPUTE, K_MEM, K_RECV, K_SEND

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def us(ns):
    """Nanoseconds as the trace's microseconds, exactly (three decimals)."""
    if ns < 0:
        return "-" + us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


class EventStream:
    """Writes ``{"traceEvents": [...], ...}`` piece by piece into a binary file."""

    def __init__(self, handle, chunk=1 << 20):
        self.handle = handle
        self.parts = []
        self.size = 0
        self.chunk = chunk
        self.events = 0
        self.first = True

    def begin(self, head=None):
        text = "{"
        for key, value in (head or {}).items():  # json.dumps spacing: readers grep '"rank": N' (HTA)
            text += f"{json.dumps(key)}: {json.dumps(value)},\n"
        self._put(text + '"traceEvents":[\n')

    def event(self, text):
        self._put(text if self.first else ",\n" + text)
        self.first = False
        self.events += 1

    def end(self, tail=None):
        text = "\n]"
        for key, value in (tail or {}).items():
            text += f",\n{_dumps(key)}:{_dumps(value)}"
        self._put(text + "}\n")
        self.flush()

    def _put(self, text):
        self.parts.append(text)
        self.size += len(text)
        if self.size >= self.chunk:
            self.flush()

    def flush(self):
        if self.parts:
            self.handle.write("".join(self.parts).encode("utf-8"))
            self.parts = []
            self.size = 0


def open_output(handle, path):
    """The file to write events into: gzip when ``path`` ends in ``.gz``."""
    if str(path).endswith(".gz"):
        return gzip.GzipFile(fileobj=handle, mode="wb", compresslevel=4, mtime=0)
    return handle


def metadata(name, pid, args, tid=None):
    tid_part = "" if tid is None else f',"tid":{tid}'
    return f'{{"ph":"M","name":"{name}","pid":{pid}{tid_part},"args":{_dumps(args)}}}'


def node_of(run, rank):
    """The node (scale-up domain) of a rank when the network has more than one dimension, else None."""
    dims = run.npus_per_dim
    return rank // dims[0] if len(dims) > 1 else None


def write_chrome_trace(request, analysis, report):
    """Streamed into ``request.path`` atomically; a write that fails late (a full disk) streams it again into a
    recovered file (:func:`astra_sim.safeio.write_or_recover`) and the ConfigError says where."""
    from astra_sim.safeio import write_or_recover

    run = analysis.run
    written = list(request.written_ranks())
    chosen = set(written)
    describer = NodeDescriber(analysis)
    messages = Messages(analysis)
    per_communicator = analysis.per_communicator
    total = analysis.total
    texts = {}  # (representative, node id) -> the event's name, category and static args as JSON
    watts = getattr(request, "power_w", None)  # set by the output format's finish from run.plugin_state

    def produce(raw):
        flows = power_counters = 0
        out = open_output(raw, request.path)
        stream = EventStream(out)
        stream.begin({"displayTimeUnit": "ns"})
        for rank in written:
            view = analysis.view(rank)
            node = node_of(run, rank)
            stream.event(metadata("process_name", rank, {"name": f"rank {rank}"}))
            stream.event(metadata("process_sort_index", rank, {"sort_index": rank}))
            if node is not None:
                stream.event(metadata("process_labels", rank, {"labels": f"node {node}"}))
            records = list(view.records())
            lanes = recv_lanes([r for r in records if analysis.kind_of(view.rep, r[0])[0] == K_RECV])
            threads = {}
            for item, start, end in records:
                kind, comm = view.kind(item)
                if kind == K_RECV:
                    lane = lanes[item.id]
                    tid, thread = TID_RECV + lane, "recv" if not lane else f"recv {lane + 1}"
                else:
                    tid, thread = track(view, item, kind, per_communicator, total)
                threads.setdefault(tid, thread)
                static = texts.get((view.rep, item.id))
                if static is None:
                    name, cat, args = describer.describe(view.rep, item, end - start)
                    static = texts[(view.rep, item.id)] = f'"name":{_dumps(name)},"cat":"{cat}","args":{_dumps(args)[:-1]}'
                extra = ""
                if comm is not None:
                    extra = f',"communicator":{_dumps(analysis.communicators.label(comm))}'
                    if comm > 0:
                        extra += f',"group":{comm}'
                    if kind in (K_SEND, K_RECV):
                        extra += f',"peer":{view.peer(item)}'
                stream.event(f'{{"ph":"X","pid":{rank},"tid":{tid},"ts":{us(start)},"dur":{us(end - start)},'
                             f'{static}{extra}}}}}')
                if kind == K_RECV:
                    flows += _flow(stream, analysis, messages, view, item, start, end, tid, chosen, flows,
                                   per_communicator, total)
            for lane, start, end, name, args in in_switch_events(view):
                tid = TID_IN_SWITCH + lane
                threads.setdefault(tid, "in-switch" if not lane else f"in-switch {lane + 1}")
                stream.event(f'{{"ph":"X","pid":{rank},"tid":{tid},"ts":{us(start)},"dur":{us(end - start)},'
                             f'"name":{_dumps(name)},"cat":"in_switch","args":{_dumps(args)}}}')
            for tid in sorted(threads):
                stream.event(metadata("thread_name", rank, {"name": threads[tid]}, tid))
                stream.event(metadata("thread_sort_index", rank, {"sort_index": tid}, tid))
            if watts:
                for t, w in power_steps(analysis, view.rep, records, watts, report.max_finish_ns):
                    stream.event(f'{{"ph":"C","pid":{rank},"name":"power W","ts":{us(t)},"args":{{"W":{w:.3f}}}}}')
                    power_counters += 1
        counters = _link_counters(stream, request.link_load, total, report.max_finish_ns)
        stream.end({"otherData": {"generator": "astra-sim-py", "ranks_written": len(written),
                                  "ranks": total, "times": "microseconds, exact to the nanosecond"}})
        if out is not raw:
            out.close()
        return {"events": stream.events, "flows": flows, "link_counters": counters, "power_counters": power_counters}

    written_stats = write_or_recover(request.path, produce, "astra run", "--timeline")
    return {"path": request.path, "format": "chrome", "ranks_written": len(written), **written_stats,
            "bytes": os.path.getsize(request.path)}


def power_steps(analysis, rep, records, watts, end_ns):
    """``[(t_ns, W), ...]`` of one rank from 0 to ``end_ns`` (the last entry at ``end_ns``): at each instant the
    watts of the highest-power activity among its ``records`` (compute by op class, collectives and sends at
    ``comm``, remote memory at ``elementwise``; a compute node at ``watts["node"](rep, node, ns, op_class)`` where the
    energy plugin gives one), else ``idle``; receive waits and CPU ops idle the GPU."""
    idle = watts["idle"]
    node_w = watts.get("node")  # the energy plugin's per-node power, where a kernel's is not its class's
    changes = []
    for node, start, end in records:
        if end <= start:
            continue
        kind = analysis.kind_of(rep, node)[0]
        if kind == K_COMPUTE:
            op_class = analysis.op_class(rep, node)
            w = node_w(rep, node, end - start, op_class) if node_w is not None else watts.get(op_class, watts["other"])
        elif kind in (K_COLL, K_SEND):
            w = watts["comm"]
        elif kind == K_MEM:
            w = watts["elementwise"]
        else:
            continue
        changes.append((start, 1, w))
        changes.append((end, -1, w))
    changes.sort()
    running, steps, i = {}, [(0, idle)], 0
    while i < len(changes):
        t = changes[i][0]
        while i < len(changes) and changes[i][0] == t:
            _, step, w = changes[i]
            running[w] = running.get(w, 0) + step
            if not running[w]:
                del running[w]
            i += 1
        level = max(running, default=idle)
        if level != steps[-1][1]:
            steps[-1:] = [(t, level)] if t == steps[-1][0] else [steps[-1], (t, level)]
    if steps[-1][0] < end_ns:  # idle (waiting for the step's end) up to it
        steps.append((end_ns, idle))
    return steps


def _flow(stream, analysis, messages, view, node, start, end, recv_tid, chosen, flow_id, per_communicator, total):
    """The flow from the send a receive matched to the receive (when the sender is written too)."""
    src = view.peer(node)
    if src not in chosen:
        return 0
    match = messages.matching_send(view, node, start)
    if match is None:
        return 0
    sender, send, send_start, _send_end = match
    send_tid = track(sender, send, K_SEND, per_communicator, total)[0]
    at = end - 1 if end > start else end  # inside the receive's slice
    stream.event(f'{{"ph":"s","id":{flow_id},"pid":{sender.rank},"tid":{send_tid},"ts":{us(send_start)},'
                 f'"name":"message","cat":"message"}}')
    stream.event(f'{{"ph":"f","bp":"e","id":{flow_id},"pid":{view.rank},"tid":{recv_tid},"ts":{us(at)},'
                 f'"name":"message","cat":"message"}}')
    return 1


def _link_counters(stream, load, total, end_ns):
    """One counter track per link that carried traffic: its use (0..1) per bin; samples only where it changes."""
    if load is None or not load.bins:
        return 0
    pid = total  # one past the last rank
    stream.event(metadata("process_name", pid, {"name": "network links"}))
    stream.event(metadata("process_sort_index", pid, {"sort_index": pid}))
    series, width = load.utilisation(end_ns)
    for link, values in series.items():
        name = _dumps(f"link {link}: {load.name(link)}")
        last = None
        for i, value in enumerate(values + [0.0]):
            if value != last:
                stream.event(f'{{"ph":"C","pid":{pid},"name":{name},"ts":{us(i * width)},'
                             f'"args":{{"utilisation":{value}}}}}')
                last = value
    return len(series)


__all__ = ["write_chrome_trace", "power_steps", "us", "EventStream", "open_output"]
