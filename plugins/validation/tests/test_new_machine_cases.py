"""The registry's published measurements on the machines people buy now (issue 40): HGX B200 and B300, GB200 and
GB300 NVL72 racks (whole or in part), AMD Instinct MI300X and MI355X, and H200. Each is a check case with its source,
and ``astra validate`` runs the cheap ones end to end; the misses docs/validation.md explains are asserted to still
be misses, so the page is revisited when the model moves."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main
from astra_validation.registry import load_cases

#: the platforms of issue 40's machines (HGX B200/B300, GB200/GB300 NVL72 racks, AMD Instinct, H200)
NEW_MACHINES = ("hgx-b200", "hgx-b300", "gb200-nvl72", "gb200-nvl72-64", "gb300-nvl72", "mi300x", "mi325x", "mi355x",
                "hgx-h200")
#: the 8B steps added from Megatron-Bridge's GB300/GB200 rows and MLPerf Training v5.1, on 8 GPUs, one NVL72 rack
#: or 64 H200 (under 3 s each); the 64- and 256-GPU 70B steps (about 40 s each on 2 cores) are left to
#: ``astra validate``
CHEAP_NEWEST = ("megatron-bridge-gb300-llama3-8b-fp8", "megatron-bridge-gb200-llama3-8b-fp8",
                "mlperf-v5.1-llama31-8b-gb300-8gpu-fp4", "mlperf-v5.1-llama31-8b-gb200-8gpu-fp4",
                "mlperf-v5.1-llama31-8b-b300-fp4", "mlperf-v5.1-llama31-8b-b300-fp8",
                "mlperf-v5.1-llama31-8b-b200-fp4", "mlperf-v5.1-llama31-8b-mi355x-fp8",
                "mlperf-v5.1-llama31-8b-gb300-rack-fp8", "mlperf-v5.1-llama31-8b-gb200-rack-fp8",
                "mlperf-v5.1-llama31-8b-h200-64gpu-fp8")
#: every case added from the newest machines' sources (GB300, B300, GB200 in part, MI355X, H200; and HGX B200's FP4)
NEWEST = CHEAP_NEWEST + ("megatron-bridge-gb200-llama3-70b-mxfp8", "gpu-recipes-a3ultra-h200-llama31-70b-fp8")


def _new_machine_cases():
    return [c for c in load_cases() if c.platform in NEW_MACHINES and c.kind in ("llm_step", "collective")]


def test_the_registry_holds_at_least_six_sourced_check_cases_on_the_new_machines():
    cases = _new_machine_cases()
    assert len(cases) >= 6, [c.name for c in cases]
    for case in cases:
        assert case.source and case.source_id and case.hardware
        # nothing was fitted on these sources: a fit case would have to name its constant
        assert case.role == "check" and not case.fitted, case.name
        assert case.measured_s(case.nodes * 8) > 0
    assert {"hgx-b200", "hgx-b300", "gb200-nvl72", "gb300-nvl72", "mi300x", "mi355x", "hgx-h200"} <= {
        c.platform for c in cases}
    assert {"collective", "llm_step"} <= {c.kind for c in cases}
    assert len({c.source_id for c in cases}) >= 3


def test_the_measured_times_are_the_published_numbers_converted():
    by_name = {c.name: c for c in _new_machine_cases()}
    rack = by_name["nccl-allreduce-gb200-nvl72-1rack"]
    # nccl-tests' busbw = size x 2(n-1)/n / time: the README's row gives 20,299 us at 8 GiB on 72 GPUs.
    assert abs(rack.measured_s(72) - 20299e-6) / 20299e-6 < 0.001
    step = by_name["megatron-bridge-b200-llama3-8b-fp8"]
    # GBS 128 x 8192 tokens over 8 GPUs at 30,624 tokens/s/GPU
    assert abs(step.measured_s() - 128 * 8192 / (30624 * 8)) < 1e-3


def test_the_newest_machines_cases_are_sourced_and_cite_a_commit():
    by_name = {c.name: c for c in _new_machine_cases()}
    assert set(NEWEST) <= set(by_name)
    for name in NEWEST:
        case = by_name[name]
        assert case.kind == "llm_step" and not case.long, name
        # each names the published number and where it was read (a commit of the repository that holds it)
        assert any(commit in case.source for commit in ("067f987d", "441d65f4", "1a3020bb")), case.source
    # MLPerf v5.1: AMD logs samples/s over a block of steps, so its step is GBS / throughput (32 / ~30.68)
    assert abs(by_name["mlperf-v5.1-llama31-8b-mi355x-fp8"].measured_s() - 32 / 30.683) < 1e-3
    # Megatron-Bridge 26.04.01: 256 x 8192 tokens over 64 GB200 at 3,712 tokens/s/GPU
    assert abs(by_name["megatron-bridge-gb200-llama3-70b-mxfp8"].measured_s() - 256 * 8192 / (3712 * 64)) < 1e-3


def test_astra_validate_runs_the_short_new_machine_cases(tmp_path):
    short = [c.name for c in _new_machine_cases() if not c.long and c.name not in NEWEST]
    assert len(short) >= 8
    out = tmp_path / "r.json"
    assert main(["validate", "--only", ",".join(short), "-o", str(out)]) == 0
    results = {r["name"]: r for r in json.loads(out.read_text())["cases"]}
    assert set(results) == set(short)
    for row in results.values():
        assert row["simulated_ns"] > 0 and row["role"] == "check"
        assert row["error"] == (row["simulated_ns"] - row["measured_ns"]) / row["measured_ns"]
    # docs/validation.md, "The new machines": Blackwell's NVLS peak is fitted on other sources (NVIDIA/nccl#1807,
    # lixueduan.com) and NVLSTree runs across nodes, so one and two racks come within 5 % and two B200 nodes within
    # 15 %; twenty racks ran with NCCL_NVLS_ENABLE=0 (coreweave/nccl-tests 5ceab10; the case's --nccl-nvls off): NCCL
    # 2.26 runs the tree there, +13.7 % (it was -50 % as NVLSTree).
    for name in ("nccl-allreduce-gb200-nvl72-1rack", "nccl-allreduce-gb200-nvl72-2racks"):
        assert abs(results[name]["error"]) < 0.05, (name, results[name]["error"])
    assert abs(results["nccl-allreduce-b200-2node"]["error"]) < 0.15
    assert abs(results["nccl-allreduce-gb200-nvl72-20racks"]["error"]) < 0.2
    # RCCL on MI300X: MSCCL all-pairs up to 16 MiB, the cdna3 calibration fitted on another published sweep
    # (hisohara/ai-scripts): the blog's three sizes within 10 %
    for name in ("rccl-allreduce-mi300x-8gpu-16g", "rccl-allreduce-mi300x-8gpu-64m", "rccl-allreduce-mi300x-8gpu-1m"):
        assert abs(results[name]["error"]) < 0.10, (name, results[name]["error"])


@pytest.mark.slow  # eleven 8B steps through astra validate: about 15 s on 2 cores
def test_astra_validate_runs_the_cheap_newest_machine_steps(tmp_path):
    out = tmp_path / "r.json"
    assert main(["validate", "--only", ",".join(CHEAP_NEWEST), "-o", str(out)]) == 0
    results = {r["name"]: r for r in json.loads(out.read_text())["cases"]}
    assert set(results) == set(CHEAP_NEWEST)
    for name, row in results.items():
        gpus = 72 if "-rack-" in name else 64 if "-64gpu-" in name else 8
        assert row["gpus"] == gpus and row["simulated_ns"] > 0 and row["role"] == "check"
    error = {name: row["error"] for name, row in results.items()}
    # docs/validation.md, "The newest machines": MI355X's MLPerf step comes within 5 %. With Blackwell's own kernel
    # measurements (NVFP4 GEMMs: pytorch/ao#2427; attention: NVIDIA's cuDNN SDPA benchmark of B200, GB200, GB300)
    # the GB parts' steps come within 8 %, but GB200's Megatron-Bridge 8B row (14 % fast, like the HGX B200 row) and
    # the GB300 rack: since the GEMM tile sets and the published FP8 ceiling of the B300 preset (docs/validation.md,
    # "GEMM tile sets and the published maximum achievable rate") it is 12.5 % slow, a known miss (7.6 % since its CP
    # step without the mask runs at NVIDIA's measured cuDNN no-mask rate, attention.blackwell_mask_ratio). Since
    # session 49 the racks' FP8 parameters are gathered in 1 byte (Megatron's fp8_param_gather, their configs'
    # --fp8-params) and their TE op fuser is stated: the GB300 rack +6.9 -> +3.9 %, the GB200 rack -5.5 -> -8.2 % (its
    # exposed data-parallel gathers halved). Since session 53 a GEMM's rate moves with its clock on a curve, not in
    # proportion (power_clock.SustainedGemm.clock_curve): the 1,200 W GB200 trays' GEMMs run at 0.881 of the burst,
    # not 0.949, and the GB200 rows come within 8 % (the rack -7.5 -> -4.6 %, Megatron-Bridge's 8B -10.5 -> -7.0 %)
    assert abs(error["mlperf-v5.1-llama31-8b-mi355x-fp8"]) < 0.05
    for name in ("megatron-bridge-gb300-llama3-8b-fp8", "mlperf-v5.1-llama31-8b-gb300-8gpu-fp4",
                 "mlperf-v5.1-llama31-8b-gb200-8gpu-fp4", "mlperf-v5.1-llama31-8b-gb300-rack-fp8",
                 "mlperf-v5.1-llama31-8b-gb200-rack-fp8", "megatron-bridge-gb200-llama3-8b-fp8"):
        assert abs(error[name]) < 0.08, (name, error[name])
    # the known miss: the HGX B300 steps (FP4 and FP8) are 11-14 % fast with their GEMMs at the sustained rate of
    # their 1,100 W boards (astra_gpu_model.power_clock; 16-18 % at the burst rate they were fitted on), B200's FP4
    # step 4 % (12 %)
    for name in CHEAP_NEWEST[4:6]:
        assert -0.25 < error[name] < -0.08, (name, error[name])
    assert -0.10 < error["mlperf-v5.1-llama31-8b-b200-fp4"] < 0
    # H200's MLPerf 8B step on 8 nodes (FP8 with FP8 attention, CP 2, one micro-batch) is 20 % fast
    assert -0.30 < error["mlperf-v5.1-llama31-8b-h200-64gpu-fp8"] < -0.10
    # GB300 runs on the HGX B300 preset (gpu_proxy), at its rack's 1,400 W against the HGX board's 1,100 W: the same
    # FP4 recipe simulates 4 % longer on HGX B300 (its GEMMs' sustained clock), while the measured HGX B300 (Lenovo)
    # step is 17 % longer than GB300's
    gb300, b300 = (results[f"mlperf-v5.1-llama31-8b-{m}"] for m in ("gb300-8gpu-fp4", "b300-fp4"))
    assert 1.02 * gb300["simulated_ns"] < b300["simulated_ns"] < 1.1 * gb300["simulated_ns"]
    assert b300["measured_ns"] > 1.1 * gb300["measured_ns"]
    # likewise GB200 and HGX B200 (the B200 preset, 1,200 W against 1,000 W): measured 12 % apart (other submitters),
    # simulated 4 % (7 % before session 53's rate-clock curve; Megatron-Bridge's one-recipe pair measures 2.9 %)
    gb200, b200 = (results[f"mlperf-v5.1-llama31-8b-{m}"] for m in ("gb200-8gpu-fp4", "b200-fp4"))
    assert 1.02 * gb200["simulated_ns"] < b200["simulated_ns"] < 1.1 * gb200["simulated_ns"]
    assert b200["measured_ns"] > 1.1 * gb200["measured_ns"]


@pytest.mark.slow  # GPT-3 175B on 256 TPU v6e chips through astra validate: about 2 s of CPU, more on a busy machine
def test_the_tpu_v6e_case_is_sourced_and_a_known_miss(tmp_path):
    case = next(c for c in load_cases() if c.name == "maxtext-v6e-256-gpt3-175b")
    assert case.platform == "tpu-v6e" and case.role == "check" and not case.fitted
    # the recipe's example log line, read at a commit, and its layout in documented flags
    assert "c855fe6b" in case.source and "17.182" in case.source
    assert case.measured_s() == pytest.approx(17.182)
    assert {"--recompute", "full", "--zero", "3"} <= set(case.workload)
    out = tmp_path / "r.json"
    assert main(["validate", "--only", case.name, "-o", str(out)]) == 0
    row = json.loads(out.read_text())["cases"][0]
    assert row["gpus"] == 256
    # docs/validation.md, "TPU v6e: one check case": the array is fed from VMEM (the scaling book's ~22x HBM) since
    # 2026-11-29; before, HBM's rate stalled its GEMMs (74.80 s, +335.4 %). The slice's collectives are the torus
    # rule (the scaling book: every axis at once, both directions; 400 GB/s a chip on this pod, Google's all-reduce
    # bandwidth per Pod), not the kernel's one-direction ring (105 GB/s): 12.93 s (-24.8 %) -> 12.71 s (-26.0 %).
    # The band is what that sourced model gives, nothing fitted: a known miss, too fast. FSDP's traffic (2.6 s of
    # ICI time) hides under 12.7 s of compute; even fully exposed it would give 15.3 s, so most of the miss is
    # compute time per FLOP the model lacks (the one published v6e GEMM rate, 827 TFLOP/s at 8192^3 in tpu-recipes'
    # microbenchmarks, is 1.4 % above the model's: test_tpu_feed.py; no flash-attention rate found). --iota-embed
    # (gpt3-175b.yml's use_iota_embed) since 2026-11-30: 12.725 s (-25.9 %). Revisit when it moves.
    assert -0.31 < row["error"] < -0.21, row["error"]
