"""The published per-shape GEMM check table (data/published_gemm_shapes.csv) and its printer (fit/check_gemm_shapes.py):
check data, read by no fit."""

from pathlib import Path

import pytest

from astra_gpu_model.calibration import load_published_gemm_shapes, load_published_peak_gemm
from astra_gpu_model.gpu import load_gpu
from astra_sim_testing import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "fit" / "check_gemm_shapes.py"


def _script():
    return load_script(SCRIPT)


def test_rows_parse_and_time_rows_are_converted_by_hand():
    rows = load_published_gemm_shapes()
    assert len(rows) == 19
    assert {r["gpu"] for r in rows} == {"H100-SXM5-80GB", "B200"}
    wqkv = next(r for r in rows if r["source"].startswith("float8_experimental#38 attn.wqkv (16384"))
    # 2 x 16384 x 1280 x 8192 = 343,597,383,680 FLOP in 6.04E-04 s = 568.87 TFLOP/s
    assert (wqkv["m"], wqkv["n"], wqkv["k"]) == (16384, 1280, 8192)
    assert wqkv["tflops"] == pytest.approx(568.9, abs=0.05)


def test_check_rows_are_not_fit_rows():
    fit = {(p["gpu"], p["dtype"], p["m"], p["n"], p["k"]) for p in load_published_peak_gemm()}
    assert not fit & {(r["gpu"], r["dtype"], r["m"], r["n"], r["k"]) for r in load_published_gemm_shapes()}


def test_sustained_column_scales_burst_fits_and_caps_per_layer_fits():
    check = _script()
    rows = load_published_gemm_shapes()
    h100 = next(r for r in rows if r["gpu"] == "H100-SXM5-80GB" and r["dtype"] == "bf16")
    burst, sustained = check.model_tflops(load_gpu("H100-SXM5-80GB"), h100)
    # the Hopper BF16 fit is capped at H200's sustained rates (power_clock.sustained_gemm_factor): the median over the
    # measured shapes of sustained at 700 W / the model there, 0.91821 on the H100 SXM5 (test_power_clock: arithmetic)
    assert sustained / burst == pytest.approx(0.91821, abs=2e-4)
    h100_fp8 = next(r for r in rows if r["gpu"] == "H100-SXM5-80GB" and r["dtype"] == "fp8")
    burst, sustained = check.model_tflops(load_gpu("H100-SXM5-80GB"), h100_fp8)
    assert sustained / burst == pytest.approx(0.98815, abs=2e-4)  # FP8: the median of its four shapes
    b200 = next(r for r in rows if r["gpu"] == "B200" and r["dtype"] == "bf16")
    burst, sustained = check.model_tflops(load_gpu("B200"), b200)
    # B200 bf16 at its 1000 W TDP: MSMF x the full board's 1426.4 / 1455.7 = 1426.987 TFLOP/s at 1291.4 MHz on the
    # rate-clock curve, the clock x ((1000 - 140) / (994 - 140)) ** (1 / 1.32) = 1.00532 -> 1431.28 / 1770.9 =
    # 0.80822 (test_power_clock: arithmetic)
    assert sustained / burst == pytest.approx(0.8082, abs=2e-4)
