"""``--cudnn-version`` on the H100 SXM5 / H200: cuDNN attention at 9.1.1 (the FlashAttention-3 paper's bars,
arXiv:2407.08608 App. C.1) or 9.19.0 (this project's H200: 2k-8k from calibration/nvidia-h200-2026-11-26, 16k+ the long
rows); the default (no option) unchanged; a release older than both refused in one line."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest

from astra_gpu_model import cudnn_versions
from astra_gpu_model.attention import hopper_cudnn_factor, kernel_efficiency, measured_utilisation
from astra_gpu_model.model import GpuComputeModel
from astra_sim.errors import ConfigError
from astra_sim_testing import flash_attention_node

CALIBRATION = Path(__file__).resolve().parents[1] / "calibration" / "nvidia-h200-2026-11-26" / "attention.csv"
PAPER_UTIL = 2048 / 2112  # the paper's 2,048 blocks in 16 waves of 132 SMs


def _model(version=None, gpu="H100", warnings=None):
    options = {"gpu": gpu} if version is None else {"gpu": gpu, "cudnn_version": version}
    return GpuComputeModel(SimpleNamespace(options=options, warn=(warnings if warnings is not None else []).append))


def test_the_shipped_table_is_the_rule_applied_to_the_measurement():
    text = (resources.files("astra_gpu_model") / "data" / cudnn_versions.HOPPER_919).read_text(encoding="utf-8")
    shipped = [line for line in text.splitlines() if not line.startswith("#")][1:]
    rows = cudnn_versions.short_table(CALIBRATION.read_text(encoding="utf-8"))
    assert shipped == [",".join(str(x) for x in r) for r in rows]
    # by hand: causal forward at 2k, the one shape of >= 2,048 blocks (b 2 x 64 heads x 16): 543.039 / (2048 / 2112)
    assert rows[5][:5] == ("fwd", "causal", 128, 2048, round(543.039 / PAPER_UTIL, 1))


def test_a_node_at_two_releases_by_hand():
    """cuDNN causal forward, b 2 x 32 heads of 128, 8k keys (4,096 blocks: 32 waves of 132, 0.970): 9.19.0 at the
    measured 657.9 TFLOP/s in full waves; 9.1.1 at the paper's 529 (over its own 0.970): both x the node's waves."""
    node = flash_attention_node(2, 32, 8192, 128, True, "cudnn", False)
    flops = 2.0 * 2 * 32 * (8192 * 8192 - 8192 * 8191 / 2) * 256
    ctas = 2 * 32 * 64
    util = ctas / (-(-ctas // 132) * 132)
    for gpu in ("H100", "H200"):
        new, old = _model("9.19.0", gpu), _model("9.1.1", gpu)
        launch = new.gpu.gemm.launch_us * 1e-6
        assert new.compute_time_ns(node, 0) == math.ceil((launch + flops / (657.9e12 * util)) * 1e9)
        assert old.compute_time_ns(node, 0) == math.ceil((launch + flops / (529e12 / PAPER_UTIL * util)) * 1e9)
        assert old.compute_time_ns(node, 0) > new.compute_time_ns(node, 0)
    # the release picked is the newest at or below: 9.13.1 is 9.1.1's state, 9.20 is 9.19.0's
    assert _model("9.13.1").compute_time_ns(node, 0) == _model("9.1.1").compute_time_ns(node, 0)
    assert _model("9.20.0").compute_time_ns(node, 0) == _model("9.19.0").compute_time_ns(node, 0)


def test_the_default_is_unchanged_and_fa2_ignores_the_option():
    """No option: the paper's bars up to 8k keys (= 9.1.1 there), the 9.19 long rows from 16k (= 9.19.0 there)."""
    default, paper, new = _model(), _model("9.1.1"), _model("9.19.0")
    for backward in (False, True):
        short = flash_attention_node(1, 32, 4096, 128, True, "cudnn", backward)
        long = flash_attention_node(1, 32, 32768, 128, True, "cudnn", backward)
        assert default.compute_time_ns(short, 0) == paper.compute_time_ns(short, 0) != new.compute_time_ns(short, 0)
        assert default.compute_time_ns(long, 0) == new.compute_time_ns(long, 0) != paper.compute_time_ns(long, 0)
        fa2 = flash_attention_node(1, 32, 4096, 128, True, "fa2", backward)
        assert default.compute_time_ns(fa2, 0) == paper.compute_time_ns(fa2, 0) == new.compute_time_ns(fa2, 0)
    assert kernel_efficiency("cudnn", False, True, 4096) == kernel_efficiency("cudnn", False, True, 4096, 128, None)


def test_the_factor_by_hand_and_the_unmeasured_mask():
    """9.19.0 over the paper at 4k, causal forward: 617.4 x 0.970 / 518. Without the mask nothing was measured below
    16k (ASSUMPTION: 16k's factor, 699.0 x 0.970 / 595); head dim 96 halfway between 64's and 128's factors."""
    table = cudnn_versions.HOPPER_919
    assert hopper_cudnn_factor(table, False, True, 4096) == pytest.approx(617.4 * measured_utilisation() / 518)
    assert hopper_cudnn_factor(table, False, False, 2048) == pytest.approx(699.0 * measured_utilisation() / 595)
    assert hopper_cudnn_factor(cudnn_versions.HOPPER_PAPER, True, True, 65536) == 1.0
    f64, f128 = (hopper_cudnn_factor(table, False, True, 8192, d) for d in (64, 128))
    assert hopper_cudnn_factor(table, False, True, 8192, 96) == pytest.approx((f64 + f128) / 2)


def test_says_which_release_and_refuses_an_older_one():
    said = []
    _model("9.13.1", "H200", said)
    assert len(said) == 1 and "H200-SXM attention timed at the rows measured with cuDNN 9.1.1" in said[0]
    said = []
    _model("9.19.0", "H100", said)
    assert said == []
    with pytest.raises(ConfigError) as exc:
        _model("8.9.7", "H100")
    text = str(exc.value)
    assert "\n" not in text and "--cudnn-version 8.9.7" in text and "H100-SXM5-80GB 9.1.1, 9.19.0" in text
    assert cudnn_versions.hopper_table("H800-SXM5-80GB", "9.19.0") is None  # other Hopper parts: no release


def test_fp8_attention_does_not_follow_the_release():
    """FP8 stays at NVIDIA's H200 rows (cuDNN 9.19.1) at every release: the paper (9.1.1) has no FP8 backward."""
    from astra_gpu_model.attention import fp8_efficiency

    gpu = _model(gpu="H200").gpu
    for causal in (False, True):
        for backward in (False, True):
            default = fp8_efficiency(gpu, "cudnn", causal, 8192, 128, backward)
            for release in ("9.1.1", "9.13.1", "9.19.0"):
                assert fp8_efficiency(gpu, "cudnn", causal, 8192, 128, backward, release) == default
