"""A Megatron training step at TP > 1 without sequence parallelism (issue 36): the all-reduce of a column-parallel
layer's (QKV's, FC1's) input gradient starts when the dgrad GEMM ends and runs beside the wgrad GEMM; the chain
goes on at max(wgrad end, all-reduce end) (Megatron-Core core_r0.14.0 ``LinearWithGradAccumulationAndAsync
Communication.backward``: ``all_reduce(grad_input, async_op=True)`` after the dgrad, ``handle.wait()`` after the
wgrad; Transformer Engine d0067d0 ``_Linear`` / ``_LayerNormLinear`` likewise); so does the LM head's, Megatron's
``output_layer`` being such a linear too. By hand on a one-layer step at TP 2,
simulated on a 2-NPU analytical ring; the other frameworks keep autograd's order (reduction after both GEMMs), and
so does Megatron with ``--no-async-tensor-model-parallel-allreduce`` (2021-09 .. 2024-04; before 3f652469 always)."""

from __future__ import annotations

import types

import pytest

from astra_sim import hookimpl
from astra_sim.errors import ConfigError
from astra_sim.chakra import types as T
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

# one layer, h 256, FFN 512 (gated: FC1 is 2 x 512 wide, 512 per TP rank), 2 sequences of 128 tokens: n = 256 rows
ONE_LAYER = dict(layers=1, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True,
                 rms_norm=True)
GRAD_BYTES = 256 * 256 * 2  # the input gradient, all-reduced whole: 131,072 B
# FC1's dgrad and wgrad: 2 x 256 x 512 x 256 flop = 67,108,864 each; at 0.05 TFLOP/s 1342.18 us -> 1342 us; the
# LM head's wgrad (512 of the 1024 vocabulary rows per TP rank: Megatron pads 1000 to a multiple of 128 x TP 2):
# 2 x 256 x 256 x 512 = 67,108,864, 1342 us as well
SLOW_TFLOPS, FC1_GEMM_NS, HEAD_WGRAD_NS = 0.05, 1_342_000, 1_342_000


def _step(tmp_path, name="w", simulate_it=True, **cfg):
    """The rank-0 nodes by label and, simulated, each node's ``(start, end)`` ns by id and the rank's finish."""
    cfg = LlmConfig(**{"micro_batches": 1, "micro_batch_size": 2, "tp": 2, "dropout": False,
                       "elementwise": False, **cfg})
    prefix = tmp_path / name
    generate_llm(model_dims(**ONE_LAYER), cfg, prefix)
    nodes = {n.attrs.get("label", n.name): n for n in read_rank_nodes(prefix, 0)}
    if not simulate_it:
        return nodes, None, None
    spans = {}
    probe = types.ModuleType("asyncar_spans")
    probe.astra_run_start = hookimpl(lambda run: run.add_node_observer(
        lambda rank, node, start, end: spans.__setitem__(node.id, (start, end)) if rank == 0 else None))
    report = simulate(str(prefix), write_system_config(tmp_path / f"{name}.sys.json", dims=1),
                      write_network_config(tmp_path / f"{name}.net.yml", npus=(2,)), None,
                      f"{prefix}.groups.json", plugins=["network_analytical", "workload_generators"],
                      extra_plugins=[probe], breakdown=False)
    return nodes, spans, report.ranks[0].finish_ns


@pytest.fixture(scope="module")
def fast_gemms(tmp_path_factory):
    """GEMMs at the 1 us floor: each all-reduce outlasts the wgrad beside it."""
    return _step(tmp_path_factory.mktemp("fast"))


@pytest.fixture(scope="module")
def slow_gemms(tmp_path_factory):
    """GEMMs at 0.05 TFLOP/s: the wgrad outlasts the all-reduce beside it."""
    return _step(tmp_path_factory.mktemp("slow"), tflops=SLOW_TFLOPS)


def test_the_all_reduce_hangs_on_the_dgrad_only(fast_gemms):
    nodes, _, _ = fast_gemms
    for site, gemm in (("mlp_in", "fc1"), ("attn_in", "qkv")):
        ar = nodes[f"tp_ar.bwd.l0.mb0.{site}"]
        dgrad, wgrad = nodes[f"bwd.l0.mb0.{gemm}.dgrad"], nodes[f"bwd.l0.mb0.{gemm}.wgrad"]
        assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == GRAD_BYTES
        assert ar.data_deps == [dgrad.id] and wgrad.data_deps == [dgrad.id]
    # the projection's dgrad (the next node on the chain) waits for FC1's wgrad and its all-reduce
    assert set(nodes["bwd.l0.mb0.proj.dgrad"].data_deps) == {nodes["bwd.l0.mb0.fc1.wgrad"].id,
                                                             nodes["tp_ar.bwd.l0.mb0.mlp_in"].id}


