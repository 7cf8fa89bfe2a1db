"""MSCCL-IR XML custom collectives, executed threadblock by threadblock.

Configure with ``"all-reduce-implementation-custom": ["algo.xml"]`` (or ``all-gather-``,
``reduce-scatter-``, ``all-to-all-``, or ``per-node-custom-implementation``). The kernel makes a
custom collective one stream with one phase; on every rank this module runs the XML's ``<gpu>``
whose id is the rank's position in the communicator. See docs/msccl.md for the full write-up.

Execution semantics
-------------------
* Every ``<tb>`` runs its steps strictly in order; all threadblocks of a rank run concurrently.
* A step first waits for its cross-threadblock dependency (``depid``/``deps``: step ``deps`` of
  threadblock ``depid`` on the same GPU has completed). ``nop`` does only that.
* Then it does its parts in sequence: receive (from ``tb.recv``), local work (reduce or copy), send
  (to ``tb.send``). ``rrcs``/``rrs`` = receive, reduce, send; ``rcs`` = receive, send; ``rrc`` =
  receive, reduce; ``re``/``ra`` = reduce; ``cpy`` = copy.
* A receive completes when its message has arrived; a send completes when its message has arrived at
  the peer (like the reference's CustomAlgorithm: a send node ends with the send's callback).
* All receives of a rank are posted when the collective starts, in step order per threadblock (the
  receive side of an NCCL connection always has its buffer ready); a receiving step only waits for the
  arrival. So sends never wait for the receiver to reach its step, and with ``--rendezvous-protocol``
  the 8 KiB handshakes leave at the start instead of deadlocking send-first programs.
* Message size: ``buffer x cnt // nchunksperloop`` bytes (at least 1), where ``buffer`` is the
  buffer ``nchunksperloop`` cuts: the node's ``comm_size`` for all-reduce, reduce-scatter and
  all-to-all (the full input buffer) and ``comm_size x ngpus`` for all-gather (``comm_size`` is what
  each rank contributes, ``nchunksperloop`` cuts the output buffer). The size depends only on ``cnt``,
  so a send and its receive always agree; the remainder (< nchunksperloop bytes) is not simulated.
* Matching is per (peer, channel) in order: each (collective instance, channel) has its own tag,
  ``2e9 x (chan + 1) + stream tag``, above every tag space the kernel uses (native, collective,
  rendezvous), so channels are distinct message streams and concurrent collectives never mix.
* Costs (local memory bandwidth ``local-mem-bw``): a reduction (``rrs``, ``rrc``, ``rrcs``, ``re``,
  ``ra``) costs the reference's ``3 x trunc(bytes / local-mem-bw)`` (write + 2 reads,
  ``Sys.reduction_delay_ns``); a ``cpy`` costs ``2 x trunc(bytes / local-mem-bw)`` (read + write).
  Receiving into a buffer and forwarding (``r``, ``rcs``, ``s``) cost nothing beyond the network,
  as for native algorithms. No endpoint delay (the reference's CustomAlgorithm has none either).
* Options (``simulate(..., options={...})``): ``msccl_protocol=True`` inflates every message by the
  protocol's wire overhead (``LL`` 2x: 8-byte lines with 4 data bytes; ``LL128`` 128/120; ``Simple``
  1x), which is what makes LL-based algorithms lose at large sizes on real hardware.
"""

from __future__ import annotations

from astra_sim.errors import ConfigError
from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, Algorithm

from astra_collectives_msccl.msccl_ir import OPCODES, MscclAlgorithm, is_msccl_xml, parse_msccl

__all__ = ["MscclFormat", "MscclCollective", "MscclRank", "MSCCL_TAG_STRIDE", "PROTOCOL_WIRE_FACTOR"]

#: Per-channel tag spaces: channel c uses [STRIDE x (c+1), STRIDE x (c+1) + 5e8); its rendezvous
#: handshakes (tag + 1e9) stay below the next channel's space.
MSCCL_TAG_STRIDE = 2_000_000_000

