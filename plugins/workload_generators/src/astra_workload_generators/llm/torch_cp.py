"""Context parallelism as PyTorch's experimental ``context_parallel`` runs it (torchtitan's CP): ``--cp-rotate
allgather`` (torchtitan's default) or ``alltoall``. ``--cp-rotate ring`` is Megatron / Transformer Engine's ring of
K/V send/recv (:meth:`.attention.AttentionOps._cp_ring`), unchanged.

Source: ``torch/distributed/tensor/experimental/_attention.py`` (pytorch/pytorch; read at f2127dbd and 0123248a,
whose ring code is the same; the torchtitan table's torch is 1963fc8, 2024-12-23): ``_templated_ring_attention``,
``_templated_ring_attention_backward``, ``_SDPAMerger``, ``_AllGatherRotater`` / ``_AllToAllRotater``,
``_ContextParallelOptions`` (``convert_to_f32 = True``, ``enable_load_balance = True``, ``rotate_method =
ALL_GATHER``). torchtitan 9dec370 (``config_manager.py``: ``--experimental.context_parallel_rotate_method``, default
``"allgather"``) sets the rotate method; its Llama repeats K/V to the query heads (``repeat_kv``) before
``F.scaled_dot_product_attention``, so every K/V the ring moves has the query heads.

Per layer and forward pass (the forward, and again under full recomputation), on a rank holding ``q = s/CP`` tokens
(the head-tail chunks c and 2CP-1-c of 2CP):

* ``key.contiguous()``, ``value.contiguous()``: copies (the SDPA inputs are transposed BSHD views);
* step i < CP-1: ``torch.cat([key.flatten(), value.flatten()])`` (a copy of the K/V held), then the rotater's
  ``exchange_buffers``: ``allgather`` all-gathers the local K/V once (step 0) and hands out chunks of it, ``alltoall``
  sends the held K/V to CP index c+1 (``permute_tensor``, a send/recv pair) every step;
* step i: one flash SDPA call, causal on the local chunks at i = 0; afterwards (load balance) all ``q`` queries
  against the first half of the received keys (``i <= rank``) or the second half of the queries against all of them
  (``i > rank``), not causal -- the same FLOPs;
* ``_SDPAMerger.step``: the block output cast to fp32 (``convert_to_f32``), and for i > 0 the merge ``out - sigmoid(
  block_lse - lse) * (out - block_out)``, ``lse - logsigmoid(lse - block_lse)``, each an eager kernel over the fp32
  ``b x heads x q x d`` output (or its ``lse``); ``results()`` casts the output back.

The backward (``_templated_ring_attention_backward``): zeroed fp32 dQ, dK, dV; the K/V again (``allgather``: a new
all-gather; ``alltoall``: the ring again); per step one flash backward on the forward's shapes, dK/dV of the chunk
accumulated in fp32 (step 0: ``grad_key += grad_key_``; then, after waiting for the dK/dV buffer from c-1, the half
chunk added and ``torch.cat`` rebuilding the whole fp32 tensor: ``_partial_update``), ``torch.cat`` of dK and dV into
one fp32 buffer sent to c+1 (always ``_AllToAllRotater``, fp32: ``2 x b x q x heads x d x 4`` bytes), dQ accumulated
in fp32; after the loop dQ cast back and the dK/dV buffer that came home cast to ``--dtype``.

Waits: eager PyTorch waits for a collective at the tensor's first use (``AsyncCollectiveTensor``): the all-gather at
step 1, a permute at the next step's accumulation. ``--cp-compile`` (the ring attention inside torch.compile, as
torchtitan compiles each block): functional collectives traced are waited for where issued
(``torch/distributed/_functional_collectives.py`` ``_maybe_wrap_tensor``: ``if _are_we_tracing(): return
wait_tensor(self)``; Inductor's ``reorder_for_compute_comm_overlap`` is off by default), so each exchange is exposed;
the K/V cats nobody sends are dead code; each step's merge is one fused kernel over the fp32 output (read it, the bf16
block and the LSEs, write it) plus one over the LSE, the zeros fold into the first accumulations, and each backward
step's dK/dV accumulation and cat are one kernel (ASSUMPTION: Inductor's pointwise fusion, not read from a trace).

Whose steps (one symmetric trace for every rank): the slowest rank's at each point where the ranks wait for each
other. The forward (and its recomputation) is CP index 0's, whose every step after the first takes the ``i > rank``
branch (the second half of the queries against all received keys, merged into half of the output, then
``_partial_update``'s cats): nothing inside a pass waits for another rank after the step-0 all-gather, and the next
layer's all-gather waits for the slowest; FlashAttention-2 runs that wide block 4.7 % slower than the last rank's
(:meth:`_fwd_block`, measured on the H200). The backward is the last rank's (``i <= rank``: all queries x half the
keys, the slower branch backward): each step's dK/dV permute makes neighbours wait for each other.
"""

