"""astra run --ns3-fct-file is written after the packet-level run: a late failure (the final rename into the output
folder fails, as a full disk does) keeps the flow completion times whole in a recovered file, and the one error line
says where; the output folder keeps no part of it (issue 39)."""

from __future__ import annotations

import errno
import importlib.util
import re

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim_testing import write_system_config
from astra_sim_testing import fail_renames_into

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ns3") is None,
                                reason="the ns3 package is not installed (pip install 'ns3==3.44.post0')")


def two_host_star(tmp_path):
    """Two hosts on one switch (node 2), 100 Gb/s, 1 us: the smallest network ns-3 runs in well under a second."""
    (tmp_path / "topo.txt").write_text("3 1 2\n2\n2 0 100Gbps 1us 0\n2 1 100Gbps 1us 0\n")
    cfg = tmp_path / "cfg.txt"
    cfg.write_text("TOPOLOGY_FILE topo.txt\nPACKET_PAYLOAD_SIZE 1000\nCC_MODE 8\nENABLE_QCN 1\nBUFFER_SIZE 32\n"
                   "KMIN_MAP 1 100000000000 400\nKMAX_MAP 1 100000000000 1600\nPMAX_MAP 1 100000000000 0.2\n")
    return str(cfg)


@pytest.mark.slow  # loading ns-3 takes 10-25 s
def test_a_late_fct_file_write_failure_keeps_it(tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    prefix = tmp_path / "ar"
    node = make_node(1, "c", T.COMM_COLL_NODE, attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE,
                                                      "comm_size": 256 * 1024})
    for rank in range(2):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
    args = ["run", "--workload-configuration", str(prefix), "--system-configuration",
            write_system_config(tmp_path / "sys.json"), "--network-configuration", two_host_star(tmp_path),
            "--network-backend", "ns3", "-q", "--ns3-fct-file"]
    reference = tmp_path / "fct.txt"
    assert main([*args, str(reference)]) == 0
    assert reference.read_text().count("\n") >= 2  # a flow each way
    capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.ENOSPC)
    assert main([*args, str(out / "fct.txt")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    [recovered] = kept.iterdir()
    assert lines == [f"astra: error: astra run: could not write --ns3-fct-file {out / 'fct.txt'} "
                     f"(No space left on device); kept it as {recovered}"], err
    assert "Traceback" not in err
    assert re.fullmatch(r"\d{8}-\d{6}-run-ns3-fct-file-\w+-fct\.txt", recovered.name), recovered.name
    assert recovered.read_bytes() == reference.read_bytes()  # every flow, whole
    assert list(out.iterdir()) == []
