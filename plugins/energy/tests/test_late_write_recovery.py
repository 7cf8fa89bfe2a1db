"""astra run --power-timeline is written after the run: a late failure (the final rename into the output folder
fails, as a full disk does) keeps the timeline whole in a recovered file, and the one error line says where; the
output folder keeps no part of it (issue 39)."""

from __future__ import annotations

import errno
import re

from astra_sim.chakra import make_node, types as T
from astra_sim.cli import main
from astra_sim_testing import write_case
from astra_sim_testing import fail_renames_into


def test_a_late_power_timeline_write_failure_keeps_it(tmp_path, capsys, monkeypatch):
    kept = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(kept))
    node = make_node(0, "aten::mm", T.COMP_NODE, duration_micros=1, attrs={
        "is_cpu_op": False, "inputs_shapes": "[[1024, 1024], [1024, 1024]]",
        "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"})
    prefix, system, network = write_case(tmp_path, [node])
    args = ["run", "--workload-configuration", prefix, "--system-configuration", str(system),
            "--network-configuration", str(network), "--compute-model", "gpu", "-q", "--power-timeline"]
    reference = tmp_path / "p.json"
    assert main([*args, str(reference)]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.ENOSPC)
    assert main([*args, str(out / "p.json")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    [recovered] = kept.iterdir()
    assert lines == [f"astra: error: astra run: could not write --power-timeline {out / 'p.json'} "
                     f"(No space left on device); kept it as {recovered}"], err
    assert "Traceback" not in err
    assert re.fullmatch(r"\d{8}-\d{6}-run-power-timeline-\w+-p\.json", recovered.name), recovered.name
    assert recovered.read_bytes() == reference.read_bytes()  # whole, counter for counter
    assert list(out.iterdir()) == []
