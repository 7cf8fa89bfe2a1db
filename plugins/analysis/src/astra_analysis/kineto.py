"""``--timeline DIR --timeline-format kineto``: one trace per rank in the PyTorch profiler's (Kineto's) layout,
``DIR/rank<N>.pt.trace.json``, so that tools made for real traces read simulated ones, e.g.
HolisticTraceAnalysis: ``TraceAnalysis(trace_dir=DIR)``.

The mapping (what HTA reads is in brackets):

* top level: ``schemaVersion``, ``distributedInfo`` (``{"backend": "nccl", "rank": N, "world_size": W}``:
  [the rank], written first), ``deviceProperties`` (one device: the ``gpu`` model's GPU, or a plain NPU),
  ``baseTimeNanoseconds`` 0;
* one ``ProfilerStep#0`` annotation (``cat: user_annotation``) over the rank's step on the host thread;
* a GPU compute node: a ``kernel`` event on stream 7 [``args.stream`` >= 0 makes it a GPU kernel; a name that is
  not ``nccl...Kernel``, ``Memcpy``, ``Memset`` or ``...Sync`` makes it computation], named like the node,
  and a ``cuda_runtime`` ``cudaLaunchKernel`` on the host at its start with the same ``correlation``
  [``index_correlation``];
* a collective, send or receive: a ``kernel`` named ``ncclDevKernel_<Collective>`` / ``ncclDevKernel_SendRecv``
  [``^nccl.*Kernel``: communication] on its communication stream (20, and 1000, 1001, ... for the rank's other streams; receives
  on their own streams 500, 501, ... so that waiting receives do not overlap);
* a remote-memory node: ``gpu_memcpy`` ``Memcpy HtoD`` (load) or ``Memcpy DtoH`` (store) on stream 50
  [memory: neither computation nor communication];
* a CPU op: ``cpu_op`` on the host thread;
* a phase of a collective that a switch reduced or multicast (``inSwitch``): a ``gpu_user_annotation`` named
  ``in-switch reduce`` / ``in-switch multicast`` / ``in-switch reduce + multicast`` on the collective's stream
  (HTA drops GPU annotations by default, so they change none of its numbers; viewers show them over the kernel);
* every event keeps the Chrome timeline's arguments (node id, op, bytes, communicator, ...).

With these, HTA's temporal breakdown gives: compute time = our ``compute:*`` parts, non-compute time = our
``exposed:*`` + ``exposed_in_switch:*`` + ``recv_wait:*`` + ``remote_memory``, idle = our ``cpu`` + ``idle`` (counted between the first
kernel's start and the last kernel's end), and its comm/comp overlap = our ``comm_overlapped_ns /
comm_busy_ns``. Times are whole microseconds, each start and end rounded to the nearest: HTA would round
fractional timestamps itself, starts up and ends down, opening a gap of up to 1 us between every two
adjacent kernels (idle time that is not there); rounded ends keep adjacent kernels adjacent, and the
rounding errors cancel out instead of adding up. The Chrome timeline keeps exact nanoseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from astra_analysis.events import TID_COMM, NodeDescriber, in_switch_events, recv_lanes, track
from astra_analysis.timeline import EventStream
from astra_analysis.views import K_COLL, K_COMPUTE, K_CPU, K_MEM, K_RECV, K_SEND
from astra_sim.chakra import types as T

HOST_PID, DEVICE_PID = 1, 0
HOST_TID = 1
STREAM_COMPUTE, STREAM_COMM, STREAM_MEMORY, STREAM_RECV, STREAM_OTHER_COMM = 7, 20, 50, 500, 1000
#: names HTA would not count as computation; a compute node called so is renamed
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_NCCL_NAMES = {T.ALL_REDUCE: "AllReduce", T.ALL_GATHER: "AllGather", T.REDUCE_SCATTER: "ReduceScatter",
               T.ALL_TO_ALL: "AllToAll", T.BROADCAST: "Broadcast"}
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def us(ns):
    """Whole microseconds, rounded to the nearest (see the module docstring)."""
    return str((ns + 500) // 1000)


def kernel_name(kind, node, name):
    if kind == K_COMPUTE:
        return name if not _HTA_NOT_COMPUTE.match(name) else f"kernel {name.replace('Sync', 'sync')}"
    if kind == K_COLL:
        return f"ncclDevKernel_{_NCCL_NAMES.get(node.attrs.get('comm_type'), 'Collective')}"
    if kind in (K_SEND, K_RECV):
        return "ncclDevKernel_SendRecv"
    if kind == K_MEM:
        return "Memcpy DtoH (Device -> Pinned)" if node.type == T.MEM_STORE_NODE else "Memcpy HtoD (Pinned -> Device)"
    return name


def device_properties(run):
    gpu = getattr(run.compute_model, "gpu", None)
    props = {"id": 0, "name": getattr(gpu, "name", None) or "simulated NPU", "totalGlobalMem": 0,
             "computeMajor": 0, "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
             "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
             "numSms": getattr(gpu, "sm_count", None) or 0}
    return [props]


def write_kineto_traces(request, analysis, report):
    """One file per rank into the folder ``request.path``, each atomically. A write that fails late (a full disk)
    removes the files this call wrote (no partial set), writes the whole set again into a recovered folder
    (:func:`astra_sim.safeio.recover`), and the ConfigError says where."""
    from astra_sim.safeio import atomic_output, recover

    written = list(request.written_ranks())
    describer = NodeDescriber(analysis)
    props = device_properties(analysis.run)

    def write_all(folder, files, atomic=True):
        """Every rank's file into ``folder`` (each appended to ``files`` once whole); returns the events."""
        events = 0
        for rank in written:
            path = os.path.join(folder, f"rank{rank}.pt.trace.json")
            with atomic_output(path) if atomic else open(path, "wb") as handle:
                stream = EventStream(handle)
                stream.begin({"schemaVersion": 1,
                              "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": analysis.total},
                              "deviceProperties": props, "baseTimeNanoseconds": 0,
                              "traceName": f"astra-sim-py rank {rank}"})
                _rank_events(stream, analysis, describer, rank)
                stream.end({"displayTimeUnit": "ms"})
            files.append(path)
            events += stream.events
        return events

    files = []
    try:
        os.makedirs(request.path, exist_ok=True)
        events = write_all(request.path, files)
    except OSError as exc:
        for path in files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        recover(f"astra run: could not write --timeline {request.path} ({exc.strerror or exc})",
                os.path.basename(os.path.normpath(request.path)), lambda kept: write_all(kept, [], atomic=False),
                "astra run", "--timeline", folder=True)
    return {"path": request.path, "format": "kineto", "ranks_written": len(written), "files": len(files),
            "events": events}


