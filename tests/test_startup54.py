"""Start-up and per-rank work (issue 37, session 54): ``astra --version`` imports no pluggy; a plain run imports
neither the GPU description nor the scale-out kinds (``astra run``'s choices live in ``astra_gpu_model.names``) nor
tracemalloc; the compact report groups ranks by their numbers and breakdown object before serialising any, with
the same classes as grouping every rank's JSON; a small trace's bytes are its own digest."""

from __future__ import annotations

import json
import subprocess
import sys

from astra_sim_testing import small_congestion_run_argv

#: never imported by a plain congestion run (the default compute model, no --platform, no memory measurement)
LAZY = ["astra_gpu_model.gpu", "astra_gpu_model.gemm", "astra_gpu_model.scale_out", "tracemalloc"]

SCRIPT = """
import json, sys
from astra_sim.cli import main
code = main(sys.argv[2:])
print(json.dumps({"code": code, "loaded": [m for m in json.loads(sys.argv[1]) if m in sys.modules]}))
"""


def test_astra_version_imports_no_pluggy():
    script = "import sys; from astra_sim.cli import main; main(['--version']); print('pluggy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["astra-sim-py", "0.1.0", "False"]


def test_hookimpl_is_one_marker_made_at_first_use():
    import pluggy

    import astra_sim

    assert astra_sim.hookimpl is astra_sim.hookimpl  # (kept in the module once made)
    assert isinstance(astra_sim.hookimpl, pluggy.HookimplMarker) and astra_sim.hookimpl.project_name == "astra"


def test_a_plain_run_imports_neither_the_gpu_description_nor_the_scale_out_kinds(tmp_path):
    argv = small_congestion_run_argv(tmp_path)
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(LAZY), *argv], capture_output=True, text=True,
                         check=True, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, out.stderr
    assert result["loaded"] == [], f"a plain congestion run imported {result['loaded']}"


def test_the_run_options_names_are_the_models_own():
    import astra_gpu_model
    from astra_gpu_model import gemm, gpu, names, scale_out

    assert names.SCALE_OUT_KINDS == tuple(scale_out.KINDS)
    assert (gpu.DTYPES, gpu.COLLECTIVES, gpu.DEFAULT_GPU) == (names.DTYPES, names.COLLECTIVES, names.DEFAULT_GPU)
    assert gpu.preset_names() == names.preset_names() and "H100-SXM5-80GB" in names.preset_names()
    for name, module in (("GpuSpec", gpu), ("load_gpu", gpu), ("GemmParams", gemm), ("gemm_time_s", gemm)):
        assert getattr(astra_gpu_model, name) is getattr(module, name)  # (the package's names, loaded on first use)


def _classes_by_json(ranks):
    """The compact layout's classes as session 53 found them: every rank's record serialised and compared."""
    from astra_sim.report import _classes

    by_key = {}
    for rank in ranks:
        record = _classes([rank])[0]  # (one rank: its record, anonymised, as its class would show it)
        del record["ranks"], record["count"]
        by_key.setdefault(json.dumps(record, sort_keys=True), []).append(rank.rank)
    return sorted(by_key.values())


def test_rank_classes_are_those_of_comparing_every_record():
    from astra_sim.report import RankReport, _classes
    from astra_sim.humanize import parse_rank_ranges

    def breakdown(groups, busy):
        return {"parts": {"exposed:tp": busy, "idle": 0}, "communicators": [{"communicator": "tp", "groups": groups,
                                                                             "busy_ns": busy}]}

    shared = breakdown([1], 5)
    ranks = [RankReport(0, 10, 4, 6, 0, 6, 3, shared), RankReport(1, 10, 4, 6, 0, 6, 3, shared),
             RankReport(2, 10, 4, 6, 0, 6, 3, breakdown([2], 5)),  # equal once anonymised, another object
             RankReport(3, 10, 4, 6, 0, 6, 3, breakdown([2], 7)),  # other parts
             RankReport(4, 11, 4, 7, 0, 7, 3, shared),  # other numbers, the same breakdown object
             RankReport(5, None, 4, None, 0, 6, 3), RankReport(6, None, 4, None, 0, 6, 3),  # still running
             RankReport(7, 10, 4, 6, 0, 6, 3)]  # no breakdown
    classes = _classes(ranks)
    assert sorted(parse_rank_ranges(c["ranks"], len(ranks)) for c in classes) == _classes_by_json(ranks)
    assert [c["count"] for c in classes] == [3, 1, 1, 2, 1]
    assert classes[0]["breakdown"]["communicators"] == [{"communicator": "tp", "busy_ns": 5}]


def test_a_small_trace_is_its_own_digest_and_a_large_one_is_hashed(tmp_path):
    from astra_sim.builtin import ChakraFormat

    prefix = tmp_path / "t"
    contents = [b"small", b"small", b"other", b"x" * 5000, b"x" * 5000, b"y" * 5000]
    for rank, data in enumerate(contents):
        (tmp_path / f"t.{rank}.et").write_bytes(data)
    chakra = ChakraFormat()
    keys = [chakra.rank_digest(str(prefix), rank)[1] for rank in range(len(contents))]
    assert keys[0] == keys[1] == b"small" and keys[2] == b"other"
    assert keys[3] == keys[4] != keys[5] and len(keys[3]) == 32  # (sha256 past 4 KiB)
    assert chakra._last_read == (f"{prefix}.5.et", b"y" * 5000)  # (kept for load_rank's parse)
    assert chakra.rank_digest(str(prefix), 99) is None
    (tmp_path / "t.7.et").mkdir()  # (opens, then fails to read: load_rank reports it, as for a missing file)
    assert chakra.rank_digest(str(prefix), 7) is None
