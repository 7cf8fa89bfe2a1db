"""``--gpu-kernel-gap-ns``: the GPU's idle time before each compute kernel (a replayed CUDA graph's), by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from astra_gpu_model.model import GRAPH_KERNEL_GAP_NS, GpuComputeModel
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim_testing import flash_attention_node

BF16 = "'Tensor(c10::BFloat16)'"


def _model(gap=None):
    options = {"gpu": "H100"} if gap is None else {"gpu": "H100", "gpu_kernel_gap_ns": gap}
    return GpuComputeModel(SimpleNamespace(options=options))


def test_each_kernel_starts_the_gap_later_and_the_default_has_none():
    node = flash_attention_node(1, 32, 4096, 128, True, None, False, BF16)
    plain = _model().compute_time_ns(node, 0)
    assert _model(0).compute_time_ns(node, 0) == plain
    assert _model(GRAPH_KERNEL_GAP_NS).compute_time_ns(node, 0) == plain + 376
    assert _model(1000).compute_time_ns(node, 0) == plain + 1000
    assert _model(1000).describe()["kernel_gap_ns"] == 1000 and "kernel_gap_ns" not in _model().describe()


def test_a_negative_gap_is_refused():
    with pytest.raises(ConfigError, match="--gpu-kernel-gap-ns must be 0 or more"):
        _model(-1)


def test_astra_run_refuses_a_negative_gap_with_exit_2(tmp_path, capsys):
    assert main(["run", "--platform", "hgx-h100", "--workload-configuration", str(tmp_path / "none"),
                 "--gpu-kernel-gap-ns", "-5", "-q"]) == 2
    assert "--gpu-kernel-gap-ns" in capsys.readouterr().err
