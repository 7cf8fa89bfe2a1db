"""Multi-head latent attention (DeepSeek-V2/V3): the down- and up-projection GEMMs that replace the QKV
projection, forward and backward, and the compressed KV cache that decode reads.

The down-projections (``q_a``, ``kv_a``: hidden -> latent) are small and replicated on every TP rank; the
up-projections (``q_b``, ``kv_b``: latent -> per-head queries, keys and values) are split by heads, as
Megatron-LM and vLLM shard them. Attention then runs per head with a head_dim-wide query/key and a
v_head_dim-wide value. Decode caches only the latent and the shared rotary key (``kv_lora_rank + rope_dim``
per position and layer, the same on every TP rank) and is timed in this non-absorbed form (keys and values
re-expanded per head), which is what the FLOPs count; serving engines that absorb ``kv_b`` into the query and
output projections do different GEMMs.
"""

from __future__ import annotations

from .model import mla_projections


class MlaOps:
    """MLA's projections (a stage-builder mixin)."""

    def _mla_gemms(self):
        """``[(name, k, n)]`` on one rank: the up-projections' outputs split over TP."""
        tp = self.cfg.tp
        return [(name, k, n if name in ("q_a", "kv_a") else n // tp) for name, k, n in mla_projections(self.dims)]

    def mla_forward(self, lab, deps):
        """The four projections of this rank's tokens (the first after the sequence-parallel all-gather, which
        all of them read); returns the last node."""
        n = self.tokens
        gemms = self._mla_gemms()
        name, k, w = gemms[0]
        node = self.ag_mm(lab + ".attn_in", f"{lab}.{name}", n, k, w, deps)
        for name, k, w in gemms[1:]:
            node = self.mm(f"{lab}.{name}", n, k, w)
        return node

    def mla_backward(self, lab, deps, gathered):
        """Input and weight gradients of the projections, last first; the weight gradients of the GEMMs that read
        the hidden state wait for its sequence-parallel re-gather (``gathered``)."""
        n, h = self.tokens, self.dims.hidden
        node = None
        for name, k, w in reversed(self._mla_gemms()):
            node = self.mm(f"{lab}.{name}.dgrad", n, w, k, deps)
            deps = ()
            self.mm(f"{lab}.{name}.wgrad", k, n, w, gathered if k == h else ())
        return node

    def mla_cache_bytes(self, positions):
        """Bytes of the compressed KV cache of one sequence's ``positions`` in one layer (whole on each TP rank)."""
        return positions * (self.dims.kv_lora_rank + self.dims.rope_dim) * self.nbytes