#: Bytes on the wire per data byte (``msccl_protocol`` option).
PROTOCOL_WIRE_FACTOR = {"Simple": (1, 1), "LL": (2, 1), "LL128": (128, 120)}

#: XML ``coll`` -> the kernel collective it implements (``custom`` implements any).
_COLL_TO_COM = {
    "allreduce": ALL_REDUCE,
    "allgather": ALL_GATHER,
    "reduce_scatter": REDUCE_SCATTER,
    "reducescatter": REDUCE_SCATTER,
    "alltoall": ALL_TO_ALL,
}
_CONFIG_KEY = {
    ALL_REDUCE: "all-reduce-implementation-custom",
    ALL_GATHER: "all-gather-implementation-custom",
    REDUCE_SCATTER: "reduce-scatter-implementation-custom",
    ALL_TO_ALL: "all-to-all-implementation-custom",
}

# Step flags in the compiled program.
_RECV, _LOCAL, _SEND = 1, 2, 4


class MscclFormat:
    """The ``msccl`` custom collective format: ``.xml`` files whose root element is ``<algo>``."""

    def matches(self, path):
        return is_msccl_xml(path)

    def load(self, path, context):
        return MscclCollective(parse_msccl(path), context)


class MscclCollective:
    """One loaded XML; compiles (and caches) the per-GPU programs for each collective size."""

    def __init__(self, algo: MscclAlgorithm, context):
        self.algo = algo
        self.context = context
        options = getattr(context, "options", None) or {}
        self.protocol = bool(options.get("msccl_protocol", False))
        cfg = getattr(context, "system_config", None)
        self.local_mem_bw = getattr(cfg, "local_mem_bw_bytes_per_s", 0.0) if cfg is not None else 0.0
        self.config_path = getattr(cfg, "path", "<system config>")
        self._programs = {}
        # Static per-step structure (independent of size and ranks).
        self._structure = [_structure(gpu) for gpu in algo.gpus]

    # -------------------------------------------------------------- checks
    def _check(self, com_type, group_npus):
        algo = self.algo
        want = _COLL_TO_COM.get(algo.coll)
        if algo.coll != "custom" and want != com_type:
            raise ConfigError(
                f"MSCCL-IR {algo.path}: a {algo.coll!r} algorithm cannot implement "
                f"{com_type.replace('_', '-')} (configured through {_CONFIG_KEY.get(com_type, com_type)!r})"
            )
        n = len(group_npus) if group_npus else self.context.total_npus
        if n != algo.ngpus:
            where = "the communicator group" if group_npus else "the simulation"
            raise ConfigError(
                f"MSCCL-IR {algo.path}: ngpus={algo.ngpus} but {where} has {n} NPUs; "
                "an MSCCL algorithm runs on exactly ngpus ranks"
            )

    # -------------------------------------------------------------- program
    def _program(self, com_type, data_size, group_npus):
        key = (com_type, data_size, None if not group_npus else tuple(group_npus))
        prog = self._programs.get(key)
        if prog is None:
            if len(self._programs) > 64:
                self._programs.clear()
            prog = self._programs[key] = self._compile(com_type, data_size, group_npus)
        return prog

    def _compile(self, com_type, data_size, group_npus):
        algo = self.algo
        ranks = sorted(group_npus) if group_npus else list(range(algo.ngpus))
        buffer = data_size * algo.ngpus if com_type == ALL_GATHER else data_size
        nchunks = algo.nchunksperloop
        wire_num, wire_den = PROTOCOL_WIRE_FACTOR.get(algo.proto, (1, 1)) if self.protocol else (1, 1)
        bw = self.local_mem_bw
        sizes, costs = {}, {}

        def size_of(cnt):
            s = sizes.get(cnt)
            if s is None:
                s = sizes[cnt] = max(1, buffer * cnt // nchunks)
            return s

        def cost_of(kind, nbytes):
            c = costs.get((kind, nbytes))
            if c is None:
                if bw <= 0:
                    raise ConfigError(
                        f"{self.config_path}: 'local-mem-bw' must be > 0 (GB/s): the MSCCL algorithm "
                        f"{algo.path} reduces or copies data locally"
                    )
                # Same truncation as Sys.reduction_delay_ns: per access, then x accesses.
                c = costs[(kind, nbytes)] = kind * int(nbytes / bw * 1e9)
            return c

        programs = []
        for gpu_structure in self._structure:
            tbs = []
            for chan, send_peer, recv_peer, steps in gpu_structure:
                send_rank = ranks[send_peer] if send_peer >= 0 else -1
                recv_rank = ranks[recv_peer] if recv_peer >= 0 else -1
                compiled = []
                for flags, cnt, local_kind, dep_tb, dep_s, has_waiters, slot in steps:
                    nbytes = size_of(cnt) if cnt > 0 else 0
                    wire = -(-nbytes * wire_num // wire_den) if nbytes else 0
                    cost = cost_of(local_kind, nbytes) if local_kind else 0
                    f = flags & ~_LOCAL
                    if cost > 0:
                        f |= _LOCAL
                    compiled.append((f, wire, cost, dep_tb, dep_s, has_waiters, slot))
                tbs.append((chan, send_rank, recv_rank, tuple(compiled)))
            programs.append(tuple(tbs))
        final = {ALL_REDUCE: data_size, ALL_GATHER: data_size * algo.ngpus,
                 REDUCE_SCATTER: data_size // algo.ngpus, ALL_TO_ALL: data_size}.get(com_type, data_size)
        return programs, final

    # -------------------------------------------------------------- API
    def make_algorithm(self, com_type, rank, position, group_npus, data_size):
        self._check(com_type, group_npus)
        if not 0 <= position < self.algo.ngpus:
            raise ConfigError(
                f"MSCCL-IR {self.algo.path}: rank {rank} is not a member of its communicator group "
                f"(position {position})"
            )
        programs, final = self._program(com_type, data_size, group_npus)
        return MscclRank(com_type, rank, programs[position], data_size, final)


def _structure(gpu):
    """Per threadblock: (chan, send peer, recv peer, steps); a step is
    (flags, cnt, local kind (0 none, 2 copy, 3 reduce), dep tb index or -1, dep step, has waiters,
    receive slot: the step's index among the GPU's receiving steps, or -1)."""
    index = {tb.id: i for i, tb in enumerate(gpu.threadblocks)}
    waited = set()
    for tb in gpu.threadblocks:
        for st in tb.steps:
            if st.depid >= 0 and st.depid != tb.id:
                waited.add((index[st.depid], st.deps))
    out = []
    slot = 0
    for i, tb in enumerate(gpu.threadblocks):
        steps = []
        for st in tb.steps:
            op = OPCODES[st.type]
            flags = (_RECV if op.recv else 0) | (_SEND if op.send else 0)
            local = 3 if op.reduce else (2 if op.copy else 0)
            if local:
                flags |= _LOCAL
            if st.depid >= 0 and st.depid != tb.id:  # a same-tb dependency is met by program order
                dep_tb, dep_s = index[st.depid], st.deps
            else:
                dep_tb, dep_s = -1, -1
            steps.append((flags, st.cnt, local, dep_tb, dep_s, (i, st.s) in waited, slot if op.recv else -1))
            if op.recv:
                slot += 1
        out.append((tb.chan, tb.send, tb.recv, tuple(steps)))
    return tuple(out)


class MscclRank(Algorithm):
    """One rank's threadblocks as a small interpreter driven by message and timer callbacks.

    Per threadblock: ``pc`` (the step being executed) and ``phase`` (0 dependency, 1 receive, 2 local
    work, 3 send, 4 done). Callbacks only move a threadblock to its next phase and put it on the
    ready list; :meth:`_pump` runs ready threadblocks until they block (no recursion).
    """

    __slots__ = ("rank", "program", "pc", "phase", "waiters", "ready", "running", "left", "tags",
                 "in_init", "arrived", "slot_waiter", "_on_event", "_on_arrival")

    def __init__(self, com_type, rank, program, data_size, final_data_size):
        self.com_type = com_type
        self.rank = rank
        self.program = program
        self.data_size = data_size
        self.final_data_size = final_data_size
        n = len(program)
        self.pc = [0] * n
        self.phase = [0] * n
        self.waiters = {}
        self.ready = []
        self.running = False
        self.left = sum(1 for tb in program if tb[3])
        self.tags = None
        self.in_init = False
        nslots = sum(1 for tb in program for st in tb[3] if st[6] >= 0)
        self.arrived = bytearray(nslots)
        self.slot_waiter = [-1] * nslots

    def bind(self, stream):
        super().bind(stream)
        base = stream.tag
        self.tags = [MSCCL_TAG_STRIDE * (tb[0] + 1) + base for tb in self.program]
        self._on_event = self._event
        self._on_arrival = self._arrival

    # -- kernel events ----------------------------------------------------
    def run_init(self):
        self.in_init = True
        # Every receive is posted up front, in step order per threadblock (a threadblock owns its
        # (peer, channel) connection, so this is the connection's order): the receive side of an
        # NCCL connection always has its buffer ready. A step then only waits for the arrival.
        rank, recv, arrival = self.rank, self._recv, self._on_arrival
        for t, (_chan, _send_rank, recv_rank, steps) in enumerate(self.program):
            tag = self.tags[t]
            for st in steps:
                if st[6] >= 0:
                    recv(recv_rank, rank, st[1], tag, arrival, st[6])
        self.ready.extend(i for i, tb in enumerate(self.program) if tb[3])
        self._pump()
        self.in_init = False

    def run_general(self, _arg=None):
        pass

    def run_received(self, _arg=None):
        pass

    def _arrival(self, slot):
        """The message of receive ``slot`` arrived; wake its threadblock if it is waiting for it."""
        self.arrived[slot] = 1
        t = self.slot_waiter[slot]
        if t >= 0:
            self.phase[t] = 2
            self.ready.append(t)
            if not self.running:
                self._pump()

    def _event(self, t):
        """Local work ended or a send was delivered: next phase of tb ``t``."""
        self.phase[t] += 1
        self.ready.append(t)
        if not self.running:
            self._pump()

    # -- interpreter ------------------------------------------------------
    def _pump(self):
        self.running = True
        ready = self.ready
        program = self.program
        pc, phase = self.pc, self.phase
        arrived, slot_waiter = self.arrived, self.slot_waiter
        rank = self.rank
        while ready:
            t = ready.pop()
            chan, send_rank, recv_rank, steps = program[t]
            i = pc[t]
            ph = phase[t]
            nsteps = len(steps)
            while True:
                flags, wire, cost, dep_tb, dep_s, has_waiters, slot = steps[i]
                if ph == 0:
                    if dep_tb >= 0 and pc[dep_tb] <= dep_s:
                        key = (dep_tb, dep_s)
                        w = self.waiters.get(key)
                        if w is None:
                            self.waiters[key] = [t]
                        else:
                            w.append(t)
                        break
                    ph = 1
                if ph == 1:
                    ph = 2
                    if flags & _RECV and not arrived[slot]:
                        phase[t] = 1
                        slot_waiter[slot] = t
                        break
                if ph == 2:
                    ph = 3
                    if flags & _LOCAL:
                        phase[t] = 2
                        self._register(self._on_event, t, cost)
                        break
                if ph == 3:
                    ph = 4
                    if flags & _SEND:
                        phase[t] = 3
                        self._send(rank, send_rank, wire, self.tags[t], self._on_event, t)
                        break
                # step complete
                i += 1
                pc[t] = i
                ph = phase[t] = 0
                if has_waiters:
                    woken = self.waiters.pop((t, i - 1), None)
                    if woken:
                        ready.extend(woken)
                if i == nsteps:
                    self.left -= 1
                    break
        self.running = False
        if self.left == 0:
            self.left = -1
            self._on_event = self._on_arrival = None
            if self.in_init:
                # Never end the phase inside run_init (the kernel is still starting the stream).
                self._register(self._finish_later, None, 0)
            else:
                self.finish()

    def _finish_later(self, _arg):
        self.finish()
