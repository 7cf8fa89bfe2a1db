"""Rotary position embedding (RoPE) of the queries and keys (``--rope``), forward and backward: memory-bound
kernels over Q and K after the QKV projection.

- ``eager``: eager PyTorch's ``apply_rotary_emb`` as torchtitan's Llama writes it (pytorch/torchtitan
  ``torchtitan/models/llama/model.py``): ``torch.view_as_complex(xq.float().reshape(..., -1, 2))``, the product
  with ``freqs_cis`` (complex64), ``torch.view_as_real(...).flatten(3)`` and ``.type_as(xq)``; the same for xk.
  The reshapes and views launch nothing, so each tensor costs three kernels: the cast to fp32, the complex product
  and the cast back; autograd's backward runs the same three on the gradient (the cast back's backward casts the
  gradient to fp32, the product's multiplies it by the conjugate frequencies, the cast's casts it back).
  torchtitan's compiled block (``--torch-compile``) runs the same three: TorchInductor generates no code for
  complex operators and falls back to ATen for the product ("Torchinductor does not support code generation for
  complex operators", ``torch/_inductor/lowering.py``, reported on this very RoPE in pytorch/torchtitan#15), so the
  casts before and after it stay kernels of their own.
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

Before the rotation, a model with query/key norms (``dims.qk_norm``: Qwen3, Gemma 3) normalises each query and
key head over its ``head_dim`` (:meth:`RopeOps.qk_norm_fwd`): Hugging Face's ``Qwen3Attention.forward`` runs
``self.q_norm(self.q_proj(hidden_states).view(hidden_shape))`` and the same for the keys, then
``apply_rotary_pos_emb`` (huggingface/transformers v4.55.0 ``models/qwen3/modeling_qwen3.py``); Megatron-Core's
``SelfAttention.get_query_key_value_tensors`` applies ``q_layernorm`` / ``k_layernorm`` to the split query and key
before ``forward`` rotates them (core_r0.14.0 32ad5c89 ``megatron/core/transformer/attention.py``); vLLM's Qwen3
likewise (``q_norm`` / ``k_norm`` on the heads before ``rotary_emb``). One norm kernel per tensor each way, timed
as the layers' norms are (:meth:`.layers.LayerOps.layer_norm`: ATen's fused RMSNorm, or LayerNorm with its bias) over
``b x s x heads`` rows of ``head_dim``.

**Megatron-Core's QKV split** (a Megatron training step, not MLA; :meth:`RopeOps.qkv_split_fwd`,
:meth:`RopeOps.qkv_split_value`, :meth:`RopeOps.qkv_split_bwd`). ``SelfAttention.get_query_key_value_tensors`` views the
QKV GEMM's ``[s, b, hp]`` output as ``[s, b, ng, (np/ng + 2) hn]`` and splits it along the last dimension with
Transformer Engine's ``SplitAlongDim`` (views), then ``query.reshape(s, b, -1, hn)`` (NVIDIA/Megatron-LM 791b70e0, the
core_r0.11.0 of NeMo 25.02's ``requirements/manifest.json``, and core_v0.15.0, ``megatron/core/transformer/
attention.py``). Three copies follow, none of which the generator had:

- the query's reshape merges the group dimension (stride ``(np/ng + 2) hn``) with the heads of a group (stride
  ``hn``): not a view when ``1 < ng < np`` (grouped-query attention), so PyTorch copies the query (read and write
  ``b s np hn`` elements);
- RoPE writes new query and key tensors (TE's ``fused_apply_rotary_pos_emb``), so the value, still a strided view of
  the QKV output, no longer matches the keys' strides: TE's ``get_qkv_layout`` finds no supported layout and makes
  ``q, k, v`` contiguous (``# force q,k,v to be contiguous``: TE v2.1 ``pytorch/attention.py``, v2.9
  ``pytorch/attention/dot_product_attention/utils.py``), which copies the value (``b s ng hn``; the rotated query and
  key are already contiguous under core_v0.15.0's ``sbhd``; core_r0.11.0's ``bshd`` path, ``TEDotProductAttention
  .forward``'s ``x.transpose(0, 1).contiguous()``, copies the same value and leaves the rotated ones as they are);
- ``SplitAlongDim.backward`` returns a view only when the three gradients lie in the split's own storage; the
  rotated query's and key's gradients are new tensors (and a grouped query's comes through the reshape's copy), so it
  runs ``torch.cat(grad_outputs, dim=split_dim)``: read dQ, dK, dV, write the ``[s, b, hp]`` gradient (TE v2.1
  ``_SplitAlongDim``, v2.9 ``utils.SplitAlongDim``). Without RoPE and with ``np == ng`` (GPT-3's learned positions,
  multi-head attention) the three are views of one ``sbh3d`` buffer at both ends: nothing is copied.

``--rope fused-qkv`` is TE's ``apply_fused_qkv_rotary_pos_emb`` (NVIDIA/TransformerEngine 84fa28d2, 2025-09-08, "Fused
RoPE with combined QKV input"; Megatron-Core ``fused_single_qkv_rope``, the MLPerf v5.1 Llama 3.1 8B configs'
``FUSED_QKV_ROPE``): one kernel reads the whole QKV output and writes the rotated query and key and the value (its
backward reads their gradients and writes the QKV gradient), so none of the three copies is made.
"""

from __future__ import annotations

from .config import rope_kernel


