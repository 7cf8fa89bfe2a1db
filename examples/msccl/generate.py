"""Regenerates examples/msccl/ (the files are checked in; this is their source).

    .venv/bin/python examples/msccl/generate.py            # rewrites the example in place
    .venv/bin/python examples/msccl/generate.py OUT_DIR    # writes it under OUT_DIR instead

* ``allreduce_ring_8gpu.xml``: an MSCCL-IR ring all-reduce on 8 GPUs, one channel, written the way
  msccl-tools' ``allreduce_a100_ring.py 8 1 1`` lays it out with instruction fusion off (each GPU sends
  its chunk, then receives-reduces and forwards seven times, then receives and forwards the reduced
  chunks): only the step types ``s``, ``rrc`` and ``r``, which ASTRA-sim's own converter also reads;
* ``system.json``: the reference's usual system configuration with that XML as the custom all-reduce
  and ``local-mem-bw`` 50 GB/s (the reductions' cost);
* ``network.yml``: a ring of 8 NPUs, 50 GB/s and 500 ns per link.
"""

from __future__ import annotations

import json
import os
import sys

NPUS = 8


def ring_allreduce_xml(n=NPUS, proto="LL128"):
    """The unfused ring all-reduce as MSCCL-IR XML (one threadblock per GPU)."""
    lines = [f'<algo name="allreduce_ring_1channelsperring" proto="{proto}" nchannels="1" nchunksperloop="{n}" '
             f'ngpus="{n}" coll="allreduce" inplace="1">']
    for rank in range(n):
        lines.append(f'  <gpu id="{rank}" i_chunks="{n}" o_chunks="0" s_chunks="0">')
        lines.append(f'    <tb id="0" send="{(rank + 1) % n}" recv="{(rank - 1) % n}" chan="0">')
        steps = ["s"] + ["rrc", "s"] * (n - 1) + ["r", "s"] * (n - 2) + ["r"]
        chunk = rank
        for s, kind in enumerate(steps):
            if kind in ("rrc", "r"):
                chunk = (chunk - 1) % n  # receive the chunk the left neighbour just sent
            lines.append(f'      <step s="{s}" type="{kind}" srcbuf="i" srcoff="{chunk}" dstbuf="i" '
                         f'dstoff="{chunk}" cnt="1" depid="-1" deps="-1" hasdep="0"/>')
        lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def system_json():
    return json.dumps({
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 1,
        "collective-optimization": "baseline",
        "local-mem-bw": 50,
        "all-reduce-implementation-custom": ["allreduce_ring_8gpu.xml"],
    }, indent=1) + "\n"


NETWORK_YML = "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]  # GB/s\nlatency: [ 500 ]  # ns\n"


def files():
    return {"allreduce_ring_8gpu.xml": ring_allreduce_xml(), "system.json": system_json(), "network.yml": NETWORK_YML}


def main(out_dir=None):
    out_dir = out_dir or os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out_dir, exist_ok=True)
    for name, text in files().items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
