"""A deployment over time: replicas (each an :class:`~astra_serving.engine.Engine`) behind a router, or
separate prefill and decode pools with the KV cache moved between them. A discrete-event loop in int ns:
arrivals, iteration ends and KV transfer ends.

``fast_forward`` (on by default): every engine keeps its decoding sequences as a lazy group (engine.py), so an
iteration costs the same however many sequences decode in it; off, each iteration schedules and completes every
sequence one by one (the reference the tests compare it with, ``tests/test_fast_forward.py``).

Routers: ``round-robin``; ``least-loaded`` (fewest tokens still to process, queued and running);
``kv-aware`` (a replica that has the request's prompt prefix cached, else the one with the most free KV blocks,
ties by load). With disaggregation a request is prefilled on a prefill replica (chosen by the router), which
samples the first token; its KV cache then goes over the network to a decode replica (the least loaded) and
the first token is delivered when it has arrived (TTFT includes the transfer). A prefill replica sends one
transfer at a time (FIFO), a decode replica receives one at a time, and the prefill replica holds the
request's blocks until it is sent.

``frontend`` (a :class:`~astra_serving.frontend.Frontend`, or None): a routed request reaches its replica's engine
when that replica's frontend has parsed and tokenised it (one request at a time), and every delivered token
reaches the client the frontend's ``deliver_ns`` later (frontend.py).
"""

from __future__ import annotations

import heapq
import itertools

from astra_sim.errors import ConfigError
from astra_sim.gcpause import gc_paused

from .engine import Seq

ROUTERS = ("round-robin", "least-loaded", "kv-aware")


