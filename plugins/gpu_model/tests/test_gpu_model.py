"""The ``gpu`` compute model in whole runs: aten::mm COMP nodes, kernels under CPU ops, fallbacks, options."""

from __future__ import annotations

import json
import math

import pytest

from astra_sim.chakra import make_node, types as T
from astra_sim.cli import main as astra_main
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.simulation import simulate
from astra_sim_testing import write_case

from astra_gpu_model.model import GpuComputeModel
from astra_gpu_model.ops import classify
from astra_gpu_model.power_clock import sustained_gemm_factor

PLUGINS = ["network_analytical", "gpu_model"]
BF16_PAIR = "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"


def mm(node_id, m, k, n, deps=(), micros=7, types=BF16_PAIR):
    """An aten::mm GPU COMP node; shapes/types in attributes (the kernel does not expose IOInfo shapes yet)."""
    return make_node(node_id, "aten::mm", T.COMP_NODE, data_deps=list(deps), duration_micros=micros,
                     attrs={"is_cpu_op": False, "inputs_shapes": f"[[{m}, {k}], [{k}, {n}]]", "inputs_types": types})


def mm_ns(gpu, m, k, n):
    model = GpuComputeModel(None, gpu)
    op = classify("aten::mm", f"[[{m}, {k}], [{k}, {n}]]", BF16_PAIR, "")
    return max(1, math.ceil(model.op_seconds(op) * 1e9))


def test_whole_run_times_aten_mm_nodes_from_their_shapes(tmp_path):
    nodes = [mm(0, 4096, 8192, 4096), mm(1, 4096, 4096, 14336, deps=[0]), mm(2, 1, 8192, 8192, deps=[1])]
    prefix, system, network = write_case(tmp_path, nodes)
    expected = mm_ns("H100", 4096, 8192, 4096) + mm_ns("H100", 4096, 4096, 14336) + mm_ns("H100", 1, 8192, 8192)
    report = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu")
    assert [r.finish_ns for r in report.ranks] == [expected, expected]
    assert [r.compute_ns for r in report.ranks] == [expected, expected]
    assert 500_000 < expected < 2_000_000  # ~0.35 + ~0.65 ms + ~0.05 ms on an H100
    assert report.settings["compute_model"] == "gpu"
    assert report.settings["gpu_model"]["gpu"] == "H100-SXM5-80GB"
    assert report.stats["gpu_model_nodes"] == {"op_shapes": 6}

    # another GPU through the run option; replay for comparison
    a100 = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options={"gpu": "A100"})
    assert a100.max_finish_ns == (mm_ns("A100", 4096, 8192, 4096) + mm_ns("A100", 4096, 4096, 14336)
                                  + mm_ns("A100", 1, 8192, 8192))
    assert a100.max_finish_ns > 2 * report.max_finish_ns
    replay = simulate(prefix, system, network, plugins=PLUGINS, compute_model="replay")
    assert replay.max_finish_ns == 3 * 7000


def test_kernel_nodes_use_the_shapes_of_the_cpu_op_that_launched_them(tmp_path):
    """The PyTorch converter's layout: a CPU op (aten::addmm, shapes) and its GPU kernel (ctrl_deps)."""
    addmm = make_node(10, "aten::addmm", T.COMP_NODE, duration_micros=5, attrs={
        "is_cpu_op": True,
        "inputs_shapes": "[[4096], [2048, 8192], [8192, 4096], [], []]",
        "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)', 'Int', 'Int']",
    })
    kernel = make_node(11, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", T.COMP_NODE,
                       ctrl_deps=[10], duration_micros=999, attrs={"is_cpu_op": False})
    orphan = make_node(12, "void at::native::vectorized_elementwise_kernel<4>", T.COMP_NODE, data_deps=[11],
                       duration_micros=3, attrs={"is_cpu_op": False})
    counted = make_node(13, "fused_op", T.COMP_NODE, data_deps=[12],
                        attrs={"is_cpu_op": False, "num_ops": 10 ** 12, "tensor_size": 10 ** 6})
    prefix, system, network = write_case(tmp_path, [addmm, kernel, orphan, counted])
    report = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu", options={"gpu": "H100"})
    model = GpuComputeModel(None, "H100")
    gemm = model.op_seconds(classify("aten::addmm", "[[4096], [2048, 8192], [8192, 4096], [], []]", "", ""))
    params = model.gpu.gemm
    # the num_ops node at the BF16 peak, capped at the sustained rate (power_clock.sustained_gemm_factor, 0.91821)
    cap = sustained_gemm_factor(model.gpu, "bf16", 700.0)
    roofline = params.launch_us * 1e-6 + 1e12 / (params.compute_efficiency * 989.4e12 * cap)
    expected_gpu = math.ceil(gemm * 1e9) + 3000 + math.ceil(roofline * 1e9)
    assert [r.compute_ns for r in report.ranks] == [expected_gpu] * 2
    assert report.max_finish_ns == 5000 + expected_gpu  # the CPU op is replayed, then the GPU nodes run
    assert report.stats["gpu_model_nodes"] == {
        "launcher_op_shapes": 2, "replay_duration": 2, "num_ops_tensor_size": 2}


