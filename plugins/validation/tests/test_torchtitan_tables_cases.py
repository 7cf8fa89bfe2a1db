"""The rest of torchtitan's docs/performance.md (at eaea6f6a; torch 1963fc8, torchtitan 9dec370) as check cases: the
torch.compile and Float8 rows of Tables 1 and 3 (Llama 3.1 8B, FSDP 8 / 128), Table 4 (Llama 3.1 70B, FSDP 32 x TP 8,
with and without AsyncTP) and Table 5 (Llama 3.1 405B, FSDP 8 x TP 8 x PP 8, 1F1B and Interleaved 1F1B). The rows
must be the published TPS/GPU converted by torchtitan 9dec370's own tps formula, and run with the flags the tables and
torchtitan's code at that commit give, nothing tuned."""

from __future__ import annotations

import pytest

from astra_workload_generators.llm import LlmSpec
from astra_workload_generators.llm.split import stage_layers

#: (name, table, TPS/GPU, local batch, sequence, TP x PP (torchtitan's non_data_parallel_size), GPUs)
ROWS = (("torchtitan-h100-llama3.1-8b-fsdp8-sac-bs2-compile", "Table 1", 6667, 2, 8192, 1, 8),
        ("torchtitan-h100-llama3.1-8b-fsdp8-sac-bs2-compile-fp8", "Table 1", 8532, 2, 8192, 1, 8),
        ("torchtitan-h100-llama3.1-8b-fsdp128-sac-bs2-compile", "Table 3", 6514, 2, 8192, 1, 128),
        ("torchtitan-h100-llama3.1-8b-fsdp128-sac-bs2-compile-fp8", "Table 3", 8380, 2, 8192, 1, 128),
        ("torchtitan-h100-llama3.1-70b-fsdp32-tp8-fp8", "Table 4", 829, 16, 8192, 8, 256),
        ("torchtitan-h100-llama3.1-70b-fsdp32-tp8-fp8-asynctp", "Table 4", 876, 16, 8192, 8, 256),
        ("torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-1f1b-fp8", "Table 5", 100, 32, 8192, 64, 512),
        ("torchtitan-h100-llama3.1-405b-fsdp8-tp8-pp8-interleaved-fp8", "Table 5", 128, 32, 8192, 64, 512))
#: the steps worked out by hand: 16384/6667, 16384/8532, 16384/6514, 16384/8380, 131072/6632, 131072/7008,
#: 262144/6400, 262144/8192
HAND = (2.4575, 1.9203, 2.5152, 1.9551, 19.7636, 18.7032, 40.96, 32.0)


@pytest.fixture(scope="module")
def cases(registry_cases):
    return [registry_cases[name] for name, *_ in ROWS]


def test_the_rows_are_sourced_checks_on_the_grand_teton_machines(cases):
    for case, (_, table, tps, *_rest, gpus) in zip(cases, ROWS):
        assert case.kind == "llm_step" and case.role == "check" and not case.fitted and not case.long, case.name
        assert "eaea6f6a" in case.source and table in case.source and f"{tps:,} TPS/GPU" in case.source
        # one document with the other torchtitan H100 rows: left out together by --cv
        assert case.source_id == "pytorch/torchtitan docs/performance.md"
        assert case.platform == "grand-teton-h100" and case.nodes * 8 == gpus


def test_the_measured_steps_are_the_published_tps_converted(cases, flag):
    # tps = labels.numel() of the local batch / (time x CP x TP x PP): step = local batch x seq / (TPS x TP x PP)
    for case, (_, _t, tps, batch, seq, non_dp, gpus), step in zip(cases, ROWS, HAND):
        assert case.measured_s() == pytest.approx(batch * seq / (tps * non_dp), abs=1e-4)
        assert case.measured_s() == pytest.approx(step, abs=1e-4)
        assert int(flag(case, "--seq-len")) == seq
        # the local batch is one data-parallel rank's: micro-batches x micro-batch size
        assert int(flag(case, "--micro-batches")) * int(flag(case, "--micro-batch-size")) == batch
        tp, pp = int(flag(case, "--tp") or 1), int(flag(case, "--pp") or 1)
        assert tp * pp == non_dp and int(flag(case, "--dp")) * tp * pp == gpus and flag(case, "--cp") is None


def test_the_flags_are_the_tables_and_torchtitans_and_nothing_tuned(cases, flag):
    for case, (name, table, *_rest) in zip(cases, ROWS):
        words = set(case.workload)
        assert flag(case, "--framework") == "fsdp2" and flag(case, "--zero") == "3" and "--no-dropout" in words
        # compiled: the norm is one kernel (no --norm-kernel composite, which is the eager rows' Python RMSNorm)
        assert flag(case, "--norm-kernel") is None
        # Float8 where the row says it (every row of Tables 4 and 5)
        assert (flag(case, "--gemm-dtype") == "fp8") == (name.endswith("fp8") or table in ("Table 4", "Table 5"))
        assert flag(case, "--recompute") == ("selective" if table in ("Table 1", "Table 3") else "full")
        # AsyncTP -> --tp-comm-overlap: Table 4's second row and all of Table 5 (the table's title)
        assert ("--tp-comm-overlap" in words) == (name.endswith("asynctp") or table == "Table 5")
        # TP shards the norms in torchtitan's plan
        assert ("--sequence-parallel" in words) == (flag(case, "--tp") is not None)
        # 9dec370 apply_fsdp: reshard_after_forward=False under PP only
        assert ("--no-reshard-after-forward" in words) == (table == "Table 5")
        # Interleaved 1F1B: two stages per rank (generate_split_points for a PipelineScheduleMulti)
        assert flag(case, "--virtual-stages") == ("2" if "interleaved" in name else None)
        assert not {"--comm-sms", "--tflops", "--moe-imbalance", "--tp-overlap-config"} & words, case.name


def test_table_5s_flags_give_torchtitans_generated_splits(cases):
    # torchtitan 9dec370 generate_split_points, by hand. 1F1B: 126 layers over 8 stages, base 15, 6 left over:
    # 15, then six of 16, the last the rest 126 - 111 = 15. Interleaved: over 16 stages, base 7, 14 left over: 7,
    # then fourteen of 8, the last 126 - 119 = 7
    hand = {"1f1b": (15,) + (16,) * 6 + (15,), "interleaved": (7,) + (8,) * 14 + (7,)}
    for case in cases[6:]:
        dims, cfg = LlmSpec.from_argv(case.workload).resolve()
        assert dims.layers == 126
        kind = "interleaved" if "interleaved" in case.name else "1f1b"
        assert tuple(len(r) for r in stage_layers(dims.layers, cfg)) == hand[kind]
