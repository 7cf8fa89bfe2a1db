"""Class traces held in memory (issue 37): a generator and a run in one process skip the encode and the parse.

A generator that runs its workload in the same process (``astra validate``, a layout search's points, a library
caller) used to encode every node to Chakra bytes and have the run parse them back. :func:`hold_compact_workload`
instead keeps each class trace as the nodes the reader would have made of its file, and writes the workload's files
with every class trace reduced to its GlobalMetadata and one *held frame*: a frame whose first byte (field number 0)
no protobuf reader accepts, naming the process that holds the nodes and a token for them. So:

* the run's ``load_trace`` (:mod:`.plugin`) takes the held nodes, as they are, in the process that made them;
* what reads only the GlobalMetadata (the memory check, the throughput figures, a sweep's estimate) reads the file;
* any other reader fails loudly ("not a valid Node"), never silently: the package's own readers (expansion, one
  rank's nodes) and anyone calling :func:`ensure_written` first get the whole file written, byte for byte what the
  generator writes without holding (``encode``, the generator's own encoder, is kept for that);
* a held trace is dropped when its file is removed or replaced (validation's private folders), and the oldest are
  written out and dropped when more than :data:`MAX_HELD_NODES` nodes are held (never those just held: their run
  needs them in memory anyway).
"""

from __future__ import annotations

import os
import secrets
import threading

from astra_sim.chakra.writer import encode_varint
from astra_sim.errors import WorkloadError

#: The start of a held frame's body: byte 0 is a protobuf tag of field 0, which every protobuf parser rejects.
HELD_FRAME = b"\x00astra-sim held trace: the nodes are in the memory of process "
#: Nodes held at most (each node object once); the oldest traces are written out beyond (the newest workload stays).
MAX_HELD_NODES = 3_000_000

_LOCK = threading.RLock()
_HELD = {}  # token -> _Held, oldest first


class _Held:
    __slots__ = ("path", "head", "nodes", "encode", "identity", "own_nodes")

    def __init__(self, path, head, nodes, encode, own_nodes):
        self.path, self.head, self.nodes, self.encode = path, head, nodes, encode
        self.identity = None  # (inode, size, mtime) of the held file once written
        self.own_nodes = own_nodes  # nodes no earlier class trace of its workload holds (what it costs in memory)

    def data(self):
        """The whole trace file: the GlobalMetadata frame and every node's frame."""
        parts = [self.head]
        for node in self.nodes:
            body = self.encode(node)
            parts.append(encode_varint(len(body)))
            parts.append(body)
        return b"".join(parts)


def _identity(path):
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def hold_compact_workload(prefix, npus, symmetry, classes, encode, *, comm_groups=None, generator=None):
    """:func:`~astra_workload_compact.write_compact_workload` for class traces held in memory. ``classes``:
    ``(representative rank, GlobalMetadata frame (length prefix and message), nodes)`` in order, the nodes as
    :func:`astra_sim.chakra.parse_et` (``keep_raw=False``) gives them for the file; ``encode(node)``: the node's
    frame body as the file holds it. Returns the manifest's path."""
    from astra_workload_compact.manifest import write_compact_workload

    prefix = str(prefix)
    stubs, held = [], []
    for i, (rep, head, nodes) in enumerate(classes):
        token = f"{os.getpid()}: {secrets.token_hex(12)}"
        body = HELD_FRAME + token.encode()
        stubs.append((rep, head + encode_varint(len(body)) + body))
        path = os.path.abspath(f"{prefix}.class{i}.et")  # (write_compact_workload's name; the manifest's path)
        own = 0
        for node in nodes:  # the reader names a node's first file
            if node.path is None:
                node.path = path
                own += 1
        held.append((token, _Held(path, head, nodes, encode, own)))
    with _LOCK:
        _prune()
        _HELD.update(held)  # (before the files: a held frame always finds its nodes in this process)
        manifest = write_compact_workload(prefix, npus, symmetry, stubs, comm_groups=comm_groups,
                                          generator=generator)
        for _, entry in held:
            entry.identity = _identity(entry.path)
        _write_out_beyond(MAX_HELD_NODES, keep={token for token, _ in held})
    return manifest


