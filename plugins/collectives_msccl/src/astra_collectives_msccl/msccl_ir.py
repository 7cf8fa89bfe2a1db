"""Reader for MSCCL-IR XML (the msccl-tools "old format" the MSCCL runtime and ASTRA-sim read).

Grammar::

    <algo name proto nchannels nchunksperloop ngpus coll inplace [nthreads minBytes maxBytes]>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

:func:`parse_msccl` returns a :class:`MscclAlgorithm` and checks the program statically; every
problem is an :class:`astra_sim.errors.ConfigError` naming the file and the GPU, threadblock and step.
Checks:

* ``ngpus`` 1..10,000,000 (``MAX_TOTAL_NPUS``), ``nchunksperloop`` > 0, every GPU id 0..ngpus-1 present exactly once;
* threadblock ids unique per GPU; ``send``/``recv`` peers -1 or 0..ngpus-1 and not the GPU itself;
  ``chan`` >= 0; at most one threadblock per (send peer, channel) and per (recv peer, channel) on a GPU
  (the runtime gives each NCCL connection to one threadblock, which is what makes ordering defined);
* step indices ``s`` are 0..n-1 (steps are sorted by ``s``); the opcode is known (:data:`OPCODES`); a
  step that sends has a send peer and one that receives a recv peer; buffers are ``i``/``o``/``s`` and
  ``offset + cnt`` fits the buffer (``i_chunks``/``o_chunks``/``s_chunks``; for an in-place collective
  ``i`` and ``o`` are the same buffer, so the larger size bounds both);
* a dependency (``depid``/``deps``) names an existing threadblock of the same GPU and one of its steps;
  a dependency on the own threadblock must point backwards; the dependency graph (program order plus
  cross-threadblock dependencies) has no cycle;
* per (src, dst, channel) the sends of ``src`` and the receives of ``dst`` pair up one to one, in order,
  with equal ``cnt`` (:func:`check_matching`);
* the program can run to the end when sends never block (:func:`check_progress`): no cycle of
  receives across GPUs.

Tolerance: the RCCL / TE-CCL dialect's extra attributes (``outofplace``, ``redop``, ...) and child
elements (``<copy i_off o_off>`` under ``<gpu>``) are ignored, as are any other unknown attributes
and elements. Missing ``depid``/``deps``/``hasdep`` default to -1/-1/0, a missing ``nchannels`` to
max(chan)+1, a missing ``proto`` to ``Simple``, a missing ``coll`` to ``custom`` and a missing
``inplace`` to ``not outofplace`` (else 0).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError
from astra_sim.limits import MAX_TOTAL_NPUS
from astra_sim.safeio import brief

from astra_collectives_msccl.safe_xml import load_xml

__all__ = [
    "OPCODES",
    "Opcode",
    "Step",
    "Threadblock",
    "Gpu",
    "MscclAlgorithm",
    "parse_msccl",
    "is_msccl_xml",
    "check_matching",
    "check_progress",
]


@dataclass(frozen=True)
class Opcode:
    """What one step opcode does, as parts executed in this order: recv, reduce/copy, send."""

    name: str
    recv: bool = False  # receives cnt chunks from tb.recv
    reduce: bool = False  # reduces (received or local src) into a buffer
    copy: bool = False  # local copy src -> dst (no reduction)
    send: bool = False  # sends cnt chunks to tb.send


#: Every opcode the MSCCL runtime executes (``msccl.h``); ``ra`` (residual add) is runtime-only.
OPCODES: dict[str, Opcode] = {
    "s": Opcode("send", send=True),
    "r": Opcode("recv", recv=True),
    "rcs": Opcode("recv_copy_send", recv=True, send=True),
    "rrs": Opcode("recv_reduce_send", recv=True, reduce=True, send=True),
    "rrc": Opcode("recv_reduce_copy", recv=True, reduce=True),
    "rrcs": Opcode("recv_reduce_copy_send", recv=True, reduce=True, send=True),
    "cpy": Opcode("copy", copy=True),
    "re": Opcode("reduce", reduce=True),
    "ra": Opcode("residual_add", reduce=True),
    "nop": Opcode("nop"),
}

_BUFFERS = ("i", "o", "s")


@dataclass
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0

    @property
    def op(self) -> Opcode:
        return OPCODES[self.type]


@dataclass
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step] = field(default_factory=list)


@dataclass
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    threadblocks: list[Threadblock] = field(default_factory=list)

    def tb(self, tb_id: int) -> Threadblock | None:
        for tb in self.threadblocks:
            if tb.id == tb_id:
                return tb
        return None


@dataclass
class MscclAlgorithm:
    path: str
    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    gpus: list[Gpu] = field(default_factory=list)  # sorted by id: gpus[r].id == r

    @property
    def nsteps(self) -> int:
        return sum(len(tb.steps) for g in self.gpus for tb in g.threadblocks)


# ----------------------------------------------------------------------------------------------
# parsing


def _where(path, gpu=None, tb=None, step=None):
    parts = [f"MSCCL-IR {path}"]
    if gpu is not None:
        parts.append(f"gpu {gpu}")
    if tb is not None:
        parts.append(f"tb {tb}")
    if step is not None:
        parts.append(f"step {step}")
    return ", ".join(parts)


def _int(el, attr, where, default=None):
    raw = el.get(attr)
    if raw is None:
        if default is None:
            raise ConfigError(f"{where}: <{el.tag}> lacks the attribute {attr!r}")
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{where}: <{el.tag}> {attr}={brief(raw)} is not an integer") from None
    if abs(value) >= 1 << 63:  # (no count or index is that big; a 4,000-digit one would flood every message)
        raise ConfigError(f"{where}: <{el.tag}> {attr}={brief(raw)} is out of range (an int64)")
    return value


def _read_root(path):
    """The root element, read bounded and without entity expansion (:func:`astra_collectives_msccl.safe_xml.parse_xml`)."""
    return load_xml(path, "MSCCL-IR")


class _Root(Exception):
    pass


def is_msccl_xml(path) -> bool:
    """True when ``path`` ends with ``.xml`` and its root element is ``<algo>`` (cheap: reads until the root
    element starts, at most 1 MiB; a file that declares entities counts, so that reading it says why not)."""
    from xml.parsers import expat

    p = os.fspath(path)
    if not p.lower().endswith(".xml") or not os.path.isfile(p):
        return False

    def root(tag, _attrs):
        raise _Root(tag == "algo")

    def entity(*_args):
        raise _Root(True)

    parser = expat.ParserCreate()
    parser.StartElementHandler = root
    parser.EntityDeclHandler = parser.UnparsedEntityDeclHandler = entity
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        with open(p, "rb") as handle:
            parser.Parse(handle.read(1 << 20), False)
    except _Root as found:
        return bool(found.args[0])
    except (expat.ExpatError, OSError):
        return False
    return False


def parse_msccl(path) -> MscclAlgorithm:
    """Read and check an MSCCL-IR XML file (see the module docstring for the checks)."""
    path = os.fspath(path)
    root = _read_root(path)
    if root.tag != "algo":
        raise ConfigError(f"MSCCL-IR {path}: the root element is <{brief(root.tag)}>, expected <algo>")
    w = _where(path)
    ngpus = _int(root, "ngpus", w)
    if not 0 < ngpus <= MAX_TOTAL_NPUS:
        raise ConfigError(f"{w}: ngpus={brief(ngpus)} must be 1..{MAX_TOTAL_NPUS:,}")
    nchunks = _int(root, "nchunksperloop", w)
    if nchunks <= 0:
        raise ConfigError(f"{w}: nchunksperloop={nchunks} must be positive")
    if root.get("inplace") is not None:
        inplace = _int(root, "inplace", w)
    elif root.get("outofplace") is not None:
        inplace = int(not _int(root, "outofplace", w))
    else:
        inplace = 0
    algo = MscclAlgorithm(
        path=path,
        name=root.get("name", os.path.splitext(os.path.basename(path))[0]),
        proto=root.get("proto", "Simple"),
        nchannels=_int(root, "nchannels", w, -1),
        nchunksperloop=nchunks,
        ngpus=ngpus,
        coll=root.get("coll", "custom"),
        inplace=inplace,
    )

    by_id: dict[int, Gpu] = {}
    for gel in root.iter("gpu"):
        gid = _int(gel, "id", w)
        wg = _where(path, gid)
        if not 0 <= gid < ngpus:
            raise ConfigError(f"{wg}: gpu id {gid} is outside 0..{ngpus - 1} (ngpus={ngpus})")
        if gid in by_id:
            raise ConfigError(f"{wg}: gpu id {gid} appears twice")
        gpu = Gpu(gid, _int(gel, "i_chunks", wg, 0), _int(gel, "o_chunks", wg, 0), _int(gel, "s_chunks", wg, 0))
        for name in ("i_chunks", "o_chunks", "s_chunks"):
            if getattr(gpu, name) < 0:
                raise ConfigError(f"{wg}: {name}={getattr(gpu, name)} is negative")
        tb_ids = set()
        for tel in gel.iter("tb"):
            tid = _int(tel, "id", wg)
            wt = _where(path, gid, tid)
            if tid in tb_ids:
                raise ConfigError(f"{wt}: threadblock id {tid} appears twice on gpu {gid}")
            tb_ids.add(tid)
            tb = Threadblock(tid, _int(tel, "send", wt, -1), _int(tel, "recv", wt, -1), _int(tel, "chan", wt, 0))
            for role in ("send", "recv"):
                peer = getattr(tb, role)
                if peer == -1:
                    continue
                if not 0 <= peer < ngpus:
                    raise ConfigError(f"{wt}: {role} peer {peer} is outside 0..{ngpus - 1} (ngpus={ngpus})")
                if peer == gid:
                    raise ConfigError(f"{wt}: {role} peer {peer} is the gpu itself")
            if tb.chan < 0:
                raise ConfigError(f"{wt}: chan={tb.chan} is negative")
            steps = []
            for sel in tel.iter("step"):
                ws = _where(path, gid, tid, sel.get("s", "?")[:24])
                steps.append(
                    Step(
                        s=_int(sel, "s", ws),
                        type=(sel.get("type") or "").strip(),
                        srcbuf=(sel.get("srcbuf") or "").strip(),
                        srcoff=_int(sel, "srcoff", ws, -1),
                        dstbuf=(sel.get("dstbuf") or "").strip(),
                        dstoff=_int(sel, "dstoff", ws, -1),
                        cnt=_int(sel, "cnt", ws, 0),
                        depid=_int(sel, "depid", ws, -1),
                        deps=_int(sel, "deps", ws, -1),
                        hasdep=_int(sel, "hasdep", ws, 0),
                    )
                )
            steps.sort(key=lambda st: st.s)
            for idx, st in enumerate(steps):
                if st.s != idx:
                    what = "appears twice" if idx > 0 and steps[idx - 1].s == st.s else f"leaves a gap (expected s={idx})"
                    raise ConfigError(f"{_where(path, gid, tid, st.s)}: step index {st.s} {what}")
            tb.steps = steps
            gpu.threadblocks.append(tb)
        by_id[gid] = gpu

    missing = list(itertools.islice((g for g in range(ngpus) if g not in by_id), 9))
    if missing:
        raise ConfigError(f"{w}: ngpus={ngpus} but no <gpu> for id(s) {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    algo.gpus = [by_id[g] for g in range(ngpus)]
    max_chan = max((tb.chan for g in algo.gpus for tb in g.threadblocks), default=-1)
    if algo.nchannels < 0:
        algo.nchannels = max_chan + 1
    _check_steps(algo)
    _check_dependencies(algo)
    check_matching(algo)
    check_progress(algo)
    return algo


# ----------------------------------------------------------------------------------------------
# static checks


def _check_steps(algo: MscclAlgorithm):
    path = algo.path
    for gpu in algo.gpus:
        sizes = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
        if algo.inplace:
            sizes["i"] = sizes["o"] = max(gpu.i_chunks, gpu.o_chunks)
        used_send: dict[tuple[int, int], int] = {}
        used_recv: dict[tuple[int, int], int] = {}
        for tb in gpu.threadblocks:
            wt = _where(path, gpu.id, tb.id)
            sends = any(st.type in OPCODES and OPCODES[st.type].send for st in tb.steps)
            recvs = any(st.type in OPCODES and OPCODES[st.type].recv for st in tb.steps)
            for used, role, active in ((used_send, "send", sends), (used_recv, "recv", recvs)):
                peer = getattr(tb, role)
                if peer < 0 or not active:
                    continue
                key = (peer, tb.chan)
                if key in used:
                    raise ConfigError(
                        f"{wt}: threadblocks {used[key]} and {tb.id} both {role} "
                        f"{'to' if role == 'send' else 'from'} gpu {peer} on channel {tb.chan}; "
                        "a (peer, channel) connection belongs to one threadblock"
                    )
                used[key] = tb.id
            for st in tb.steps:
                ws = _where(path, gpu.id, tb.id, st.s)
                op = OPCODES.get(st.type)
                if op is None:
                    raise ConfigError(f"{ws}: unknown opcode type={brief(st.type)} (known: {', '.join(OPCODES)})")
                if st.cnt < 0:
                    raise ConfigError(f"{ws}: cnt={st.cnt} is negative")
                if op.send and tb.send < 0:
                    raise ConfigError(f"{ws}: type={brief(st.type)} sends but the threadblock has send=-1")
                if op.recv and tb.recv < 0:
                    raise ConfigError(f"{ws}: type={brief(st.type)} receives but the threadblock has recv=-1")
                if st.type == "nop":
                    continue
                # which buffers the op touches: a send reads src, a recv writes dst, local ops both.
                reads_src = not op.recv or op.reduce  # s, cpy, re, ra and rrs/rrc/rrcs read src
                writes_dst = not (op.send and not op.recv) and st.type != "rrs"
                for role, buf, off, needed in (
                    ("src", st.srcbuf, st.srcoff, reads_src),
                    ("dst", st.dstbuf, st.dstoff, writes_dst),
                ):
                    if not needed:
                        continue
                    if buf not in _BUFFERS:
                        raise ConfigError(f"{ws}: {role}buf={brief(buf)} is not one of i, o, s")
                    if off < 0 or off + st.cnt > sizes[buf]:
                        raise ConfigError(
                            f"{ws}: {role}off={off} cnt={st.cnt} is outside the {buf!r} buffer "
                            f"({sizes[buf]} chunks on gpu {gpu.id})"
                        )


def _check_dependencies(algo: MscclAlgorithm):
    path = algo.path
    for gpu in algo.gpus:
        tbs = {tb.id: tb for tb in gpu.threadblocks}
        # graph nodes (tb, s); edges: program order and cross-tb dependencies.
        preds: dict[tuple[int, int], tuple[int, int]] = {}
        for tb in gpu.threadblocks:
            for st in tb.steps:
                if st.depid < 0:
                    continue
                ws = _where(path, gpu.id, tb.id, st.s)
                other = tbs.get(st.depid)
                if other is None:
                    raise ConfigError(f"{ws}: depends on threadblock {st.depid}, which gpu {gpu.id} does not have")
                if not 0 <= st.deps < len(other.steps):
                    raise ConfigError(
                        f"{ws}: depends on step {st.deps} of threadblock {st.depid}, which has "
                        f"{len(other.steps)} step(s)"
                    )
                if st.depid == tb.id and st.deps >= st.s:
                    raise ConfigError(f"{ws}: depends on its own threadblock's step {st.deps}, which is not earlier")
                preds[(tb.id, st.s)] = (st.depid, st.deps)
        if not preds:
            continue
        # cycle check: iterative DFS over (tb, s) with edges to (tb, s-1) and the dependency.
        state: dict[tuple[int, int], int] = {}
        for tb in gpu.threadblocks:
            for st in tb.steps:
                start = (tb.id, st.s)
                if start in state:
                    continue
                stack = [(start, 0)]
                while stack:
                    node, i = stack.pop()
                    if i == 0:
                        if state.get(node) == 2:
                            continue
                        state[node] = 1
                    nexts = []
                    if node[1] > 0:
                        nexts.append((node[0], node[1] - 1))
                    if node in preds:
                        nexts.append(preds[node])
                    if i < len(nexts):
                        stack.append((node, i + 1))
                        nxt = nexts[i]
                        s = state.get(nxt)
                        if s == 1:
                            raise ConfigError(
                                f"{_where(path, gpu.id, node[0], node[1])}: dependency cycle through "
                                f"tb {nxt[0]} step {nxt[1]}"
                            )
                        if s is None:
                            stack.append((nxt, 0))
                    else:
                        state[node] = 2


def check_matching(algo: MscclAlgorithm):
    """Per (src, dst, channel): src's sends and dst's receives pair up in order with equal ``cnt``."""
    path = algo.path
    sends: dict[tuple[int, int, int], list[tuple[int, int, Step]]] = {}
    recvs: dict[tuple[int, int, int], list[tuple[int, int, Step]]] = {}
    for gpu in algo.gpus:
        for tb in gpu.threadblocks:
            for st in tb.steps:
                op = OPCODES[st.type]
                if op.send:
                    sends.setdefault((gpu.id, tb.send, tb.chan), []).append((gpu.id, tb.id, st))
                if op.recv:
                    recvs.setdefault((tb.recv, gpu.id, tb.chan), []).append((gpu.id, tb.id, st))
    for key in sorted(set(sends) | set(recvs)):
        src, dst, chan = key
        ss, rr = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(ss), len(rr))):
            if k >= len(rr):
                g, t, st = ss[k]
                raise ConfigError(
                    f"{_where(path, g, t, st.s)}: send #{k + 1} to gpu {dst} on channel {chan} has no matching "
                    f"receive (gpu {dst} receives {len(rr)} message(s) from gpu {src} on channel {chan}, "
                    f"gpu {src} sends {len(ss)})"
                )
            if k >= len(ss):
                g, t, st = rr[k]
                raise ConfigError(
                    f"{_where(path, g, t, st.s)}: receive #{k + 1} from gpu {src} on channel {chan} has no "
                    f"matching send (gpu {src} sends {len(ss)} message(s) to gpu {dst} on channel {chan}, "
                    f"gpu {dst} receives {len(rr)})"
                )
            (gs, ts, sst), (gr, tr, rst) = ss[k], rr[k]
            if sst.cnt != rst.cnt:
                raise ConfigError(
                    f"{_where(path, gs, ts, sst.s)}: send #{k + 1} to gpu {dst} on channel {chan} has cnt={sst.cnt} "
                    f"but the matching receive (gpu {gr}, tb {tr}, step {rst.s}) has cnt={rst.cnt}"
                )


def check_progress(algo: MscclAlgorithm):
    """Run the program untimed (sends never block) and report a step that can never run.

    Catches what the per-step checks cannot: receive cycles across GPUs (gpu 0 waits for gpu 1
    which waits for gpu 0) and cross-threadblock dependencies that wait on such a step.
    """
    path = algo.path
    posted: dict[tuple[int, int, int], int] = {}
    taken: dict[tuple[int, int, int], int] = {}
    tbs = [(gpu, tb) for gpu in algo.gpus for tb in gpu.threadblocks]
    done = {(gpu.id, tb.id): 0 for gpu, tb in tbs}
    progress = True
    while progress:
        progress = False
        for gpu, tb in tbs:
            key = (gpu.id, tb.id)
            i = done[key]
            while i < len(tb.steps):
                st = tb.steps[i]
                if st.depid >= 0 and done[(gpu.id, st.depid)] <= st.deps:
                    break
                op = OPCODES[st.type]
                if op.recv:
                    ck = (tb.recv, gpu.id, tb.chan)
                    if taken.get(ck, 0) >= posted.get(ck, 0):
                        break
                    taken[ck] = taken.get(ck, 0) + 1
                if op.send:
                    ck = (gpu.id, tb.send, tb.chan)
                    posted[ck] = posted.get(ck, 0) + 1
                i += 1
                progress = True
            done[key] = i
    for gpu, tb in tbs:
        i = done[(gpu.id, tb.id)]
        if i < len(tb.steps):
            st = tb.steps[i]
            if st.depid >= 0 and done[(gpu.id, st.depid)] <= st.deps:
                why = f"its dependency (tb {st.depid} step {st.deps}) never completes"
            else:
                ck = (tb.recv, gpu.id, tb.chan)
                why = (
                    f"receive #{taken.get(ck, 0) + 1} from gpu {tb.recv} on channel {tb.chan} is never sent "
                    f"(the sender is blocked earlier: a cycle of receives)"
                )
            raise ConfigError(f"{_where(path, gpu.id, tb.id, st.s)}: deadlock: {why}")
