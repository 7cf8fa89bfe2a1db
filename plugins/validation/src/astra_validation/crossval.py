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
    #: ``refit(excluded_source_ids)`` -> a context manager under which the model uses the refitted value (it may
    #: yield a function that rewrites a case, for a constant that is one of the case's own inputs); None when no
    #: data is left to refit it on once its source is out (the cases then have no out-of-source prediction, said
    #: with ``why_not``)
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


#: ShareGPT's output tokens as benchmark_serving keeps them (pruned 4:1024:2048, Llama 3.1's tokenizer, EOS
#: ignored), published by a source other than SGLang's vLLM v0.6.0 page: vllm-project/vllm#13305 (2025-03-19, Llama
#: 3.1 8B Instruct, `benchmark_serving.py --dataset-name sharegpt --ignore-eos`, 1000 prompts on an H100): "Total
#: generated tokens: 198343"
SHAREGPT_OUTPUTS_ELSEWHERE = {"source": "vllm-project/vllm#13305", "requests": 1000, "output_tokens": 198343}
#: the source whose rows gave the ShareGPT output lengths of the serving cases (mean and spread)
SHAREGPT_PAGE = "sglang-benchmark-vllm060"
#: the outputs' coefficient of variation without that page: its 1.4 came from the page's own medians, and no other
#: source gives one; 1 is the assumption it replaced (and the prompts' own)
SHAREGPT_CV_WITHOUT_PAGE = 1.0


def fit_output_mean(target_mean, cv, prompt_len, prune, samples=20000, seed=0):
    """The lognormal mean (before pruning) of outputs of coefficient of variation ``cv`` whose requests, drawn with
    ``prompt_len``'s prompts and pruned by ``prune`` as astra serve draws them (``generate_requests``), have a mean
    output of ``target_mean`` tokens: bisection, on the same random draws at every step."""
    from astra_serving.requests import generate_requests, parse_length

    prompts = parse_length(prompt_len, "--prompt-len")

    def mean_output(mean):
        requests = generate_requests(samples, 1.0, prompts, ("lognormal", mean, cv), seed=seed, prune=prune)
        return sum(r.output_tokens for r in requests) / samples

    low, high = target_mean / 4, target_mean * 4
    for _ in range(16):  # the bracket, 3.75 x the target wide, to 1/65536 of it: well under the 0.1 kept
        middle = (low + high) / 2
        low, high = (middle, high) if mean_output(middle) < target_mean else (low, middle)
    return round((low + high) / 2, 1)


def _option(argv, flag):
    """The value after ``flag`` in a case's command-line words (None when absent)."""
    words = list(argv)
    return words[words.index(flag) + 1] if flag in words and words.index(flag) + 1 < len(words) else None


@contextmanager
def _sharegpt_outputs_without(excluded):
    """ShareGPT's output lengths with SGLang's page left out: the mean from ``SHAREGPT_OUTPUTS_ELSEWHERE`` (198.3
    tokens after pruning), the spread back to ``SHAREGPT_CV_WITHOUT_PAGE``; yields what rewrites a case's
    ``--output-len`` (the lognormal's mean refitted by :func:`fit_output_mean` with the case's own prompts and
    pruning). Nothing changes while another source is out."""
    if SHAREGPT_PAGE not in excluded:
        yield None
        return
    from astra_serving.requests import parse_prune

    target = SHAREGPT_OUTPUTS_ELSEWHERE["output_tokens"] / SHAREGPT_OUTPUTS_ELSEWHERE["requests"]

    def adjust(case):
        prompt, prune = _option(case.serve, "--prompt-len"), parse_prune(_option(case.serve, "--prune"))
        mean = fit_output_mean(target, SHAREGPT_CV_WITHOUT_PAGE, prompt or "512", prune)
        words = list(case.serve)
        words[words.index("--output-len") + 1] = f"lognormal:{mean:g}:{SHAREGPT_CV_WITHOUT_PAGE:g}"
        return replace(case, serve=tuple(words))

    yield adjust


#: The constants registry cases name in ``fitted``; ``kinds``: the case kinds whose result the constant can change
#: (a memory constant fitted on a page does not make that page's step times fit cases).
TUNED = {
    "nccl.PEAK_BUSBW": TunedConstant(
        "nccl.PEAK_BUSBW", "astra_gpu_model.nccl.PEAK_STATEMENTS: NVIDIA/nccl-tests#212 (H100 NVSwitch ring 370 GB/s, "
        "NVLS all-reduce ~480 GB/s bus bandwidth; the ring's 370/450 share of the line rate, applied to A100), "
        "GTC 2024 S62129 (NVLS 480 GB/s); Blackwell NVLS: NVIDIA/nccl#1807 (830 GB/s on 8 B200), lixueduan.com "
        "(811 GB/s on 8 GB200 over MNNVL)",
        "plugins/gpu_model/fit/fit_nccl.py (astra_gpu_model.nccl.beyond_fit_efficiency)", _nccl_peaks_without,
        kinds=("llm_step", "collective", "serving", "energy")),
    "serving.sharegpt_output_lengths": TunedConstant(
        "serving.sharegpt_output_lengths",
        "sgl-project/sglang benchmark_vllm_060 README: output mean 194 = 3700.64 / 19.04 (offline token over request "
        "throughput), CV 1.4 from the page's median TTFT, TPOT and E2E; without it: vllm-project/vllm#13305's "
        "198343 output tokens over 1000 ShareGPT requests, CV 1", "by hand (docs/serving.md, cause (f)); without "
        "the page astra_validation.crossval.fit_output_mean", _sharegpt_outputs_without, kinds=("serving",)),
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
            adjust = stack.enter_context(TUNED[name].refit({case.source_id}))
            if adjust is not None:  # a refit of the case's own inputs (its request lengths) rewrites the case
                case = adjust(case)
        result = run_case(case, workdir)
    return {**result, "refitted": names}


__all__ = ["TUNED", "TunedConstant", "fitted_on", "plan", "run_case_without_source", "fit_output_mean"]
