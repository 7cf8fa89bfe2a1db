"""``--moe-force-load-balancing`` in training (issue 36): the busiest EP rank. Under Megatron-Core's random router
(``RandomSTE``) each token's k copies land on a uniformly random set of k experts, so a rank's copies spread around
their mean, and every rank waits for the busiest one at each layer's combine all-to-all. The trace gives every rank
the expected busiest rank's copies (:func:`busiest_rank_rows`): its experts' GEMMs and the all-to-alls carry them.
Each number is worked by hand in its test."""

from __future__ import annotations

import math

from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims
from astra_workload_generators.llm.routing import busiest_rank_rows, expected_max_std_normal

# 8 experts over EP 2 (4 local), top-2, 128 tokens a rank: 256 token copies per rank, T = 256 tokens in the group
MOE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, experts=8, top_k=2, moe_ffn=512, gated=True)


def test_expected_max_of_normals_by_hand():
    """E[max of 2] = 1/sqrt(pi) and E[max of 3] = 3/(2 sqrt(pi)) in closed form; 8 and 16 from the order-statistics
    tables (1.4236, 1.7660)."""
    assert expected_max_std_normal(1) == 0.0
    assert math.isclose(expected_max_std_normal(2), 1 / math.sqrt(math.pi), abs_tol=1e-6)
    assert math.isclose(expected_max_std_normal(3), 1.5 / math.sqrt(math.pi), abs_tol=1e-6)
    assert math.isclose(expected_max_std_normal(8), 1.4236, abs_tol=5e-5)
    assert math.isclose(expected_max_std_normal(16), 1.7660, abs_tol=5e-5)


def test_two_ranks_by_hand():
    """8 experts, EP 2 (4 local), top-2, 128 copies a rank: T = 128 tokens in the group. A token's copies on rank
    0's 4 experts are Hypergeometric(8, 4, 2): 0, 1, 2 with 6/28, 16/28, 6/28, variance 40/28 - 1 = 3/7, so a
    rank's copies have variance 128 x 3/7 = 54.86 (sd 7.407). The two ranks' copies add up to 256, so the busiest
    has 128 + |X - 128|, whose mean is 128 + sd sqrt(2/pi) = 128 + 5.91: 134."""
    assert busiest_rank_rows(128, 4, 8, 2, 2) == 134
    # one rank, or no copies: nothing to wait for
    assert busiest_rank_rows(128, 8, 8, 2, 1) == 128
    assert busiest_rank_rows(0, 4, 8, 2, 2) == 0


def test_the_validation_cases_by_hand():
    """GPT-OSS 120B (EP 8, 16 local of 128 experts, top-4, 4,096 tokens a rank: 16,384 copies, T = 32,768):
    variance 32768 x 4 x (1/8)(7/8)(124/127) = 13,997.5, sd 118.31; the busiest of 8 ranks whose copies add up to
    a constant: sd x sqrt(8/7) x 1.4236 = 180.05 more. Qwen3 30B-A3B (EP 16, 8 local of 128, top-8, 32,768 copies,
    T = 65,536): variance 65536 x 8 x (1/16)(15/16)(120/127) = 29,025.6, sd 170.37; x sqrt(16/15) x 1.7660 =
    310.7 more."""
    assert busiest_rank_rows(16384, 16, 128, 4, 8) == 16384 + 180
    assert busiest_rank_rows(32768, 8, 128, 8, 16) == 32768 + 311


def _expert_nodes(folder, label):
    return [n for n in read_rank_nodes(folder, 0) if (n.attrs.get("label") or n.name) == label]


def test_the_trace_carries_the_busiest_rank(tmp_path):
    """The 8-expert fixture (256 copies a rank, T = 256): variance 256 x 3/7 = 109.7, sd 10.47, the busiest of two
    ranks 256 + 10.47 x sqrt(2/pi) = 256 + 8.36: 264. Its 4 local experts get Binomial(264, 1/4)'s quantiles at
    1/8, 3/8, 5/8, 7/8 (math.comb: P(X <= 57) = 0.112 < 1/8 <= P(X <= 58) = 0.143; P(X <= 63) = 0.365 < 3/8 <=
    P(X <= 64) = 0.420; P(X <= 67) = 0.589 < 5/8 <= P(X <= 68) = 0.643; P(X <= 73) = 0.857 < 7/8 <= P(X <= 74) =
    0.886): 58, 64, 68, 74, sum 264. The forward fc1 and the backward fc2 dgrad carry them; the token all-to-alls
    264 x 256 x 2 B, the probabilities' 264 x 2 B (bf16); the permute still reads the rank's own 256 copies."""
    dims = model_dims(**MOE)
    cfg = dict(dp=2, ep=2, moe_grouped_gemm="cublas-streams", moe_dispatcher="alltoall")
    generate_llm(dims, LlmConfig(**cfg, moe_force_load_balancing=True), tmp_path / "r")
    generate_llm(dims, LlmConfig(**cfg), tmp_path / "e")
    rows = (58, 64, 68, 74)
    fc1 = [n.attrs["tensor_size"] for n in _expert_nodes(tmp_path / "r", "fwd.l0.mb0.experts.fc1")]
    # tensor_size = (rows x 256 (input) + 256 x 1024 (weight) + rows x 1024 (output)) x 2 B (bf16)
    assert fc1 == [2 * (r * 256 + 256 * 1024 + r * 1024) for r in rows]
    dgrad = [n.attrs["tensor_size"] for n in _expert_nodes(tmp_path / "r", "bwd.l0.mb0.experts.fc2.dgrad")]
    assert dgrad == [2 * (r * 256 + 256 * 512 + r * 512) for r in rows]
    for folder, copies in ((tmp_path / "r", 264), (tmp_path / "e", 256)):
        a2a = {(n.attrs.get("label") or n.name): n.attrs["comm_size"] for n in read_rank_nodes(folder, 0)
               if (n.attrs.get("label") or n.name).startswith("ep_a2a.fwd.l0.mb0.")}
        assert a2a == {"ep_a2a.fwd.l0.mb0.dispatch": copies * 256 * 2, "ep_a2a.fwd.l0.mb0.dispatch.probs": copies * 2,
                       "ep_a2a.fwd.l0.mb0.combine": copies * 256 * 2}
    permute = _expert_nodes(tmp_path / "r", "fwd.l0.mb0.dispatch.permute")
    assert permute and permute[0].attrs["tensor_size"] == 2 * (256 * 256 + 128 * 256)


def test_inference_keeps_the_mean(tmp_path):
    """Prefill is left at the mean (the normal limit needs a training micro-batch's many tokens): with and without
    the flag, the dispatch all-to-all carries the rank's 256 copies."""
    dims = model_dims(**MOE)
    sizes = []
    for force in (True, False):
        folder = tmp_path / str(force)
        generate_llm(dims, LlmConfig(dp=2, ep=2, mode="prefill", moe_force_load_balancing=force), folder)
        sizes.append(sorted(n.attrs["comm_size"] for n in read_rank_nodes(folder, 0)
                            if (n.attrs.get("label") or n.name).startswith("ep_a2a.") and "dispatch" in
                            (n.attrs.get("label") or n.name)))
    assert sizes[0] == sizes[1] and sizes[0]
