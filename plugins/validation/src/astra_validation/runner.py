"""Simulate one registry case through the same commands a user runs (``astra workload llm``, ``astra run``)."""

from __future__ import annotations

import os
import tempfile
import time

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
from astra_folding.symmetry import BlockShift
from astra_workload_compact import write_compact_workload

_COMM_TYPES = {"all_reduce": T.ALL_REDUCE, "all_gather": T.ALL_GATHER, "reduce_scatter": T.REDUCE_SCATTER,
               "all_to_all": T.ALL_TO_ALL}


def case_run_spec(case, prefix, steady=(), where=None):
    """The case's ``astra run`` options (its platform, nodes and ``run`` words) as the kernel's RunSpec; ``where``
    names the case in an error (default its name; the registry's check adds its file)."""
    from astra_sim.spec import RunSpec

    return RunSpec.from_argv(["--workload-configuration", prefix, "--platform", case.platform, "--nodes",
                              str(case.nodes), *steady, *case.run], where=where or f"validation case {case.name}: run")


def run_case(case, workdir=None):
    """``{name, measured_ns, simulated_ns, error, wall_s, ...}`` for ``case``; error = (sim - meas) / meas. The step is
    what ``astra workload llm <workload>`` + ``astra run --platform ...`` give, through their Python API."""
    from astra_sim.platforms import get_platform
    from astra_sim.runner import run_spec

    if case.kind == "serving":
        return _run_serving(case, workdir)
    if case.kind == "memory":
        return _run_memory(case)
    if case.kind == "energy":
        return _run_energy(case)
    if case.kind == "kv_cache":
        return _run_kv_cache(case)
    start = time.perf_counter()
    from astra_sim.generated import private_folder  # named by this process: a SIGKILLed run's is reclaimed

    with private_folder("astra-validate-") if workdir is None else tempfile.TemporaryDirectory(dir=workdir) as tmp:
        prefix = os.path.join(tmp, "w")
        gpus = case.nodes * get_platform(case.platform).gpus_per_node
        # nccl-tests time collectives back to back on the GPU: no host launch gap before them.
        steady = ["--host-launch-us", "0", "--host-sync-us", "0"] if case.kind == "collective" else []
        run = case_run_spec(case, prefix, steady)
        if case.kind == "llm_step":
            from astra_workload_generators.llm import LlmSpec, generate_llm_workload

            # generated for the case's platform and the GPU its run computes on (a --gpu in its run words replaces
            # the platform's: where Transformer Engine writes FP8 transposes); held in memory for the run below,
            # in this process (issue 37: no encode and parse back; the same ns)
            spec = LlmSpec.from_argv(case.workload, where=f"validation case {case.name}: workload")
            generate_llm_workload(spec.for_platform(case.platform, run.options), prefix,
                                  on_warning=lambda line: None, in_memory=True)
        else:
            node = make_node(0, case.collective, T.COMM_COLL_NODE, attrs={
                "is_cpu_op": False, "comm_type": _COMM_TYPES[case.collective], "comm_size": case.size_bytes})
            write_compact_workload(prefix, gpus, [BlockShift(1, gpus, gpus)],
                                   [(0, encode_et(make_metadata(), [node]))], generator="astra validate")
        report = run_spec(run)
    simulated = report.max_finish_ns
    if case.kind == "llm_step":  # the step's own ranks: a job may use part of a node (4 of a DGX's 8 GPUs)
        gpus = len(report.ranks)
    measured = case.measured_ns(gpus)
    return {**_identity(case), "gpus": gpus, "measured_ns": measured,
            "simulated_ns": simulated, "error": (simulated - measured) / measured,
            "wall_s": round(time.perf_counter() - start, 1), "simulated_ranks": report.stats.get("simulated_ranks"),
            "platform_defaults": report.settings.get("platform_defaults")}


def _run_serving(case, workdir=None):
    """A serving case: ``astra serve <serve> --platform <platform>`` through astra_serving's API; the error is on the
    measured metric itself (median TPOT or TTFT, or output-token throughput)."""
    from astra_serving import ServeSpec, serve

    start = time.perf_counter()
    spec = ServeSpec.from_argv([*case.serve, "--platform", case.platform], where=f"validation case {case.name}: serve")
    report, _requests = serve(spec)
    timed = [k for k in ("tpot_p50_ms", "ttft_p50_ms") if k in case.measured]
    if timed:
        what = timed[0].split("_")[0]
        measured, simulated = float(case.measured[timed[0]]), _p50_ms(report, what)
        unit = f"ms {what.upper()} p50"
        measured_ns, simulated_ns = round(measured * 1e6), round(simulated * 1e6)
    else:
        measured, simulated = float(case.measured["output_tokens_per_s"]), report["throughput_tokens_per_s"]
        unit = "tok/s"
        measured_ns, simulated_ns = round(1e9 / measured), round(1e9 / simulated)  # time per output token
    return {**_identity(case), "metric": case.serving_family, "gpus": report["deployment"]["gpus"],
            "measured_ns": measured_ns, "simulated_ns": simulated_ns, "measured_value": measured,
            "simulated_value": simulated, "unit": unit, "error": (simulated - measured) / measured,
            "wall_s": round(time.perf_counter() - start, 1), "simulated_ranks": None, "platform_defaults": None}


