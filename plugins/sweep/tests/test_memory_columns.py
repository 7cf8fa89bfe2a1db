"""Memory columns of sweep and search rows (peak, parts, capacity, margin), and astra search's memory filter on the
layouts MLPerf submitters ran GPT-3 175B with on H100: enumerated by the search's own enumerate_layouts and judged
by its test (peak_memory's total against the platform's memory, memory_fit.verdict != "oom"), so that a change to
the estimate that would make the search drop a layout known to have run fails here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from astra_sim.platforms import get_platform
from astra_sweep.memory_columns import estimate_columns, report_memory_columns
from astra_sweep.point import fill_row
from astra_sweep.results import result_kind
from astra_sweep.search import enumerate_layouts
from astra_workload_generators.llm import LlmSpec, model_dims, peak_memory
from astra_workload_generators.llm.memory_fit import verdict


def _report(memory):
    return {"ranks": [{"rank": 0, "finish_ns": 10, "compute_ns": 6, "exposed_comm_ns": 4}],
            "settings": {"memory": memory}}


def test_a_sweep_row_keeps_the_peak_its_parts_the_capacity_and_the_margin():
    memory = {"peak_bytes": 90, "hbm_capacity_bytes": 80, "margin_bytes": -10, "fits": False,
              "peak_breakdown_bytes": {"weights": 50, "activations": 40, "context": 0}}
    row = {}
    fill_row(row, _report(memory))
    assert row["peak_mem_bytes"] == 90 and row["mem_capacity_bytes"] == 80 and row["mem_margin_bytes"] == -10
    assert (row["mem_weights_bytes"], row["mem_activations_bytes"], row["mem_context_bytes"]) == (50, 40, 0)
    assert all(result_kind(k) == "int" for k in row if k.startswith("mem"))


def test_no_memory_check_no_memory_columns():
    row = {}
    fill_row(row, _report(None))
    assert not [k for k in row if "mem" in k]
    assert report_memory_columns({"peak_bytes": "90"}) == {}  # not an integer: not a column


def test_a_search_row_has_the_same_columns_from_the_estimate():
    dims, cfg = LlmSpec(model="gpt2", tp=2, dp=4, micro_batch_size=2, micro_batches=2, zero=1).resolve(
        on_warning=lambda line: None)
    m = peak_memory(dims, cfg)
    row = estimate_columns(m, 80 * 2**30)
    assert row["peak_mem_bytes"] == m.total == sum(v for k, v in row.items() if k.startswith("mem_") and k not in (
        "mem_capacity_bytes", "mem_margin_bytes"))
    assert row["mem_margin_bytes"] == 80 * 2**30 - m.total > 0
    assert "mem_capacity_bytes" not in estimate_columns(m, None)


# MLPerf Training GPT-3 175B on DGX H100 (80 GB), NVIDIA's NeMo submissions. Config file names are
# config_DGXH100_<nodes>x<GPUs>x<MINIBS>x<TP>x<PP>_mbs<micro-batch>.sh, global batch = MINIBS x DP; all use the
# distributed optimizer (config_common.sh USE_DIST_OPTIMIZER=True), sequence parallelism and selective activation
# recomputation with dropout 0 (conf megatron_gpt_config.yaml), FP8 GEMMs (config_fp8.sh), sequence 2048.
MLPERF = {
    # mlcommons/training_results_v3.0 NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_96x8x128x4x8_mbs1.sh
    "v3.0-768-gpus": dict(gpus=768, batch=3072, tp=4, pp=8, vp=1, mbs=1),
    # mlcommons/training_results_v3.1 NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_512x8x16x4x8_mbs1.sh
    "v3.1-4096-gpus": dict(gpus=4096, batch=2048, tp=4, pp=8, vp=1, mbs=1),
    # the same per-GPU layout (TP 4, PP 8, micro-batch 1) on 1024 GPUs: DP 32 (a larger DP only shards the
    # optimizer more, so what fits on 768 GPUs fits here)
    "v3.x-layout-1024-gpus": dict(gpus=1024, batch=2048, tp=4, pp=8, vp=1, mbs=1),
}
# mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/config_DGXH100_64x8x128x4x8_mbs2.sh:
# 512 GPUs, TP 4, PP 8, INTERLEAVED_PIPELINE=4, micro-batch 2, global batch 2048; NeMo's distributed fused Adam
# keeps bf16 gradients (conf/optim/distributed_fused_adam.yaml: grad_sync_dtype bf16) and the weights are FP8
# (config_common.sh: FP8_PARAMS=True)
MLPERF_V4 = {"v4.0-512-gpus": dict(gpus=512, batch=2048, tp=4, pp=8, vp=4, mbs=2),
             "v4.0-layout-1024-gpus": dict(gpus=1024, batch=2048, tp=4, pp=8, vp=4, mbs=2)}


def _search_layout(gpus, batch, tp, pp, vp, mbs, recompute):
    """The layout as astra search enumerates it (its defaults: sequence parallelism with TP, dropout on)."""
    dims = model_dims("gpt3-175b")
    choices = {"tp": [tp], "pp": [pp], "vp": [vp], "mbs": [mbs], "zero": [1], "ep": None, "cp": [1],
               "recompute": [recompute]}
    layouts, _ = enumerate_layouts(dims, gpus, batch, 8, choices, "fp8")
    assert len(layouts) == 1 and layouts[0][1]  # valid, and it divides the global batch
    return dims, layouts[0][0]


def _kept(dims, cfg):
    """astra search's memory test (search.py: memory_verdict(peak_memory(dims, cfg).total, capacity) != "oom")."""
    capacity = get_platform("hgx-h100").device_memory_bytes()
    return verdict(peak_memory(dims, cfg).total, capacity) != "oom"


