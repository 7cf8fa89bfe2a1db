"""Write the 4-to-1 incast of docs/ns3.md into FOLDER: ranks 0-3 each send 4 MiB to rank 4 through one switch
(100 Gbps links of 1 us), with an ASTRA-sim ns-3 network_cfg.txt (DCTCP, or --cc-mode 0 for plain TCP).

    python examples/ns3/make_incast.py FOLDER [--cc-mode 8|0]
"""

import argparse
from pathlib import Path

try:
    import astra_sim  # noqa: F401
except ImportError:  # run outside the project's environment: say how to run it, not a traceback
    raise SystemExit(f"{__file__}: astra-sim-py is not installed in this Python; run `make install`, then "
                     f".venv/bin/python {__file__}") from None

from astra_sim.chakra import make_metadata, make_node, types as T, write_et

MiB = 1 << 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--cc-mode", type=int, default=8)
    args = parser.parse_args()
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    attrs = {"is_cpu_op": False, "comm_dst": 4, "comm_size": 4 * MiB, "comm_tag": 1}
    for rank in range(5):
        if rank < 4:
            nodes = [make_node(1, "send", T.COMM_SEND_NODE, attrs={**attrs, "comm_src": rank})]
        else:
            nodes = [make_node(1 + s, f"recv{s}", T.COMM_RECV_NODE, attrs={**attrs, "comm_src": s}) for s in range(4)]
        write_et(folder / f"incast.{rank}.et", make_metadata(), nodes)
    (folder / "topo.txt").write_text("6 1 5\n5\n" + "".join(f"5 {h} 100Gbps 0.001ms 0\n" for h in range(5)))
    (folder / "network_cfg.txt").write_text(
        f"TOPOLOGY_FILE topo.txt\nCC_MODE {args.cc_mode}\nPACKET_PAYLOAD_SIZE 1000\nENABLE_QCN 1\nBUFFER_SIZE 32\n"
        "KMIN_MAP 1 100000000000 400\nKMAX_MAP 1 100000000000 1600\nPMAX_MAP 1 100000000000 0.2\n"
    )


if __name__ == "__main__":
    main()
