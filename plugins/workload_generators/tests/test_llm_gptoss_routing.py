"""``--moe-force-load-balancing`` (issue 36): Megatron-Bridge's benchmark recipes set Megatron-Core's
``moe_router_force_load_balancing``, whose ``RandomSTE`` replaces the router's logits with normal noise, so each
token's top-k is a random set of k experts and an expert's token copies are Binomial(T, k / E) over the EP group's
T tokens. The local experts get that law's quantiles at (i + 0.5) / L (L local experts), adjusted to add up to the
rank's copies. Each case is worked by hand from the binomial probabilities (written out in each test)."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_workload_compact import read_rank_nodes

from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm, model_dims
from astra_workload_generators.llm.routing import _binomial_quantiles, random_routing_rows

# 8 experts over EP 2 (4 local), top-2, 128 tokens a rank: 256 token copies per rank, T = 256 tokens in the group
MOE = dict(layers=2, hidden=256, heads=8, vocab=1000, seq_len=128, experts=8, top_k=2, moe_ffn=512, gated=True)


def test_binomial_quantiles_by_hand():
    """Binomial(8, 1/2): P(X <= 2) = 37/256 = 0.145, P(X <= 3) = 93/256 = 0.363, P(X <= 4) = 163/256 = 0.637,
    P(X <= 5) = 219/256 = 0.855: the 0.25 quantile is 3 and the 0.75 quantile 5."""
    assert _binomial_quantiles(8, 0.5, [0.25, 0.75]) == [3, 5]


def test_two_local_experts_by_hand():
    """8 copies a rank, 2 local experts of 4, top-2: T = 8 x 4 / (2 x 2) = 8 tokens, p = 1/2; the quantiles at
    0.25 and 0.75 (above) are 3 and 5, which add up to 8: no adjustment."""
    assert random_routing_rows(8, 2, 4, 2) == (3, 5)


def test_quantiles_are_adjusted_to_the_rank_total_by_hand():
    """5 copies a rank, 4 local experts of 8, top-2: T = 5 x 8 / (4 x 2) = 5, p = 1/4. P(X <= 0) = 243/1024 =
    0.237, P(X <= 1) = 648/1024 = 0.633, P(X <= 2) = 918/1024 = 0.896: the quantiles at 1/8, 3/8, 5/8, 7/8 are 0, 1,
    1, 2 (sum 4). One row is missing: it goes to the middle expert first (index 1), giving 0, 2, 1, 2, listed in
    ascending order."""
    assert random_routing_rows(5, 4, 8, 2) == (0, 1, 2, 2)


def test_one_local_expert_or_no_rows_split_evenly():
    assert random_routing_rows(256, 1, 8, 2) == (256,)
    assert random_routing_rows(0, 4, 8, 2) == (0, 0, 0, 0)


def test_the_generated_expert_gemms_carry_the_spread(tmp_path):
    """The fixture: the busiest of the two EP ranks has 264 copies (test_llm_moe51_straggler); Binomial(264, 1/4)'s
    quantiles at 1/8, 3/8, 5/8, 7/8 are 58, 64, 68, 74 (exact CDF, from math.comb), sum 264: no adjustment. One
    cuBLAS GEMM per local expert carries those rows (fc1 forward ``[rows, 256] x [256, 1024]``); the all-to-all
    carries the busiest rank's 264 copies, which every rank waits for at the combine."""
    dims = model_dims(**MOE)
    cfg = dict(dp=2, ep=2, moe_grouped_gemm="cublas-streams")
    generate_llm(dims, LlmConfig(**cfg, moe_force_load_balancing=True), tmp_path / "r")
    generate_llm(dims, LlmConfig(**cfg), tmp_path / "e")

    def fc1_rows_and_a2a(folder):
        rows, a2a = [], []
        for n in read_rank_nodes(folder, 0):
            label = n.attrs.get("label") or n.name
            if label == "fwd.l0.mb0.experts.fc1":
                rows.append(n.attrs["tensor_size"])
            if label.startswith("ep_a2a.fwd.l0.mb0.dispatch"):
                a2a.append(n.attrs["comm_size"])
        return rows, a2a

    spread, a2a = fc1_rows_and_a2a(tmp_path / "r")
    even, a2a_even = fc1_rows_and_a2a(tmp_path / "e")
    # tensor_size = (rows x 256 (input) + 256 x 1024 (weight) + rows x 1024 (output)) x 2 B (bf16)
    assert spread == [2 * (r * 256 + 256 * 1024 + r * 1024) for r in (58, 64, 68, 74)]
    assert even == [2 * (64 * 256 + 256 * 1024 + 64 * 1024)] * 4
    assert a2a == [264 * 256 * 2] and a2a_even == [256 * 256 * 2]


def test_the_flag_and_its_refusals():
    base = "--model gpt-oss-120b --seq-len 4096 --pp 4 --dp 16 --ep 8 --moe-force-load-balancing".split()
    _, cfg = LlmSpec.from_argv(base).resolve()
    assert cfg.moe_force_load_balancing
    for extra in (["--moe-imbalance", "1.1"], ["--moe-capacity-factor", "1.0"]):
        with pytest.raises(ConfigError, match="other models of the routing"):
            LlmSpec.from_argv(base + extra).resolve()
    with pytest.raises(ConfigError, match="needs a mixture-of-experts model"):
        LlmSpec.from_argv(["--model", "llama3-8b", "--moe-force-load-balancing"]).resolve()