def _varint(data, pos):
    """``(value, position after it)`` of the varint at ``pos``; None when cut off or longer than 10 bytes."""
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        value |= (data[i] & 0x7F) << shift
        shift += 7
        if data[i] < 0x80:
            return value, i + 1
    return None


def _token_of(data):
    """The token of a held trace's bytes (a GlobalMetadata frame, then a held frame, then nothing), else None."""
    first = _varint(data, 0)
    if first is None:
        return None
    second = _varint(data, first[1] + first[0])
    if second is None:
        return None
    length, start = second
    if start + length != len(data) or not data.startswith(HELD_FRAME, start):
        return None
    return data[start + len(HELD_FRAME):].decode("utf-8", "replace")


def held_nodes(data, path):
    """The held nodes of a trace file's bytes ``data``; None for a trace that is not held (parse it). A held trace
    whose nodes this process does not hold is a WorkloadError saying where they are."""
    if HELD_FRAME not in data[-256:]:  # (the held frame ends the file: a cheap look first)
        return None
    token = _token_of(data)
    if token is None:
        return None
    with _LOCK:
        entry = _HELD.get(token)
        if entry is not None and entry.identity is not None and entry.identity == _identity(path):
            return entry.nodes
    raise WorkloadError(f"{path}: this class trace was generated in memory (held by process {token.split(':')[0]}) "
                        "and is not a file: run it in that process, or generate the workload without holding it "
                        "(astra workload llm, generate_llm_workload(..., in_memory=False))")


def trace_nodes(path):
    """The nodes of the class trace file ``path``: those this process holds for it, else the file parsed
    (``read_et(path, keep_raw=False)``): for a tool that reads a workload it generated in memory (a layout search's
    bound). Errors are the reader's ChakraError, or the WorkloadError of a trace held by another process."""
    from astra_sim.chakra import ChakraError, read_et

    real = os.path.abspath(str(path))
    identity = _identity(real)
    with _LOCK:
        for entry in _HELD.values():
            if entry.path == real and entry.identity is not None and entry.identity == identity:
                return entry.nodes
    try:
        return read_et(path, keep_raw=False).nodes
    except ChakraError:
        try:
            with open(real, "rb") as handle:
                held_nodes(handle.read(), path)  # (a trace another process holds: says so)
        except OSError:
            pass
        raise


def ensure_written(path):
    """Write the held trace ``path`` (a class trace file of this process's :func:`hold_compact_workload`) out
    as the whole file, byte for byte the generator's, and stop holding it; nothing for any other file."""
    real = os.path.abspath(str(path))
    with _LOCK:
        for token, entry in list(_HELD.items()):
            if entry.path == real and entry.identity == _identity(real):
                _write_out(token, entry)


def _write_out(token, entry):
    from astra_sim.safeio import write_bytes_atomic

    write_bytes_atomic(entry.path, entry.data())
    del _HELD[token]


def _write_out_beyond(limit, keep=()):
    """Write out the oldest held traces (but those of ``keep``: the workload just held, for its run) until at most
    ``limit`` nodes are held."""
    held = sum(entry.own_nodes for entry in _HELD.values())
    for token, entry in list(_HELD.items()):
        if held <= limit:
            break
        if token in keep:
            continue
        held -= entry.own_nodes
        if entry.identity is not None and entry.identity == _identity(entry.path):
            _write_out(token, entry)
        else:
            del _HELD[token]


def _prune():
    """Forget held traces whose file was removed or replaced (nothing can read them any more)."""
    for token, entry in list(_HELD.items()):
        if entry.identity is not None and entry.identity != _identity(entry.path):
            del _HELD[token]


def held_count():
    """How many class traces this process holds (for tests and diagnostics)."""
    with _LOCK:
        return len(_HELD)
