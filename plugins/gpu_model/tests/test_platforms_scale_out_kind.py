"""``astra platforms``: the NIC's scale-out kind (``--scale-out``'s name for it, ``scale_out.kind`` in ``--json``)
beside the NIC rate, in a table that still fits 80 columns, and the default fabric (``--fabric``)."""

import json

from astra_sim.cli import main
from astra_gpu_model.platform_command import _fabric, _nic


def test_the_table_shows_each_platforms_scale_out_kind_in_80_columns(capsys, monkeypatch):
    assert main(["platforms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    kinds = {r["name"]: (r.get("scale_out") or {}).get("kind") for r in rows}
    assert kinds["hgx-h100"] == "ib-ndr" and kinds["dgx-a100"] is None  # (the JSON the table follows)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["platforms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("(scale-out)" in line for line in lines)
    for name, kind in kinds.items():
        cells = [c.strip() for c in next(line for line in lines if f" {name} " in line).split("│")]
        assert name in cells
        rate = f"{next(r for r in rows if r['name'] == name)['nic_gbit_per_s_per_gpu']:g}"
        assert (f"{rate} ({kind})" if kind else rate) in cells


def test_the_nic_cell():
    assert _nic({"nic_gbit_per_s_per_gpu": 400.0, "scale_out": {"kind": "spectrum-x"}}) == "400 (spectrum-x)"
    assert _nic({"nic_gbit_per_s_per_gpu": 800.0, "scale_out": {"kind": None}}) == "800"
    assert _nic({"nic_gbit_per_s_per_gpu": 25.0}) == "25"  # a TPU's DCN: no scale_out


def test_the_table_shows_each_platforms_default_fabric(capsys, monkeypatch):
    """Issue 40: the fabric ``--fabric`` builds (kind, oversubscription, planes) is a column on a wide terminal and a
    note at 80 columns, following ``fabric`` in ``--json``."""
    assert main(["platforms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    cells = {r["name"]: (f"{r['fabric']['kind']} {r['fabric']['oversubscription']:g}:1, {r['fabric']['planes']} plane"
                         if r.get("fabric") else "-") for r in rows}
    assert cells["hgx-h100"] == "rail 1:1, 1 plane" and cells["tpu-v6e"] == "-"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["platforms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("scale-out fabric" in line for line in lines)
    for name, cell in cells.items():
        assert cell in [c.strip() for c in next(line for line in lines if f" {name} " in line).split("│")]
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["platforms"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    with_fabric = sum(cell != "-" for cell in cells.values())
    assert f"scale-out fabric (--fabric): rail 1:1, 1 plane on {with_fabric} platforms" in text


def test_the_fabric_cell():
    assert _fabric({"fabric": {"kind": "planes", "oversubscription": 2.0, "planes": 2}}) == "planes 2:1, 2 planes"
    assert _fabric({"fabric": {"kind": "rail", "oversubscription": 1.0, "planes": 1}}) == "rail 1:1, 1 plane"
    assert _fabric({"name": "tpu-v6e"}) == "-"
