"""Regenerates the example traces in examples/ (they are checked in; this is their source).

    .venv/bin/python examples/generate_examples.py

data_parallel/: a 6-layer model trained data-parallel on 16 NPUs (Ring 4 x Switch 4).
Each rank runs the forward pass, then the backward pass; every layer's
weight gradient is all-reduced as soon as that layer's backward compute is
done, so communication overlaps the remaining backward compute. The first
layer also has an embedding-like all-to-all in the forward pass.
"""

from __future__ import annotations

import os

try:
    import astra_sim  # noqa: F401
except ImportError:  # run outside the project's environment: say how to run it, not a traceback
    raise SystemExit(f"{__file__}: astra-sim-py is not installed in this Python; run `make install`, then "
                     f".venv/bin/python {__file__}") from None

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T

HERE = os.path.dirname(os.path.abspath(__file__))

LAYERS = [  # (name, forward us, backward us, gradient bytes)
    ("embedding", 120, 180, 64 << 20),
    ("block1", 250, 500, 48 << 20),
    ("block2", 250, 500, 48 << 20),
    ("block3", 250, 500, 48 << 20),
    ("block4", 250, 500, 48 << 20),
    ("head", 90, 160, 16 << 20),
]


def data_parallel_nodes():
    nodes = []
    ids = iter(range(1_000_000))
    previous = None
    for index, (name, fwd_us, _bwd_us, _grad) in enumerate(LAYERS):
        node_id = next(ids)
        nodes.append(make_node(node_id, f"{name}.forward", T.COMP_NODE,
                               data_deps=[] if previous is None else [previous],
                               duration_micros=fwd_us, attrs={"is_cpu_op": False}))
        previous = node_id
        if index == 0:
            node_id = next(ids)
            nodes.append(make_node(node_id, "embedding.all_to_all", T.COMM_COLL_NODE, data_deps=[previous],
                                   attrs={"is_cpu_op": False, "comm_type": T.ALL_TO_ALL, "comm_size": 8 << 20}))
            previous = node_id
    for name, _fwd_us, bwd_us, grad_bytes in reversed(LAYERS):
        node_id = next(ids)
        nodes.append(make_node(node_id, f"{name}.backward", T.COMP_NODE, data_deps=[previous],
                               duration_micros=bwd_us, attrs={"is_cpu_op": False}))
        previous = node_id
        nodes.append(make_node(next(ids), f"{name}.grad_all_reduce", T.COMM_COLL_NODE, data_deps=[node_id],
                               attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": grad_bytes}))
    return nodes


def write_data_parallel(npus=16):
    folder = os.path.join(HERE, "data_parallel", "trace")
    os.makedirs(folder, exist_ok=True)
    data = encode_et(make_metadata(), data_parallel_nodes())
    for rank in range(npus):
        with open(os.path.join(folder, f"dp.{rank}.et"), "wb") as handle:
            handle.write(data)


if __name__ == "__main__":
    write_data_parallel()
    print("wrote examples/data_parallel/trace/dp.{0..15}.et")
