"""Multi-token prediction (DeepSeek-V3's ``num_nextn_predict_layers``): in training, after the main model's LM head
the last stage runs one more module per predicted depth -- the 2h -> h projection of the hidden state and the next
token's embedding, one transformer layer and the shared LM head with its loss -- and their backward before the
main head's. Inference does not emit them (they serve speculative decoding, which is not modelled).

The module's layer is emitted as layer ``layers + k`` (its labels ``fwd.l<L+k>``), like the model's last layer
(MoE in DeepSeek-V3). ``eh_proj`` is a column-parallel linear (``h/TP`` outputs per rank, no bias) whose output
is gathered over TP along its last dimension (``gather_from_tensor_model_parallel_region``: an all-gather forward,
a split backward) and, with sequence parallelism, split back to ``s/TP`` rows (``scatter_to_sequence_parallel_
region``: a split forward, an all-gather of the gradient backward); as a sequence-parallel column-parallel linear
it all-gathers its ``[s/TP, 2h]`` input first and reduce-scatters its input gradient (without sequence parallelism:
all-reduces it). NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/transformer/multi_token_prediction.py``
326, 457-467 (``eh_proj=column_parallel_linear_impl``, ``gather_output=False, bias=False``) and 509-529
(``_concat_embeddings``). Its norms' compute is left out (their weights are counted, :data:`.model.
MTP_MODULE_NORMS`).
The shared head is Megatron's ``output_layer`` called again (``GPTModel._postprocess``), so with sequence
parallelism it gathers its input and reduce-scatters its input gradient as the main head does, and its weight
gradient is deferred with ``--defer-embedding-wgrad-compute`` like the main head's (:meth:`.layers.LayerOps.
head_backward`; NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/models/gpt/gpt_model.py``: ``mtp_logits,
_ = self.output_layer(hidden_states_list[mtp_layer_number + 1], weight=output_weight, ...)``).
"""

from __future__ import annotations

from astra_sim.chakra import types as T


class MtpOps:
    """MTP modules (a stage-builder mixin)."""

    def mtp_forward(self, mb, vocab):
        dims, n, h = self.dims, self.tokens, self.dims.hidden
        for k in range(dims.mtp_layers):
            lab = f"fwd.mtp{k}.mb{mb}"
            self.eh_proj_forward(lab, n, h)
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
            self.eh_proj_backward(lab, n, h)
            if sync:
                dense, expert = params[f"mtp{k}"]
                self.grad_sync(f"mtp{k}", dense, mb=smb)
                self.grad_sync(f"mtp{k}.experts", expert, "edp", mb=smb)

    def eh_proj_forward(self, lab, n, h):
        """``eh_proj`` on this rank's ``h/TP`` outputs between its TP gathers (see the module's notes)."""
        tp, sp = self.cfg.tp, self.cfg.sequence_parallel
        if tp > 1 and sp:  # the column-parallel linear's sequence-parallel input gather ([s/TP, 2h] -> [s, 2h])
            self.coll(f"tp_ag.{lab}.eh_proj_in", T.ALL_GATHER, 2 * self.act_bytes, "tp")
        self.mm(lab + ".eh_proj", n, 2 * h, h // tp)
        if tp > 1:  # gather_from_tensor_model_parallel_region: [s, h/TP] -> [s, h]
            self.coll(f"tp_ag.{lab}.eh_proj_out", T.ALL_GATHER, self.act_bytes, "tp")

    def eh_proj_backward(self, lab, n, h):
        """The input- and weight-gradient GEMMs of ``eh_proj``'s shard; with sequence parallelism first the
        gradient's all-gather (the backward of the scatter to ``s/TP`` rows); after the input gradient its
        reduction over TP (reduce-scatter with sequence parallelism, else all-reduce), launched asynchronously
        beside the weight gradient and waited for after it, as Megatron's linears do
        (``LinearWithGradAccumulationAndAsyncCommunication.backward``, core_r0.14.0 ``megatron/core/
        tensor_parallel/layers.py``)."""
        tp, sp = self.cfg.tp, self.cfg.sequence_parallel
        if tp > 1 and sp:
            self.coll(f"tp_ag.{lab}.eh_proj_out_grad", T.ALL_GATHER, self.act_bytes, "tp")
        self.mm(lab + ".eh_proj.dgrad", n, h // tp, 2 * h)
        reduce = []
        if tp > 1:
            kind, comm = ("rs", T.REDUCE_SCATTER) if sp else ("ar", T.ALL_REDUCE)
            reduce = [self.coll(f"tp_{kind}.{lab}.eh_proj_in", comm, 2 * self.act_bytes, "tp", [self.prev],
                                chain=False)]
        self.mm(lab + ".eh_proj.wgrad", 2 * h, n, h // tp)
        self.wait_for(reduce)
