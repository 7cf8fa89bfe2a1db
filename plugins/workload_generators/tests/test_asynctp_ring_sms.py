"""torchtitan's AsyncTP (``--framework fsdp2 --tp-comm-overlap``): the TP ring steps' transfers are copy-engine
copies (PyTorch's symmetric-memory ``copy_`` between peer buffers), so they carry ``comm_sms`` 0 by default; a
``--comm-sms`` entry still overrides it, and Megatron (Transformer Engine) keeps the gpu model's default (no
attribute)."""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_sim.cli import main
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm.overlap import default_ring_sms

COMM = (T.COMM_COLL_NODE, T.COMM_SEND_NODE, T.COMM_RECV_NODE)
# the eight ring sites the generator emits, written out by hand: forward all-gathers of the QKV / FC1 input,
# forward reduce-scatters of the projection / FC2 output, backward all-gathers of the FC2 / projection output
# gradient, backward reduce-scatters of the FC1 / QKV input gradient
RING_NAMES = {"qkv_fprop", "fc1_fprop", "proj_fprop", "fc2_fprop", "fc2_dgrad", "proj_dgrad", "qkv_wgrad",
              "fc1_wgrad"}


def test_fsdp2_rings_take_no_sms_and_megatron_has_no_default():
    assert default_ring_sms("fsdp2") == {name: 0 for name in RING_NAMES}
    assert default_ring_sms("megatron") == {}
    assert default_ring_sms("deepspeed") == {}


def _generate(tmp_path, name, *extra):
    prefix = tmp_path / name / "t"
    args = ["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000",
            "--seq-len", "128", "--tp", "2", "--dp", "2", "--micro-batches", "1", "--sequence-parallel",
            "--tp-comm-overlap", *extra, "-o", str(prefix)]
    assert main(args) == 0
    return [n for r in range(4) for n in read_rank_nodes(prefix, r) if n.type in COMM]


def test_fsdp2_ring_nodes_carry_zero_sms(tmp_path):
    nodes = _generate(tmp_path, "fsdp2", "--framework", "fsdp2", "--zero", "3")
    ring = [n for n in nodes if n.name.startswith(("tp_send.", "tp_recv."))]
    # TP 2: one step per ring, 8 rings per layer, 2 layers, a send and a receive each, on 4 ranks
    assert len(ring) == 8 * 2 * 2 * 4
    assert {n.attrs.get("comm_sms") for n in ring} == {0}
    # nothing else gets an attribute: the backward re-gathers and the FSDP collectives keep the gpu model's default
    assert not any("comm_sms" in n.attrs for n in nodes if n not in ring)


def test_comm_sms_overrides_the_default(tmp_path):
    nodes = _generate(tmp_path, "override", "--framework", "fsdp2", "--zero", "3", "--comm-sms", "fc1_fprop=5")
    fc1 = {n.attrs.get("comm_sms") for n in nodes
           if n.name.startswith(("tp_send.ag.fwd", "tp_recv.ag.fwd")) and ".mlp_in." in n.name}
    others = {n.attrs.get("comm_sms") for n in nodes
              if n.name.startswith(("tp_send.", "tp_recv.")) and not (".ag.fwd" in n.name and ".mlp_in." in n.name)}
    assert fc1 == {5} and others == {0}


def test_megatron_rings_keep_no_attribute(tmp_path):
    nodes = _generate(tmp_path, "megatron", "--zero", "1")
    assert any(n.name.startswith("tp_send.") for n in nodes)
    assert not any("comm_sms" in n.attrs for n in nodes)