from __future__ import annotations

from astra_sim.chakra import types as T

from .attention import ATTN, ATTN_BWD, CP_TAG_BASE

#: ``--cp-rotate`` choices: Megatron / TE's P2P ring, and the two rotate methods of PyTorch's context_parallel
CP_ROTATES = ("ring", "allgather", "alltoall")
F32 = "Tensor(float)"


def cp_rotate(cfg) -> str:
    """The K/V exchange of context parallelism: ``--cp-rotate`` if given, else ``allgather`` under ``--framework
    fsdp2`` (torchtitan 9dec370's ``context_parallel_rotate_method`` default), else ``ring`` (Megatron / TE)."""
    if cfg.cp_rotate:
        return cfg.cp_rotate
    return "allgather" if cfg.framework == "fsdp2" else "ring"


class TorchCpOps:
    """PyTorch's context-parallel SDPA (a stage-builder mixin, see the module docstring)."""

    @property
    def torch_cp(self):
        """Context parallelism runs as PyTorch's ``context_parallel`` (``--cp-rotate allgather | alltoall``)."""
        return self.cfg.cp > 1 and cp_rotate(self.cfg) != "ring"

    def _sdpa_kv_heads(self, hq, hkv):
        """The K/V heads of the SDPA call: torchtitan's Llama repeats K/V to the query heads first (``repeat_kv``,
        under ``--framework fsdp2``); otherwise the model's K/V heads."""
        return hq if self.cfg.framework == "fsdp2" else hkv

    def _f32(self, *shape):
        return (tuple(shape), F32)

    def _kv_exchange(self, lab, layer, mb, phase, j, b, hk, q, d, dv, held):
        """Step ``j``'s ``torch.cat`` of the held K/V and its rotation; returns what step ``j + 1`` waits for (eager)
        or step ``j`` itself (``--cp-compile``): the all-gather (``allgather``, issued at step 0 only) or this step's
        receive (``alltoall``). Compiled, the cat of a step whose exchange sends nothing is dead code (removed)."""
        cfg = self.cfg
        elems = b * hk * q * (d + dv)
        gather = cp_rotate(cfg) == "allgather"
        if gather and j > 0 and cfg.cp_compile:
            return held
        # (from step 1 on, after the wait for the K/V of this step: rotater.next_buffer())
        cat = self.ew("aten::copy_", f"{lab}.kv_cat.{j}", [self._t(elems), self._t(elems)],
                      [] if held is None else [held])
        if gather:
            if j > 0:
                return held
            return self.coll(f"cp_kv_ag.{lab}", T.ALL_GATHER, cfg.cp * elems * self.nbytes, "cp", [cat],
                             chain=False)
        tag = CP_TAG_BASE + (((phase * self.dims.layers + layer) * cfg.micro_batches + mb) * cfg.cp + j + 1)
        self.send(f"cp_send.{lab}.kv.{j + 1}", +1, tag, [cat], elems * self.nbytes, "cpsend", "cp")
        return self.recv(f"cp_recv.{lab}.kv.{j + 1}", -1, tag, elems * self.nbytes, "cprecv", "cp")

    def _contiguous_kv(self, lab, b, hk, q, d, dv, deps):
        """``key.contiguous()`` and ``value.contiguous()``: copies of the transposed views."""
        self.ew("aten::copy_", lab + ".k_contiguous", [self._t(b, hk, q, d), self._t(b, hk, q, d)], deps)
        return self.ew("aten::copy_", lab + ".v_contiguous", [self._t(b, hk, q, dv), self._t(b, hk, q, dv)])

    def _steps_with_kv(self, lab, layer, mb, phase, b, hk, q, d, dv):
        """Per SDPA step ``(j, (keys, model keys, causal), what it waits for)``, the K/V exchanges emitted on the
        way (eager: step j waits for the exchange issued at step j-1; compiled: for the one issued just before)."""
        cfg = self.cfg
        arrived = None
        for j, step in enumerate(self._attn_steps(q, layer)):
            wait = [arrived] if j > 0 else []
            if j < cfg.cp - 1:
                arrived = self._kv_exchange(lab, layer, mb, phase, j, b, hk, q, d, dv, arrived if j > 0 else None)
                if cfg.cp_compile:
                    wait = [arrived]
            yield j, step, wait

    def torch_cp_fwd(self, lab, b, hq, hkv, q, d, dv, layer, mb, phase, deps=()):
        """One layer's context-parallel SDPA forward (module docstring); returns the output's cast back."""
        cfg = self.cfg
        hk = self._sdpa_kv_heads(hq, hkv)
        lab = lab + ".attn"
        self._contiguous_kv(lab, b, hk, q, d, dv, deps)
        extra = self._kernel_attr(None)
        out, lse = self._f32(b, hq, q, dv), self._f32(b, hq, q, 1)
        for j, (k, kf, causal), wait in self._steps_with_kv(lab, layer, mb, phase, b, hk, q, d, dv):
            label = f"{lab}.cp{j}"
            rows, k = self._fwd_block(q, k)
            half = rows < q  # CP index 0's partial step: the merge updates the second half of out and lse
            self.comp(ATTN, label, f"[[{b}, {hq}, {rows}, {d}], [{b}, {hk}, {k}, {d}], [{b}, {hk}, {k}, {dv}]]",
                      2 * b * q * kf * (d + dv) * hq, b * (d + dv) * (rows * hq + k * hk), wait, extra=extra,
                      values=f"[[], [], [], 0.0, {causal}, False]")
            part, part_lse, block = self._f32(b, hq, rows, dv), self._f32(b, hq, rows, 1), self._t(b, hq, rows, dv)
            if cfg.cp_compile:  # one fused kernel for the output's merge, one for the LSE's (the casts inlined;
                if j > 0:       # partial: the torch.cat of _partial_update fused in, the whole fp32 tensor written)
                    self.ew("aten::sub", label + ".merge.out", [out, block, part_lse, part_lse])
                    self.ew("aten::sub", label + ".merge.lse", [lse, part_lse])
                continue
            self.ew("aten::copy_", label + ".out_to_f32", [part, block])  # convert_to_f32
            if j > 0:  # _SDPAMerger._merge_one
                self.ew("aten::sub", label + ".merge.lse_diff", [part_lse, part_lse])
                self.ew("aten::sigmoid", label + ".merge.sigmoid", [part_lse])
                self.ew("aten::sub", label + ".merge.out_diff", [part, part])
                self.ew("aten::mul", label + ".merge.scale", [part_lse, part])
                self.ew("aten::sub", label + ".merge.out", [part, part])
                self.ew("aten::sub", label + ".merge.lse_diff2", [part_lse, part_lse])
                self.ew("aten::log_sigmoid_forward", label + ".merge.logsigmoid", [part_lse])
                self.ew("aten::sub", label + ".merge.lse", [part_lse, part_lse])
                if half:  # _partial_update: torch.cat of the kept and the merged halves, LSE and output
                    self.ew("aten::cat", label + ".merge.lse_cat", [[part_lse, part_lse]])
                    self.ew("aten::cat", label + ".merge.out_cat", [[part, part]])
        return self.ew("aten::copy_", lab + ".out_to_dtype", [self._t(b, hq, q, dv), out])

    def _fwd_block(self, q, k):
        """``(queries, keys)`` a forward ring step is timed at: the forward is timed on CP index 0, the rank whose
        forward is the slowest, since nothing in a pass waits for the other ranks until the next layer's K/V
        all-gather (or, with ``alltoall``, each step's permute). Its every step after the first takes
        ``_templated_ring_attention``'s ``i > rank`` branch: the second half of its queries against all ``q``
        received keys (``query.chunk(2, dim=2)[1]``), where the last rank runs all ``q`` queries against ``q/2``
        keys. The same FLOPs, but FlashAttention-2 runs the wide block slower: 25.58 against 24.43 ms on the H200
        (calibration/nvidia-h200-2026-11-30/attention_long.csv: 16k x 32k and 32k x 16k, 32 heads of 128, not
        causal; the backward the other way round, 69.05 against 71.01 ms, so the backward stays timed on the last
        rank, whose branch is the slower there and whose step the dK/dV permute makes every rank wait for). Step 0
        and a non-causal ring (``k == q``) are the same on every rank."""
        if k < q:
            return q // 2, q
        return q, k

    def torch_cp_bwd(self, lab, layer, mb, b, hq, hkv, q, d, dv):
        """One layer's context-parallel SDPA backward (module docstring); returns the cast of the dK/dV that came
        home (what the rest of the layer's backward reads)."""
        cfg = self.cfg
        fused = cfg.cp_compile
        hk = self._sdpa_kv_heads(hq, hkv)
        lab = lab + ".attn"
        dq, kv = self._f32(b, hq, q, d), b * hk * q * (d + dv)
        if not fused:  # (compiled: the zeros fold into the first accumulation)
            for name, shape in (("dq", dq), ("dk", self._f32(b, hk, q, d)), ("dv", self._f32(b, hk, q, dv))):
                self.ew("aten::zero_", f"{lab}.{name}_zeros", [shape])
        self._contiguous_kv(lab, b, hk, q, d, dv, ())
        dkv = None
        for j, (k, kf, causal), wait in self._steps_with_kv(lab + ".bwd", layer, mb, 3, b, hk, q, d, dv):
            label = f"{lab}.cp{j}"
            self.comp(ATTN_BWD, label, f"[[{b}, {hq}, {q}, {d}], [{b}, {hq}, {q}, {d}], "
                      f"[{b}, {hk}, {k}, {d}], [{b}, {hk}, {k}, {dv}]]",
                      4 * b * q * kf * (d + dv) * hq, 2 * b * (d + dv) * (q * hq + k * hk), wait,
                      extra=self._kernel_attr(None),
                      values=f"[[], [], [], [], [], [], None, None, 0, 0, 0.0, {causal}, None, None]")
            wait = [] if j == 0 or fused else [dkv]  # eager: the dK/dV buffer from c-1 (sent at step j-1)
            if fused:  # one kernel: the received fp32 buffer (none at step 0) + this step's bf16 dK, dV -> the cat
                part = b * hk * k * (d + dv)
                ins = [self._f32(kv), self._t(part)] if j == 0 else [self._f32(kv), self._f32(kv), self._t(part)]
                cat = self.ew("aten::copy_", f"{label}.dkv_accumulate", ins)
            else:
                for name, width in (("dk", d), ("dv", dv)):
                    self.ew("aten::add_", f"{label}.{name}_accumulate", [self._f32(b, hk, k, width),
                                                                         self._t(b, hk, k, width)], wait)
                    wait = []
                    if j > 0:  # _partial_update: torch.cat of the chunks back into one tensor
                        self.ew("aten::copy_", f"{label}.{name}_cat", [self._f32(b, hk, q, width),
                                                                       self._f32(b, hk, q, width)])
                cat = self.ew("aten::copy_", f"{label}.dkv_cat", [self._f32(kv), self._f32(kv)])
            tag = CP_TAG_BASE + (((2 * self.dims.layers + layer) * cfg.micro_batches + mb) * cfg.cp + j)
            self.send(f"cp_send.{lab}.dkv.{j}", +1, tag, [cat], kv * 4, "cpsend", "cp")
            dkv = self.recv(f"cp_recv.{lab}.dkv.{j}", -1, tag, kv * 4, "cprecv", "cp")
            if fused and j == 0:  # (the zeros folded in: the cast of dQ to fp32)
                self.ew("aten::copy_", f"{label}.dq_accumulate", [dq, self._t(b, hq, q, d)], [dkv])
            else:
                self.ew("aten::add_", f"{label}.dq_accumulate", [dq, self._t(b, hq, q, d)], [dkv] if fused else [])
        self.ew("aten::copy_", lab + ".dq_to_dtype", [self._t(b, hq, q, d), dq])
        return self.ew("aten::copy_", lab + ".dkv_to_dtype", [self._t(kv), self._f32(kv)], [dkv])
