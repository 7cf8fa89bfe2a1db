"""The GPU variants (A100 40GB, H100 PCIe, H100 NVL, H20) and their platforms: datasheet numbers, PCIe topology."""

import json

import pytest
import yaml

from astra_sim.chakra import make_metadata, make_node, write_et
from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError

from astra_gpu_model.gpu import load_gpu
from astra_gpu_model.nccl import ALL_REDUCE, collective_time_us, config_for_gpu
from astra_gpu_model.platforms import get_platform

#: The vendors' tables as published (sparse figures where NVIDIA prints them with an asterisk: the preset keeps
#: half), typed here from the documents named in each preset's `sources:`, not from the presets.
DATASHEETS = {
    # NVIDIA A100 datasheet, A100 40GB SXM column
    "A100-SXM4-40GB": dict(sm=108, clock=1410, sparse={"tf32": 312, "bf16": 624, "fp16": 624, "int8": 1248},
                           dense={"fp32": 19.5, "fp64": 19.5}, hbm_gbps=1555, hbm_gb=40, tdp=400, scaleup=300,
                           topology="nvswitch"),
    # NVIDIA H100 datasheet, H100 PCIe column; product brief PB-11133-001
    "H100-PCIe-80GB": dict(sm=114, clock=1755, sparse={"tf32": 756, "bf16": 1513, "fp16": 1513, "fp8": 3026,
                                                        "int8": 3026},
                           dense={"fp32": 51, "fp64": 51}, hbm_gbps=2000, hbm_gb=80, tdp=350, scaleup=300,
                           topology="pairwise"),
    # NVIDIA H100 datasheet, H100 NVL column (per GPU)
    "H100-NVL-94GB": dict(sm=132, clock=None, sparse={"tf32": 835, "bf16": 1671, "fp16": 1671, "fp8": 3341,
                                                       "int8": 3341},
                          dense={"fp32": 60, "fp64": 60}, hbm_gbps=3900, hbm_gb=94, tdp=400, scaleup=300,
                          topology="pairwise"),
    # press reports of NVIDIA's H20 specification (dense figures)
    # pytorch/torchtitan docs/performance.md (memory, bandwidth, the 700 W TDP; an SXM H100: the SXM5's peaks and
    # clock, its 500 W default limit applied by the energy plugin's clock-power model)
    "H100-SXM-96GB-HBM2e": dict(sm=132, clock=1980, sparse={"tf32": 989.4, "bf16": 1978.8, "fp16": 1978.8,
                                                             "fp8": 3957.8, "int8": 3957.8},
                                dense={"fp32": 60, "fp64": 60}, hbm_gbps=2400, hbm_gb=96, tdp=700, scaleup=450,
                                topology="nvswitch"),
    # NVIDIA's H800 specification as reported: the H100 SXM's rates (sparse 989 / 1,979 / 3,958), NVLink 400 GB/s
    "H800-SXM5-80GB": dict(sm=132, clock=1980, sparse={"tf32": 989.4, "bf16": 1978.8, "fp16": 1978.8, "fp8": 3957.8,
                                                        "int8": 3957.8},
                           dense={"fp32": 67, "fp64": 1}, hbm_gbps=3350, hbm_gb=80, tdp=700, scaleup=200,
                           topology="nvswitch"),
    "H20": dict(sm=78, clock=None, sparse={"tf32": 148, "bf16": 296, "fp16": 296, "fp8": 592, "int8": 592},
                dense={"fp32": 44, "fp64": 1}, hbm_gbps=4000, hbm_gb=96, tdp=400, scaleup=450, topology="nvswitch"),
}
PLATFORMS = {"dgx-a100-40gb": "A100-SXM4-40GB", "h100-pcie": "H100-PCIe-80GB", "h100-nvl": "H100-NVL-94GB",
             "hgx-h20": "H20", "grand-teton-h100": "H100-SXM-96GB-HBM2e", "hgx-h800": "H800-SXM5-80GB"}


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_a_variant_has_its_datasheet_numbers(name):
    sheet, gpu = DATASHEETS[name], load_gpu(name)
    assert (gpu.sm_count, gpu.boost_clock_mhz, gpu.hbm_bandwidth_gbps, gpu.hbm_capacity_gb, gpu.tdp_w) == (
        sheet["sm"], sheet["clock"], sheet["hbm_gbps"], sheet["hbm_gb"], sheet["tdp"])
    for dtype, sparse in sheet["sparse"].items():
        assert gpu.tensor_tflops[dtype] == pytest.approx(sparse / 2, abs=0.5), dtype
    for dtype, dense in sheet["dense"].items():
        assert gpu.tensor_tflops[dtype] == dense, dtype
    assert gpu.scaleup_bandwidth_gbps == sheet["scaleup"] and gpu.scaleup_topology == sheet["topology"]
    assert all(len(v) > 10 for v in gpu.raw["sources"].values())


