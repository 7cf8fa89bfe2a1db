"""Recomputes the README's error tables from the measured GEMMs in shared/calibration.

* fitting set (Vidur, A100 and H100 fp16 linear layers): median |error| <= 10 % per device;
* hold-out (LLMCompass A100 fp16 sweep, never fitted): a looser bound, justified by the two data sets
  disagreeing with each other by ~20 % on the very same GEMM shapes (see the README).
"""

from __future__ import annotations

import numpy as np
import pytest

from astra_gpu_model.calibration import (
    DEVICE_PRESETS, LLMCOMPASS_GEMM, VIDUR_GEMM, error_stats, load_llmcompass_gemm, load_vidur_gemm,
    predict_gemm_s,
)
from astra_gpu_model.gpu import fitted_parameters, load_gpu


@pytest.fixture(scope="module")
def calibration_dir(shared_dir):
    path = shared_dir / "calibration"
    if not (path / VIDUR_GEMM).exists():
        pytest.skip("shared/calibration GEMM data not found")
    return path


@pytest.fixture(scope="module")
def vidur(calibration_dir):
    return load_vidur_gemm(calibration_dir / VIDUR_GEMM)


@pytest.fixture(scope="module")
def llmcompass(calibration_dir):
    return load_llmcompass_gemm(calibration_dir / LLMCOMPASS_GEMM)


@pytest.mark.parametrize("device", ["a100", "h100"])
def test_fitting_set_median_error_at_most_10_percent(vidur, device):
    d = vidur[device]
    gpu = load_gpu(DEVICE_PRESETS[device])
    stats = error_stats(predict_gemm_s(gpu, d["m"], d["n"], d["k"]), d["time_s"])
    assert stats["n"] == {"a100": 36516, "h100": 21924}[device]
    assert stats["median_abs"] <= 0.10, stats
    assert abs(stats["median_signed"]) <= 0.02, stats  # unbiased
    # the checked-in fit file was produced from this data by fit/fit_gemm.py: same numbers
    recorded = fitted_parameters()["families"][device]["error_on_fitting_data"]
    assert recorded["median_abs"] == pytest.approx(stats["median_abs"], abs=1e-5)
    assert recorded["n"] == stats["n"]


def test_holdout_llmcompass_a100_sweep(llmcompass):
    gpu = load_gpu("A100-SXM4-80GB")
    pred = predict_gemm_s(gpu, llmcompass["m"], llmcompass["n"], llmcompass["k"])
    meas = np.array(llmcompass["time_s"])
    rel = (pred - meas) / meas
    big = meas >= 100e-6
    assert big.sum() == 15
    # GEMMs of >= 100 us: the model (fitted on Vidur's slower A100) over-predicts by the data sets'
    # disagreement (~20 %); bound: median <= 20 %, every point <= 25 %
    stats = error_stats(pred[big], meas[big])
    assert stats["median_abs"] <= 0.20, stats
    assert stats["max_abs"] <= 0.25, stats
    # GEMMs under 50 us: LLMCompass times include a ~30 us host/launch floor (a 8192x64x64 GEMM moves
    # 2 MB, about 1 us of HBM time, yet measures 29.6 us); the model times the kernel only, so it is below
    tiny = meas < 50e-6
    assert tiny.sum() == 4 and np.all(rel[tiny] < 0)
    # all 20 rows: reported in the README, loosely bounded
    assert error_stats(pred, meas)["median_abs"] <= 0.25


def test_the_two_a100_data_sets_disagree_by_about_20_percent(vidur, llmcompass):
    """The justification of the hold-out bound: same shapes, ~20 % apart, so no model fits both better."""
    v = vidur["a100"]
    times = {}
    for m, n, k, t in zip(v["m"], v["n"], v["k"], v["time_s"]):
        times.setdefault((m, n, k), []).append(t)
    ratios = [np.median(times[(m, n, k)]) / t
              for m, n, k, t in zip(llmcompass["m"], llmcompass["n"], llmcompass["k"], llmcompass["time_s"])
              if (m, n, k) in times]
    assert len(ratios) == 2
    assert all(1.15 < r < 1.3 for r in ratios), ratios
