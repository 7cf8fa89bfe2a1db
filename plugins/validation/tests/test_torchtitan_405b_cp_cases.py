"""torchtitan's second CP table (docs/performance.md at eaea6f6a, Table 6; the TorchTitan paper's Table 6): Llama 3.1
405B on 512 Grand Teton H100s, TP 8, PP 8 (1F1B), FSDP x CP = 8, local batch 8, at 32k-256k tokens. The registry's
rows must be the published TPS/GPU converted by torchtitan 9dec370's own tps formula, and run with the flags the
table and torchtitan's code at that commit give, nothing tuned."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_validation.registry import load_cases
from astra_workload_generators.llm import LlmSpec
from astra_workload_generators.llm.split import check_split, stage_layers

#: (name, sequence, TPS/GPU, CP) as Table 6 prints them
ROWS = (("torchtitan-h100-llama3.1-405b-fsdp8-cp1-32k-fp8", 32768, 76, 1),
        ("torchtitan-h100-llama3.1-405b-fsdp4-cp2-64k-fp8", 65536, 47, 2),
        ("torchtitan-h100-llama3.1-405b-fsdp2-cp4-128k-fp8", 131072, 31, 4),
        ("torchtitan-h100-llama3.1-405b-fsdp1-cp8-256k-fp8", 262144, 16, 8))


@pytest.fixture(scope="module")
def cases(registry_cases):
    return [registry_cases[name] for name, *_ in ROWS]


def test_the_rows_are_sourced_checks_on_the_grand_teton_machines(cases):
    for case in cases:
        assert case.kind == "llm_step" and case.role == "check" and not case.fitted and not case.long, case.name
        assert "eaea6f6a" in case.source and "Table 6" in case.source and "2410.06511" in case.source
        # one document with the 8B CP rows: left out together by --cv
        assert case.source_id == "pytorch/torchtitan docs/performance.md"
        assert case.platform == "grand-teton-h100" and case.nodes * 8 == 512


def test_the_measured_steps_are_the_published_tps_converted(cases, flag):
    # tps = local batch 8 x seq (counted before the CP split) / (time x CP x TP 8 x PP 8): step = 8 seq / (TPS CP 64)
    hand = (53.8947, 87.1489, 132.1290, 256.0)  # 262144/4864, 524288/6016, 1048576/7936, 2097152/8192
    for case, (_, seq, tps, cp), step in zip(cases, ROWS, hand):
        assert case.measured_s() == pytest.approx(8 * seq / (tps * cp * 64), abs=1e-3)
        assert case.measured_s() == pytest.approx(step, abs=1e-4)
        # every row's step is the same 2,097,152 tokens: local batch 8 x FSDP (8 / CP) sequences of seq
        assert 8 * (8 // cp) * seq == 2_097_152
        assert int(flag(case, "--seq-len")) == seq and int(flag(case, "--cp")) == cp
        assert int(flag(case, "--dp")) * cp == 8 and flag(case, "--tp") == "8" and flag(case, "--pp") == "8"
        # local batch 8 = PP (the default micro-batch count at 9dec370) micro-batches of 1
        assert int(flag(case, "--micro-batches")) * int(flag(case, "--micro-batch-size")) == 8


def test_the_flags_are_the_tables_and_torchtitans_and_nothing_tuned(cases, flag):
    for case in cases:
        words = set(case.workload)
        # stated by the table: Float8, AsyncTP (with the SP that torchtitan's TP plan always applies), full AC
        assert {"--tp-comm-overlap", "--sequence-parallel", "--recompute", "--cp-compile"} <= words
        assert flag(case, "--gemm-dtype") == "fp8" and flag(case, "--recompute") == "full"
        # torchtitan 9dec370 apply_fsdp: reshard_after_forward=False under PP
        assert "--no-reshard-after-forward" in words and flag(case, "--framework") == "fsdp2"
        assert not {"--comm-sms", "--tflops", "--moe-imbalance", "--virtual-stages"} & words, case.name


def test_the_split_flags_give_torchtitans_generated_split_of_126_layers():
    # torchtitan 9dec370 generate_split_points, 126 layers over 8 single-stage ranks, by hand: base 126 // 8 = 15,
    # 6 left over; the first stage 15, the next six 16 each (one extra each), the last the rest: 126 - 111 = 15
    case = next(c for c in load_cases() if c.name == ROWS[0][0])
    dims, cfg = LlmSpec.from_argv(case.workload).resolve()
    assert dims.layers == 126
    assert tuple(len(r) for r in stage_layers(dims.layers, cfg)) == (15, 16, 16, 16, 16, 16, 16, 15)
    # without the two slots 126 does not divide over PP 8
    plain = LlmSpec.from_argv([w for w in case.workload
                               if w not in ("--pipeline-embedding-layer", "--pipeline-loss-layer")])
    with pytest.raises(ConfigError):
        check_split(dims.layers, plain.resolve()[1])