def test_all_reduce_longer_than_the_wgrad(fast_gemms):
    """Start = the dgrad's end; the chain goes on at the all-reduce's end, which is later than the wgrad's, by
    less than it did when the all-reduce waited for the wgrad (by the wgrad's 1 us)."""
    nodes, spans, finish = fast_gemms
    for site, gemm in (("mlp_in", "fc1"), ("attn_in", "qkv")):
        ar = spans[nodes[f"tp_ar.bwd.l0.mb0.{site}"].id]
        dgrad = spans[nodes[f"bwd.l0.mb0.{gemm}.dgrad"].id]
        wgrad = spans[nodes[f"bwd.l0.mb0.{gemm}.wgrad"].id]
        assert ar[0] == dgrad[1] == wgrad[0] and wgrad[1] - wgrad[0] == 1_000  # (the floor: 1 us)
        assert ar[1] > wgrad[1]
    fc1_ar = spans[nodes["tp_ar.bwd.l0.mb0.mlp_in"].id]
    assert spans[nodes["bwd.l0.mb0.proj.dgrad"].id][0] == fc1_ar[1]
    # QKV's is the layer's last reduction: the backward (and the step: DP 1, no optimizer node) ends with it
    assert finish == spans[nodes["tp_ar.bwd.l0.mb0.attn_in"].id][1]


def test_wgrad_longer_than_the_all_reduce(slow_gemms):
    """By hand: FC1's dgrad and wgrad 1342 us each; the all-reduce starts at the dgrad's end and is over before the
    wgrad is, so the projection's dgrad starts at dgrad end + 1342 us: the all-reduce is hidden."""
    nodes, spans, finish = slow_gemms
    dgrad = spans[nodes["bwd.l0.mb0.fc1.dgrad"].id]
    wgrad = spans[nodes["bwd.l0.mb0.fc1.wgrad"].id]
    ar = spans[nodes["tp_ar.bwd.l0.mb0.mlp_in"].id]
    assert dgrad[1] - dgrad[0] == wgrad[1] - wgrad[0] == FC1_GEMM_NS
    assert ar[0] == dgrad[1] and ar[1] < wgrad[1]
    assert spans[nodes["bwd.l0.mb0.proj.dgrad"].id][0] == dgrad[1] + FC1_GEMM_NS
    qkv_wgrad = spans[nodes["bwd.l0.mb0.qkv.wgrad"].id]
    assert spans[nodes["tp_ar.bwd.l0.mb0.attn_in"].id][1] < qkv_wgrad[1] == finish


def test_the_head_all_reduces_its_input_gradient_beside_its_wgrad(fast_gemms, slow_gemms):
    """Megatron's output layer (a ColumnParallelLinear, ``allreduce_dgrad``): the all-reduce of the head's whole
    input gradient (131,072 B) starts at the head's dgrad end; the last layer's backward starts at max(head wgrad
    end, all-reduce end): the all-reduce's end with 1 us GEMMs, the wgrad's (dgrad end + 1342 us) with slow ones."""
    for (nodes, spans, _), later in ((fast_gemms, "ar"), (slow_gemms, "wgrad")):
        ar, dgrad, wgrad = (nodes[k] for k in ("tp_ar.bwd.head.mb0.head_in", "bwd.head.mb0.dgrad",
                                                "bwd.head.mb0.wgrad"))
        assert ar.attrs["comm_type"] == T.ALL_REDUCE and ar.attrs["comm_size"] == GRAD_BYTES
        assert ar.data_deps == [dgrad.id] and wgrad.data_deps == [dgrad.id]
        nxt = spans[nodes["bwd.l0.mb0.fc2.dgrad"].id][0]
        assert spans[ar.id][0] == spans[dgrad.id][1] == spans[wgrad.id][0]
        assert nxt == max(spans[ar.id][1], spans[wgrad.id][1]) == {"ar": spans[ar.id], "wgrad": spans[wgrad.id]}[later][1]
    assert spans[wgrad.id][1] - spans[wgrad.id][0] == HEAD_WGRAD_NS