def test_a_cpu_op_that_launched_two_kernels_shares_its_time(tmp_path):
    shapes = "[[8, 1024, 4096], []]"
    gelu = make_node(1, "aten::gelu", T.COMP_NODE, duration_micros=2,
                     attrs={"is_cpu_op": True, "inputs_shapes": shapes, "inputs_types": "['Tensor(float)', 'String']"})
    k1 = make_node(2, "kernel_a", T.COMP_NODE, ctrl_deps=[1], attrs={"is_cpu_op": False})
    k2 = make_node(3, "kernel_b", T.COMP_NODE, ctrl_deps=[1], data_deps=[2], attrs={"is_cpu_op": False})
    prefix, system, network = write_case(tmp_path, [gelu, k1, k2])
    report = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu")
    model = GpuComputeModel(None)
    total = model.op_seconds(classify("aten::gelu", shapes, "['Tensor(float)', 'String']", ""))
    launch = model.gpu.gemm.launch_us * 1e-6
    share = math.ceil(((total - launch) / 2 + launch) * 1e9)
    assert report.ranks[0].compute_ns == 2 * share
    # total = the op's time plus one more launch
    assert 2 * share == pytest.approx((total + launch) * 1e9, abs=2)


def test_view_ops_take_no_time_and_bad_attributes_are_errors(tmp_path):
    view = make_node(1, "aten::view", T.COMP_NODE, duration_micros=50, attrs={"is_cpu_op": False})
    prefix, system, network = write_case(tmp_path, [view])
    assert simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu").max_finish_ns == 0
    bad = make_node(1, "k", T.COMP_NODE, attrs={"is_cpu_op": False, "num_ops": "many"})
    prefix, system, network = write_case(tmp_path, [bad])
    with pytest.raises(WorkloadError, match=r"node 1 \('k'\): attribute 'num_ops' must be a non-negative integer"):
        simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu")


def test_unusable_shapes_fall_back_with_a_warning(tmp_path):
    node = make_node(1, "aten::mm", T.COMP_NODE, duration_micros=4,
                     attrs={"is_cpu_op": False, "inputs_shapes": "[[4, 8], [9, 2]]"})
    prefix, system, network = write_case(tmp_path, [node])
    report = simulate(prefix, system, network, plugins=PLUGINS, compute_model="gpu")
    assert report.max_finish_ns == 4000
    assert any("inner dimensions differ" in w for w in report.warnings)


def test_fp32_gemms_use_tf32_only_when_asked_and_fp8_falls_back_on_a100():
    fp32 = classify("aten::mm", "[[8192, 8192], [8192, 8192]]", "['Tensor(float)', 'Tensor(float)']", "")
    plain = GpuComputeModel(None, "H100").op_seconds(fp32)
    tf32 = GpuComputeModel(None, "H100", tf32=True).op_seconds(fp32)
    assert tf32 < plain / 5
    warnings = []

    class Context:
        options = {"gpu": "A100"}
        warn = staticmethod(warnings.append)

    fp8 = classify("aten::_scaled_mm", "[[8192, 8192], [8192, 8192], [], []]",
                   "['Tensor(c10::Float8_e4m3fn)', 'Tensor(c10::Float8_e4m3fn)', 'Tensor(float)', 'Tensor(float)']", "")
    model = GpuComputeModel(Context())
    assert model.op_seconds(fp8) > 0
    assert any("A100-SXM4-80GB has no fp8 throughput" in w for w in warnings)


def test_cli_options(tmp_path, capsys):
    prefix, system, network = write_case(tmp_path, [mm(0, 2048, 2048, 2048)])
    gpu_yaml = tmp_path / "slow.yaml"
    gpu_yaml.write_text("base: H100-SXM5-80GB\nname: H100-half\ntensor_tflops: {bf16: 494.7}\n")
    out = tmp_path / "report.json"
    args = ["run", "-p", "network_analytical", "-p", "gpu_model", "--workload-configuration", prefix,
            "--system-configuration", system, "--network-configuration", network, "--compute-model", "gpu",
            "-q", "--report-json", str(out)]
    assert astra_main(args) == 0
    h100 = json.loads(out.read_text())
    assert h100["settings"]["gpu_model"]["gpu"] == "H100-SXM5-80GB"
    assert astra_main(args + ["--gpu", str(gpu_yaml)]) == 0
    half = json.loads(out.read_text())
    assert half["settings"]["gpu_model"]["gpu"] == "H100-half"
    assert half["summary"]["max_finish_ns"] > 1.5 * h100["summary"]["max_finish_ns"]
    assert astra_main(args + ["--gpu", "H1000"]) == 2
    assert "neither a preset" in capsys.readouterr().err


def test_bad_default_dtype_is_a_config_error():
    class Context:
        options = {"gpu_default_dtype": "fp4"}

    with pytest.raises(ConfigError, match="--gpu-default-dtype"):
        GpuComputeModel(Context())


def test_nodes_of_one_op_are_timed_once_per_gpu_state():
    """The per-node path is cached by the node's op (name, IOInfo, grouped GEMM, attention kernel): one entry per
    distinct op however many nodes, each node the ns a fresh model gives it; a grouped GEMM of the same shapes is its
    own entry, and a clock ratio (set_clock_ratios) clears the cache."""
    model = GpuComputeModel(None)
    nodes = [mm(i, 4096, 8192, 4096) for i in range(50)]
    alone = GpuComputeModel(None).compute_time_ns(nodes[0], 0)
    assert [model.compute_time_ns(n, 0) for n in nodes] == [alone] * 50
    assert model.counts["op_shapes"] == 50
    entries = len(model._cache)
    assert entries == 2  # the op's seconds and the node's ns
    grouped = mm(99, 4096, 8192, 4096)
    grouped.attrs.update(grouped_gemm_dim="m", grouped_gemm_sizes=[1024, 3072, 0, 0])
    grouped_ns = model.compute_time_ns(grouped, 0)
    assert grouped_ns == GpuComputeModel(None).compute_time_ns(grouped, 0) != alone
    assert model.compute_time_ns(nodes[1], 0) == alone and len(model._cache) == entries + 2
    model.set_clock_ratios({"gemm": 0.5})
    assert model.compute_time_ns(nodes[2], 0) > alone
