"""Attention: FlashAttention (one node per call, causal or not, one call per context-parallel ring step, with
Transformer Engine's merges of the ring steps) or
Megatron's unfused QK^T / softmax / AV, and the context-parallel ring of K/V (and dK/dV) messages."""

from __future__ import annotations

from .config import attention_kernel
from .fp8 import FP8_FWD, FP8_GRAD, TE_QUANTIZE


BMM = "aten::bmm"


ATTN = "aten::_scaled_dot_product_flash_attention"


ATTN_BWD = "aten::_scaled_dot_product_flash_attention_backward"


#: Transformer Engine's dequantize of an FP8 tensor back to --dtype (memory-bound, timed from ``tensor_size``)
TE_DEQUANTIZE = "transformer_engine::dequantize"


#: fp32 tensors of Transformer Engine's CP merges and accumulations
TE_F32 = "Tensor(float)"


CP_TAG_BASE = 1 << 24  # comm_tag of context-parallel ring messages: CP_TAG_BASE + ((phase*L + layer)*M + mb)*CP + j


class AttentionOps:
    """Attention and context parallelism (a stage-builder mixin)."""

    def attn_unfused_fwd(self, lab, b, hq, q, c, d, deps=()):
        """Megatron-LM (2021) attention without FlashAttention: QK^T bmm, fused scale-mask-softmax and dropout on
        the b*heads*q*c scores, AV bmm (GQA: K/V heads repeated to hq). ``--softmax-kernel eager``: Hugging Face's
        scale and masks before the softmax, each its own kernel."""
        bh = b * hq
        sc = (b, hq, q, c)
        self.comp(BMM, lab + ".attn.qk", f"[[{bh}, {q}, {d}], [{bh}, {d}, {c}]]", 2 * bh * q * c * d,
                  bh * (q * d + d * c + q * c), deps)
        if self.cfg.softmax_kernel == "eager":  # Hugging Face's scale and masks, each its own kernel (.hf_eager)
            self.attn_mask_fwd(lab, b, hq, q, c)
        self.ew("aten::_softmax", lab + ".attn.softmax", [self._t(*sc)])
        if self.cfg.dropout:
            self.ew("aten::native_dropout", lab + ".attn.dropout", [self._t(*sc)])
        return self.comp(BMM, lab + ".attn.av", f"[[{bh}, {q}, {c}], [{bh}, {c}, {d}]]", 2 * bh * q * c * d,
                         bh * (q * c + c * d + q * d))

    def attn_unfused_bwd(self, lab, b, hq, q, c, d):
        bh = b * hq
        sc = (b, hq, q, c)
        e = bh * (q * c + c * d + q * d)
        f = 2 * bh * q * c * d
        self.comp(BMM, lab + ".attn.dp", f"[[{bh}, {q}, {d}], [{bh}, {d}, {c}]]", f, e)
        self.comp(BMM, lab + ".attn.dv", f"[[{bh}, {c}, {q}], [{bh}, {q}, {d}]]", f, e)
        if self.cfg.dropout:
            self.ew("aten::native_dropout_backward", lab + ".attn.dropout", [self._t(*sc), (sc, "Tensor(bool)")])
        self.ew("aten::_softmax_backward_data", lab + ".attn.softmax", [self._t(*sc), self._t(*sc)])
        if self.cfg.softmax_kernel == "eager":
            self.attn_mask_bwd(lab, b, hq, q, c)
        self.comp(BMM, lab + ".attn.dq", f"[[{bh}, {q}, {c}], [{bh}, {c}, {d}]]", f, e)
        return self.comp(BMM, lab + ".attn.dk", f"[[{bh}, {c}, {q}], [{bh}, {q}, {d}]]", f, e)

    def _attn_steps(self, q, layer=None):
        """FlashAttention calls per layer: ``[(keys timed, keys of the model FLOPs, is_causal), ...]``.

        Without context parallelism one call of the ``q`` queries against all ``self.ctx`` keys, causal in
        training and prefill (decode: one query against the whole cache). With ``--cp``: one call per ring step,
        as Transformer Engine runs it (step j on the K/V chunk received at step j, overlapping the next
        transfer). Causal CP uses Megatron's load-balanced layout (rank c holds sequence chunks c and
        2CP-1-c of 2CP): step 0 is the rank's own chunks, causal; every other step does half a block, which TE
        computes as all queries against the first half of an earlier rank's keys or the second half of the
        queries against all of a later rank's keys -- the same work; both are timed here as all ``q`` queries
        against ``q/2`` keys, so that every rank of a stage gets the same trace. ``num_ops`` counts the model's
        FLOPs (the full ``q x keys`` block, no causal saving, as Megatron-LM's FLOP formula does); the gpu model
        times the executed work from the shapes and ``is_causal``."""
        cfg = self.cfg
        causal = cfg.causal and cfg.mode not in ("decode", "mixed")
        if layer is not None and self.dims.attn_keys(layer, self.ctx) < self.ctx:
            # sliding window shorter than the context: each query sees the last `window` keys, a band that costs
            # O(q*w), timed as a q x w block without the causal triangle
            w = self.dims.window
            return [(w, w, False)]
        if cfg.cp == 1:
            return [(self.ctx, self.ctx, causal)]
        return [(q, q, causal)] + [(q // 2 if causal else q, q, False)] * (cfg.cp - 1)

    def flash_fwd(self, lab, b, hq, hkv, q, d, recvs, extra=None, steps=None, dv=None, layer=None):
        """Forward FlashAttention (see :meth:`_attn_steps`, or the given ``steps``); ``recvs``: the CP ring's K/V
        receives; ``dv``: the values' head width (MLA: v_head_dim; default ``d``). ``--attention-dtype fp8``: each
        call is preceded by the cast of its Q, K, V to FP8 (:meth:`_fp8_attention_cast`), takes E4M3 operands and,
        under delayed scaling, is followed by the dequantize of its FP8 output."""
        dv = dv or d
        extra = self._window_attr(self._kernel_attr(extra), q, layer)
        fp8 = self.cfg.attention_dtype == "fp8"
        node = None
        for j, (k, kf, causal) in enumerate(steps or self._attn_steps(q, layer)):
            label = lab + ".attn" + (f".cp{j}" if self.cfg.cp > 1 else "")
            elems = b * (d + dv) * (q * hq + k * hkv)
            deps = recvs[j - 1:j]
            if fp8:
                self._fp8_attention_cast(label, b, hq * q * d if j == 0 else 0, hkv * k * (d + dv), deps)
                deps = ()
            # _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask)
            node = self.comp(ATTN, label, f"[[{b}, {hq}, {q}, {d}], [{b}, {hkv}, {k}, {d}], [{b}, {hkv}, {k}, {dv}]]",
                             2 * b * q * kf * (d + dv) * hq, elems, deps, extra=extra,
                             types=[FP8_FWD] * 3 if fp8 else None, nbytes=elems if fp8 else None,
                             values=f"[[], [], [], 0.0, {causal}, False]")
            if fp8 and self.cfg.fp8_recipe == "delayed":
                # DelayedScaling's kernel writes O in FP8; TE hands the projection --dtype (fp8_mha off)
                rows = b * hq * q
                node = self._te(TE_DEQUANTIZE, label + ".fp8_dequantize", rows, dv, FP8_FWD,
                                rows * dv * (1 + self.nbytes), ())
            if self.te_ring_merges:
                self._te_ring_step_fwd(label, j, b, hq, q, dv)
        if self.te_ring_merges:
            node = self._te_ring_out_correction(lab + ".attn", b, hq, q, dv, j + 1)
        return node

    @property
    def te_ring_merges(self):
        """Transformer Engine's ring (``AttnFuncWithCPAndKVP2P``, ``--cp-rotate ring``) merges the CP steps' partial
        outputs and accumulates their gradients in memory-bound kernels of its own: emitted in training steps with
        element-wise nodes (:meth:`_te_ring_step_fwd`, :meth:`_te_ring_out_correction`, :meth:`_te_ring_bwd_step`).
        Source: NVIDIA/TransformerEngine ``transformer_engine/pytorch/attention/dot_product_attention/
        context_parallel.py`` read at tag v2.8 (the same kernels at d0067d0, 2026), bshd/sbhd layouts."""
        return self.cfg.cp > 1 and self.cfg.ew and not self.torch_cp

    def _te_ring_acc(self, *shape, fp8=None):
        """The dtype TE merges and accumulates the CP steps in (``fp8``: the pass runs in FP8; default the
        forward's ``--attention-dtype``): fp32 with FP8 attention ("out in torch.float32",
        "dq, dk, dv are reduced across steps in higher precision"), else ``--dtype`` (``out = torch.zeros_like(q)``,
        ``dq_buffer = torch.empty_like(q)``, the dK/dV ring buffers in the K/V's dtype)."""
        fp8 = self.cfg.attention_dtype == "fp8" if fp8 is None else fp8
        return (tuple(shape), TE_F32) if fp8 else self._t(*shape)

    def _te_ring_step_fwd(self, label, j, b, hq, q, dv):
        """After CP step ``j``'s forward (TE v2.8 ``AttnFuncWithCPAndKVP2P.forward``): under FP8 current scaling the
        step's FP8 output (``cp_p2p_fwd_fused_attn`` passes the O quantizer) converted ``.to(torch.float32)`` (under
        delayed scaling the dequantize emitted after the call stands for TE's ``dequantize(dtype=torch.float32)``);
        from step 1 on, ``flash_attn_fwd_softmax_lse_correction`` (one fused kernel: TE's ``jit_fuser`` is
        ``torch.compile``) merging the step's fp32 LSE into the running one."""
        if self.cfg.attention_dtype == "fp8" and self.cfg.fp8_recipe == "current":
            shape = [b, hq, q, dv]  # (read one byte an element, write four; ew counts FP8 at --dtype's width)
            self._memory_node("aten::copy_", label + ".out_to_f32", b * hq * q * dv * (1 + 4), repr([shape, shape]),
                              repr([TE_F32, FP8_FWD]), ())
        if j > 0:
            lse = ((b, hq, q), TE_F32)
            self.ew("aten::add_", label + ".lse_correction", [lse, lse])

    def _te_ring_out_correction(self, lab, b, hq, q, dv, steps):
        """TE's output correction after the ring (TE v2.8 ``AttnFuncWithCPAndKVP2P.forward``, bshd/sbhd): step 0's
        output scaled by ``exp(lse_step - lse)`` into the running output (``flash_attn_fwd_out_correction_init``),
        each later step's scaled and added to it (``flash_attn_fwd_out_correction``), one fused kernel each; under
        FP8 the fp32 output cast back, ``out.to(fwd_nominal_dtype)`` (in ``--dtype`` it is a no-op: no kernel).
        ASSUMPTION (the symmetric trace of :meth:`_attn_steps`): every rank is timed as the last CP rank, whose every
        step takes TE's ``i <= rank`` branch (full-size corrections; ranks with ``i > rank`` correct half)."""
        out, lse = self._te_ring_acc(b, hq, q, dv), ((b, hq, q, 1), TE_F32)
        node = None
        for j in range(steps):  # (one per CP step; a sliding-window layer's single call: one)
            label = f"{lab}.cp{j}.out_correction"
            if j == 0:
                node = self.ew("aten::mul", label, [out, lse, lse])
            else:
                node = self.ew("aten::add_", label, [out, out, lse, lse])
        if self.cfg.attention_dtype == "fp8":
            node = self.ew("aten::copy_", lab + ".out_to_dtype", [self._t(b, hq, q, dv), out])
        return node

    def _fp8_attention_cast(self, label, b, q_elems, kv_elems, deps):
        """Transformer Engine's quantize of Q, K and V (``q_elems`` + ``kv_elems`` per sequence) to FP8 E4M3 before
        its FP8 attention (``fp8_dpa``, inputs not already FP8: ``fp8_mha`` off): read in ``--dtype`` (twice under
        ``--fp8-recipe current``: the amax first), written as one byte per element. Memory-bound; one kernel per
        call: a CP step after the first casts only the K/V it reads of the chunk received (its Q is already FP8)."""
        cols = q_elems + kv_elems
        reads = 2 if self.cfg.fp8_recipe == "current" else 1
        return self._te(TE_QUANTIZE, label + ".fp8_cast", b, cols, self.ttype, b * cols * (reads * self.nbytes + 1),
                        deps)

    def flash_bwd(self, lab, b, hq, hkv, q, d, dv=None, layer=None):
        """Backward FlashAttention, one call per forward call. Returns the node after which the CP ring can send
        dK/dV back (step 1's, the first remote chunk; without CP the only node). :attr:`fp8_backward`: dO is
        quantized first (:meth:`_fp8_grad_cast`), each call takes E5M2 dO and E4M3 Q, K, V (named ``cudnn``: TE's
        FP8 backward is cuDNN's) and is followed by the dequantize of its dQ, dK, dV."""
        dv = dv or d
        fp8 = self.fp8_backward
        nodes = []
        for j, (k, kf, causal) in enumerate(self._attn_steps(q, layer)):
            label = lab + ".attn" + (f".cp{j}" if self.cfg.cp > 1 else "")
            elems = 2 * b * (d + dv) * (q * hq + k * hkv)
            if fp8 and j == 0:
                self._fp8_grad_cast(label, b, hq * q * dv)
            # _scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp,
            #     cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset)
            node = self.comp(ATTN_BWD, label, f"[[{b}, {hq}, {q}, {d}], [{b}, {hq}, {q}, {d}], "
                             f"[{b}, {hkv}, {k}, {d}], [{b}, {hkv}, {k}, {dv}]]",
                             4 * b * q * kf * (d + dv) * hq, elems,
                             extra=self._window_attr(self._kernel_attr(None, "cudnn" if fp8 else None), q, layer),
                             types=[FP8_GRAD] + [FP8_FWD] * 3 if fp8 else None, nbytes=elems if fp8 else None,
                             values=f"[[], [], [], [], [], [], None, None, 0, 0, 0.0, {causal}, None, None]")
            if fp8:  # dQ, dK, dV come out in E5M2; TE hands --dtype back (Q, K, V were not FP8 tensors)
                cols = hq * q * d + hkv * k * (d + dv)
                node = self._te(TE_DEQUANTIZE, label + ".fp8_dequantize", b, cols, FP8_GRAD,
                                b * cols * (1 + self.nbytes), ())
            if self.te_ring_merges:
                node = self._te_ring_bwd_step(label, j, b, hq, hkv, q, k, d, dv)
            nodes.append(node)
        if self.te_ring_merges and fp8:
            # the fp32 dQ, dK, dV cast to the inputs' --dtype (autograd casts a gradient to its input's dtype)
            kv_home = hkv * q * (d + dv)
            self.ew("aten::copy_", lab + ".attn.dq_to_dtype", [self._t(b, hq, q, d), ((b, hq, q, d), TE_F32)])
            self.ew("aten::copy_", lab + ".attn.dkv_to_dtype", [self._t(b, kv_home), ((b, kv_home), TE_F32)])
        return nodes[min(1, len(nodes) - 1)]

    def _te_ring_bwd_step(self, label, j, b, hq, hkv, q, k, d, dv):
        """TE's accumulation of CP step ``j``'s gradients (TE v2.8 ``AttnFuncWithCPAndKVP2P.backward``): dQ copied at
        step 0 and added after (``dq.copy_(dq_)``, ``dq.add_(dq_)``), dK and dV of the step's ``k`` keys likewise into
        the dK/dV ring buffer (``dk.copy_(dk_)`` / ``dk.add_(dk_)``, the same for dV); under FP8 current scaling
        into zeroed fp32 buffers, always added (the ``.to(torch.float32)`` of each step's gradients: the dequantize
        emitted after the call; the fp32 buffer's zeroing is not emitted). One kernel each; returns the last."""
        fp8 = self.fp8_backward
        op = "aten::copy_" if j == 0 and not fp8 else "aten::add_"
        dq = self._te_ring_acc(b, hq, q, d, fp8=fp8)
        self.ew(op, label + ".dq_accumulate", [dq, dq])
        node = None
        for name, width in (("dk", d), ("dv", dv)):
            grad = self._te_ring_acc(b, hkv, k, width, fp8=fp8)
            node = self.ew(op, f"{label}.{name}_accumulate", [grad, grad])
        return node

    @property
    def fp8_backward(self):
        """The attention backward runs in FP8: ``--attention-dtype fp8`` with ``--fp8-attention-backward on`` (the
        default, as Transformer Engine's ``NVTE_FP8_DPA_BWD`` defaults to 1: "FP8 forward and backward", TE
        docs/envvars.rst). TE's FP8 backward is cuDNN's fused attention (FusedAttnFunc.backward in
        transformer_engine/pytorch/attention/dot_product_attention/backends.py): the forward's E4M3 Q, K, V, O,
        dO quantized to E5M2, dQ, dK, dV written in E5M2 and dequantized to --dtype."""
        return self.cfg.attention_dtype == "fp8" and self.cfg.fp8_attention_backward

    def _fp8_grad_cast(self, label, b, elems):
        """TE's quantize of the attention output's gradient dO (``elems`` per sequence, --dtype from the
        projection's dgrad) to E5M2 before the FP8 backward: read once (twice under ``--fp8-recipe current``: the
        amax first), written as one byte per element; once per layer (the CP steps reuse it)."""
        reads = 2 if self.cfg.fp8_recipe == "current" else 1
        return self._te(TE_QUANTIZE, label + ".fp8_grad_cast", b, elems, self.ttype,
                        b * elems * (reads * self.nbytes + 1), ())

    def _kernel_attr(self, extra, kernel=None):
        """``extra`` with the ``attention_kernel`` attribute the gpu model times the node by (``kernel``, else
        ``--attention-kernel`` or its framework's default; none named: no attribute)."""
        kernel = kernel or attention_kernel(self.cfg)
        return extra if kernel is None else dict(extra or {}, attention_kernel=kernel)

    def _window_attr(self, extra, q, layer):
        """``extra`` with ``attention_window`` (the window, keys a query sees) on a sliding-window layer's call of
        more than one query (:meth:`_attn_steps`' band, emitted as a q x w block): the gpu model times the tiles the
        kernel runs over the band from it. A decode step's single query (a true 1 x w block) and layers without a
        window: no attribute (their traces unchanged)."""
        if layer is None or q <= 1 or self.dims.attn_keys(layer, self.ctx) >= self.ctx:
            return extra
        return dict(extra or {}, attention_window=self.dims.window)

    def _cp_ring(self, label, layer, mb, phase, start):
        """Ring exchange over the CP group: CP-1 steps, each sending the chunk held (own K,V chunk first, then the
        one received in the previous step) to CP index c+1 and receiving from c-1. Returns the receive ids."""
        cfg, dims = self.cfg, self.dims
        if cfg.cp == 1:
            return []
        size = 2 * cfg.micro_batch_size * self.seq * (dims.kv_heads // cfg.tp) * dims.head_dim * self.nbytes
        recvs, prev = [], start
        for j in range(1, cfg.cp):
            tag = CP_TAG_BASE + (((phase * dims.layers + layer) * cfg.micro_batches + mb) * cfg.cp + j)
            self.send(f"cp_send.{label}.{j}", +1, tag, [prev], size, "cpsend", "cp")
            prev = self.recv(f"cp_recv.{label}.{j}", -1, tag, size, "cprecv", "cp")
            recvs.append(prev)
        return recvs
