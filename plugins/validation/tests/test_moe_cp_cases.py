"""The registry's MoE training steps and long-sequence steps with context parallelism (issue 36): the regimes where
held-back measurements came out 7-24 % too fast while the registry had no case to see it. Each case is a published
row (Megatron-Bridge's DGX H100 MoE rows, torchtitan's Grand Teton CP table) with the flags its source states; the
misses docs/validation.md ("MoE and long context, the regimes the registry lacked") explains are asserted to still
be misses, so the page is revisited when the model moves."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main
from astra_validation.registry import load_cases

#: Megatron-Bridge's DGX H100 rows of Qwen3 30B-A3B (EP 16 over two nodes) and GPT-OSS 120B (PP 4, EP 8)
MOE = ("megatron-bridge-h100-qwen3-30b-a3b-fp8-ep16", "megatron-bridge-h100-gpt-oss-120b-bf16-pp4-ep8")
#: torchtitan's Table 2: Llama 3.1 8B on 8 Grand Teton H100s at 32k (CP 1, the reference), 64k, 128k and 256k tokens
LONG_CONTEXT = ("torchtitan-h100-llama3.1-8b-fsdp8-cp1-32k-fp8", "torchtitan-h100-llama3.1-8b-fsdp4-cp2-64k-fp8",
                "torchtitan-h100-llama3.1-8b-fsdp2-cp4-128k-fp8", "torchtitan-h100-llama3.1-8b-fsdp1-cp8-256k-fp8")


def _flag(case, name):
    """The value after ``name`` in the case's workload words (None when absent)."""
    words = list(case.workload)
    return words[words.index(name) + 1] if name in words else None


def _cases():
    by_name = {c.name: c for c in load_cases()}
    return {name: by_name[name] for name in MOE + LONG_CONTEXT}


def test_the_cases_load_are_sourced_checks_and_cover_both_regimes():
    cases = _cases()
    for name, case in cases.items():
        assert case.kind == "llm_step" and case.role == "check" and not case.fitted, name
        assert case.source and case.source_id and case.hardware, name
        # each cites the commit at which its row was read
        assert any(commit in case.source for commit in ("067f987d", "eaea6f6a")), case.source
        assert case.measured_s() > 0
    moe = [cases[n] for n in MOE]
    assert all(int(_flag(c, "--ep")) > 1 for c in moe)
    # both recipes set bias_activation_fusion (gpt_oss_bridge.py; perf_recipes/qwen/h100/qwen3_moe.py at 067f987d)
    assert all("--bias-activation-fusion" in c.workload for c in moe)
    # both set moe_router_force_load_balancing True (perf_recipes/{gpt_oss,qwen}/h100/*.py at 067f987d)
    assert all("--moe-force-load-balancing" in c.workload for c in moe)
    assert {c.source_id for c in moe} == {"NVIDIA-NeMo/Megatron-Bridge performance-summary"}
    cp = [cases[n] for n in LONG_CONTEXT if _flag(cases[n], "--cp")]
    assert len(cp) >= 2 and all(int(_flag(c, "--cp")) > 1 and int(_flag(c, "--seq-len")) >= 16384 for c in cp)
    # what each source states and nothing tuned: no SM budgets, efficiencies or overlap knobs beyond the recipe's
    for case in cases.values():
        assert not {"--comm-sms", "--tflops", "--moe-imbalance", "--tp-comm-overlap"} & set(case.workload), case.name


def test_the_measured_steps_are_the_published_rows_converted():
    cases = _cases()
    # Megatron-Bridge: GBS x sequence / (tokens/s/GPU x GPUs)
    assert cases[MOE[0]].measured_s() == pytest.approx(1024 * 4096 / (8826 * 16), abs=1e-3)
    assert cases[MOE[1]].measured_s() == pytest.approx(1280 * 4096 / (5824 * 64), abs=1e-3)
    # torchtitan 9dec370 divides the whole sequence's tokens by CP x TP x PP: a step is seq / (TPS x CP)
    for name, seq, tps, cp in zip(LONG_CONTEXT, (32768, 65536, 131072, 262144), (3890, 2540, 1071, 548), (1, 2, 4, 8)):
        assert cases[name].measured_s() == pytest.approx(seq / (tps * cp), abs=1e-3)
        assert int(_flag(cases[name], "--cp") or 1) == cp and int(_flag(cases[name], "--dp")) * cp == 8


@pytest.mark.slow  # four 8B steps at 32k-256k tokens on 8 GPUs: about 4 s on 2 cores
def test_long_context_steps_run_and_the_cp_miss_grows_with_the_cp_degree(tmp_path):
    out = tmp_path / "r.json"
    assert main(["validate", "--only", ",".join(LONG_CONTEXT), "-o", str(out)]) == 0
    error = {r["name"]: r["error"] for r in json.loads(out.read_text())["cases"]}
    assert set(error) == set(LONG_CONTEXT)
    ref, cp2, cp4, cp8 = (error[name] for name in LONG_CONTEXT)
    # docs/validation.md, "MoE and long context": at 32k without CP and at 64k with CP 2 the step is within 10 %
    # (attention is 62 and 78 % of it); at CP 4 and CP 8 it is a known miss, too fast, and the miss grows with the
    # CP degree (the per-GPU attention FLOPs double each row; measured, the step grows faster than they do)
    assert abs(ref) < 0.10 and abs(cp2) < 0.10, (ref, cp2)
    assert -0.36 < cp4 < -0.16, cp4
    assert -0.42 < cp8 < -0.18, cp8  # -22.7 -> -21.6 %: the forward timed on CP index 0 (session 53)
    assert cp8 < cp4 < cp2


#: each MoE row: its GPUs and the band docs/validation.md ("MoE and long context") puts its error in
MOE_BANDS = {MOE[0]: (16, -0.09, 0.02), MOE[1]: (64, -0.36, -0.18)}


@pytest.mark.slow  # a 16-GPU (about 16 s of CPU) or a 64-GPU (about 45 s) MoE step through astra validate
@pytest.mark.parametrize("name", MOE)  # one case a test, so two workers run them side by side
def test_moe_steps_run_qwen3_within_reach_and_gpt_oss_a_known_miss(tmp_path, name):
    out = tmp_path / "r.json"
    assert main(["validate", "--only", name, "-o", str(out)]) == 0
    rows = {r["name"]: r for r in json.loads(out.read_text())["cases"]}
    assert set(rows) == {name}
    gpus, low, high = MOE_BANDS[name]
    assert rows[name]["gpus"] == gpus
    # docs/validation.md, "MoE and long context": Qwen3 30B-A3B's expert all-to-all crosses two nodes; timed as NCCL
    # runs it (each GPU's off-node half through its own NIC, NVIDIA/nccl-tests#130 and #267) the step is -3.8 %
    # (it was -43.9 % while the all-to-all was a ring over the node's eight NICs). GPT-OSS 120B's EP 8 stays in one
    # node: still about 45 % too fast (compute and the pipeline, not the exchange). Its case now states the
    # attention kernel and the unfused RoPE its source runs (--attention-kernel cudnn --rope eager): -46.1 -> -44.7 %;
    # the dispatcher, per-expert GEMMs and selective recompute: -36.0 %; the experts' fc2 bias added per expert
    # outside the GEMM (Megatron's TEGroupedMLP._apply_bias): -31.5 %; the experts' fused activation as the recipes
    # run it (--bias-activation-fusion: GPT-OSS's two clamps and their cat before the kernel, -27.5 %; Qwen3's
    # SwiGLU one kernel each way, -0.5 -> -1.6 %)
    assert low < rows[name]["error"] < high, rows[name]["error"]
