"""kv_capacity follows vLLM's accounting: one hand-computed check per term (docs/memory.md, "Serving: vLLM's
accounting")."""

import pytest

from astra_serving.capacity import (
    GIB, NON_TORCH_BYTES, NON_TORCH_TP_BYTES, SAMPLER_BYTES_PER_LOGIT, VISIBLE_MEMORY_BYTES, VISIBLE_SHARE_ASSUMED,
    kv_capacity, model_of,
)
from astra_serving.steptime import Layout
from astra_sim.errors import InfeasibleError

#: Llama 3 8B's matrices, counted by hand: 32 layers x (Q 4096^2 + K, V 2 x 4096 x 1024 + O 4096^2 + gated FFN
#: 3 x 4096 x 14336) + untied embedding and LM head 2 x 128256 x 4096 (its 8,030,261,248 parameters less the
#: RMSNorms' 266,240, which the memory model leaves out)
LLAMA3_8B_PARAMS = 32 * (4096 ** 2 + 2 * 4096 * 1024 + 4096 ** 2 + 3 * 4096 * 14336) + 2 * 128256 * 4096
LLAMA3_8B_VOCAB = 128256


def _layout(model="llama3-8b", platform="hgx-h100", tp=1, pp=1):
    return Layout({"model": model}, platform, tp=tp, pp=pp, ep=1, run={}, gpus_per_node=8)


def test_budget_is_what_cuda_reports_times_the_utilization():
    h100 = kv_capacity(_layout(), 0.9)
    assert h100.visible_bytes == VISIBLE_MEMORY_BYTES["H100-SXM5-80GB"] == round(79.22 * GIB)
    assert h100.usable_bytes == int(round(79.22 * GIB) * 0.9)
    half = kv_capacity(_layout(), 0.5)
    assert half.usable_bytes == int(round(79.22 * GIB) * 0.5)
    # a GPU without a logged total: its HBM times the H100's visible share
    a100 = kv_capacity(_layout(platform="dgx-a100"), 0.9)
    assert a100.visible_bytes == int(80 * GIB * VISIBLE_SHARE_ASSUMED)
    assert kv_capacity(_layout(platform="dgx-a100-40gb"), 0.9).visible_bytes == round(39.38 * GIB)


def test_weights_are_the_models_parameters_in_16_bit_per_tp_rank():
    norms = 32 * 2 * 4096 + 4096  # two RMSNorm weights a layer and the final norm (counted since 664c29e)
    assert LLAMA3_8B_PARAMS + norms == 8_030_261_248  # Hugging Face's count of Llama 3 8B
    assert kv_capacity(_layout()).weights_bytes == 2 * (LLAMA3_8B_PARAMS + norms) == 16_060_522_496
    # TP 2: half of every matrix, the norms whole on each rank
    assert kv_capacity(_layout(tp=2)).weights_bytes == LLAMA3_8B_PARAMS + 2 * norms


def test_sampler_holds_the_gathered_logits_of_max_num_seqs_rows():
    full = kv_capacity(_layout(), max_num_batched_tokens=8192, max_num_seqs=256)
    assert SAMPLER_BYTES_PER_LOGIT == 14
    assert full.sampler_bytes == 256 * LLAMA3_8B_VOCAB * 14 == 459_669_504
    one = kv_capacity(_layout(), max_num_batched_tokens=8192, max_num_seqs=1)
    assert one.sampler_bytes == LLAMA3_8B_VOCAB * 14
    assert one.kv_bytes - full.kv_bytes == 255 * LLAMA3_8B_VOCAB * 14
    # never more rows than the profiling run has tokens
    assert kv_capacity(_layout(), max_num_batched_tokens=64, max_num_seqs=256).sampler_bytes == 64 * 128256 * 14


