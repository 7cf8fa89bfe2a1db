"""`astra fabric SPEC --platform NAME --nodes N --scale-out KIND`: the kind's leaf switch, rates, routing and latency,
its assumed numbers marked, and one-line errors."""

from __future__ import annotations

import json

from astra_sim.cli import main


def test_roce_past_one_leaf(capsys):
    assert main(["fabric", "rail", "--platform", "hgx-h100", "--nodes", "128", "--scale-out", "roce"]) == 0
    out = capsys.readouterr().out
    # 51.2 Tb/s Ethernet leaves of 128 / 2 = 64 nodes: 128 nodes span 2 leaves; 400 x 0.96 x 0.60 = 230.4 Gb/s
    assert "2 leaves of 64 nodes" in out and "NIC 384 Gb/s per GPU" in out  # the fabric's links: line x achievable
    assert "past one leaf: x0.6 under load" in out and "effective 230.4 Gb/s per GPU" in out
    assert "routing ecmp (--flow-ecmp hash)" in out
    assert "one-way 1990 ns = endpoints 1000 (ASSUMPTION) + 3 x switch 330 (ASSUMPTION) ns" in out


def test_ndr_json_has_every_source(capsys):
    assert main(["fabric", "rail", "--platform", "hgx-h100", "--nodes", "4", "--scale-out", "ib-ndr", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    kind = info["scale_out"]
    assert kind["kind"] == "ib-ndr" and not kind["at_scale"] and kind["one_way_latency_ns"] == 1330
    assert info["nodes_per_leaf"] == 4 and info["nic_hop_latency_ns"] == 665  # the leaf of 32, capped at 4 nodes
    assert all(kind["sources"][key].startswith("ASSUMPTION") for key in kind["assumptions"])
    assert kind["sources"]["switch_latency_ns"].startswith("yobitel.com")


def test_errors(capsys):
    assert main(["fabric", "rail", "--platform", "hgx-h100", "--nodes", "4", "--scale-out", "ib-hdr"]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "--scale-out: unknown scale-out kind 'ib-hdr'; expected one of ib-ndr, ib-xdr, spectrum-x, roce, efa, efa-p5en")
