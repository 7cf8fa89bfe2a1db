"""Multi-token prediction (DeepSeek-V3's ``num_nextn_predict_layers``): in training, after the main model's LM head
the last stage runs one more module per predicted depth -- the 2h -> h projection of the hidden state and the next
token's embedding, one transformer layer and the shared LM head with its loss -- and their backward before the
main head's. Inference does not emit them (they serve speculative decoding, which is not modelled).

The module's layer is emitted as layer ``layers + k`` (its labels ``fwd.l<L+k>``), like the model's last layer
(MoE in DeepSeek-V3). ``eh_proj`` runs whole on every TP rank (as the router does); its norms are left out.
The shared head is Megatron's ``output_layer`` called again (``GPTModel._postprocess``), so with sequence
parallelism it gathers its input and reduce-scatters its input gradient as the main head does, and its weight
gradient is deferred with ``--defer-embedding-wgrad-compute`` like the main head's (:meth:`.layers.LayerOps.
head_backward`; NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/models/gpt/gpt_model.py``: ``mtp_logits,
_ = self.output_layer(hidden_states_list[mtp_layer_number + 1], weight=output_weight, ...)``).
"""

from __future__ import annotations


class MtpOps:
    """MTP modules (a stage-builder mixin)."""

    def mtp_forward(self, mb, vocab):
        dims, n, h = self.dims, self.tokens, self.dims.hidden
        for k in range(dims.mtp_layers):
            lab = f"fwd.mtp{k}.mb{mb}"
            self.mm(lab + ".eh_proj", n, 2 * h, h)
            self.layer_forward(dims.layers + k, mb)
            self.head_gather(mb, site=f"mtp{k}.mb{mb}.head")  # (sequence parallelism: as the main head's, .layers)
            self.mm(lab + ".head", n, h, vocab, linear=False)
            if self.cfg.ew:
                self.ew("aten::_log_softmax", lab + ".head.cross_entropy", [self._t(n, vocab)])

    def mtp_backward(self, mb, vocab, deps, sync, smb, params):
        """Deepest module first; each one's gradients are reduced like a layer's (``sync``, ``smb``: as for the
        layers in ``build``)."""
        dims, n, h = self.dims, self.tokens, self.dims.hidden
        deps = list(deps)
        for k in reversed(range(dims.mtp_layers)):
            lab = f"bwd.mtp{k}.mb{mb}"
            if self.cfg.ew:
                self.ew("aten::_log_softmax_backward_data", lab + ".head.cross_entropy",
                        [self._t(n, vocab), self._t(n, vocab)], deps)
                deps = []
            # the shared head's backward (its SP re-gather and reduce-scatter; its wgrad maybe deferred, .layers)
            self.wait_for(self.head_backward(mb, vocab, deps, site=f"mtp{k}.mb{mb}.head"))
            deps = []
            self.layer_backward(dims.layers + k, mb)
            self.mm(lab + ".eh_proj.dgrad", n, h, 2 * h)
            self.mm(lab + ".eh_proj.wgrad", 2 * h, n, h)
            if sync:
                dense, expert = params[f"mtp{k}"]
                self.grad_sync(f"mtp{k}", dense, mb=smb)
                self.grad_sync(f"mtp{k}.experts", expert, "edp", mb=smb)
