"""The ``systolic`` compute model on Chakra nodes, ``astra run`` end to end, and the TPU platforms."""

import json
import time
from fractions import Fraction
from pathlib import Path

import pytest

from astra_sim.chakra import make_metadata, make_node, write_et
from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.plugins import describe_plugins, make_plugin_manager
from astra_sim.report import read_report
from astra_sim_testing import write_network_config, write_system_config

from astra_compute_systolic.config import SystolicConfig, load_config
from astra_compute_systolic.cycles import compute_cycles
from astra_compute_systolic.geometry import Layer
from astra_compute_systolic.model import SystolicArray, SystolicComputeModel, attention_gemms
from astra_compute_systolic.platforms import PRESETS, generate, get_preset, network_yaml

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"
BF16 = "Tensor(c10::BFloat16)"


def _mm(nid, m, k, n, name="aten::mm"):
    return make_node(nid, name, T.COMP_NODE, attrs={"is_cpu_op": False},
                     inputs_shapes=str([[m, k], [k, n]]), inputs_types=str([BF16, BF16]), inputs_values="")


def _model(config=None, ghz=1, **kw):
    config = config or load_config(GOLDENS / "configs" / "os32x32_calc.cfg")
    return SystolicComputeModel(array=SystolicArray(config, ghz, kw.pop("cycles", "with-prefetch")), **kw)


def test_gemm_node_costs_scalesims_cycles_at_the_clock():
    config = load_config(GOLDENS / "configs" / "os32x32_calc.cfg")
    r = compute_cycles(Layer.gemm(100, 36, 50), config)
    assert _model(config).compute_time_ns(_mm(1, 100, 50, 36), 0) == r.total_cycles_with_prefetch
    assert _model(config, cycles="total").compute_time_ns(_mm(1, 100, 50, 36), 0) == r.total_cycles
    # 1.05 GHz: ceil(cycles / 1.05)
    ns = _model(config, "1.05").compute_time_ns(_mm(1, 100, 50, 36), 0)
    assert ns == -(-Fraction(r.total_cycles_with_prefetch) // Fraction(21, 20))


def test_batched_conv_and_linear_nodes():
    model = _model()
    one = model.array.gemm_cycles(64, 48, 32)
    bmm = make_node(2, "aten::bmm", T.COMP_NODE, attrs={"is_cpu_op": False},
                    inputs_shapes=str([[3, 64, 32], [3, 32, 48]]), inputs_types=str([BF16, BF16]))
    assert model.compute_time_ns(bmm, 0) == 3 * one
    linear = make_node(3, "aten::linear", T.COMP_NODE, attrs={"is_cpu_op": False},
                       inputs_shapes=str([[4, 16, 32], [48, 32]]), inputs_types=str([BF16, BF16]))
    assert model.compute_time_ns(linear, 0) == one
    # convolution: implicit GEMM, M = N*Ho*Wo, N = out channels, K = Cin*kh*kw (as the gpu model extracts it)
    conv = make_node(4, "aten::convolution", T.COMP_NODE, attrs={"is_cpu_op": False},
                     inputs_shapes=str([[2, 3, 8, 8], [16, 3, 3, 3], [16]]), inputs_types=str([BF16] * 3),
                     inputs_values=str([None, None, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1]))
    assert model.compute_time_ns(conv, 0) == model.array.gemm_cycles(2 * 6 * 6, 16, 27)
    assert model.stats() == {"gemm": 3}


def test_attention_is_its_gemms():
    shapes = str([[2, 4, 64, 32], [2, 4, 80, 32], [2, 4, 80, 16]])
    assert attention_gemms("aten::_scaled_dot_product_flash_attention", shapes, str([BF16] * 3)) == \
        [(8, 64, 80, 32), (8, 64, 16, 80)]
    model = _model()
    node = make_node(5, "aten::_scaled_dot_product_flash_attention", T.COMP_NODE, attrs={"is_cpu_op": False},
                     inputs_shapes=shapes, inputs_types=str([BF16] * 3))
    expected = 8 * (model.array.gemm_cycles(64, 80, 32) + model.array.gemm_cycles(64, 16, 80))
    assert model.compute_time_ns(node, 0) == expected
    bwd = attention_gemms("aten::_scaled_dot_product_flash_attention_backward",
                          str([[2, 4, 64, 16]] + eval(shapes)), str([BF16] * 4))
    assert len(bwd) == 5


def test_memory_bound_views_and_fallbacks():
    add = make_node(6, "aten::add", T.COMP_NODE, attrs={"is_cpu_op": False, "tensor_size": 1},
                    inputs_shapes=str([[1000, 1000], [1000, 1000]]), inputs_types=str([BF16, BF16]),
                    duration_micros=7)
    assert _model(hbm_gbps=1000.0).compute_time_ns(add, 0) == 6000        # 6 MB read + written at 1000 GB/s
    assert _model().compute_time_ns(add, 0) == 7000                         # no HBM bandwidth: replayed
    view = make_node(7, "aten::view", T.COMP_NODE, attrs={"is_cpu_op": False}, inputs_shapes=str([[4, 4]]))
    assert _model().compute_time_ns(view, 0) is None
    flops = make_node(8, "gemm", T.COMP_NODE, attrs={"is_cpu_op": False, "num_ops": 2 * 32 * 32 * 100})
    assert _model().compute_time_ns(flops, 0) == 100                         # the array's peak: 2 x 32 x 32 / cycle


def test_needs_a_config():
    with pytest.raises(ConfigError, match="--systolic-config"):
        SystolicComputeModel(type("C", (), {"options": {}})())
    with pytest.raises(ConfigError, match="--systolic-ghz"):
        SystolicArray(SystolicConfig(4, 4, 1, 1, 1, "os"), "fast")


def _trace(tmp_path, ranks=4):
    nodes = [_mm(1, 100, 50, 36),
             make_node(2, "ar", T.COMM_COLL_NODE, data_deps=[1],
                       attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20})]
    for rank in range(ranks):
        write_et(str(tmp_path / f"t.{rank}.et"), make_metadata(), nodes)
    return str(tmp_path / "t")


