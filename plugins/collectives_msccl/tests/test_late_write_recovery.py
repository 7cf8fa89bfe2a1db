"""astra msccl to-chakra -o PREFIX writes one file per GPU after the conversion: a late failure (a rename into the
output folder fails, as a full disk does, after some GPUs' files were written) removes the files it wrote and keeps
the whole set in a recovered folder, and the one error line says where (issue 39)."""

from __future__ import annotations

import re
from pathlib import Path

from astra_sim.cli import main
from astra_sim_testing import fail_renames_into

XML = Path(__file__).resolve().parents[3] / "examples" / "msccl" / "allreduce_ring_8gpu.xml"


def test_a_late_to_chakra_write_failure_keeps_every_gpu_file(tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    argv = ["msccl", "to-chakra", str(XML), "--size", "4096", "-q", "-o"]
    reference = tmp_path / "ref"
    assert main([*argv, str(reference / "conv")]) == 0
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, after=2)  # the third GPU's file fails: two are already in place
    assert main([*argv, str(out / "conv")]) == 2
    err = capsys.readouterr().err
    [folder] = kept.iterdir()
    assert err.strip().splitlines() == [
        f"astra: error: astra msccl to-chakra: could not write --output {out / 'conv'} (No space left on device); "
        f"kept it in {folder}"], err
    assert re.fullmatch(r"\d{8}-\d{6}-msccl-to-chakra-output-\w+-conv", folder.name), folder.name
    names = sorted(p.name for p in reference.iterdir())
    assert names == [f"conv.{gpu}.et" for gpu in range(8)]
    assert sorted(p.name for p in folder.iterdir()) == names
    for name in names:
        assert (folder / name).read_bytes() == (reference / name).read_bytes()
    assert list(out.iterdir()) == []  # the two files written before the failure are gone
