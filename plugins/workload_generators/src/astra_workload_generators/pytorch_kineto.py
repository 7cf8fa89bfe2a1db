"""Kineto traces (the profiler's timeline) for the PyTorch converter: reading them, and linking their events to
the host trace's ops.

- GPU kernels (``cat`` kernel, gpu_memcpy, gpu_memset) find their launching host op through their cpu_op
  (``"External id"``), whose ``"Record function id"`` is the host op's ``rf_id``.
- Host-side events (``cat`` cpu_op and user_annotation, the latter being ``record_function`` scopes such as
  ``DistributedDataParallel.forward``, ``Optimizer.step#SGD.step`` or gloo's ``gloo:all_reduce``) give the host
  ops their measured times, matched by ``"Record function id"`` = ``rf_id`` as chakra_trace_link does.
- A host op's CPU time is its *exclusive* time: its duration minus the time covered by the events nested in it on
  the same thread, clipped to its own span (an event that starts inside it but ends after it, as a blocking
  ``gloo:send`` does under ``c10d::send``, is subtracted only up to its end). Communication markers (``gloo:*``)
  are only ever subtracted, never containers: on a worker thread they run beside other ops, and under an
  ``isend`` they stay open while the launching thread goes on.
"""

from __future__ import annotations

import bisect
from collections import namedtuple

from astra_sim.errors import ConfigError

from .pytorch_host import _PROCESS_ROOT, _THREAD_ROOT, _attr_map, _dur, _load_json, _short

_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_HOST_CATS = ("cpu_op", "user_annotation")
#: name prefixes of the record_function scopes that the CPU communication backends open around a collective or a
#: send/recv (ProcessGroupGloo's "gloo:all_reduce", "gloo:send", ...): the operation's whole life, not CPU work
COMM_MARKERS = ("gloo:",)

#: events closer than this (µs) count as one after the other, not nested: Kineto's microsecond timestamps of
#: ~5e12 µs carry ~1e-3 µs of float rounding, so a start a hair before the previous event's end is adjacency
_TOUCH_US = 2e-3
#: a Kineto trace read by :func:`read_kineto_trace`: GPU events as (index, event); cpu_op events by External id;
#: host-side events (cpu_op, user_annotation) as (index, event); the ``distributedInfo`` dict ({} if none)
KinetoTrace = namedtuple("KinetoTrace", "gpu cpu_ops host info")
#: a host op's measured span: thread id, start and end (µs, Kineto's clock)
Span = namedtuple("Span", "tid start end")


def is_comm_marker(name):
    return isinstance(name, str) and name.startswith(COMM_MARKERS)


def read_kineto_trace(path):
    """Read and check a Kineto trace (:data:`KinetoTrace`)."""
    data = _load_json(path, "Kineto trace")
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise ConfigError(f"{path}: not a Kineto trace (expected an object with a 'traceEvents' list)")
    gpu, cpu_ops, host = [], {}, []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise ConfigError(f"{path}: traceEvents[{i}]: expected an object, got {type(ev).__name__}")
        cat = ev.get("cat")
        if cat not in _GPU_CATS and cat not in _HOST_CATS:
            continue
        where = f"traceEvents[{i}] ({_short(ev.get('name'))!r})"
        args = ev.get("args", {})
        if not isinstance(args, dict):
            raise ConfigError(f"{path}: {where}: 'args' must be an object")
        ext = args.get("External id")
        if cat in _HOST_CATS:
            if cat == "cpu_op" and ext is not None:
                cpu_ops.setdefault(ext, ev)
            host.append((i, ev))
            continue
        dur = ev.get("dur")
        if not _number(dur) or dur < 0:
            raise ConfigError(f"{path}: {where}: GPU event needs a duration 'dur' >= 0 (µs), got {dur!r}")
        if not isinstance(ev.get("name"), str):
            raise ConfigError(f"{path}: {where}: GPU event needs a string 'name'")
        if ext is None:
            raise ConfigError(f"{path}: {where}: GPU event has no args 'External id' to find its launching op")
        gpu.append((i, ev))
    info = data.get("distributedInfo")
    return KinetoTrace(gpu, cpu_ops, host, info if isinstance(info, dict) else {})


