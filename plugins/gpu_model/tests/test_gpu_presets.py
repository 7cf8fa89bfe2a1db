"""GPU descriptions: every preset loads with its sources; user YAML files load, or fail naming file and key."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError

from astra_gpu_model.gpu import DEFAULT_GPU, PRESET_ALIASES, fitted_parameters, load_gpu, preset_names

PRESETS = ["A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM", "B200", "MI300X",
           "A100-SXM4-40GB", "H100-PCIe-80GB", "H100-NVL-94GB", "H20", "H100-SXM-96GB-HBM2e", "H800-SXM5-80GB",
           "B300", "MI325X", "MI355X", "L40S", "GB200"]
#: Keys whose value must have a source note in the preset file (when the preset gives the value).
HARDWARE_KEYS = ["sm_count", "boost_clock_mhz", "tensor_tflops", "hbm_bandwidth_gbps", "hbm_capacity_gb",
                 "l2_cache_mb", "scaleup", "copy_engines", "calibration", "tdp_w"]
#: Every preset states these.
REQUIRED_KEYS = ["sm_count", "tensor_tflops", "hbm_bandwidth_gbps", "hbm_capacity_gb", "l2_cache_mb", "scaleup",
                 "calibration"]


def test_every_preset_is_shipped_and_loads():
    assert sorted(PRESETS) == preset_names()
    for name in PRESETS:
        gpu = load_gpu(name)
        assert gpu.name == name
        assert gpu.sm_count > 0 and gpu.hbm_bandwidth_gbps > 0 and gpu.hbm_capacity_gb > 0
        assert gpu.tensor_tflops["bf16"] > gpu.tensor_tflops["fp32"] > 0
        assert gpu.l2_cache_mb > 0 and gpu.scaleup["ports"] > 0 and gpu.scaleup["bandwidth_per_port_gbps"] > 0
        assert 0 < gpu.gemm.compute_efficiency < 1 and 0 < gpu.gemm.hbm_efficiency < 1
        assert 0 < gpu.attention_efficiency < 1
        sources = gpu.raw["sources"]
        assert all(key in gpu.raw for key in REQUIRED_KEYS), name
        for key in HARDWARE_KEYS:
            if gpu.raw.get(key) is not None:
                assert isinstance(sources.get(key), str) and len(sources[key]) > 10, (name, key)
        assert "efficiency.attention_efficiency" in sources


def test_preset_datasheet_values():
    a100, h100, h200, b200, mi300x = (load_gpu(n) for n in PRESETS[:5])
    assert (a100.sm_count, a100.tensor_tflops["bf16"], a100.hbm_bandwidth_gbps, a100.copy_engines) == (108, 312, 2039, 3)
    assert "fp8" not in a100.tensor_tflops and a100.rate_dtype("fp8") == "fp16"
    assert (h100.sm_count, h100.tensor_tflops["fp8"], h100.hbm_bandwidth_gbps, h100.l2_cache_mb) == (132, 1978.9, 3350, 50)
    assert h100.scaleup_bandwidth_gbps == 450  # 18 NVLink 4 ports x 25 GB/s per direction
    assert (h200.hbm_bandwidth_gbps, h200.hbm_capacity_gb) == (4800, 141)
    # power limits as the datasheets state them (A100 80GB SXM 400 W, H100/H200 SXM 700 W, HGX B200 1000 W,
    # MI300X OAM 750 W)
    assert [g.tdp_w for g in (a100, h100, h200, b200, mi300x)] == [400, 700, 700, 1000, 750]
    assert h200.tensor_tflops == h100.tensor_tflops
    assert (b200.sm_count, b200.tensor_tflops["bf16"], b200.hbm_bandwidth_gbps, b200.scaleup_bandwidth_gbps) == (
        148, 2250, 8000, 900)
    assert (mi300x.sm_count, mi300x.tensor_tflops["bf16"], mi300x.hbm_capacity_gb, mi300x.vendor) == (
        304, 1307.4, 192, "amd")
    assert a100.calibration == "a100" and h100.calibration == h200.calibration == "h100"


def test_default_and_aliases():
    assert load_gpu().name == DEFAULT_GPU == "H100-SXM5-80GB"
    assert load_gpu("").name == DEFAULT_GPU
    for alias, name in PRESET_ALIASES.items():
        assert load_gpu(alias).name == name
    assert load_gpu("h100-sxm5-80gb").name == "H100-SXM5-80GB"


def test_presets_use_the_checked_in_fit():
    fit = fitted_parameters()["families"]
    assert load_gpu("A100-SXM4-80GB").gemm.to_dict() == fit["a100"]["params"]
    assert load_gpu("H100-SXM5-80GB").gemm.to_dict() == fit["h100"]["params"]


def test_custom_gpu_full_description(tmp_path):
    path = tmp_path / "future.yaml"
    path.write_text(
        "name: Future-GPU\n"
        "sm_count: 200\n"
        "tensor_tflops: {fp32: 100, bf16: 4000, fp8: 8000}\n"
        "hbm_bandwidth_gbps: 12000\n"
        "hbm_capacity_gb: 288\n"
        "scaleup: {technology: NVLink 6, ports: 18, bandwidth_per_port_gbps: 100}\n"
        "calibration: h100\n"
        "efficiency: {compute_efficiency: 0.8, launch_us: 3}\n"
        "gemm_tiles: [[128, 256], [128, 128, 1], [64, 64, 4]]\n"
    )
    gpu = load_gpu(str(path))
    assert gpu.name == "Future-GPU" and gpu.path == str(path)
    assert gpu.peak_flops("fp16") == 4000e12  # fp16 falls back to bf16
    assert gpu.gemm.compute_efficiency == 0.8 and gpu.gemm.launch_us == 3
    assert gpu.gemm.hbm_efficiency == fitted_parameters()["families"]["h100"]["params"]["hbm_efficiency"]
    assert gpu.gemm_tiles == ((128, 256, 1), (128, 128, 1), (64, 64, 4))
    assert gpu.scaleup_bandwidth_gbps == 1800


def test_custom_gpu_based_on_a_preset(tmp_path):
    path = tmp_path / "h100_more_hbm.yml"
    path.write_text("base: H100-SXM5-80GB\nname: H100-fast-HBM\nhbm_bandwidth_gbps: 6000\n"
                    "tensor_tflops: {bf16: 1200}\n")
    gpu = load_gpu(str(path))
    assert (gpu.name, gpu.hbm_bandwidth_gbps, gpu.sm_count) == ("H100-fast-HBM", 6000, 132)
    assert gpu.tensor_tflops["bf16"] == 1200 and gpu.tensor_tflops["fp8"] == 1978.9


@pytest.mark.parametrize("text, message", [
    ("sm_count: 10\n", "missing required key 'name'"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\n",
     "missing required key 'calibration'"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth: 5\ncalibration: h100\n",
     r"unknown key 'hbm_bandwidth' \(did you mean 'hbm_bandwidth_gbps'\?\)"),
    ("name: x\nsm_count: -3\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n",
     "key 'sm_count' must be a positive integer, got -3"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: fast}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n",
     "key 'tensor_tflops.bf16' must be a positive number"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bfloat16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n",
     "unknown key 'tensor_tflops.bfloat16'"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n",
     "needs at least 'bf16' or 'fp16'"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: v100\n",
     "key 'calibration' must be one of the fitted GPU families \\(a100, h100\\), got 'v100'"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n"
     "efficiency: {hbm_efficiency: 1.5}\n", "key 'efficiency.hbm_efficiency' must be a positive number <= 1.0"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n"
     "efficiency: {speed: 1}\n", "unknown key 'efficiency.speed'"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n"
     "scaleup: {ports: 2.5}\n", "key 'scaleup.ports' must be a positive integer"),
    ("name: x\nsm_count: 10\ntensor_tflops: {fp32: 1, bf16: 2}\nhbm_bandwidth_gbps: 5\ncalibration: h100\n"
     "gemm_tiles: [[128]]\n", r"key 'gemm_tiles\[0\]' must be \[tile_m, tile_n\]"),
    ("name: x\ntensor_tflops: [1, 2]\nsm_count: 1\nhbm_bandwidth_gbps: 5\ncalibration: h100\n",
     "key 'tensor_tflops' must be a mapping"),
    ("base: V100\nname: x\n", "key 'base' must name a preset"),
    ("- just\n- a list\n", "must be a YAML mapping"),
    ("name: [unclosed\n", r"not valid YAML \(line"),
])
def test_custom_gpu_errors_name_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_gpu(str(path))
    assert str(path) in str(info.value)


def test_unknown_gpu_name_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"(?i)neither a preset \(did you mean .*h100.*\) nor an existing YAML"):
        load_gpu("H1000")
    with pytest.raises(ConfigError, match="no such file"):
        load_gpu(str(tmp_path / "missing.yaml"))
