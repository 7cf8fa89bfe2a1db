"""``astra validate --cv``: leave one source out, refit what was fitted on it, and predict its cases.

A registry case names, in ``fitted``, the constants that were fitted on or tuned to its source's numbers (its
``role`` is then ``fit``). For each source, every such constant is refitted *without* that source, by the same
fitting function the checked-in value comes from, and the source's cases are simulated with the refitted values.

Most of the model's constants (GEMM, NCCL up to 64 MB, memory-bound rates, host launch, interference) are fitted on
measurements that are not registry cases (``docs/validation.md``, "Fitted constants"): leaving a source out does not
change them, so for a source nothing was fitted on, the leave-one-source-out prediction *is* the plain run.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Callable


@dataclass(frozen=True)
class TunedConstant:
    """A constant fitted on or tuned to registry sources, and how to refit it without some of them."""

    name: str
    fit_data: str
    script: str
    #: ``refit(excluded_source_ids)`` -> a context manager under which the model uses the refitted value;
    #: None when no data is left to refit it on once its source is out (the cases then have no out-of-source
    #: prediction, said with ``why_not``)
    refit: Callable | None
    why_not: str = ""
    #: the case kinds whose result this constant can change (default: every kind)
    kinds: tuple = ("llm_step", "collective", "serving", "memory", "energy")


@contextmanager
def _nccl_peaks_without(excluded):
    """NCCL's bandwidth past 64 MB (``beyond_fit``) refitted on the published peak statements of every other source
    (``nccl.PEAK_STATEMENTS``): an (architecture, algorithm, protocol) with no statement left extrapolates its
    fitted line past 64 MB."""
    from astra_gpu_model import nccl

    beyond = nccl.beyond_fit_efficiency(nccl.peak_busbw(excluded=set(excluded)))
    refitted = {arch: replace(cal, beyond_fit=beyond.get(arch, {})) for arch, cal in nccl.load_calibration().items()}
    with nccl.calibration_override(refitted):
        yield


#: The constants registry cases name in ``fitted``; ``kinds``: the case kinds whose result the constant can change
#: (a memory constant fitted on a page does not make that page's step times fit cases).
TUNED = {
    "nccl.PEAK_BUSBW": TunedConstant(
        "nccl.PEAK_BUSBW", "astra_gpu_model.nccl.PEAK_STATEMENTS: NVIDIA/nccl-tests#212 (H100 NVSwitch ring 370 GB/s, "
        "NVLS all-reduce ~480 GB/s bus bandwidth; the ring's 370/450 share of the line rate, applied to A100), "
        "GTC 2024 S62129 (NVLS 480 GB/s)",
        "plugins/gpu_model/fit/fit_nccl.py (astra_gpu_model.nccl.beyond_fit_efficiency)", _nccl_peaks_without,
        kinds=("llm_step", "collective", "serving", "energy")),
    "serving.sharegpt_output_lengths": TunedConstant(
        "serving.sharegpt_output_lengths",
        "sgl-project/sglang benchmark_vllm_060 README: output mean 194 = 3700.64 / 19.04 (offline token over request "
        "throughput), CV 1.4 from the page's median TTFT, TPOT and E2E", "by hand (docs/serving.md, cause (f))",
        None, why_not="the output lengths' mean and spread come from this page alone: with it left out there is "
        "nothing to derive them from", kinds=("serving",)),
    "memory.RESERVE_FRACTION": TunedConstant(
        "memory.RESERVE_FRACTION", "pytorch/torchtitan docs/performance.md: the FSDP 8 and FSDP 128 rows without "
        "torch.compile (max_memory_reserved over the estimate's allocated bytes)", "tools/fit_memory_reserve.py",
        None, why_not="fitted on torchtitan's own rows only: with that source left out there is nothing to fit it on",
        kinds=("memory",)),
    "energy.gemm_power_fraction": TunedConstant(
        "energy.gemm_power_fraction", "serialalice.pt GPU Energy Benchmark: vLLM at batch 128 draws 0.94-0.97 of the "
        "TDP on H100, H200 and B200 (astra_energy/data/power.json: class_w.gemm, and the H200's idle power)",
        "by hand (docs/energy.md)", None, why_not="read from this benchmark's own runs: with it left out there is "
        "no measurement of a GPU's power under sustained serving load to set it from", kinds=("energy",)),
}


def fitted_on(cases, kind=None):
    """``{source_id: sorted constant names}`` over every case of the registry (not only the chosen ones); with
    ``kind``, only the constants that can change a case of that kind (unknown names are kept: :func:`plan` says so)."""
    out = {}
    for case in cases:
        names = [n for n in case.fitted if kind is None or n not in TUNED or kind in TUNED[n].kinds]
        out.setdefault(case.source_id, set()).update(names)
    return {source: sorted(names) for source, names in out.items()}


def plan(case, cases):
    """How ``--cv`` predicts ``case``: ``("plain", [])`` (nothing that can change it was fitted on its source),
    ``("refit", names)`` or ``("none", reason)`` (a constant fitted on its source cannot be refitted without it)."""
    names = fitted_on(cases, case.kind).get(case.source_id, [])
    if not names:
        return "plain", []
    for name in names:
        constant = TUNED.get(name)
        if constant is None:
            return "none", f"no refit is known for {name!r} (known: {', '.join(TUNED)})"
        if constant.refit is None:
            return "none", f"{name}: {constant.why_not}"
    return "refit", names


def run_case_without_source(case, cases, workdir=None):
    """``case`` simulated with every constant fitted on its source refitted without that source."""
    from astra_validation.runner import run_case

    how, names = plan(case, cases)
    if how != "refit":
        raise ValueError(f"case {case.name!r}: no refit to run ({how})")
    with ExitStack() as stack:
        for name in names:
            stack.enter_context(TUNED[name].refit({case.source_id}))
        result = run_case(case, workdir)
    return {**result, "refitted": names}


__all__ = ["TUNED", "TunedConstant", "fitted_on", "plan", "run_case_without_source"]