@pytest.mark.parametrize("recompute", ["none", "selective"])  # FlashAttention: none keeps what selective keeps
@pytest.mark.parametrize("name", MLPERF)
def test_search_keeps_the_mlperf_v3_gpt3_layouts(name, recompute):
    assert _kept(*_search_layout(**MLPERF[name], recompute=recompute))


@pytest.mark.parametrize("name", MLPERF_V4)
def test_search_keeps_the_mlperf_v4_gpt3_layout_with_nemos_optimizer(name):
    """The v4.0 layout (interleaved, micro-batch 2) fits only as NeMo held it: with Megatron-LM's fp32 main
    gradients and bf16 weights beside their FP8 copies the estimate is over by more than its uncertainty."""
    dims, cfg = _search_layout(**MLPERF_V4[name], recompute="selective")
    assert not _kept(dims, cfg)  # Megatron-LM's semantics (the search's default today)
    assert _kept(dims, replace(cfg, grad_buffer="same", fp8_params=True))


SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 4, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, dp: 4}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {workload.llm.zero: [0, 1]}
"""


def test_astra_sweep_rows_carry_the_memory_columns(tmp_path):
    """End to end: each simulated point's row has the peak, its parts, the H100's capacity and the margin; the
    distributed optimizer (--zero 1) shrinks the optimizer part and widens the margin."""
    from astra_sim.cli import main
    from astra_sweep.results import Results

    (tmp_path / "spec.yaml").write_text(SPEC)
    out = str(tmp_path / "rows.csv")
    assert main(["sweep", str(tmp_path / "spec.yaml"), "-o", out, "--jobs", "1", "--no-progress"]) == 0
    rows = sorted(Results(out, [], {})._read_results(), key=lambda r: r["workload.llm.zero"])
    assert [r["status"] for r in rows] == ["ok", "ok"]
    capacity = get_platform("hgx-h100").device_memory_bytes()
    for r in rows:
        parts = sum(v for k, v in r.items() if k.startswith("mem_") and k not in ("mem_capacity_bytes",
                                                                                    "mem_margin_bytes"))
        assert r["peak_mem_bytes"] == parts and r["mem_capacity_bytes"] == capacity
        assert r["mem_margin_bytes"] == capacity - r["peak_mem_bytes"]
    assert rows[1]["mem_optimizer_bytes"] < rows[0]["mem_optimizer_bytes"]
    assert rows[1]["mem_margin_bytes"] > rows[0]["mem_margin_bytes"]


@pytest.mark.parametrize("name", MLPERF_V4)
def test_astra_search_with_nemos_flags_keeps_the_mlperf_v4_layout(name):
    """`astra search --grad-buffer same --fp8-params` enumerates the layout with NeMo's optimizer memory, and keeps it."""
    spec = MLPERF_V4[name]
    dims = model_dims("gpt3-175b")
    choices = {"tp": [spec["tp"]], "pp": [spec["pp"]], "vp": [spec["vp"]], "mbs": [spec["mbs"]], "zero": [1],
               "ep": None, "cp": [1], "recompute": ["selective"]}
    layouts, _ = enumerate_layouts(dims, spec["gpus"], spec["batch"], 8, choices, "fp8", "same", True)
    cfg = layouts[0][0]
    assert cfg.grad_buffer == "same" and cfg.fp8_params and _kept(dims, cfg)


def test_astra_search_refuses_fp8_params_without_fp8_gemms():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "astra_sim.cli", "search", "--preset", "gpt3-175b", "--gpus", "1024",
                           "--platform", "hgx-h100", "--global-batch", "1536", "--fp8-params"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--fp8-params needs --gemm-dtype fp8" in done.stderr
    assert "Traceback" not in done.stderr
