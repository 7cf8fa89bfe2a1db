"""What an eager PyTorch training step under torchtitan runs besides the layers' GEMMs, attention, norms and RoPE
(``--framework fsdp2``): the loss in fp32, the grouped-query attention's ``repeat_kv`` copies, and the gradient
clipping and AdamW step as ``foreach`` kernels. Every other framework keeps the step it had (one bf16 log-softmax
each way, no K/V copies, one fused Adam node).

Sources (pytorch/torchtitan at 9dec370, the Grand Teton rows, and at 04133643, the A100 rows):

- the loss: ``loss_fn`` is ``cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`` (9dec370
  ``train.py``; 04133643's ``model.py`` ends ``output = self.output(h).float()``): the logits are cast to fp32 and
  the log-softmax runs in fp32. Its backward: ``nll_loss_backward`` fills an fp32 gradient of the logits' size with
  zeros before scattering one value per row, the log-softmax backward runs in fp32, and the cast's backward casts
  the gradient back to bf16.
- ``repeat_kv`` (``torchtitan/models/llama/model.py``): ``torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv_heads,
  n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)`` on the keys and on the values: the reshape of
  an expanded view copies (``hq`` heads written from ``hkv``). Its backward sums the gradient over the ``n_rep``
  copies. Op-level selective checkpointing saves neither copy, so the recomputation runs them again.
- the optimizer: ``build_optimizers`` passes ``"fused": fused, "foreach": not fused`` with ``optimizer.fused``
  off by default (9dec370; 04133643: ``AdamW(..., weight_decay=0.1, foreach=True)``), so
  ``torch.optim.adamw._multi_tensor_adamw`` runs: ``_foreach_mul_`` (weight decay), ``_foreach_lerp_`` (first
  moment), ``_foreach_mul_`` and ``_foreach_addcmul_`` (second moment), ``_foreach_sqrt``, ``_foreach_div_``,
  ``_foreach_add_`` (the denominator) and ``_foreach_addcdiv_`` (the update), each over every fp32 shard: 84 bytes
  per parameter as the gpu model counts them, against the fused kernel's 20.
- gradient clipping: ``clip_grad_norm_(..., foreach=True)`` every step (``max_norm = 1.0``): ``_foreach_norm`` of
  the gradients, the norm's all-reduce over the FSDP group (a DTensor partial norm made whole), then
  ``_foreach_mul_`` of the gradients by the clip coefficient (``torch.nn.utils.clip_grads_with_norm_``).
"""

from __future__ import annotations

from astra_sim.chakra import types as T

F32 = "Tensor(float)"
#: the AdamW foreach kernels of ``_multi_tensor_adamw`` (capturable off): (op, label, lists it touches), the first
#: list written back by an in-place op; p = parameters, g = gradients, m, v = the moments, d = the denominator
FOREACH_ADAMW = (
    ("aten::_foreach_mul_", "weight_decay", "p"),
    ("aten::_foreach_lerp_", "exp_avg", "mg"),
    ("aten::_foreach_mul_", "exp_avg_sq.decay", "v"),
    ("aten::_foreach_addcmul_", "exp_avg_sq", "vgg"),
    ("aten::_foreach_sqrt", "denom.sqrt", "v"),
    ("aten::_foreach_div_", "denom.bias_correction", "d"),
    ("aten::_foreach_add_", "denom.eps", "d"),
    ("aten::_foreach_addcdiv_", "update", "pmd"),
)


class EagerStepOps:
    """torchtitan's eager loss, ``repeat_kv`` and foreach optimizer (a stage-builder mixin)."""

    def _eager(self):
        """Only under ``--framework fsdp2`` (FSDP2 under torchtitan) in a training step."""
        return not self.cfg.inference and self.cfg.framework == "fsdp2"

    def loss_fwd(self, mb, n, vocab):
        """The cross entropy over this rank's ``n x vocab`` logits."""
        label = f"fwd.head.mb{mb}.cross_entropy"
        if not self._eager():
            return self.ew("aten::_log_softmax", label, [self._t(n, vocab)])
        logits32 = ((n, vocab), F32)
        self.ew("aten::copy_", label + ".float", [self._t(n, vocab), logits32])
        return self.ew("aten::_log_softmax", label, [logits32])

    def loss_bwd(self, mb, n, vocab, deps=()):
        """Its backward, down to the logits' gradient in ``--dtype``."""
        label = f"bwd.head.mb{mb}.cross_entropy"
        if not self._eager():
            return self.ew("aten::_log_softmax_backward_data", label, [self._t(n, vocab), self._t(n, vocab)], deps)
        logits32 = ((n, vocab), F32)
        self.ew("aten::zero_", label + ".nll_loss", [logits32], deps)
        self.ew("aten::_log_softmax_backward_data", label, [logits32, logits32])
        return self.ew("aten::copy_", label + ".float", [logits32, self._t(n, vocab)])

    def repeat_kv_fwd(self, lab, b, s, hq, hkv, d):
        """The keys' and values' copies to ``hq`` heads (grouped-query attention only; memory-bound nodes, so not
        with ``elementwise`` off, as the loss and the optimizer)."""
        if not (self._eager() and self.cfg.ew) or hkv >= hq:  # (--no-elementwise: none)
            return None
        node = None
        for name in ("k", "v"):
            node = self.ew("aten::copy_", f"{lab}.repeat_kv.{name}", [self._t(b, s, hkv, d), self._t(b, s, hq, d)])
        return node

    def repeat_kv_bwd(self, lab, b, s, hq, hkv, d):
        """Their backward: each gradient summed over its ``hq / hkv`` copies (the reduced output is listed as a
        second argument so that its write is counted beside the read)."""
        if not (self._eager() and self.cfg.ew) or hkv >= hq:  # (--no-elementwise: none)
            return None
        node = None
        for name in ("k", "v"):
            node = self.ew("aten::sum", f"{lab}.repeat_kv.{name}", [self._t(b, s, hq, d), self._t(b, s, hkv, d)])
        return node

    def eager_optimizer(self, params):
        """Gradient clipping, then AdamW as foreach kernels, over this rank's ``params`` fp32 shards, after every
        gradient reduction of the step; returns the last node."""
        lists = {k: [((params,), F32)] for k in "pgmvd"}
        node = self.ew("aten::_foreach_norm", "optimizer.clip.norm", [lists["g"]], self.syncs)
        if self._group_size(self.dgroup) > 1:  # the partial norms summed over the FSDP group (one fp32 scalar)
            node = self.coll("optimizer.clip.norm_all_reduce", T.ALL_REDUCE, 4, self.dgroup, [node])
        node = self.ew("aten::_foreach_mul_", "optimizer.clip.scale", [lists["g"]], [node])
        for op, label, touched in FOREACH_ADAMW:
            node = self.ew(op, f"optimizer.adamw.{label}", [lists[k] for k in touched])
        return node