def test_astra_run_end_to_end(tmp_path):
    cfg = GOLDENS / "configs" / "os32x32_calc.cfg"
    net = write_network_config(tmp_path / "n.yml", npus=(4,))
    sys_ = write_system_config(tmp_path / "s.json")
    out = tmp_path / "r.json"
    assert main(["run", "--workload-configuration", _trace(tmp_path), "--system-configuration", sys_,
                 "--network-configuration", net, "--compute-model", "systolic", "--systolic-config", str(cfg),
                 "--systolic-ghz", "2", "--report-json", str(out), "-q"]) == 0
    report = read_report(out)
    cycles = compute_cycles(Layer.gemm(100, 36, 50), load_config(cfg)).total_cycles_with_prefetch
    assert [r["compute_ns"] for r in report["ranks"]] == [-(-cycles // 2)] * 4
    assert report["settings"]["systolic_model"]["array_rows"] == 32
    assert report["stats"]["systolic_model_nodes"] == {"gemm": 4}


def test_astra_run_errors_are_one_line(tmp_path, capsys):
    net = write_network_config(tmp_path / "n.yml", npus=(4,))
    sys_ = write_system_config(tmp_path / "s.json")
    bad = tmp_path / "bad.cfg"
    bad.write_text((GOLDENS / "configs" / "os32x32_calc.cfg").read_text().replace("Dataflow : os", "Dataflow : xs"))
    base = ["run", "--workload-configuration", _trace(tmp_path), "--system-configuration", sys_,
            "--network-configuration", net, "--compute-model", "systolic", "-q"]
    assert main(base + ["--systolic-config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.cfg" in err and "'Dataflow'" in err
    assert main(base) == 2
    assert "--systolic-config" in capsys.readouterr().err


def test_discovered_through_the_entry_point():
    pm = make_plugin_manager(select=["compute_systolic"])
    row = {r["name"]: r for r in describe_plugins(pm)}["compute_systolic"]
    assert row["status"] == "loaded" and "compute_model:systolic" in row["provides"]


# --------------------------------------------------------------------------------------------- platforms
def test_presets_have_sources_and_consistent_numbers():
    for name, preset in PRESETS.items():
        n = preset.numbers()
        for key in ("mxus", "peak_bf16_tflops", "hbm", "clock", "torus", "ici_gbps_per_link", "dcn", "array",
                    "sram", "sram_bandwidth", "ici_latency"):
            assert n["sources"][key]
        cfg = preset.config()
        peak = 2 * cfg.rows * cfg.cols * float(preset.ghz) * 1e9 / 1e12
        assert abs(peak - preset.peak_bf16_tflops) / preset.peak_bf16_tflops < 0.01
    v4 = get_preset("tpu-v4")
    assert (v4.config().rows, v4.config().cols, float(v4.ghz), v4.hbm_gbps) == (128, 1024, 1.05, 1200.0)
    assert float(get_preset("tpu-v3").ghz) == 0.94


def test_network_is_a_ring_per_torus_dimension(tmp_path):
    text = network_yaml(get_preset("tpu-v4"), (4, 4, 8), 2)
    assert "topology: [ Ring, Ring, Ring, Switch ]" in text and "npus_count: [ 4, 4, 8, 2 ]" in text
    provided = generate("tpu-v3", 1, "4x8", tmp_path)
    assert "npus_count: [ 4, 8 ]" in Path(provided["network_configuration"]).read_text()
    assert load_config(provided["options"]["systolic_config"]).cols == 512
    with pytest.raises(ConfigError, match="3D torus"):
        generate("tpu-v4", 1, "4x4", tmp_path)
    with pytest.raises(ConfigError, match="at least 2"):
        generate("tpu-v3", 1, "1x8", tmp_path)


def test_astra_platforms_lists_the_tpus(capsys):
    assert main(["platforms", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["tpu-v4"]["ici_topology"] == "4x4x4" and rows["tpu-v4"]["total_gpus"] == 64
    assert "hgx-h100" in rows


def test_platform_run_with_an_llm_workload(tmp_path, capsys):
    prefix = tmp_path / "llm"
    assert main(["workload", "llm", "--preset", "llama2-7b", "--layers", "2", "--tp", "4", "--dp", "4",
                 "--seq-len", "1024", "-o", str(prefix)]) == 0
    out = tmp_path / "r.json"
    assert main(["run", "--workload-configuration", str(prefix), "--comm-group-configuration",
                 f"{prefix}.groups.json", "--platform", "tpu-v3", "--compute-model", "systolic",
                 "--report-json", str(out), "-q"]) == 0
    report = read_report(out)
    assert len(report["ranks"]) == 16 and report["settings"]["systolic_model"]["clock_ghz"] == 0.94
    counts = report["stats"]["systolic_model_nodes"]
    assert counts["gemm"] > 0 and counts["attention"] > 0 and counts["memory"] > 0
    assert main(["run", "--workload-configuration", str(prefix), "--platform", "tpu-v9", "-q"]) == 2
    assert "tpu-v3, tpu-v4" in capsys.readouterr().err


def test_a_hundred_llm_layers_in_under_a_second():
    """100 transformer layers, forward + both gradients of every GEMM (1200 nodes, the shapes repeat as
    they do in a model) on the TPU v4 preset: the compute times cost under a second."""
    s, h, f = 2048, 4096, 11008
    nodes = []
    for _ in range(100):
        for m, k, n in ((s, h, 3 * h), (s, h, h), (s, h, 2 * f), (s, f, h)):
            for mm in ((m, k, n), (m, n, k), (k, m, n)):
                nodes.append(_mm(len(nodes), *mm))
    preset = get_preset("tpu-v4")
    start = time.perf_counter()
    model = SystolicComputeModel(array=SystolicArray(preset.config(), preset.ghz))
    total = sum(model.compute_time_ns(node, 0) for node in nodes)
    assert time.perf_counter() - start < 1.0
    assert total > 0 and model.stats() == {"gemm": 1200}
