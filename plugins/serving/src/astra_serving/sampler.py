"""The sampler's GPU kernels after the LM head, once per step on every row that samples a token (``--sampler``).

The step simulator's inference step ends with the LM head's GEMM (``--logits last``): the logits of each sequence's
last position, in the model's dtype. What a serving engine then runs on them to pick the token is not in the step.
vLLM V0 (v0.6.0, the serving engine ``astra serve`` models by default) runs it in PyTorch, outside the CUDA graph of
the decode step, on the driver rank, over the whole vocabulary of every sampled row
(vllm/model_executor/layers/sampler.py, ``Sampler.forward``, read at vllm-project/vllm 00f5ff34, a V0 version later
than v0.6.0 whose steps below are the ones v0.6.0's ``Sampler.forward`` has; the KV-cache sizing,
capacity.SAMPLER_BYTES_PER_LOGIT, already counts the same fp32 tensors' memory). With greedy requests (temperature 0,
as the registry's benchmark clients send), no penalties, no top-p/top-k/min-p and no logprobs requested, each row of
``V`` logits goes through six kernels, each a full pass over the row (bytes per logit):

=================================================  ==========================  ======
``logits = logits.to(torch.float)``                ``copy_``: read 2, write 4      6
``logits.div_(temperatures.unsqueeze(dim=1))``     ``div_``: read 4, write 4       8
``probs = torch.softmax(logits, dim=-1, ...)``     ``_softmax``: read 4, write 4   8
``logprobs = torch.log_softmax(logits, ...)``      ``_log_softmax``: 4 + 4         8
``logprobs[long_sample_indices]`` (greedy)         ``index``: read 4, write 4      8
``torch.argmax(..., dim=-1)``                      ``argmax``: read 4              4
=================================================  ==========================  ======

(``_sample_with_torch``: ``greedy_samples = torch.argmax(logprobs[long_sample_indices], dim=-1)``; ``get_logprobs``
skips its rank pass when no logprobs are requested; ``_apply_min_tokens_penalty`` writes nothing when ``min_tokens``
is 0.) Each kernel is timed by the GPU model as the memory-bound op it is (:meth:`GpuComputeModel.op_seconds`: its
per-kernel floor plus its bytes at the op's measured rate, ``_softmax`` and ``_log_softmax`` at theirs, the others
at the HBM rate), so nothing here is fitted. The host launches them while the GPU still runs the step's graph, so
their launch is hidden; their GPU time adds to the step. The rows are the sequences that sample: a decode step's
sequences (not the CUDA graph's padding: vLLM prunes the hidden states to the sampled rows first), a prefill's prompts
that end in it. ASSUMPTIONS: v0.6.0's ``Sampler.forward`` has these passes (the later V0 file was read, not the
tag); with TP the logits' gather to the driver rank is not timed (a few MB at TP 4); SGLang v0.3.0's sampler (fp32
logits, temperature, softmax, FlashInfer's sampling kernel; its file at v0.3.0 not read) is taken as vLLM's.
``none``: no sampler time, the step as before (the registry's TurboMind and TensorRT-LLM cases: their C++ engines
sample with their own fused kernels over a 32,000-entry vocabulary, a few microseconds, not read).
"""

from __future__ import annotations

#: ``--sampler`` choices
SAMPLERS = ("vllm-v0", "none")
#: vLLM V0's greedy sampling pass (the module doc): (the ATen op the GPU model times, bytes moved per logit)
VLLM_V0_GREEDY_KERNELS = (("copy_", 2 + 4), ("div_", 4 + 4), ("_softmax", 4 + 4), ("_log_softmax", 4 + 4),
                          ("index", 4 + 4), ("argmax", 4))


class SamplerTimer:
    """The sampler's GPU time (int ns) of one step that samples ``rows`` tokens from a ``vocab``-entry vocabulary on
    the GPU preset ``gpu`` (``memory_op_rates``: as the steps' ``--gpu-memory-op-rates``), memoised by rows."""

    def __init__(self, gpu, vocab, kernels=VLLM_V0_GREEDY_KERNELS, memory_op_rates=True):
        from astra_gpu_model.model import GpuComputeModel

        class _Context:  # the options a run hands the GPU model
            options = {"gpu": gpu, "gpu_memory_op_rates": "measured" if memory_op_rates else "off"}

        self.model = GpuComputeModel(_Context())
        self.vocab = int(vocab)
        self.kernels = tuple(kernels)
        self._memo = {0: 0}

    def __call__(self, rows):
        out = self._memo.get(rows)
        if out is None:
            from astra_gpu_model.ops import Op

            seconds = sum(self.model.op_seconds(Op(kind="memory", name=name, nbytes=rows * self.vocab * per_logit))
                          for name, per_logit in self.kernels)
            out = self._memo[rows] = int(round(seconds * 1e9))
        return out

    def to_dict(self):
        return {"gpu": self.model.gpu.name, "vocab": self.vocab,
                "kernels": [{"op": name, "bytes_per_logit": b} for name, b in self.kernels]}


def sampler_timer(name, layout, platform):
    """The :class:`SamplerTimer` of ``--sampler name`` for a replica ``layout`` on ``platform`` (None: ``none``, or a
    platform without a GPU preset, whose steps the GPU model does not time)."""
    if name == "none":
        return None
    from astra_sim.errors import ConfigError

    if name not in SAMPLERS:
        raise ConfigError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {name!r}")
    from astra_gpu_model.gpu import preset_names

    gpu = platform.describe(1).get("gpu")
    if gpu not in preset_names():
        return None
    from .capacity import model_of

    dims, _ = model_of(layout)
    run = layout.run or {}
    rates = run.get("gpu_memory_op_rates", run.get("gpu-memory-op-rates", "measured"))
    return SamplerTimer(gpu, dims.vocab, memory_op_rates=rates != "off")
