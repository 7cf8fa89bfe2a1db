"""Hostile inputs built to exhaust memory or time: a clear error within 5 s and 200 MB each.

* the XML "billion laughs" (nested entity expansion) given as an MSCCL-IR algorithm, and an XML
  external entity: entities are never expanded, the DTD's declarations are refused;
* the YAML alias bomb (nested anchors and aliases) given as the network configuration, and a YAML
  alias that contains itself: the composed document is measured, not expanded;
* a gzip bomb given as a Chakra trace: decompression stops at the input limit.

Each runs ``astra run`` in a fresh process, timed, with its peak memory compared to a small correct run's.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim_testing import write_network_config, write_system_config

ASTRA = Path(sys.executable).parent / "astra"
SECONDS = 5.0
MEMORY = 200 << 20  # bytes of memory the bomb may make the process grow by


def xml_bomb():
    levels = ['<!ENTITY lol0 "lol">'] + [f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)]
    return (f'<?xml version="1.0"?>\n<!DOCTYPE algo [\n{chr(10).join(levels)}\n]>\n'
            '<algo name="&lol9;" ngpus="2" nchunksperloop="1" coll="allreduce" proto="Simple" nchannels="1">'
            '<gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0"/></algo>\n')


def yaml_bomb():
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    lines += ["topology: [ Ring ]", "npus_count: *a9", "bandwidth: [ 50 ]", "latency: [ 500 ]"]
    return "\n".join(lines) + "\n"


def _trace(tmp_path, npus=2):
    prefix = tmp_path / "t"
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [make_node(1, "c", T.COMP_NODE, duration_micros=1)])
    return str(prefix)


RUNNER = """
import resource, sys
from astra_sim.cli import main
code = main(sys.argv[1:])
print(f"peak-rss-kib {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr)
sys.exit(code)
"""


def _run_measured(args, cwd, env=None):
    """``astra run ARGS -q`` in a fresh process: (exit code, stderr, seconds, peak RSS in bytes)."""
    import os

    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", RUNNER, "run", *args, "-q"], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})
    took = time.monotonic() - started
    peak = int(proc.stderr.rsplit("peak-rss-kib ", 1)[1].split()[0]) * 1024
    return proc.returncode, proc.stderr, took, peak


def _baseline(tmp_path):
    """Peak RSS of a small correct run: what the interpreter and its imports take anyway."""
    rc, err, _, peak = _run_measured(["--workload-configuration", _trace(tmp_path), "--system-configuration",
                                      write_system_config(tmp_path / "sys.json"), "--network-configuration",
                                      write_network_config(tmp_path / "ok.yml", npus=(2,))], tmp_path)
    assert rc == 0, err
    return peak


def _check_bounds(tmp_path, took, peak):
    grew = peak - _baseline(tmp_path)
    assert took < SECONDS, f"{took:.2f} s"
    assert grew < MEMORY, f"grew by {grew / 2**20:.0f} MiB"
    print(f"bomb: {took:.2f} s, peak RSS {peak / 2**20:.0f} MiB ({grew / 2**20:+.0f} MiB over a small run)")


def test_xml_entity_bomb_as_msccl_algorithm(tmp_path):
    algo = tmp_path / "bomb.xml"
    algo.write_text(xml_bomb())
    system = write_system_config(tmp_path / "sys.json", **{"all-reduce-implementation-custom": [str(algo)]})
    trace = tmp_path / "ar"
    for rank in range(2):
        write_et(f"{trace}.{rank}.et", make_metadata(), [make_node(
            1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": T.ALL_REDUCE, "comm_size": 1024})])
    rc, err, took, peak = _run_measured(["--workload-configuration", str(trace), "--system-configuration", system,
                                         "--network-configuration", write_network_config(tmp_path / "n.yml",
                                                                                         npus=(2,))], tmp_path)
    assert rc == 2, err
    assert "bomb.xml: declares a DTD entity (line 3)" in err and "Traceback" not in err
    _check_bounds(tmp_path, took, peak)


def test_xml_external_entity_is_not_read(tmp_path):
    from astra_collectives_msccl.msccl_ir import parse_msccl

    from astra_sim.errors import ConfigError

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    algo = tmp_path / "xxe.xml"
    algo.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE algo [<!ENTITY x SYSTEM "file://{secret}">]>\n'
                    '<algo name="&x;" ngpus="2" nchunksperloop="1"/>\n')
    with pytest.raises(ConfigError, match="xxe.xml: declares a DTD entity") as info:
        parse_msccl(algo)
    assert "TOP SECRET" not in str(info.value)


def test_yaml_alias_bomb_as_network_configuration(tmp_path):
    net = tmp_path / "bomb.yml"
    net.write_text(yaml_bomb())
    rc, err, took, peak = _run_measured(["--workload-configuration", _trace(tmp_path), "--system-configuration",
                                         write_system_config(tmp_path / "sys.json"), "--network-configuration",
                                         str(net)], tmp_path)
    assert rc == 2, err
    assert "bomb.yml: its aliases expand it to more than 1,000,000 nodes" in err and "Traceback" not in err
    _check_bounds(tmp_path, took, peak)


def test_recursive_yaml_alias(tmp_path):
    from astra_network_analytical.model import parse_network_config

    from astra_sim.errors import ConfigError

    net = tmp_path / "loop.yml"
    net.write_text("topology: &t [ Ring, *t ]\nnpus_count: [2]\nbandwidth: [1]\nlatency: [1]\n")
    with pytest.raises(ConfigError, match="loop.yml: an alias refers to a node that contains it"):
        parse_network_config(net)


def test_gzip_bomb_as_trace(tmp_path):
    prefix = tmp_path / "g"
    bomb = gzip.compress(bytes(256 << 20), compresslevel=6)  # 256 MiB of zeros in about 256 KiB
    for rank in range(2):
        (tmp_path / f"g.{rank}.et").write_bytes(bomb)
    rc, err, took, peak = _run_measured(["--workload-configuration", str(prefix), "--system-configuration",
                                         write_system_config(tmp_path / "sys.json"), "--network-configuration",
                                         write_network_config(tmp_path / "n.yml", npus=(2,))], tmp_path,
                                        env={"ASTRA_MAX_INPUT_BYTES": str(64 << 20)})
    assert rc == 2, err
    assert "g.0.et: gzip-compressed Chakra ET file expands to more than 67,108,864 bytes" in err
    _check_bounds(tmp_path, took, peak)
