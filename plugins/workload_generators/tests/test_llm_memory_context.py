"""The memory outside PyTorch's allocator (issue 35): the CUDA context with one NCCL communicator, and the
point-to-point buffers an expert-parallel all-to-all adds, each from NVIDIA/nccl#1685's measurement on 8 x H100."""

from __future__ import annotations

import pytest

from astra_workload_generators.llm.config import LlmConfig
from astra_workload_generators.llm.memory import peak_memory
from astra_workload_generators.llm.memory_terms import ALL_TO_ALL_PEER_BYTES, WORKSPACE_BYTES, context_bytes
from astra_workload_generators.llm.model import model_dims


def test_the_peer_buffers_are_the_measured_growth_over_seven_peers():
    # 4.34 GB after the first all_to_all_single - 1.06 GB before it, over the 7 other GPUs of the node
    assert ALL_TO_ALL_PEER_BYTES == (4_340_000_000 - 1_060_000_000) // 7


@pytest.mark.parametrize("ep, peers", [(1, 0), (2, 1), (4, 3), (8, 7), (16, 7), (64, 7)])
def test_training_with_expert_parallelism_counts_the_peers_on_the_node(ep, peers):
    cfg = LlmConfig(dp=64, ep=ep)
    assert context_bytes(cfg) == WORKSPACE_BYTES + peers * ALL_TO_ALL_PEER_BYTES


def test_inference_keeps_the_context_alone():
    assert context_bytes(LlmConfig(dp=8, ep=8, mode="decode")) == WORKSPACE_BYTES


def test_an_ep8_moe_step_carries_the_all_to_all_buffers_in_its_estimate():
    dims = model_dims("mixtral-8x7b")
    alone = peak_memory(dims, LlmConfig(dp=8, ep=1))
    expert = peak_memory(dims, LlmConfig(dp=8, ep=8))
    assert alone.context == WORKSPACE_BYTES
    assert expert.context == WORKSPACE_BYTES + 7 * ALL_TO_ALL_PEER_BYTES
    assert expert.total - expert.context - expert.allocated_bytes == expert.reserve
