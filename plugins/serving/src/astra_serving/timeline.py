"""``astra serve --timeline``: the run as a Chrome trace (chrome://tracing, Perfetto): one process per replica
whose "iterations" track holds every iteration (its batch shape in ``args``) and whose "KV transfers" track
the transfers it sent; one "requests" process with each request's queueing, prefill and decode as async spans.
Times in the file are microseconds (the format's unit); the report keeps ns."""

from __future__ import annotations

import gzip
import json


def _us(ns):
    return ns / 1000.0


def build_events(cluster, requests):
    events = []
    engines = cluster.engines + cluster.decode_engines
    for e in engines:
        name = f"replica {e.replica}" + (f" virtual engine {e.virtual_engine}" if e.pipeline is not None else "")
        events.append({"ph": "M", "name": "process_name", "pid": e.index,
                       "args": {"name": f"{name} ({e.config.role})"}})
        events.append({"ph": "M", "name": "thread_name", "pid": e.index, "tid": 0, "args": {"name": "iterations"}})
        events.append({"ph": "M", "name": "thread_name", "pid": e.index, "tid": 1, "args": {"name": "KV transfers"}})
    for replica, start, duration, prefill, decode, context in cluster.iterations:
        name = " + ".join(x for x in (f"prefill {prefill}" if prefill else "", f"decode {decode}" if decode else "")
                          if x)
        events.append({"ph": "X", "name": name, "cat": "iteration", "pid": replica, "tid": 0, "ts": _us(start),
                       "dur": _us(duration), "args": {"prefill_tokens": prefill, "decode_seqs": decode,
                                                      "mean_context": context}})
    for rid, start, end, source, target in cluster.transfers:
        events.append({"ph": "X", "name": f"KV of request {rid} -> replica {target}", "cat": "kv", "pid": source,
                       "tid": 1, "ts": _us(start), "dur": _us(end - start)})
    pid = len(engines)
    events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": "requests"}})
    for r in requests:
        spans = (("queued", r.arrival_ns, r.scheduled_ns), ("prefill", r.scheduled_ns, r.first_token_ns),
                 ("decode", r.first_token_ns, r.finish_ns))
        for name, a, b in spans:
            if a is None or b is None or b < a:
                continue
            common = {"cat": "request", "name": name, "pid": pid, "tid": 0, "id": r.id}
            events.append({**common, "ph": "b", "ts": _us(a),
                           "args": {"request": r.id, "replica": r.replica, "prompt_tokens": r.prompt_tokens,
                                    "output_tokens": r.output_tokens}})
            events.append({**common, "ph": "e", "ts": _us(b)})
    return events


def write_timeline(path, cluster, requests):
    """Written atomically; a write that fails late keeps the timeline in a recovered file (ConfigError saying
    where)."""
    from astra_sim.safeio import write_or_recover

    data = json.dumps({"traceEvents": build_events(cluster, requests), "displayTimeUnit": "ms"}).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    write_or_recover(str(path), data, "astra serve", "--timeline")