def test_non_torch_memory_grows_with_tensor_parallelism():
    assert kv_capacity(_layout()).workspace_bytes == NON_TORCH_BYTES == round(0.16 * GIB)
    assert kv_capacity(_layout(tp=2)).workspace_bytes == NON_TORCH_TP_BYTES == round(0.34 * GIB)


def test_activation_peak_is_the_profiling_run_of_max_num_batched_tokens():
    from astra_workload_generators.llm.memory import peak_memory

    layout = _layout()
    for tokens in (2048, 8192):
        cap = kv_capacity(layout, max_num_batched_tokens=tokens)
        assert cap.activations_bytes == peak_memory(*model_of(layout, mode="prefill", batch_size=1,
                                                              prompt_len=tokens)).activations
    assert kv_capacity(layout, max_num_batched_tokens=8192).activations_bytes > \
        kv_capacity(layout, max_num_batched_tokens=2048).activations_bytes
    # the profiling run is capped at the context (--max-model-len)
    assert kv_capacity(layout, max_num_batched_tokens=8192, max_model_len=2048).activations_bytes == \
        kv_capacity(layout, max_num_batched_tokens=2048).activations_bytes


@pytest.mark.parametrize("tp, per_token", [(1, 2 * 8 * 128 * 2 * 32), (2, 2 * 4 * 128 * 2 * 32)])
def test_blocks_are_what_is_left_over_the_block_bytes(tp, per_token):
    cap = kv_capacity(_layout(tp=tp), 0.9, 16, 8192, None, 256)
    left = cap.usable_bytes - cap.weights_bytes - cap.activations_bytes - cap.sampler_bytes - cap.workspace_bytes
    assert cap.kv_bytes == left and cap.kv_bytes_per_token == per_token
    assert cap.blocks == left // (16 * per_token) and cap.tokens == 16 * cap.blocks
    assert kv_capacity(_layout(tp=tp), 0.9, 32, 8192, None, 256).blocks == left // (32 * per_token)


def test_cuda_context_and_graph_pool_are_outside_the_budget():
    """vLLM's baseline is taken after the CUDA context exists and graphs are captured after the KV cache is
    allocated: nothing beyond weights, activations, sampler and non-torch memory comes out of the budget."""
    cap = kv_capacity(_layout())
    parts = cap.weights_bytes + cap.activations_bytes + cap.sampler_bytes + cap.workspace_bytes
    assert cap.usable_bytes - parts == cap.kv_bytes


def test_pipeline_stages_take_the_smallest_cache_and_the_last_runs_the_sampler():
    from astra_workload_generators.llm.memory import memory_estimate

    layout = _layout(model="llama3-70b", tp=4, pp=2)
    cap = kv_capacity(layout, 0.9, 16, 2048, None, 256)
    stages = memory_estimate(*model_of(layout, mode="prefill", batch_size=1, prompt_len=2048))
    left = [cap.usable_bytes - m.weights - m.activations - NON_TORCH_TP_BYTES for m in stages]
    left[-1] -= 256 * LLAMA3_8B_VOCAB * 14
    assert cap.kv_bytes == min(left)
    assert cap.kv_bytes_per_token == 2 * 2 * 128 * 2 * 40  # 8 KV heads / TP 4, 40 of the 80 layers
    assert cap.blocks == min(left) // (16 * cap.kv_bytes_per_token)


def test_a_model_that_leaves_no_room_is_refused_with_its_parts():
    with pytest.raises(InfeasibleError, match=r"no room for a KV cache: H100-SXM5-80GB x 1 .* the weights take "
                                              r"141\.1 GB"):
        kv_capacity(_layout(model="llama3-70b"))


def test_report_dict_carries_every_term():
    d = kv_capacity(_layout()).to_dict()
    for key in ("visible_bytes", "usable_bytes", "weights_bytes", "activations_bytes", "sampler_bytes",
                "workspace_bytes", "kv_bytes", "blocks", "tokens"):
        assert isinstance(d[key], int) and d[key] > 0