class Cluster:
    def __init__(self, engines, router="round-robin", decode_engines=None, transfer=None, kv_bytes_per_token=0,
                 sample_every_ns=None, frontend=None):
        if router not in ROUTERS:
            raise ConfigError(f"--router must be one of {', '.join(ROUTERS)}, got {router!r}")
        self.engines = engines                 # serving replicas, or the prefill pool
        self.decode_engines = decode_engines or []
        self.transfer = transfer
        self.kv_bytes_per_token = kv_bytes_per_token
        self.router = router
        self._rr = itertools.count()
        self._events = []
        self._seq = itertools.count()
        self.now = 0
        # time-weighted queue length (requests arrived, not yet scheduled anywhere): Little's law
        self._queue_len = 0
        self._queue_area = 0     # ns x requests
        self._queue_since = 0
        self.kv_samples = []     # (t_ns, used fraction over every replica's blocks)
        self._sample_every = sample_every_ns
        self._next_sample = 0
        self._link_free = {}     # (send|recv, replica) -> time its NICs are free
        self.transfers = []      # (request id, start ns, end ns)
        self.record_iterations = False
        self.fast_forward = True         # the engines' lazy decoders (the module doc)
        self.iterations = []     # (replica, start ns, duration ns, prefill tokens, decode seqs, context), if recorded
        self.meter = None        # an energy.EnergyMeter charging each iteration's energy to its requests, or None
        self.frontend = frontend if frontend is not None and frontend.active else None
        self._frontends = None
        if self.frontend is not None:
            from .frontend import FrontendQueue

            self._frontends = FrontendQueue(self.frontend)

    # ------------------------------------------------------------------ events
    def _push(self, t, kind, data):
        heapq.heappush(self._events, (t, next(self._seq), kind, data))

    def _queue_change(self, delta):
        self._queue_area += self._queue_len * (self.now - self._queue_since)
        self._queue_since = self.now
        self._queue_len += delta

    def _all_engines(self):
        return self.engines + self.decode_engines

    def _sample_kv(self):
        if self._sample_every is None or self.now < self._next_sample:
            return
        engines = self._all_engines()
        used = sum(e.blocks.used for e in engines)
        total = sum(e.blocks.total for e in engines)
        self.kv_samples.append((self.now, used / total))
        self._next_sample = self.now + self._sample_every

    # ------------------------------------------------------------------ routing
    def route(self, req, pool):
        if len(pool) == 1:
            return pool[0]
        if self.router == "round-robin":
            return pool[next(self._rr) % len(pool)]
        if self.router == "least-loaded":
            return min(pool, key=lambda e: (e.load_tokens(), e.index))
        hits = [e for e in pool if req.prefix_group is not None and e.blocks.has_prefix(req.prefix_group)]
        return min(hits or pool, key=lambda e: (-e.blocks.available(), e.load_tokens(), e.index))

    # ------------------------------------------------------------------ the loop
    def _kick(self, engine):
        """Schedule the engine's next batch if it is idle."""
        if engine.busy:
            return
        batch = self._schedule(engine)
        if batch is None:
            return
        duration = engine.end_ns(batch, self.now) - self.now
        self._account(engine, batch, duration)
        engine.busy = True
        self._push(self.now + duration, "step", (engine, batch))

    def _schedule(self, engine):
        batch = engine.schedule()
        if batch is not None:
            for seq, _ in batch.admitted:  # a sequence is first scheduled when it is admitted from the queue
                if seq.req.scheduled_ns is None:
                    seq.req.scheduled_ns = self.now
                    self._queue_change(-1)
        return batch

    def _account(self, engine, batch, duration):
        if self.record_iterations:
            self.iterations.append((engine.index, self.now, duration, batch.prefill_tokens, batch.decode_seqs,
                                    batch.context))
        engine.busy_ns += duration
        if self.meter is not None:
            self.meter.iteration(engine, batch, self.now, duration)

    def run(self, requests):
        """Simulate every request to its end; returns the requests (their times filled in). Python's cycle
        collector is paused meanwhile: the loop makes many small objects and no cycles, and its passes took 7 %
        of the loop's time (10,000 requests at 20 QPS)."""
        with gc_paused():
            return self._run(requests)

    def _run(self, requests):
        for engine in self._all_engines():
            engine.lazy_decodes = self.fast_forward
        # arrivals are read in time order (ties in request order) beside the heap, which holds the other events: an
        # arrival goes before another event at its time, as if pushed first (the heap stays a few events long)
        arrivals = sorted(requests, key=lambda r: r.arrival_ns)
        events, n = self._events, 0
        while events or n < len(arrivals):
            if n < len(arrivals) and (not events or arrivals[n].arrival_ns <= events[0][0]):
                req = arrivals[n]
                n += 1
                self.now = req.arrival_ns
                self._queue_change(+1)
                engine = self.route(req, self.engines)
                req.replica = engine.replica
                if self._frontends is not None:  # through the replica's frontend first
                    self._push(self._frontends.enter_ns(engine.replica, self.now, req.prompt_tokens), "enter",
                               (engine, req))
                    continue
                engine.add(Seq(req))
                self._kick(engine)
                continue
            t, _, kind, data = heapq.heappop(events)
            self.now = t
            if kind == "step":
                engine, batch = data
                engine.busy = False
                first, done = engine.complete(batch, t)
                if engine.config.role == "prefill":
                    for seq in done:
                        self._send_kv(engine, seq)
                else:
                    for seq in first:
                        seq.req.first_token_ns = t
                    for seq in done:
                        seq.req.finish_ns = t
                self._sample_kv()
                self._kick(engine)
            elif kind == "enter":
                engine, req = data
                engine.add(Seq(req))
                self._kick(engine)
            elif kind == "kv":
                engine, seq, target = data
                engine.blocks.release(seq.req.id)
                seq.req.first_token_ns = t
                if seq.req.output_tokens <= 1:
                    seq.req.finish_ns = t
                else:
                    target.add(Seq(seq.req, computed=seq.req.prompt_tokens, generated=1))
                    self._kick(target)
                self._kick(engine)
        self._queue_change(0)
        if self.frontend is not None and self.frontend.deliver_ns:
            for r in requests:  # the way out: detokenised and streamed to the client
                if r.first_token_ns is not None:
                    r.first_token_ns += self.frontend.deliver_ns
                if r.finish_ns is not None:
                    r.finish_ns += self.frontend.deliver_ns
        unfinished = [r for r in requests if r.finish_ns is None]
        if unfinished:  # a bug, not bad input: never report a partial run as a result
            raise RuntimeError(f"{len(unfinished)} requests never finished (first: {unfinished[0]})")
        return requests

    def _send_kv(self, engine, seq):
        target = self.route(seq.req, self.decode_engines) if self.router != "round-robin" else min(
            self.decode_engines, key=lambda e: (e.load_tokens(), e.index))
        duration = self.transfer.transfer_ns(seq.req.prompt_tokens * self.kv_bytes_per_token)
        # one transfer at a time per sending and per receiving replica (its NICs carry the whole transfer; the
        # virtual engines of a pipeline-parallel replica share them)
        start = max(self.now, self._link_free.get(("send", engine.replica), 0),
                    self._link_free.get(("recv", target.replica), 0))
        end = start + duration
        self._link_free[("send", engine.replica)] = end
        self._link_free[("recv", target.replica)] = end
        self.transfers.append((seq.req.id, start, end, engine.index, target.index))
        self._push(end, "kv", (engine, seq, target))

    def queue_area_ns(self):
        return self._queue_area