class RopeOps:
    """RoPE on Q and K (a stage-builder mixin)."""

    def rope_fwd(self, lab, b, s, hq, hkv, d, deps=()):
        """Megatron-Core's query reshape (:meth:`qkv_split_fwd`), the query/key norms (:meth:`qk_norm_fwd`), the rotary
        embedding of this rank's ``b x s x hq x d`` queries and ``hkv``-head keys, then TE's copy of the value
        (:meth:`qkv_split_value`); the last node's id, or None without any."""
        split = self.qkv_split_fwd(lab, b, s, hq, hkv, d, deps)
        deps = () if split is not None else deps
        norm = self.qk_norm_fwd(lab, b, s, hq, hkv, d, deps)
        rope = self._rope(lab + ".rope", b, s, hq, hkv, d, ("float", "rotate", "type_as"), () if norm else deps)
        value = self.qkv_split_value(lab, b, s, hkv, d)
        return next((n for n in (value, rope, norm, split) if n is not None), None)

    def rope_bwd(self, lab, b, s, hq, hkv, d, deps=()):
        """Its backward on the gradients of Q and K (the same kernels in reverse order, the norms' last). The split's
        concatenation of dQ, dK and dV (:meth:`qkv_split_bwd`) comes once context parallelism's dK/dV are home."""
        rope = self._rope(lab + ".rope", b, s, hq, hkv, d, ("type_as.bwd", "rotate.bwd", "float.bwd"), deps)
        norm = self.qk_norm_bwd(lab, b, s, hq, hkv, d, deps if rope is None else ())
        return rope if norm is None else norm

    def _megatron_split(self):
        """Megatron-Core's unfused QKV split runs (the module docstring): a Megatron training step with its
        element-wise nodes, not MLA (its own projections), and no ``--rope fused-qkv``."""
        return (self.megatron_training and self.cfg.ew and not self.dims.mla
                and rope_kernel(self.cfg, self.dims) != "fused-qkv")

    def qkv_split_fwd(self, lab, b, s, hq, hkv, d, deps=()):
        """The query's ``reshape`` copy: grouped-query attention (``1 < hkv < hq`` on this rank) in Megatron-Core's
        split; read and write ``b x s x hq x d`` in ``--dtype``. The node's id or None."""
        if not (self._megatron_split() and 1 < hkv < hq):
            return None
        q = self._t(b, s, hq, d)
        return self.ew("aten::copy_", f"{lab}.qkv_split.q", [q, q], deps)

    def qkv_split_value(self, lab, b, s, hkv, d):
        """TE's ``.contiguous()`` of the value once RoPE has written new queries and keys (a rotary model in
        Megatron-Core's split); read and write ``b x s x hkv x d``. The node's id or None."""
        if not (self._megatron_split() and rope_kernel(self.cfg, self.dims) != "none"):
            return None
        v = self._t(b, s, hkv, d)
        return self.ew("aten::copy_", f"{lab}.qkv_split.v", [v, v])

    def qkv_split_bwd(self, lab, b, s, hq, hkv, d, deps=()):
        """``SplitAlongDim.backward``'s ``torch.cat`` of dQ, dK and dV into the QKV output's gradient where they are not
        views of one buffer (a rotary model, or grouped-query attention); reads them and writes the
        ``b x s x (hq + 2 hkv) x d`` gradient. The node's id or None."""
        if not (self._megatron_split() and (rope_kernel(self.cfg, self.dims) != "none" or 1 < hkv < hq)):
            return None
        return self.ew("aten::cat", f"{lab}.qkv_split.bwd",
                       [[self._t(b, s, hq, d), self._t(b, s, hkv, d), self._t(b, s, hkv, d)]], deps)

    def qk_norm_fwd(self, lab, b, s, hq, hkv, d, deps=()):
        """``dims.qk_norm``: one norm of ``head_dim`` over this rank's query rows (``b x s x hq``) and one over its
        key rows (``hkv`` heads), forward (with the layers' other norms: ``cfg.ew_forward``); the last id or None."""
        if not (self.dims.qk_norm and self.cfg.ew_forward):
            return None
        node = None
        for name, heads in (("q", hq), ("k", hkv)):
            node = self.norm_kernel(f"{lab}.{name}_norm", b * s * heads, d, deps)
            deps = ()
        return node

    def qk_norm_bwd(self, lab, b, s, hq, hkv, d, deps=()):
        """Their backward (training, ``cfg.ew``): ``_fused_rms_norm_backward`` / ``native_layer_norm_backward`` of
        each, reading the gradient, the input and the fp32 statistics, as :meth:`.layers.LayerOps.layer_norm_bwd`."""
        if not (self.dims.qk_norm and self.cfg.ew):
            return None
        node = None
        for name, heads in (("k", hkv), ("q", hq)):
            node = self.norm_kernel_bwd(f"{lab}.{name}_norm", b * s * heads, d, deps)
            deps = ()
        return node

    def _rope(self, lab, b, s, hq, hkv, d, steps, deps):
        kind = rope_kernel(self.cfg, self.dims)
        if kind == "none":
            return None
        if kind == "fused" and self.cfg.inference:  # vLLM: Q and K rotated in place by one kernel
            tokens = b * s
            return self.ew("aten::mul_", f"{lab}.qk", [[self._t(b, s, hq, d), self._t(b, s, hkv, d)],
                                                        ((tokens,), "Tensor(long int)"), self._t(tokens, d)], deps)
        freqs = ((1, s, 1, d), "Tensor(float)")
        if kind == "fused-qkv":  # TE's fused QKV RoPE: the whole QKV output in, the rotated Q, K and the V out
            return self.ew("aten::mul", f"{lab}.qkv.{steps[1]}", [self._t(b, s, hq + 2 * hkv, d), freqs], deps)
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
