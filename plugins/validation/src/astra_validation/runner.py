"""Simulate one registry case through the same commands a user runs (``astra workload llm``, ``astra run``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import time

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_sim.errors import AstraError
from astra_sim.symmetry import BlockShift
from astra_sim.workload.compact import write_compact_workload

_COMM_TYPES = {"all_reduce": T.ALL_REDUCE, "all_gather": T.ALL_GATHER, "reduce_scatter": T.REDUCE_SCATTER,
               "all_to_all": T.ALL_TO_ALL}


def _astra(argv):
    """Run ``astra ARGV`` in this process, its terminal output swallowed; AstraError if it fails."""
    from astra_sim.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    if code != 0:
        raise AstraError(f"astra {' '.join(argv[:2])} exited {code}: {err.getvalue().strip()[-400:]}")


def _gpus_per_node(platform):
    from astra_gpu_model.platforms import get_platform

    return get_platform(platform).gpus_per_node


def run_case(case, workdir=None):
    """``{name, measured_s, simulated_s, error, wall_s, ...}`` for ``case``; error = (sim - meas) / meas."""
    if case.kind == "serving":
        return _run_serving(case, workdir)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        prefix = os.path.join(tmp, "w")
        report_path = os.path.join(tmp, "report.json")
        gpus = case.nodes * _gpus_per_node(case.platform)
        if case.kind == "llm_step":
            _astra(["workload", "llm", *case.workload, "-o", prefix])
        else:
            node = make_node(0, case.collective, T.COMM_COLL_NODE, attrs={
                "is_cpu_op": False, "comm_type": _COMM_TYPES[case.collective], "comm_size": case.size_bytes})
            write_compact_workload(prefix, gpus, [BlockShift(1, gpus, gpus)],
                                   [(0, encode_et(make_metadata(), [node]))], generator="astra validate")
        # nccl-tests time collectives back to back on the GPU: no host launch gap before them.
        steady = ["--host-launch-us", "0", "--host-sync-us", "0"] if case.kind == "collective" else []
        _astra(["run", "--workload-configuration", prefix, "--platform", case.platform, "--nodes",
                str(case.nodes), *steady, *case.run, "--report-json", report_path, "-q"])
        with open(report_path) as handle:
            report = json.load(handle)
    simulated = report["summary"]["max_finish_ns"] * 1e-9
    measured = case.measured_s(gpus)
    return {"name": case.name, "kind": case.kind, "hardware": case.hardware, "source": case.source,
            "calibration_input": case.calibration_input, "gpus": gpus, "measured_s": measured, "simulated_s": simulated,
            "error": (simulated - measured) / measured, "wall_s": round(time.perf_counter() - start, 1),
            "simulated_ranks": report["stats"].get("simulated_ranks"),
            "platform_defaults": report["settings"].get("platform_defaults")}


def _run_serving(case, workdir=None):
    """A serving case: ``astra serve <serve> --platform <platform>``; the error is on the measured metric itself
    (median TPOT or TTFT, or output-token throughput)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        report_path = os.path.join(tmp, "serve.json")
        _astra(["serve", *case.serve, "--platform", case.platform, "--report-json", report_path, "-q"])
        with open(report_path) as handle:
            report = json.load(handle)
    timed = [k for k in ("tpot_p50_ms", "ttft_p50_ms") if k in case.measured]
    if timed:
        what = timed[0].split("_")[0]
        measured, simulated = float(case.measured[timed[0]]), report[f"{what}_ms"]["p50"]
        unit = f"ms {what.upper()} p50"
        measured_s, simulated_s = measured / 1e3, simulated / 1e3
    else:
        measured, simulated = float(case.measured["output_tokens_per_s"]), report["throughput_tokens_per_s"]
        unit = "tok/s"
        measured_s, simulated_s = 1.0 / measured, 1.0 / simulated
    return {"name": case.name, "kind": case.kind, "hardware": case.hardware, "source": case.source,
            "calibration_input": case.calibration_input, "gpus": report["deployment"]["gpus"],
            "measured_s": measured_s, "simulated_s": simulated_s, "measured_value": measured,
            "simulated_value": simulated, "unit": unit, "error": (simulated - measured) / measured,
            "wall_s": round(time.perf_counter() - start, 1), "simulated_ranks": None, "platform_defaults": None}