def _p50_ms(report, what):
    """The median TPOT or TTFT of a serving report in ms (its report keeps ``<what>_ns`` or ``<what>_ms``)."""
    if f"{what}_ns" in report:
        return report[f"{what}_ns"]["p50"] / 1e6
    return report[f"{what}_ms"]["p50"]


def _identity(case):
    """The keys every result row starts with: the case, its source and its role."""
    return {"name": case.name, "kind": case.kind, "hardware": case.hardware, "source": case.source,
            "source_id": case.source_id, "role": case.role, "calibration_input": case.calibration_input}


def _run_energy(case):
    """An energy case: the energy plugin simulates the case's step (``astra_energy.cases.evaluate``) and compares
    the ``stats.energy`` quantity the source measured (power in W, or energy per token in mJ)."""
    from astra_energy.cases import evaluate, load_cases as load_energy_cases

    start = time.perf_counter()
    energy_case = next(c for c in load_energy_cases() if c.name == case.name)
    result = evaluate(energy_case)
    unit = "mJ/token" if energy_case.quantity.endswith("_mj") else "W"
    layout = [int(energy_case.llm.get(k, 1)) for k in ("tp", "pp", "dp", "cp")]  # the GPUs the step runs on
    return {**_identity(case), "gpus": layout[0] * layout[1] * layout[2] * layout[3],
            "quantity": energy_case.quantity, "measured_value": result["measured"],
            "simulated_value": result["simulated"], "unit": unit, "error": result["error"],
            "wall_s": round(time.perf_counter() - start, 1), "simulated_ranks": None, "platform_defaults": None}


def _run_memory(case):
    """A memory case: the LLM generator's peak-memory estimate of the case's workload against the measured peak.
    The estimate's ``allocated_bytes`` / ``reserved_bytes`` is used when it has the one ``measured_what`` names,
    else its ``total``."""
    from astra_sim.platforms import get_platform
    from astra_workload_generators.llm import LlmSpec, peak_memory

    from astra_validation.registry import MEMORY_MEASURES

    start = time.perf_counter()
    spec = LlmSpec.from_argv(case.workload, where=f"validation case {case.name}: workload")
    # for the case's platform and run, as its step would be generated (its GPU: whether TE caches FP8 weight
    # transposes)
    run = case_run_spec(case, "memory")
    dims, cfg = spec.for_platform(case.platform, run.options).resolve(on_warning=lambda line: None)
    estimate = peak_memory(dims, cfg)
    attribute = next(a for a in MEMORY_MEASURES[case.measured_what] if hasattr(estimate, a))
    simulated, measured = int(getattr(estimate, attribute)), int(case.measured["peak_bytes"])
    return {**_identity(case), "gpus": case.nodes * get_platform(case.platform).gpus_per_node,
            "measured_bytes": measured, "simulated_bytes": simulated, "compared": attribute,
            "measured_what": case.measured_what, "error": (simulated - measured) / measured,
            "wall_s": round(time.perf_counter() - start, 1), "simulated_ranks": None, "platform_defaults": None}


def _run_kv_cache(case):
    """A KV-cache case: the blocks ``astra serve <serve> --platform <platform>`` gives its replica
    (``ServeSpec.resolve``: vLLM's gpu_memory_utilization accounting) against the tokens a vLLM log states."""
    from astra_serving import ServeSpec

    start = time.perf_counter()
    spec = ServeSpec.from_argv([*case.serve, "--platform", case.platform], where=f"validation case {case.name}: serve")
    resolved = spec.resolve()
    measured, simulated = int(case.measured["kv_tokens"]), resolved.capacity.tokens
    return {**_identity(case), "gpus": resolved.layout.gpus, "measured_value": measured, "simulated_value": simulated,
            "unit": "KV tokens", "kv_cache": resolved.capacity.to_dict(), "error": (simulated - measured) / measured,
            "wall_s": round(time.perf_counter() - start, 1), "simulated_ranks": None, "platform_defaults": None}
