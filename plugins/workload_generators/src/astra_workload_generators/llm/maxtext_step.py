"""What MaxText's training step on GPU (JAX/XLA) runs where the generic ZeRO-3 step differs, as MaxText's own
config keys name it: ``--remat-policy minimal_flash`` (``remat_policy``) and ``--iota-embed`` (``use_iota_embed``).

Sources:

- ``remat_policy: minimal_flash``: MaxText's ``get_remat_policy`` (AI-Hypercomputer/maxtext ``MaxText/layers/
  models.py``, the 2024 code) is ``jax.checkpoint_policies.save_from_both_policies(
  checkpoint_dots_with_no_batch_dims, save_only_these_names("context"))``: a decoder layer keeps the outputs of its
  weight matmuls (dots without batch dimensions: Q, K, V, the output projection, wi_0, wi_1, wo) and of the values
  named "context". Transformer Engine's JAX fused attention (NVIDIA/TransformerEngine
  ``transformer_engine/jax/attention.py``, ``_fused_attn_fwd_rule``) names its output, its softmax statistics and
  its RNG state "context", so the attention is not run again (NVIDIA/JAX-Toolbox's MaxText README: minimal_flash
  "saves the flash attention output tensor named 'context'"). Everything else the backward needs is computed
  again from what was kept, before the layer's backward: the pre-attention RMSNorm (the Q/K/V weight gradients'
  input), RoPE of Q and K (the attention backward's inputs; MaxText's Attention applies ``apply_rotary_embedding``
  to both), the residual sum and the post-attention RMSNorm (wi_0/wi_1's weight-gradient input), and the
  activation product ``silu(wi_0) * wi_1`` (wo's). Each as the one kernel XLA fuses it into: a norm kernel, one
  RoPE kernel per tensor (``--rope fused``), the add and the activation product each one kernel (read the inputs,
  write the result). ASSUMPTION: XLA fuses each of them into one kernel and into nothing else (the GEMMs are
  cuBLAS custom calls, which take no element-wise prologue). The memory estimate still keeps every activation
  (as without recomputation), more than minimal_flash keeps.
- ``use_iota_embed: true`` (the JAX-Toolbox MaxText page's example run, ``docs/frameworks/maxtext/
  example_slurm.sub``, with the table's remat_policy, attention and batch): MaxText's ``Embed.__call__``
  (``MaxText/layers/embeddings.py``) builds ``one_hot = jnp.array(inputs[..., None] == iota, dtype)`` and takes
  ``jnp.dot(one_hot, embedding)``. Forward: the one-hot matrix written (``tokens x vocab`` in ``--dtype``, timed as
  a fill: it reads only the token ids) and the ``[tokens, vocab] x [vocab, hidden]`` GEMM. Backward: the embedding
  table's gradient, the transposed GEMM ``[vocab, tokens] x [tokens, hidden]``; the token ids have no gradient, and
  the one-hot matrix is kept from the forward (the embedding is outside the rematerialised layers).
"""

from __future__ import annotations


class MaxTextOps:
    """MaxText's rematerialisation and iota embedding (a stage-builder mixin)."""

    def maxtext_recompute(self, lab, deps=()):
        """``--remat-policy minimal_flash``: a dense layer's element-wise forward again at the start of its
        backward (see the module); returns the deps left for the next node (``[]`` once used)."""
        cfg, dims = self.cfg, self.dims
        if cfg.remat_policy != "minimal_flash" or not cfg.ew:
            return deps
        tp, h, r, n = cfg.tp, dims.hidden, self.ln_rows, self.tokens
        self.layer_norm(lab + ".remat.ln1", deps)
        self.rope_fwd(lab + ".remat", cfg.micro_batch_size, self.seq, dims.heads // tp, dims.kv_heads // tp,
                      dims.head_dim)
        self.ew("aten::add", lab + ".remat.residual", [self._t(r, h), self._t(r, h)])
        self.layer_norm(lab + ".remat.ln2")
        f = dims.ffn_hidden // tp
        if dims.gated:  # silu(wi_0) * wi_1: reads both, writes the product
            self.ew("aten::mul", lab + ".remat.act", [self._t(n, f), self._t(n, f)])
        else:
            self.ew("aten::gelu", lab + ".remat.act", [self._t(n, f)])
        return []

    def iota_embed_fwd(self, mb, vocab, deps=()):
        """``--iota-embed``: the one-hot matrix of this micro-batch's tokens (a write of ``tokens x vocab``, with
        the memory-bound nodes on) and its matmul with the (gathered) ``vocab x hidden`` table."""
        n, h = self.tokens, self.dims.hidden
        if self.cfg.ew:
            self.ew("aten::zero_", f"fwd.embedding.mb{mb}.one_hot", [self._t(n, vocab)], deps)
            deps = ()
        return self.mm(f"fwd.embedding.mb{mb}", n, vocab, h, deps, linear=False)

    def iota_embed_bwd(self, mb, vocab):
        """Its backward: the table's gradient, ``one_hot^T x`` the output gradient."""
        return self.mm(f"bwd.embedding.mb{mb}.wgrad", vocab, self.tokens, self.dims.hidden, linear=False)
