"""``--cudnn-version``: cuDNN attention on Blackwell from NVIDIA's rows measured at that cuDNN release (the B200 at
9.10.2, NVIDIA/cudnn-frontend artifacts at 9793df56), or the newest measured below it; the default path untouched;
a release older than every measurement refused in one line naming the option and the releases measured."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from astra_gpu_model import cudnn_versions
from astra_gpu_model.attention import BLACKWELL_ATTENTION, blackwell_efficiency, published_attention
from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.model import GpuComputeModel
from astra_sim.errors import ConfigError
from astra_sim_testing import flash_attention_node

OLD = "published_attention_blackwell_cudnn_9.10.2.csv"


def _model(version=None, gpu="B200", warnings=None):
    options = {"gpu": gpu} if version is None else {"gpu": gpu, "cudnn_version": version}
    return GpuComputeModel(SimpleNamespace(options=options, warn=(warnings if warnings is not None else []).append))


def test_the_9_10_2_rows_are_the_published_artifact():
    """sdpa_fp8_benchmark_results_NVIDIA_B200.csv at 9793df56 (cuDNN 91002): 8k causal, bf16 1,248.265 / 987.670,
    fp8 1,370.101 / 1,214.331 TFLOP/s; 512 bf16 forward 133.318."""
    rows = published_attention(OLD)["B200"]
    lengths, fwd = rows[("bf16", True, "fwd")]
    assert lengths == (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
    assert (fwd[0], fwd[4]) == (133.318, 1248.265)
    assert rows[("bf16", True, "bwd")][1][4] == 987.670
    assert rows[("fp8", True, "fwd")][1][4] == 1370.101
    assert rows[("fp8", True, "bwd")][1][4] == 1214.331


def test_release_chosen_at_or_below():
    assert cudnn_versions.attention_file("B200", "9.10.2") == (OLD, "9.10.2")
    assert cudnn_versions.attention_file("B200", "9.12") == (OLD, "9.10.2")  # newest measured below
    for newer in ("9.13.1", "9.13.1.26", "91301", "9.17"):
        assert cudnn_versions.attention_file("B200", newer) == (BLACKWELL_ATTENTION, "9.13.1")
    assert cudnn_versions.attention_file("H800-SXM5-80GB", "9.10.2") is None  # not timed by release


def test_efficiency_at_9_10_2_by_hand():
    """1,248.265 TFLOP/s over the B200's 2,250 BF16 peak over the benchmark's wave utilisation (128 heads x 64
    blocks of 128 queries = 8192 on 148 SMs: 56 waves, 98.8 %)."""
    b200 = load_gpu("B200")
    ctas = 128 * 8192 // 128
    bench = ctas / (-(-ctas // 148) * 148)
    assert blackwell_efficiency(b200, None, "bf16", False, 8192, True, "9.10.2") == pytest.approx(
        1248.265 / 2250 / bench)
    assert blackwell_efficiency(b200, None, "bf16", False, 8192, True, "9.13.1") == \
        blackwell_efficiency(b200, None, "bf16", False, 8192)


def test_node_times_default_unchanged_and_older_release_slower():
    """The default (no option) and the default rows' own release give the same ns; at 9.10.2 the forward by hand."""
    default, same, old = _model(), _model("9.13.1"), _model("9.10.2")
    for backward in (False, True):
        node = flash_attention_node(2, 32, 8192, 128, True, None, backward)
        assert default.compute_time_ns(node, 0) == same.compute_time_ns(node, 0)
        assert old.compute_time_ns(node, 0) > default.compute_time_ns(node, 0)
    gpu = old.gpu
    ctas = 2 * 32 * 64
    utilisation = ctas / (-(-ctas // gpu.sm_count) * gpu.sm_count)
    bench = (128 * 64) / (-(-(128 * 64) // 148) * 148)
    flops = 2.0 * 2 * 32 * (8192 * 8192 - 8192 * 8191 / 2) * 256
    expected = math.ceil((gpu.gemm.launch_us * 1e-6 + flops / (1248.265e12 / bench * utilisation)) * 1e9)
    assert old.compute_time_ns(flash_attention_node(2, 32, 8192, 128, True, None, False), 0) == expected


def test_says_which_release_and_where_it_does_nothing():
    said = []
    _model("9.12.0", warnings=said)
    assert len(said) == 1 and "cuDNN 9.10.2" in said[0] and "9.12.0" in said[0]
    said = []
    _model("9.10.2", warnings=said)
    assert said == []
    _model("9.13.1", gpu="H800", warnings=said)  # Hopper, but not H100 SXM5 / H200: no release measured
    assert len(said) == 1 and "no effect" in said[0]


@pytest.mark.parametrize("bad", ["9.7.1", "9.7", "8.9.7"])
def test_older_than_every_measurement_is_refused(bad):
    with pytest.raises(ConfigError) as exc:
        _model(bad)
    text = str(exc.value)
    assert "\n" not in text and f"--cudnn-version {bad}" in text and "B200 9.10.2, 9.13.1" in text


def test_not_a_release_is_refused_where_it_is_parsed(capsys, tmp_path):
    from astra_sim.cli import main

    with pytest.raises(ConfigError, match="--cudnn-version 'nine'.*B200 9.10.2, 9.13.1"):
        cudnn_versions.parse("nine")
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--workload-configuration", str(tmp_path / "w"), "--platform", "hgx-b200",
              "--cudnn-version", "nine"])
    assert exit_.value.code == 2
    assert "--cudnn-version" in capsys.readouterr().err
