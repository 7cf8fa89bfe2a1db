"""The study's MSCCL-IR all-reduce programs, written for any GPU count (the reference's samples are 8-GPU only).

``allpairs_allreduce_xml(n)``: every GPU owns the ``1/n`` chunk of its own index. One threadblock per peer
sends the peer's chunk and receives the peer's copy of this GPU's chunk into scratch; one reducing threadblock
adds the ``n - 1`` received copies into the owned chunk (each ``re`` waits for its peer's receive); then every
peer threadblock sends the reduced chunk to its peer and receives the peer's. Two network rounds of ``S / n``
instead of the ring's ``2 (n - 1)``: the algorithm of msccl-tools' ``allreduce_a100_allpairs.py``, laid out
more simply (that script splits each reduction over ``n`` threadblocks, ``n`` times the chunks). The ring is
``examples/msccl/generate.py``'s.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _ring_module():
    """examples/msccl/generate.py, loaded by its path (a module named ``generate`` could be another one)."""
    path = Path(__file__).resolve().parents[2] / "msccl" / "generate.py"
    spec = importlib.util.spec_from_file_location("astra_example_msccl_generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ring_allreduce_xml = _ring_module().ring_allreduce_xml  # the ring: one place for it


def _step(s, kind, src, soff, dst, doff, depid=-1, deps=-1):
    return (f'      <step s="{s}" type="{kind}" srcbuf="{src}" srcoff="{soff}" dstbuf="{dst}" dstoff="{doff}" '
            f'cnt="1" depid="{depid}" deps="{deps}" hasdep="0"/>')


def allpairs_allreduce_xml(n, proto="LL"):
    """The all-pairs all-reduce on ``n`` GPUs as MSCCL-IR XML (``proto`` LL, as msccl-tools writes it)."""
    if n < 2:
        raise ValueError(f"allpairs all-reduce: expected at least 2 GPUs, got {n}")
    reducer = n - 1  # threadblock ids 0 .. n-2 talk to the peers; n-1 reduces
    lines = [f'<algo name="allreduce_allpairs" proto="{proto}" nchannels="1" nchunksperloop="{n}" ngpus="{n}" '
             f'coll="allreduce" inplace="1">']
    for gpu in range(n):
        peers = [p for p in range(n) if p != gpu]
        lines.append(f'  <gpu id="{gpu}" i_chunks="{n}" o_chunks="0" s_chunks="{n - 1}">')
        for tb, peer in enumerate(peers):
            lines.append(f'    <tb id="{tb}" send="{peer}" recv="{peer}" chan="0">')
            lines.append(_step(0, "s", "i", peer, "s", 0))  # the peer's chunk, to be reduced there
            lines.append(_step(1, "r", "i", 0, "s", tb))  # the peer's copy of my chunk, into scratch slot tb
            lines.append(_step(2, "s", "i", gpu, "i", gpu, reducer, n - 2))  # my reduced chunk, once reduced
            lines.append(_step(3, "r", "i", peer, "i", peer))  # the peer's reduced chunk
            lines.append("    </tb>")
        lines.append(f'    <tb id="{reducer}" send="-1" recv="-1" chan="0">')
        for s in range(n - 1):
            lines.append(_step(s, "re", "s", s, "i", gpu, s, 1))  # slot s waits for threadblock s's receive
        lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"