def load_kineto_trace(path, *, with_info=False):
    """Read a Kineto trace; returns (GPU events, cpu_op events by External id), plus its ``distributedInfo`` dict
    ({} if none) when ``with_info``."""
    trace = read_kineto_trace(path)
    return (trace.gpu, trace.cpu_ops, trace.info) if with_info else (trace.gpu, trace.cpu_ops)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def link_kineto(trace, kineto_path, host_path, hnodes, children, first_gpu_id):
    """Link a Kineto trace to the host ops ``hnodes`` (``children``: host id -> child host ops).

    Returns (kernels, cpu_us, spans, thread_starts):

    - kernels: one ``(id, name, launcher host id, duration µs, stream, pg_name, path, where, args, None)`` per GPU
      event, ids from ``first_gpu_id`` on in Kineto order (``args``: the kernel's args over its cpu_op's);
    - cpu_us: host id -> exclusive CPU time in µs (float);
    - spans: host id -> :data:`Span` of every host op with a timed host-side event;
    - thread_starts: tid -> sorted list of (start, host id) of those events (for "did the thread go on?").

    A trace whose host-side events carry no ``"Record function id"`` (PyTorch before 2.3), or only 0 (no
    execution-trace observer in the session), cannot be linked: a ConfigError that says so."""
    host_events = [ev for _, ev in trace.host]
    if host_events and not any("Record function id" in ev.get("args", {}) for ev in host_events):
        raise ConfigError(
            f"{kineto_path}: its cpu_op events carry no 'Record function id', which is what links a Kineto op "
            f"to the rf_id of a host op in {host_path} ('External id' is unrelated to rf_id); the profiler "
            "writes it since pytorch/pytorch#122948 (April 2024, after PyTorch 2.2), so this trace cannot be "
            "linked. Convert the host trace without --kineto (with --comms-from-host, its collectives then come "
            "from its record_param_comms ops), or record both traces again with a newer PyTorch")
    rf_ids = {ev.get("args", {}).get("Record function id") for ev in host_events}
    if host_events and rf_ids <= {0, "0", None}:
        raise ConfigError(
            f"{kineto_path}: every cpu_op has 'Record function id' 0, which is what the profiler writes when "
            "no execution-trace observer ran in the same profiling session, so its ops cannot be matched "
            f"with the host ops of {host_path}: record both in one session (torch.profiler.profile("
            "execution_trace_observer=ExecutionTraceObserver().register_callback(...))), or convert the host "
            "trace without --kineto (with --comms-from-host for its collectives)")
    by_rf = {}
    for n in hnodes:
        rf = _attr_map(n).get("rf_id")
        if rf is not None and n["name"] not in (_PROCESS_ROOT, _THREAD_ROOT):  # (the roots have rf_id 0)
            by_rf.setdefault(rf, n["id"])
    matched = {}  # host id -> its Kineto event (the first one with its rf_id)
    for ev in host_events:
        hid = by_rf.get(ev.get("args", {}).get("Record function id"))
        if hid is not None and hid not in matched and _number(ev.get("dur")) and ev["dur"] >= 0:
            matched[hid] = ev
    kernels = []
    next_id = first_gpu_id
    for i, ev in trace.gpu:
        where = f"traceEvents[{i}] ({_short(ev['name'])!r})"
        args = ev.get("args", {})
        op = trace.cpu_ops.get(args["External id"])
        hid = by_rf.get(op.get("args", {}).get("Record function id")) if op else None
        if hid is None:
            raise ConfigError(f"{kineto_path}: {where}: no cpu_op with External id {args['External id']!r} "
                              f"matching a host op of {host_path} (by 'Record function id' = rf_id)")
        kargs = dict(op.get("args", {}))
        kargs.update(args)  # the kernel's own args first, then its cpu_op's (NCCL metadata may be on either)
        pg = kargs.get("Process Group Name", "")
        kernels.append((next_id, ev["name"], hid, _dur(ev["dur"]), args.get("stream", 0), pg, kineto_path, where,
                        kargs, None))
        next_id += 1
    names = {n["id"]: n["name"] for n in hnodes}
    timed = all(_number(ev.get("ts")) and ev.get("tid") is not None for ev in matched.values())
    spans, starts = {}, {}
    if timed:
        for hid, ev in matched.items():
            spans[hid] = Span(ev["tid"], ev["ts"], ev["ts"] + ev["dur"])
            starts.setdefault(ev["tid"], []).append((ev["ts"], hid))
        for lst in starts.values():
            lst.sort()
        cpu_us = _exclusive_by_time(spans, names)
    else:
        cpu_us = _exclusive_by_tree({hid: ev["dur"] for hid, ev in matched.items()}, children)
    return kernels, cpu_us, spans, starts


def _exclusive_by_time(spans, names):
    """Exclusive µs of each timed host op: its span minus the merged spans of the events nested in it on its thread
    (each clipped to the op's end). Communication markers are never containers (see the module docstring)."""
    out = {}
    by_tid = {}
    for hid, span in spans.items():
        by_tid.setdefault(span.tid, []).append(hid)
    for hids in by_tid.values():
        hids.sort(key=lambda h: (spans[h].start, -(spans[h].end - spans[h].start), h))
        inner = {}  # container host id -> [(start, end)] of the events directly inside it
        stack = []
        for hid in hids:
            span = spans[hid]
            while stack and spans[stack[-1]].end <= span.start + _TOUCH_US:
                stack.pop()
            if stack:
                parent = spans[stack[-1]]
                inner.setdefault(stack[-1], []).append((span.start, min(span.end, parent.end)))
            if not is_comm_marker(names.get(hid)):
                stack.append(hid)
        for hid in hids:
            span = spans[hid]
            out[hid] = max(0.0, (span.end - span.start) - _covered(inner.get(hid, ())))
    return out


def _covered(intervals):
    """Total length of the union of ``intervals``."""
    total = 0.0
    end = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _exclusive_by_tree(inclusive, children):
    """Exclusive µs when the events have no timestamps or thread ids (hand-written traces): the op's duration
    minus its host children's durations."""
    return {hid: max(0.0, inc - sum(inclusive.get(c["id"], 0) for c in children.get(hid, [])))
            for hid, inc in inclusive.items()}


def thread_went_on(starts, span, until, skip=()):
    """Whether another event started on ``span``'s thread between the end of ``span`` and ``until`` (µs), other
    than the host ops in ``skip``: the thread did not wait for something that ended at ``until``."""
    lst = starts.get(span.tid, [])
    i = bisect.bisect_left(lst, (span.end, -1))
    while i < len(lst) and lst[i][0] < until:
        if lst[i][1] not in skip:
            return True
        i += 1
    return False
