"""FP8 GEMM efficiency (``fp8_gemm_scale``): fitted on DeepGEMM's published H800 FP8 table (shipped with the
plugin), reproducible from it, and used by the compute model for FP8 GEMMs only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from astra_gpu_model import GpuComputeModel, ops
from astra_gpu_model.calibration import FP8_FIT_MIN_M, error_stats, load_deepgemm_fp8, predict_gemm_s
from astra_gpu_model.gpu import fitted_parameters, load_gpu, load_gpu_file
from astra_gpu_model.power_clock import sustained_gemm_factor
from astra_sim_testing import load_script

FIT_SCRIPT = Path(__file__).resolve().parents[1] / "fit" / "fit_gemm_fp8.py"
FP8 = "['Tensor(c10::Float8_e4m3fn)', 'Tensor(c10::Float8_e4m3fn)', 'Tensor(float)', 'Tensor(float)']"


def _fit_module():
    return load_script(FIT_SCRIPT)


def test_table_loads():
    d = load_deepgemm_fp8()
    assert len(d["m"]) == 18 and sum(m >= FP8_FIT_MIN_M for m in d["m"]) == 6
    i = d["m"].index(4096)  # first compute-bound row: 4096 x 2112 x 7168 at 1009 TFLOP/s
    assert (d["n"][i], d["k"][i]) == (2112, 7168)
    assert d["time_s"][i] == pytest.approx(2 * 4096 * 2112 * 7168 / 1009e12)


def test_checked_in_scale_is_reproduced_by_the_fit():
    families = {f: {"params": v["params"]} for f, v in fitted_parameters()["families"].items()}
    scale = _fit_module().fit_fp8_scale(families, verbose=False)
    recorded = fitted_parameters()["families"]["h100"]
    assert scale == pytest.approx(recorded["fp8_gemm_scale"], abs=2e-4)
    assert 0.5 < scale < 1.0  # FP8 kernels reach a smaller share of their (doubled) peak than fp16 ones
    assert families["h100"]["fp8_fit"]["loss_after"] < families["h100"]["fp8_fit"]["loss_before"]


def test_error_on_compute_bound_rows():
    d = load_deepgemm_fp8()
    gpu = load_gpu("H100-SXM5-80GB")
    pred = predict_gemm_s(gpu, d["m"], d["n"], d["k"], dtype="fp8", out_dtype="bf16")
    big = np.array(d["m"]) >= FP8_FIT_MIN_M
    stats = error_stats(pred[big], np.array(d["time_s"])[big])
    assert stats["median_abs"] <= 0.10 and abs(stats["median_signed"]) <= 0.05, stats
    before = predict_gemm_s(replace(gpu, fp8_gemm_scale=1.0), d["m"], d["n"], d["k"], dtype="fp8", out_dtype="bf16")
    assert np.median(before[big] / np.array(d["time_s"])[big]) < 0.9  # the fp16 efficiency was optimistic


def test_compute_model_scales_fp8_gemms_only(tmp_path):
    gpu = load_gpu("H100-SXM5-80GB")
    scale = fitted_parameters()["families"]["h100"]["fp8_gemm_scale"]
    assert gpu.fp8_gemm_scale == scale and load_gpu("H200-SXM").fp8_gemm_scale == scale  # same family
    assert gpu.gemm_params("fp8").compute_efficiency == pytest.approx(gpu.gemm.compute_efficiency * scale)
    assert gpu.gemm_params("bf16") is gpu.gemm
    big = "[[8192, 8192], [8192, 8192], [], []]"
    fp8 = ops.classify("aten::_scaled_mm", big, FP8, "")
    bf16 = ops.classify("aten::mm", "[[8192, 8192], [8192, 8192]]", str(["Tensor(c10::BFloat16)"] * 2), "")
    model = GpuComputeModel(gpu="H100-SXM5-80GB")
    t_fp8, t_bf16 = model.op_seconds(fp8), model.op_seconds(bf16)
    # compute-bound: FP8 peak is 2x bf16, at `scale` of the efficiency -> about 2 * scale times faster; the BF16
    # GEMMs also run at the sustained cap (power_clock.sustained_gemm_factor at 700 W: BF16 0.91821, FP8 0.98815)
    cap = sustained_gemm_factor(gpu, "bf16", 700.0)
    cap_fp8 = sustained_gemm_factor(gpu, "fp8", 700.0)
    assert cap == pytest.approx(0.91821, abs=2e-4) and cap_fp8 == pytest.approx(0.98815, abs=2e-4)
    assert t_bf16 / t_fp8 == pytest.approx(2 * scale * cap_fp8 / cap, rel=0.03)
    # a GPU description can override it (here: back to the fp16 efficiency)
    yaml = tmp_path / "gpu.yaml"
    yaml.write_text("base: H100-SXM5-80GB\nname: H100-unscaled\nefficiency:\n  fp8_gemm_scale: 1.0\n")
    plain = GpuComputeModel(gpu=str(yaml))
    assert plain.gpu.fp8_gemm_scale == 1.0
    assert plain.op_seconds(fp8) < t_fp8 and plain.op_seconds(bf16) == t_bf16
    assert load_gpu_file(yaml).describe()["fp8_gemm_scale"] == 1.0
