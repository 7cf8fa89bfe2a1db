"""Rotary position embedding (RoPE) of the queries and keys (``--rope``), forward and backward: memory-bound
kernels over Q and K after the QKV projection.

- ``eager``: eager PyTorch's ``apply_rotary_emb`` as torchtitan's Llama writes it (pytorch/torchtitan
  ``torchtitan/models/llama/model.py``): ``torch.view_as_complex(xq.float().reshape(..., -1, 2))``, the product
  with ``freqs_cis`` (complex64), ``torch.view_as_real(...).flatten(3)`` and ``.type_as(xq)``; the same for xk.
  The reshapes and views launch nothing, so each tensor costs three kernels: the cast to fp32, the complex product
  and the cast back; autograd's backward runs the same three on the gradient (the cast back's backward casts the
  gradient to fp32, the product's multiplies it by the conjugate frequencies, the cast's casts it back).
- ``fused`` in training: one kernel per tensor each way, reading the tensor and the frequencies and writing the
  result in ``--dtype`` (Transformer Engine's ``fused_apply_rotary_pos_emb``, which Megatron-LM's
  ``apply_rotary_pos_emb(t, freqs, config)`` in ``megatron/core/models/common/embeddings/rope_utils.py`` calls on
  one tensor, the query or the key, when ``config.apply_rope_fusion``; Megatron-LM's ``--no-rope-fusion`` is
  store_false, so it is on by default; NeMo's and Megatron-Bridge's Llama-style configs set it True). The
  backward is TE's fused backward, again one kernel per tensor. Full recompute reruns it with the layer's forward;
  selective recompute (core attention) does not, the rotated Q and K being the attention's saved inputs.
- ``fused`` in inference: vLLM's ``rotary_embedding`` custom op (vllm-project/vllm v0.6.0
  ``vllm/model_executor/layers/rotary_embedding.py``, ``RotaryEmbedding.forward_cuda``:
  ``ops.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox_style)`` after
  ``cos_sin_cache.to(..., dtype=query.dtype)``): one kernel per layer, in place on Q and K, reading each token's
  int64 position and its ``head_dim`` row of the cos/sin cache in ``--dtype``.

A complex64 tensor of ``d/2`` entries is written as its fp32 real view of ``d`` (the same bytes); the frequencies
as one fp32 ``(1, s, 1, d)`` tensor broadcast over batch and heads.
"""

from __future__ import annotations

from .config import rope_kernel


class RopeOps:
    """RoPE on Q and K (a stage-builder mixin)."""

    def rope_fwd(self, lab, b, s, hq, hkv, d, deps=()):
        """The rotary embedding of this rank's ``b x s x hq x d`` queries and ``hkv``-head keys; the last node's id,
        or None without ``--rope``."""
        return self._rope(lab + ".rope", b, s, hq, hkv, d, ("float", "rotate", "type_as"), deps)

    def rope_bwd(self, lab, b, s, hq, hkv, d, deps=()):
        """Its backward on the gradients of Q and K (the same kernels in reverse order)."""
        return self._rope(lab + ".rope", b, s, hq, hkv, d, ("type_as.bwd", "rotate.bwd", "float.bwd"), deps)

    def _rope(self, lab, b, s, hq, hkv, d, steps, deps):
        kind = rope_kernel(self.cfg, self.dims)
        if kind == "none":
            return None
        if kind == "fused" and self.cfg.inference:  # vLLM: Q and K rotated in place by one kernel
            tokens = b * s
            return self.ew("aten::mul_", f"{lab}.qk", [[self._t(b, s, hq, d), self._t(b, s, hkv, d)],
                                                        ((tokens,), "Tensor(long int)"), self._t(tokens, d)], deps)
        freqs = ((1, s, 1, d), "Tensor(float)")
        node = None
        for name, heads in (("q", hq), ("k", hkv)):
            x, x32 = self._t(b, s, heads, d), ((b, s, heads, d), "Tensor(float)")
            if kind == "fused":
                node = self.ew("aten::mul", f"{lab}.{name}.{steps[1]}", [x, freqs], deps)
            else:
                self.ew("aten::copy_", f"{lab}.{name}.{steps[0]}", [x, x32], deps)
                self.ew("aten::mul", f"{lab}.{name}.{steps[1]}", [x32, freqs])
                node = self.ew("aten::copy_", f"{lab}.{name}.{steps[2]}", [x32, x])
            deps = ()
        return node
