"""Scaling a data-parallel trace: exact reproduction of the reference tools' larger outputs, clear refusals."""

from __future__ import annotations

import shutil

import pytest

from astra_sim.chakra import make_metadata, read_et, write_et
from astra_sim.cli import main
from astra_sim.errors import WorkloadError

from astra_workload_generators.micro import collective_trace, graph_trace, write_trace
from astra_workload_generators.scale import check_replicable, scale_trace


def _same(prefix, reference, npus):
    for rank in range(npus):
        assert open(f"{prefix}.{rank}.et", "rb").read() == open(f"{reference}.{rank}.et", "rb").read(), rank


def test_text_converter_trace_scales_to_the_8_npu_conversion(shared_dir, tmp_path):
    """Chakra's converter at 2 NPUs, scaled to 8, is byte for byte its own 8-NPU output (ids run on)."""
    text = shared_dir / "samples" / "chakra" / "text"
    summary = scale_trace(text / "MLP_ModelParallel", 8, tmp_path / "m")
    assert summary["id_step"] == 29 and summary["from_npus"] == 2
    _same(tmp_path / "m", text / "astra_example_8npus" / "MLP_ModelParallel", 8)


def test_parity_trace_scales_to_the_16_npu_trace(parity_dir, tmp_path):
    summary = scale_trace(parity_dir / "traces" / "single_all_reduce_8_1MB" / "t", 16, tmp_path / "t")
    assert summary["renamed"] and summary["id_step"] == 0
    _same(tmp_path / "t", parity_dir / "traces" / "single_all_reduce_16_1MB" / "t", 16)
    scale_trace(parity_dir / "traces" / "single_all_to_all_16_1MB" / "t", 4, tmp_path / "down")  # and down
    _same(tmp_path / "down", parity_dir / "traces" / "single_all_to_all_4_1MB" / "t", 4)


def test_global_id_traces_keep_their_offsets(shared_dir, tmp_path):
    golden = shared_dir / "samples" / "chakra" / "astra-sim-golden" / "all_to_all_4npus_1MB" / "all_to_all"
    scale_trace(golden, 8, tmp_path / "a")
    write_trace(collective_trace("all_to_all", 1 << 20, 8, ids="global"), tmp_path / "b")
    _same(tmp_path / "a", tmp_path / "b", 8)
    generator = shared_dir / "samples" / "chakra" / "generator" / "ALL_REDUCE"
    scale_trace(generator, 3, tmp_path / "g", keep_names=True)
    assert [read_et(tmp_path / f"g.{r}.et").nodes[0].id for r in range(3)] == [16, 17, 18]


def test_p2p_is_not_replicable(parity_dir, shared_dir):
    with pytest.raises(WorkloadError, match=r"t\.0\.et: not replicable: node 0 \('send'\) of rank 0: it is a "
                                            r"COMM_SEND_NODE \(comm_src=0, comm_dst=1\)"):
        scale_trace(parity_dir / "traces" / "misc_p2p_shift_8" / "t", 16, "/nonexistent/x")
    custom = shared_dir / "samples" / "chakra" / "astra-sim-golden" / "custom_ring_allreduce_8npus_1MB"
    with pytest.raises(WorkloadError, match="point-to-point peers are rank-specific"):
        check_replicable(custom / "custom_allreduce")


def test_differing_ranks_name_the_first_difference(parity_dir, tmp_path):
    for path in (parity_dir / "traces" / "misc_overlap_8").glob("t.*.et"):
        shutil.copy(path, tmp_path / path.name)
    trace = read_et(tmp_path / "t.5.et")
    trace.nodes[2].duration_micros = 6
    write_et(tmp_path / "t.5.et", trace.metadata, trace.nodes)
    with pytest.raises(WorkloadError, match=r"t\.5\.et: not replicable: rank 5 differs from rank 0 at node #2 "
                                            r"\(rank 5: id 2 'c1'; rank 0: id 2 'c1'\): duration_micros 6 vs 5"):
        scale_trace(tmp_path / "t", 16, tmp_path / "out")
    trace.nodes[2].duration_micros = 5
    trace.nodes[1].set_attr("comm_size", 4096)
    write_et(tmp_path / "t.5.et", trace.metadata, trace.nodes)
    with pytest.raises(WorkloadError, match=r"node #1 .*: attributes \{'comm_size': \(4096, 'int64_val'\)\} vs "
                                            r"\{'comm_size': \(1048576, 'int64_val'\)\}"):
        check_replicable(tmp_path / "t")
    write_et(tmp_path / "t.5.et", trace.metadata, trace.nodes[:2])
    with pytest.raises(WorkloadError, match="rank 5 has 2 nodes, rank 0 has 3"):
        check_replicable(tmp_path / "t")
    write_et(tmp_path / "t.5.et", make_metadata("1.0.0"), read_et(tmp_path / "t.4.et").nodes)
    with pytest.raises(WorkloadError, match="rank 5's GlobalMetadata differs"):
        check_replicable(tmp_path / "t")


def test_communicator_groups_are_not_replicable(tmp_path):
    spec = {"nodes": [{"name": "ar", "type": "all_reduce", "size": 64, "attrs": {"pg_name": "1"}}]}
    write_trace(graph_trace(spec, 4), tmp_path / "g")
    with pytest.raises(WorkloadError, match="communicator group pg_name='1'"):
        check_replicable(tmp_path / "g")


def test_scale_cli(parity_dir, tmp_path, capsys):
    src = parity_dir / "traces" / "single_reduce_scatter_8_1KB" / "t"
    assert main(["workload", "scale", str(src), "--to-npus", "16", "-o", str(tmp_path / "s")]) == 0
    assert "8 -> 16 NPUs" in capsys.readouterr().out
    _same(tmp_path / "s", parity_dir / "traces" / "single_reduce_scatter_16_1KB" / "t", 16)
    assert main(["workload", "scale", str(tmp_path / "none"), "--to-npus", "2", "-o", str(tmp_path / "x")]) == 2
    assert "no trace at" in capsys.readouterr().err
    assert main(["workload", "scale", str(src), "--from-npus", "9", "--to-npus", "2", "-o", str(tmp_path / "x")]) == 2
    assert "--from-npus 9 expects ranks 0..8" in capsys.readouterr().err