@pytest.mark.parametrize("platform, gpu", sorted(PLATFORMS.items()))
def test_a_variant_platform_resolves_to_its_gpu(platform, gpu):
    p = get_platform(platform)
    numbers = p.numbers(2)
    assert p.gpu == gpu and numbers["gpu"] == gpu and numbers["total_gpus"] == 16
    assert numbers["hbm_capacity_gb"] == DATASHEETS[gpu]["hbm_gb"] and numbers["tdp_w"] == DATASHEETS[gpu]["tdp"]
    assert p.device_memory_bytes() == DATASHEETS[gpu]["hbm_gb"] * 2**30  # a datasheet's GB of HBM are GiB
    assert p.peak_tflops("bf16") == load_gpu(gpu).tensor_tflops["bf16"]
    if DATASHEETS[gpu]["topology"] == "pairwise":  # the node's network dimension is the PCIe switch
        assert numbers["scaleup_gb_per_s_per_direction"] == 64 and numbers["nvlink_bridge_gb_per_s_per_direction"] == 300
        assert "No NVSwitch" in numbers["scaleup_note"]


def test_a_pcie_card_is_nccls_pairwise_machine_without_nvls():
    pcie, sxm = config_for_gpu("H100-PCIe-80GB"), config_for_gpu("H100-SXM5-80GB")
    assert (pcie.topology, pcie.nvls, pcie.pair_nvlink_gbps) == ("pairwise", False, 300.0)
    assert (sxm.topology, sxm.nvls) == ("nvswitch", True)
    assert pcie.link(2) == "bridge" and pcie.link(8) == "pcie"
    size = 256 << 20
    pair = collective_time_us(ALL_REDUCE, size, 2, pcie)
    eight = collective_time_us(ALL_REDUCE, size, 8, pcie)
    assert eight[1] != "nvls" and collective_time_us(ALL_REDUCE, size, 8, sxm)[1] == "nvls"
    # across PCIe 8 cards move each byte far slower than NVSwitch; the bridged pair is in between
    assert eight[0] > 3 * collective_time_us(ALL_REDUCE, size, 8, sxm)[0]
    assert pair[0] < eight[0]


def _trace(tmp_path, ranks, size=4 << 20):
    nodes = [make_node(1, "ar", T.COMM_COLL_NODE,
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": size})]
    for rank in range(ranks):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return str(tmp_path / "t")


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_astra_run_on_a_variant_platform_times_the_all_reduce_with_its_gpu(tmp_path, platform):
    report_path = tmp_path / "r.json"
    # the collective alone: no host launch gap before it (as nccl-tests time them)
    assert main(["run", "--workload-configuration", _trace(tmp_path, 8), "--platform", platform, "-q",
                 "--host-launch-us", "0", "--host-sync-us", "0", "--report-json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    gpu = PLATFORMS[platform]
    expected_us = collective_time_us(ALL_REDUCE, 4 << 20, 8, config_for_gpu(gpu))[0]
    assert report["summary"]["max_finish_ns"] == pytest.approx(expected_us * 1e3, rel=1e-3, abs=5)
    assert gpu in json.dumps(report["settings"]["platform_defaults"])


def test_a100_40gb_and_80gb_differ_only_in_memory():
    small, large = load_gpu("A100-SXM4-40GB"), load_gpu("A100-SXM4-80GB")
    assert small.tensor_tflops == large.tensor_tflops and small.gemm == large.gemm
    assert (small.hbm_bandwidth_gbps, small.hbm_capacity_gb) == (1555, 40)


@pytest.mark.parametrize("scaleup, message", [
    ({"topology": "ring"}, "'scaleup.topology' must be one of nvswitch, pairwise"),
    ({"topology": "pairwise"}, "needs 'scaleup.pcie_gbps'"),
    ({"pcie_gbps": -1}, "'scaleup.pcie_gbps' must be a positive number"),
])
def test_a_bad_scaleup_topology_is_named(tmp_path, scaleup, message):
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump({"base": "H100-PCIe-80GB", "name": "x", "scaleup": {"topology": "nvswitch",
                                                                                        **scaleup}}))
    if scaleup.get("topology") == "pairwise":  # drop the base's pcie_gbps to see the check
        path.write_text(yaml.safe_dump({"name": "x", "sm_count": 114, "tensor_tflops": {"bf16": 756, "fp32": 51},
                                        "hbm_bandwidth_gbps": 2000, "calibration": "h100", "scaleup": scaleup}))
    with pytest.raises(ConfigError, match=message):
        load_gpu(str(path))