@pytest.mark.parametrize("cfg", [dict(framework="fsdp2", zero=3, dp=2), dict(framework="deepspeed", zero=2, dp=2),
                                 dict(framework="deepspeed", zero=3, dp=2),
                                 dict(zero=3, dp=2, remat_policy="minimal_flash", iota_embed=True)],
                         ids=["fsdp2", "deepspeed-zero2", "deepspeed-zero3", "maxtext"])
def test_other_frameworks_reduce_after_both_gemms(tmp_path, cfg):
    """torchtitan (DTensor), DeepSpeed, Hugging Face eager and MaxText's step: autograd reduces the input gradient
    after the matmul's whole backward: the all-reduce on the chain after the wgrad GEMM, as before."""
    nodes, _, _ = _step(tmp_path, simulate_it=False, **cfg)
    for site, gemm in (("mlp_in", "fc1"), ("attn_in", "qkv")):
        assert nodes[f"tp_ar.bwd.l0.mb0.{site}"].data_deps == [nodes[f"bwd.l0.mb0.{gemm}.wgrad"].id]
    assert "tp_ar.bwd.head.mb0.head_in" not in nodes  # (their head's reduction is not emitted, as before)


@pytest.fixture(scope="module")
def sync_gemms(tmp_path_factory):
    """``--no-async-tensor-model-parallel-allreduce``, GEMMs at 0.05 TFLOP/s."""
    return _step(tmp_path_factory.mktemp("sync"), tflops=SLOW_TFLOPS, async_tp_allreduce=False)


def test_no_async_flag_all_reduces_after_the_wgrad(sync_gemms):
    """Megatron-LM 3f652469 / cfd2e216 without ``async_tensor_model_parallel_allreduce``: the all-reduce is
    ``copy_to_tensor_model_parallel_region``'s backward, after the matmul's (both GEMMs), for QKV, FC1 and the head
    (``parallel_lm_logits``). By hand: FC1's all-reduce starts at its dgrad's end + 1342 us (the wgrad), the head's
    at its dgrad's end + 1342 us, and the next GEMM starts at the all-reduce's end."""
    nodes, spans, finish = sync_gemms
    for site, gemm, wgrad_ns, nxt in (("l0.mb0.mlp_in", "l0.mb0.fc1", FC1_GEMM_NS, "l0.mb0.proj.dgrad"),
                                      ("head.mb0.head_in", "head.mb0", HEAD_WGRAD_NS, "l0.mb0.fc2.dgrad"),
                                      ("l0.mb0.attn_in", "l0.mb0.qkv", None, None)):
        ar, dgrad, wgrad = (nodes[k] for k in (f"tp_ar.bwd.{site}", f"bwd.{gemm}.dgrad", f"bwd.{gemm}.wgrad"))
        assert ar.attrs["comm_size"] == GRAD_BYTES and ar.data_deps == [wgrad.id]
        assert spans[ar.id][0] == spans[wgrad.id][1]
        if wgrad_ns:
            assert spans[ar.id][0] == spans[dgrad.id][1] + wgrad_ns
            assert spans[nodes[f"bwd.{nxt}"].id][0] == spans[ar.id][1]
    assert finish == spans[nodes["tp_ar.bwd.l0.mb0.attn_in"].id][1]


def test_no_async_flag_is_moot_with_sp_and_refused_elsewhere(tmp_path):
    """With sequence parallelism Megatron set the flag off and reduce-scattered asynchronously anyway (cfd2e216
    ``megatron/arguments.py`` 304-307): the same step either way. Outside a Megatron training step: refused."""
    sp = dict(sequence_parallel=True, simulate_it=False)
    on, _, _ = _step(tmp_path, "on", **sp)
    off, _, _ = _step(tmp_path, "off", async_tp_allreduce=False, **sp)
    assert {k: n.data_deps for k, n in on.items()} == {k: n.data_deps for k, n in off.items()}
    assert on["tp_rs.bwd.l0.mb0.mlp_in"].data_deps == [on["bwd.l0.mb0.fc1.dgrad"].id]
    with pytest.raises(ConfigError, match="no-async-tensor-model-parallel-allreduce"):
        _step(tmp_path, "fsdp2", simulate_it=False, framework="fsdp2", zero=3, dp=2, async_tp_allreduce=False)
