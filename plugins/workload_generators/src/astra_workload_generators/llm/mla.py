"""Multi-head latent attention (DeepSeek-V2/V3): the down- and up-projection GEMMs that replace the QKV
projection, forward and backward, and the compressed KV cache that decode reads.

The down-projections (``q_a``, ``kv_a``: hidden -> latent) are small and replicated on every TP rank; the
up-projections (``q_b``, ``kv_b``: latent -> per-head queries, keys and values) are split by heads, as
Megatron-LM and vLLM shard them. Attention then runs per head with a head_dim-wide query/key and a
v_head_dim-wide value. Decode caches only the latent and the shared rotary key (``kv_lora_rank + rope_dim``
per position and layer, the same on every TP rank) and is timed in this non-absorbed form (keys and values
re-expanded per head), which is what the FLOPs count; serving engines that absorb ``kv_b`` into the query and
output projections do different GEMMs.

In a Megatron training step at TP > 1 without sequence parallelism the TP reduction of the backward is the
up-projections' own, as Megatron-Core's Transformer Engine layer spec builds them (NVIDIA/Megatron-LM core_r0.14.0
32ad5c89 ``megatron/core/models/gpt/gpt_layer_specs.py`` 123-147: ``linear_q_down_proj`` and
``linear_kv_down_proj`` are ``backend.linear()``, ``TELinear`` with ``parallel_mode='duplicated'``
(``megatron/core/transformer/multi_latent_attention.py`` 367-431: no TP communication); ``linear_q_up_proj``,
``linear_kv_up_proj`` and, without ``q_lora_rank``, ``linear_q_proj`` are ``TEColumnParallelLinear`` (or
``TELayerNormColumnParallelLinear`` with ``qk_layernorm``)): each all-reduces its input gradient, the latent's
``tokens x q_lora_rank`` / ``tokens x kv_lora_rank`` (the hidden state's ``tokens x h`` for ``linear_q_proj``),
launched after its input-gradient GEMM and waited for after its weight gradient (``.layers _dgrad_reduce``), and
the duplicated down-projections then give every TP rank the whole gradient of the hidden state: no all-reduce of
it. Megatron-Core's non-SP path does not reduce the shared rotary key's (``k_pos_emb``) gradient over TP either
(multi_latent_attention.py 560-570: only the SP branch gathers it, whose backward reduce-scatters): nothing is
emitted for it. With sequence parallelism, outside Megatron, and at TP 1 the layer keeps one reduction of the
hidden state's gradient after the projections, as before (ASSUMPTION with SP: Megatron-Core gathers and
reduce-scatters the latents and the rotary key there instead, not modelled).
"""

from __future__ import annotations

from astra_sim.chakra import types as T

from .model import mla_projections

#: MLA's down-projections: whole on every TP rank (Megatron-Core's ``TELinear(parallel_mode='duplicated')``)
DUPLICATED = ("q_a", "kv_a")


class MlaOps:
    """MLA's projections (a stage-builder mixin)."""

    def _mla_gemms(self):
        """``[(name, k, n)]`` on one rank: the up-projections' outputs split over TP."""
        tp = self.cfg.tp
        return [(name, k, n if name in DUPLICATED else n // tp) for name, k, n in mla_projections(self.dims)]

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

    def mla_own_reductions(self):
        """Whether each TP-split projection reduces its own input gradient (a Megatron training step at TP > 1
        without sequence parallelism; see the module docstring) instead of one reduction of the hidden state's."""
        cfg = self.cfg
        return cfg.tp > 1 and not cfg.sequence_parallel and self.megatron_training

    def mla_backward(self, lab, deps, gathered):
        """Input and weight gradients of the projections, last first; the weight gradients of the GEMMs that read
        the hidden state wait for its sequence-parallel re-gather (``gathered``). With :meth:`mla_own_reductions`
        each TP-split projection's input gradient is all-reduced (``tp_ar.<lab>.<name>_in``): beside its weight
        gradient, waited for after it (``.layers _dgrad_reduce``), or on the chain after it where that gives
        none (``--no-async-tensor-model-parallel-allreduce``, a frozen weight). Returns whether it did (then the
        caller reduces nothing more)."""
        n, h = self.tokens, self.dims.hidden
        own = self.mla_own_reductions()
        for name, k, w in reversed(self._mla_gemms()):
            self.mm(f"{lab}.{name}.dgrad", n, w, k, deps)
            deps = ()
            reduce = own and name not in DUPLICATED
            size = n * k * self.nbytes  # (the projection's input: a latent, or the hidden state)
            reduced = self._dgrad_reduce(f"{lab}.{name}_in", size) if reduce else []
            self.mm(f"{lab}.{name}.wgrad", k, n, w, gathered if k == h else ())
            if reduced:
                self.wait_for(reduced)
            elif reduce:
                self.coll(f"tp_ar.{lab}.{name}_in", T.ALL_REDUCE, size, "tp")
        return own

    def mla_cache_bytes(self, positions):
        """Bytes of the compressed KV cache of one sequence's ``positions`` in one layer (whole on each TP rank)."""
        return positions * (self.dims.kv_lora_rank + self.dims.rope_dim) * self.nbytes