def _rank_events(stream, analysis, describer, rank):
    view = analysis.view(rank)
    per_communicator = analysis.per_communicator
    total = analysis.total
    stream.event(f'{{"ph":"M","name":"process_name","pid":{HOST_PID},"args":{{"name":"rank {rank} host"}}}}')
    stream.event(f'{{"ph":"M","name":"process_name","pid":{DEVICE_PID},"args":{{"name":"rank {rank} device 0"}}}}')
    stream.event(f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#0","pid":{HOST_PID},"tid":{HOST_TID},'
                 f'"ts":0,"dur":{us(view.finish_ns or 0)},"args":{{"External id":1}}}}')
    records = list(view.records())
    lanes = recv_lanes([r for r in records if analysis.kind_of(view.rep, r[0])[0] == K_RECV])
    comm_streams = {}
    correlation = 1
    for node, start, end in sorted(records, key=lambda r: (r[1], r[0].id)):
        kind, comm = view.kind(node)
        name, cat, args = describer.describe(view.rep, node, end - start)
        args = dict(args, category=cat)
        if comm is not None:
            args["communicator"] = analysis.communicators.label(comm)
            if kind in (K_SEND, K_RECV):
                args["peer"] = view.peer(node)
        if kind == K_CPU:
            stream.event(f'{{"ph":"X","cat":"cpu_op","name":{_dumps(name)},"pid":{HOST_PID},"tid":{HOST_TID},'
                         f'"ts":{us(start)},"dur":{_dur(start, end)},"args":{_dumps(args)}}}')
            continue
        if kind == K_COMPUTE:
            gpu_stream, cat, runtime = STREAM_COMPUTE, "kernel", "cudaLaunchKernel"
        elif kind == K_MEM:
            gpu_stream, cat, runtime = STREAM_MEMORY, "gpu_memcpy", "cudaMemcpyAsync"
        elif kind == K_RECV:
            gpu_stream, cat, runtime = STREAM_RECV + lanes[node.id], "kernel", "cudaLaunchKernel"
        elif kind in (K_COLL, K_SEND):
            tid = track(view, node, kind, per_communicator, total)[0]
            gpu_stream = comm_streams.get(tid)
            if gpu_stream is None:  # the default stream 20, the others (per communicator) 1000, 1001, ...
                others = sum(1 for t in comm_streams if t != TID_COMM)
                gpu_stream = comm_streams[tid] = STREAM_COMM if tid == TID_COMM else STREAM_OTHER_COMM + others
            cat, runtime = "kernel", "cudaLaunchKernel"
        else:
            continue  # METADATA / INVALID nodes take no time on a device
        correlation += 1
        args.update({"device": 0, "stream": gpu_stream, "correlation": correlation, "External id": correlation})
        stream.event(f'{{"ph":"X","cat":"cuda_runtime","name":"{runtime}","pid":{HOST_PID},"tid":{HOST_TID},'
                     f'"ts":{us(start)},"dur":0,"args":{{"correlation":{correlation},"External id":{correlation}}}}}')
        stream.event(f'{{"ph":"X","cat":"{cat}","name":{_dumps(kernel_name(kind, node, name))},"pid":{DEVICE_PID},'
                     f'"tid":{gpu_stream},"ts":{us(start)},"dur":{_dur(start, end)},"args":{_dumps(args)}}}')
    for _lane, start, end, name, args in in_switch_events(view):
        node = view.nodes[args["node_id"]]
        gpu_stream = comm_streams.get(track(view, node, K_COLL, per_communicator, total)[0], STREAM_COMM)
        args = dict(args, device=0, stream=gpu_stream)
        stream.event(f'{{"ph":"X","cat":"gpu_user_annotation","name":{_dumps(name)},"pid":{DEVICE_PID},'
                     f'"tid":{gpu_stream},"ts":{us(start)},"dur":{_dur(start, end)},"args":{_dumps(args)}}}')


def _dur(start, end):
    """The duration between the rounded start and end (adjacent kernels stay adjacent)."""
    return str((end + 500) // 1000 - (start + 500) // 1000)


__all__ = ["write_kineto_traces", "kernel_name"]
