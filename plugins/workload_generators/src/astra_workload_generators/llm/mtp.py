"""Multi-token prediction (DeepSeek-V3's ``num_nextn_predict_layers``): in training, after the main model's LM head
the last stage runs one more module per predicted depth -- the 2h -> h projection of the hidden state and the next
token's embedding, one transformer layer and the shared LM head with its loss -- and their backward before the
main head's. Inference does not emit them (they serve speculative decoding, which is not modelled).

The module's layer is emitted as layer ``layers + k`` (its labels ``fwd.l<L+k>``), like the model's last layer
(MoE in DeepSeek-V3). ``eh_proj`` runs whole on every TP rank (as the router does); its norms are left out.
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
            self.mm(lab + ".head.dgrad", n, vocab, h, deps, linear=False)
            deps = []
            self.mm(lab + ".head.wgrad", h, n, vocab, linear=False)
            self.layer_backward(dims.layers + k, mb)
            self.mm(lab + ".eh_proj.dgrad", n, h, 2 * h)
            self.mm(lab + ".eh_proj.wgrad", 2 * h, n, h)
            if sync:
                dense, expert = params[f"mtp{k}"]
                self.grad_sync(f"mtp{k}", dense, mb=smb)
                self.grad_sync(f"mtp{k}.experts", expert, "edp", mb=smb)
