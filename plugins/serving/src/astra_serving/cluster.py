"""A deployment over time: replicas (each an :class:`~astra_serving.engine.Engine`) behind a router, or
separate prefill and decode pools with the KV cache moved between them. A discrete-event loop in int ns:
arrivals, iteration ends and KV transfer ends.

Decode runs (``fast_forward``, on by default): between events, a replica whose batch is decode only and whose
next iterations change nothing but each sequence's length (no arrival or other event before they end, no
sequence finishing, nothing waiting or swapped out, the KV blocks they need free) runs them in one go: each
iteration's time is still looked up (its context is one longer each time) and accounted, the blocks taken, and
the sequences are advanced at the end, without a scheduler pass per iteration. Every request's times are those of the loop that schedules
each iteration (``tests/test_fast_forward.py`` compares them on random workloads).

Routers: ``round-robin``; ``least-loaded`` (fewest tokens still to process, queued and running);
``kv-aware`` (a replica that has the request's prompt prefix cached, else the one with the most free KV blocks,
ties by load). With disaggregation a request is prefilled on a prefill replica (chosen by the router), which
samples the first token; its KV cache then goes over the network to a decode replica (the least loaded) and
the first token is delivered when it has arrived (TTFT includes the transfer). A prefill replica sends one
transfer at a time (FIFO), a decode replica receives one at a time, and the prefill replica holds the
request's blocks until it is sent.
"""

from __future__ import annotations

import heapq
import itertools

from astra_sim.errors import ConfigError

from .engine import Seq

ROUTERS = ("round-robin", "least-loaded", "kv-aware")


class Cluster:
    def __init__(self, engines, router="round-robin", decode_engines=None, transfer=None, kv_bytes_per_token=0,
                 sample_every_ns=None):
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
        self.fast_forward = True         # decode runs in one go (the module doc)
        self.iterations = []     # (replica, start ns, duration ns, prefill tokens, decode seqs, context), if recorded

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
    def _kick(self, engine, run=False):
        """Schedule the engine's next batch if it is idle; ``run``: the caller does nothing after this call, so a
        decode run may move the clock on (:meth:`_decode_run`)."""
        if engine.busy:
            return
        batch = self._schedule(engine)
        if batch is None:
            return
        duration = engine.end_ns(batch, self.now) - self.now
        if run and self.fast_forward:
            batch, duration = self._decode_run(engine, batch, duration)
            if batch is None:
                return
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

    def _decode_run(self, engine, batch, duration):
        """Run the iterations of a decode-only ``batch`` that end before the next event and leave the batch as
        it is (:meth:`Engine.decode_repeats`) here, as the event loop would: each accounted and followed by a KV
        sample at its end, the next one a context longer. (the batch to start now, its duration); ``now`` is
        the end of the iterations run."""
        horizon = self._events[0][0] if self._events else None
        if horizon is not None and self.now + duration >= horizon:
            return batch, duration  # another event comes first (the common case under load): nothing to run
        repeats = engine.decode_repeats(batch)
        if not repeats:
            return batch, duration
        blocks, size, phases = engine.blocks, engine.blocks.block_size, engine.decode_block_phases()
        ran = 0
        short = False
        while ran < repeats and (horizon is None or self.now + duration < horizon):
            self._account(engine, batch, duration)
            self.now += duration
            ran += 1
            self._sample_kv()
            grow = phases.get(ran % size)
            if grow:  # the next iteration's new blocks, taken as the scheduler would (in running order)
                if blocks.available() < len(grow):
                    short = True  # the scheduler preempts: it makes the next batch
                    break
                for seq in grow:
                    blocks.grow(seq.req.id, seq.computed + ran + 1)
            batch = engine.next_decode(batch)
            duration = engine.end_ns(batch, self.now) - self.now
        if ran:
            engine.advance_decodes(ran)
        if short:
            batch = self._schedule(engine)
            duration = None if batch is None else engine.end_ns(batch, self.now) - self.now
        return batch, duration

    def run(self, requests):
        """Simulate every request to its end; returns the requests (their times filled in)."""
        for req in requests:
            self._push(req.arrival_ns, "arrival", req)
        while self._events:
            t, _, kind, data = heapq.heappop(self._events)
            self.now = t
            if kind == "arrival":
                self._queue_change(+1)
                engine = self.route(data, self.engines)
                data.replica = engine.replica
                engine.add(Seq(data))
                self._kick(engine)
            elif kind == "step":
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
                self._kick(engine, run=True)
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
