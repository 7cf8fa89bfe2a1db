import os
import shutil
import sys

import pytest

RING = """topology: [ Ring ]
npus_count: [ 8 ]
bandwidth: [ {bw} ]
latency: [ 500.0 ]
"""
#: ring collectives with 4 chunks in flight per dimension (the congestion backend then pipelines them)
SYSTEM = """{"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 4,
 "preferred-dataset-splits": 4, "collective-optimization": "baseline", "local-mem-bw": 1600,
 "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
 "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["direct"]}
"""


@pytest.fixture
def ring(tmp_path):
    """An 8-NPU bidirectional ring (50 GB/s links, and the same at 25 GB/s) and its system configuration."""
    (tmp_path / "net.yml").write_text(RING.format(bw=50.0))
    (tmp_path / "net_half.yml").write_text(RING.format(bw=25.0))
    (tmp_path / "sys.json").write_text(SYSTEM)
    return tmp_path


@pytest.fixture
def write_spec():
    """``write_spec(folder, text, name="cluster.yaml")``: the spec file's path."""
    def write(folder, text, name="cluster.yaml"):
        path = folder / name
        path.write_text(text)
        return str(path)

    return write


@pytest.fixture
def astra_exe():
    path = os.path.join(os.path.dirname(sys.executable), "astra")
    return path if os.path.exists(path) else shutil.which("astra")
