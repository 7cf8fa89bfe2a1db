"""torchtitan's AsyncTP reduce-scatter (``--framework fsdp2 --tp-comm-overlap``): PyTorch's
``fused_matmul_reduce_scatter`` ends with one sum over the stacked partials, not TP-1 ring adds (Megatron's
Transformer Engine ring keeps its adds in the forward's reduce-scatters; its backward's are bulk)."""

from __future__ import annotations

from astra_gpu_model.ops import classify, node_io
from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_workload_compact import read_rank_nodes

TP, HIDDEN, SEQ = 4, 256, 128


def _nodes(tmp_path, name, *extra):
    prefix = tmp_path / name / "t"
    args = ["workload", "llm", "--layers", "1", "--hidden", str(HIDDEN), "--heads", "8", "--vocab", "1000",
            "--seq-len", str(SEQ), "--tp", str(TP), "--micro-batches", "1", "--sequence-parallel",
            "--tp-comm-overlap", "--no-dropout", *extra, "-o", str(prefix)]
    assert main(args) == 0
    return read_rank_nodes(prefix, 0)


def _label(n):
    return n.attrs.get("label", "")


def test_fsdp2_reduce_scatter_is_one_sum_over_the_stacked_partials(tmp_path):
    nodes = _nodes(tmp_path, "fsdp2", "--framework", "fsdp2", "--zero", "3")
    assert not [n for n in nodes if ".rs_add" in _label(n)]
    sums = {_label(n): n for n in nodes if _label(n).endswith(".rs_sum")}
    # four reduce-scatters a layer: projection and FC2 output (forward), FC1 and QKV input gradient (backward)
    assert sorted(k.rsplit(".", 2)[-2] for k in sums) == ["attn_in", "attn_out", "mlp_in", "mlp_out"]
    by_id = {n.id: n for n in nodes}
    rows = SEQ // TP  # micro-batch 1: this rank's rows of the [SEQ, HIDDEN] output
    for label, node in sums.items():
        # the gpu model's count: read TP partials of [rows, HIDDEN] bf16, write one: (TP + 1) x 32 x 256 x 2 B
        assert classify(node.name, *node_io(node)).nbytes == (TP + 1) * rows * HIDDEN * 2 == 81920
        # it waits for every one of the TP-1 copies of its ring
        site = label.rsplit(".", 2)[-2]
        recvs = {d for d in node.data_deps if by_id[d].type == T.COMM_RECV_NODE}
        ring = {n.id for n in nodes if n.name.startswith("tp_recv.rs.") and f".{site}." in n.name
                and n.name.split(".")[2] == label.split(".")[0]}
        assert recvs == ring and len(ring) == TP - 1, label


def test_megatron_keeps_the_ring_adds(tmp_path):
    # the forward's two reduce-scatter rings (projection, FC2 output); the backward's of the QKV / FC1 input
    # gradient are Transformer Engine's bulk reduce-scatters beside the wgrad GEMM, one collective each
    nodes = _nodes(tmp_path, "megatron")
    assert len([n for n in nodes if ".rs_add" in _label(n)]) == 2 * (TP - 1)
    assert not [n for n in nodes if _label(n).endswith(".rs_sum")]
    assert sorted(n.name for n in nodes if n.name.startswith("tp_rs.bwd.l")) == ["tp_rs.bwd.l0.mb0.attn_in",
                                                                               "tp_rs.bwd.l0.mb0.mlp_in"]
