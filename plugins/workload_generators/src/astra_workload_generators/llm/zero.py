"""Data-parallel synchronisation: gradient all-reduces or ZeRO-1/2 reduce-scatters and parameter all-gathers,
ZeRO-3 / FSDP parameter gathers per unit, and the optimizer step that waits for them."""

from __future__ import annotations

from astra_sim.chakra import types as T

from .config import implied_framework
from .model import (MTP_MODULE_NORMS, dense_layer_parameters, expert_layer_parameters, layer_norm_parameters,
                    norm_weights, sequence_parallel_biases)
from .split import stage_layers


#: Bytes per parameter the optimizer node moves (as the gpu model counts ``_fused_adam_``): it reads fp32 master
#: weights, fp32 gradients and the two fp32 Adam moments (16 B) and writes the weights and both moments back (12 B),
#: the 28 B fit/measure_gpu.py timed AdamW at. The fp16/bf16 model copy (+2 B) is not counted.
ADAM_BYTES_PER_PARAM = 28
#: FSDP2 under torchtitan's mixed precision (bf16 parameters, ``mixed_precision_reduce = "float32"``) reduce-scatters
#: gradients in fp32: 4 bytes per parameter (the memory estimate keeps the same fp32 copy, ``memory_terms``).
FSDP2_REDUCE_BYTES = 4
#: the units torchtitan leaves to FSDP2's root module (the token embedding and, with the final norm, the LM head)
ROOT_UNITS = ("embedding", "head")


class _CopiedOut(list):
    """The ids a unit's compute waits on once FSDP2 copied its gathered parameters out (one copy per gather)."""


class DataParallelOps:
    """Gradient and parameter synchronisation over DP (a stage-builder mixin)."""

    def optimizer(self, params, buffer=None):
        """Adam over this rank's ``params`` (fp32 master weights, grads, two moments): one ``_fused_adam_``
        node after every gradient reduction of the step; ZeRO-1/2 parameter all-gathers follow it. In a Megatron
        step also what Megatron-Core runs around it (:meth:`megatron_grad_norm`, :meth:`zero_grad_buffer` of the
        ``buffer`` parameters' gradients, :meth:`megatron_params_back`). Under ``--framework fsdp2``:
        torchtitan's clipping and foreach AdamW instead (:mod:`.eager_step`)."""
        if self._eager():
            return self.eager_optimizer(params)
        if self._deepspeed():
            return self.ds_optimizer(params)
        f = "Tensor(float)"
        one = [((params,), f)]
        mega = self._megatron_optimizer()
        if mega:
            self.sp_norm_grad_all_reduce()
            self.embedding_grad_all_reduce()  # (tied embeddings at PP > 1: .stage)
        deps = [self.megatron_grad_norm(params)] if mega else self.syncs
        node = self.ew("aten::_fused_adam_", "optimizer.adam", [one, one, one, one], deps)
        if mega:
            if not self.cfg.overlap_param_gather:  # (with it, the step's start: build())
                self.zero_grad_buffer(params if buffer is None else buffer)
            node = self.megatron_params_back(params)
        for label, size, group in self.deferred:
            self.coll(label, T.ALL_GATHER, size, group, [node], chain=False)
        return node

    # -- Megatron-Core's optimizer step around Adam (Megatron-LM core_r0.14.0: MixedPrecisionOptimizer.step, the
    # distributed optimizer's copies, DistributedDataParallel.zero_grad_buffer) ----------------------------------
    def _megatron_optimizer(self):
        """Megatron-Core's step: a training step of the generic (Megatron) framework, ZeRO below 3, element-wise
        nodes on. FSDP2/torchtitan and DeepSpeed have their own (:mod:`.eager_step`, :mod:`.deepspeed_step`)."""
        cfg = self.cfg
        return not cfg.inference and cfg.ew and cfg.zero < 3 and implied_framework(cfg) == "megatron"

    def zero_grad_buffer(self, elements):
        """``DistributedDataParallel.zero_grad_buffer()`` at the start of every step (``train_step``): each
        gradient buffer's ``reset()``, ``self.grad_data.zero_()``: the whole buffer of this rank's ``elements``
        parameters (ZeRO-1 shards the optimizer, not the buffer), fp32 main gradients or ``--grad-buffer same``'s
        ``--dtype``. A memset: the gpu model counts its writes. With ``--overlap-param-gather`` it is the step's
        first node (:meth:`.stage._StageBuilder.build`), where it runs while the first layer waits for its
        parameters' all-gather, as in Megatron. Without, the step starts with nothing to wait beside, so it is
        emitted after Adam (which read the gradients), before the parameters' copy back: the next step's first
        node, on the same chain (one step's span is the same: in a pipeline the first stage, which the others
        wait on first, also ends last); the copy back stays the last compute node the ZeRO-1 gathers follow (as
        astra search's bound reads a step)."""
        if not self._megatron_optimizer():
            return None
        dtype = self.ttype if self.cfg.grad_buffer == "same" else "Tensor(float)"
        return self.ew("aten::zero_", "zero_grad_buffer", [((elements,), dtype)])

    def stage_norm_elements(self):
        """The parameters on this rank that are whole on every TP rank and marked ``sequence_parallel``: the norms'
        (its layers' in every chunk, :func:`.model.layer_norm_parameters`; on the last virtual stage the final
        norm's and the MTP modules') and the row-parallel linears' biases (:func:`.model.sequence_parallel_biases`)."""
        dims, cfg, p, P, V = self.dims, self.cfg, self.p, self.cfg.pp, self.cfg.virtual_stages
        split = stage_layers(dims.layers, cfg)
        per_layer, one = layer_norm_parameters(dims), norm_weights(dims)
        total = 0
        for ch in range(V):
            v = ch * P + p
            total += sum(per_layer + sequence_parallel_biases(dims, dims.is_moe_layer(i)) for i in split[v])
            if v == P * V - 1 and not cfg.inference and dims.mtp_layers:
                mtp = per_layer + sequence_parallel_biases(dims, dims.is_moe_layer(dims.layers))
                total += dims.mtp_layers * (mtp + MTP_MODULE_NORMS * one)
            if v == P * V - 1:
                total += one
        return total

    def sp_norm_grad_all_reduce(self):
        """With sequence parallelism each TP rank's norm weights saw only its ``s/TP`` rows, so Megatron sums their
        gradients over TP once the DP reduction is done, before the optimizer: ``finalize_model_grads`` ->
        ``_allreduce_non_tensor_model_parallel_grads`` (every parameter marked ``sequence_parallel``, the norms'
        weights and biases: one coalesced ``all_reduce`` over the TP group of the flattened main gradients; NVIDIA/
        Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/distributed/finalize_model_grads.py`` 298-363, 410-437),
        after ``finish_grad_sync`` (it waits for the step's gradient reductions). Main gradients in fp32, or in
        --dtype with ``--grad-buffer same``. On the compute chain; ``None`` without sequence parallelism, at TP 1,
        or with LoRA (frozen norms). The row-parallel biases a biased model also marks are in it (:meth:`stage_norm_
        elements`)."""
        cfg = self.cfg
        if not cfg.sequence_parallel or cfg.tp == 1 or self.frozen:
            return None
        grad_bytes = self.nbytes if cfg.grad_buffer == "same" else 4
        return self.coll("tp_ar.norm_grads", T.ALL_REDUCE, self.stage_norm_elements() * grad_bytes, "tp",
                         self.syncs)

    def megatron_grad_norm(self, params):
        """Before Adam, over this rank's ``params`` shard: with gradients kept in ``--dtype`` (``--grad-buffer
        same``: ``grad_reduce_in_fp32`` off) ``_copy_model_grads_to_main_grads``'s ``shard_model_grad.float()`` (read
        the shard in --dtype, write fp32; with fp32 main gradients ``.float()`` copies nothing); then
        ``clip_grad_norm`` (``clip_grad`` 1.0 by default): ``get_grad_norm_fp32``'s ``multi_tensor_l2norm`` over the
        fp32 main gradients (read 4 B each) and the all-reduce of the squared norm (one fp32) over the optimizer's
        grad-stats group: with the distributed optimizer (ZeRO >= 1) every rank of its instance, since each holds a
        DP shard, emitted over the data-parallel group; without it (ZeRO 0) the model-parallel group only, as the
        gradients are whole on every DP rank: nothing over DP. ASSUMPTION: the model-parallel (TP x PP) part of
        that reduction, a 4-byte all-reduce, is left out (the trace has no such group).
        ``clip_grad_by_total_norm_fp32`` rescales only when the norm exceeds ``clip_grad``
        (``if clip_coeff < 1.0``): not emitted. Returns the last node (Adam waits on it)."""
        f32 = [((params,), "Tensor(float)")]
        deps = self.syncs
        if self.cfg.grad_buffer == "same" and self.nbytes != 4:
            self.ew("aten::copy_", "optimizer.main_grads", [((params,), self.ttype), f32[0]], deps)
            deps = ()
        node = self.ew("aten::linalg_vector_norm", "optimizer.clip.norm", f32, deps)  # (the shard as one tensor)
        if self.cfg.zero >= 1 and self._group_size(self.dgroup) > 1:
            node = self.coll("optimizer.clip.norm_all_reduce", T.ALL_REDUCE, 4, self.dgroup, [node])
        return node

    def megatron_params_back(self, params):
        """After Adam, ``_copy_main_params_to_model_params``: the fp32 shard written into the model's parameters
        (which ZeRO-1's all-gather then sends): a copy to ``--dtype`` (read 4, write 2 B), or with ``--fp8-params``
        ``quantize_param_shard`` (Transformer Engine's ``cast_master_weights_to_fp8``: under current scaling the
        shard's amax first, then the cast: read 4 + 4, write 1 B; delayed: read 4, write 1). ASSUMPTION: with
        ``--fp8-params`` every parameter of the shard is taken as FP8 (the norms' and the embedding's are kept
        in --dtype: 1 or 2 B more each, under 15 % of an 8B Llama's). Returns the node."""
        f32 = ((params,), "Tensor(float)")
        if not self.cfg.fp8_params:
            return self.ew("aten::copy_", "optimizer.params", [f32, ((params,), self.ttype)])
        reads = 2 if self.cfg.fp8_recipe == "current" else 1
        return self._memory_node("transformer_engine::quantize", "optimizer.params_fp8", params * (4 * reads + 1),
                                 f"[[{params}]]", "['Tensor(float)']", ())

    def grad_sync(self, label, params, group="dp", mb=None, table=None):
        """Gradient synchronisation of ``params`` (this rank's shard) over the DP group (or, for expert weights,
        the expert-data-parallel group of DP/EP ranks), off the compute chain. ``mb``: with
        ``--grad-sync-every-micro-batch``, the micro-batch whose gradients these are (label ``.mb<k>``); ZeRO-1/2
        gather the updated parameters once, after the last one. Under :meth:`_fsdp2_root` the root's units
        (:data:`ROOT_UNITS`) are reduced as one, ``label`` "root", when the embedding's backward (the last) is done:
        the LM head's call emits nothing, the embedding's sends the root's dense parameters, read from ``table``
        (build()'s {unit: (dense, expert)}, which the embedding's call passes)."""
        cfg = self.cfg
        group = self.dgroup if group == "dp" else group
        if cfg.inference or self._group_size(group) == 1 or params == 0:
            return
        if self._fsdp2_root() and label in ROOT_UNITS and group == self.dgroup:
            if label != "embedding":
                return
            label, params = "root", sum(table[u][0] for u in ROOT_UNITS)
        size = params * self.nbytes
        last = mb is None or mb == cfg.micro_batches - 1
        ag_label = f"{group}_ag.{label}"
        if mb is not None:
            label = f"{label}.mb{mb}"
        if cfg.zero == 3 and self._fsdp2():
            # FSDP2's foreach_reduce: the unit's gradients copied into one reduce-scatter buffer in the reduce dtype
            # on the compute stream (torch._chunk_cat, "copy-in"), then reduce-scattered on its own stream
            reduce_bytes = max(self.nbytes, FSDP2_REDUCE_BYTES)
            src = ((params,), self.ttype)
            dst = ((params,), "Tensor(float)" if reduce_bytes == 4 else self.ttype)
            copy = self.ew("aten::copy_", f"fsdp_copy_in.{label}", [src, dst])
            self.syncs.append(self.coll(f"{group}_rs.{label}", T.REDUCE_SCATTER, params * reduce_bytes, group,
                                        [copy], chain=False))
        elif cfg.zero == 3 and self._deepspeed() and group == self.dgroup:  # in DeepSpeed's buckets
            self.ds_grad_sync(label, params, group)
        elif cfg.zero == 3:  # parameters stay sharded: gradients are only reduce-scattered
            self.syncs.append(self.coll(f"{group}_rs.{label}", T.REDUCE_SCATTER, size, group, [self.prev],
                                        chain=False))
        elif cfg.zero:
            rs = self.coll(f"{group}_rs.{label}", T.REDUCE_SCATTER, size, group, [self.nan_check(label, params)],
                           chain=False)
            self.syncs.append(rs)
            gathered = self.param_gather_bytes(label.split(".")[0], params, group != self.dgroup)
            if cfg.overlap_param_gather or not last:  # (overlapped: gathered at the next step's start)
                pass
            elif cfg.ew:  # the updated shards are gathered after the optimizer step
                self.deferred.append((ag_label, gathered, group))
            else:
                self.coll(ag_label, T.ALL_GATHER, gathered, group, [rs], chain=False)
        else:
            self.syncs.append(self.coll(f"{group}_ar.{label}", T.ALL_REDUCE, size, group,
                                        [self.nan_check(label, params)], chain=False))

    def nan_check(self, label, params):
        """``--check-nan-in-grad``: Megatron-Core DDP's ``check_for_nan_in_grad`` (``_ParamAndGradBucketGroup.
        start_grad_sync`` -> ``check_for_nan_in_grad``: ``bucket.grad_data.norm(p=2)`` per bucket, core_r0.11
        ``megatron/core/distributed/param_and_grad_buffer.py`` 153-167, 268-269) on the compute stream just before
        the bucket's reduction: one read of the ``params`` gradients in the buffer's dtype (bf16 with ``--grad-buffer
        same``, else fp32). Its result goes to the rerun state machine, which returns at once when it is DISABLED
        (the default, ``rerun_state_machine.py`` 171-178, 463-464): no host wait. Returns the node the reduction
        waits on (the compute chain's last node without the flag)."""
        if not self.cfg.check_nan_in_grad:
            return self.prev
        grad_type = self.ttype if self.cfg.grad_buffer == "same" else "Tensor(float)"
        return self.ew("aten::linalg_vector_norm", f"nan_check.{label}", [((params,), grad_type)])

    def _gather(self, label, dense, expert):
        """ZeRO-3: all-gather a unit's parameter shards (dense over DP(xCP), experts over expert-DP), off the
        chain, issued at the current point of the compute chain; returns the ids (compute waits on them)."""
        cfg, out = self.cfg, []
        if cfg.zero != 3 or cfg.inference:
            return out
        for group, params in ((self.dgroup, dense), ("edp", expert)):
            if params and self._group_size(group) > 1:
                deps = [] if self.prev is None else [self.prev]
                if self._deepspeed():  # (with its copy-in and copy-out)
                    out.append(self.ds_gather(label, params, group, deps))
                    continue
                if self._fsdp2():  # (the shard cast and copied into the gather's buffer first)
                    deps = self.fsdp2_gather_copy_in(label, -(-params // self._group_size(group)), deps)
                out.append(self.coll(f"{group}_ag.{label}", T.ALL_GATHER, params * self.nbytes, group, deps,
                                     chain=False))
        return out

    def _z3(self, units, name, store, params, phase):
        """Gather ``name`` (if not yet) and prefetch the next unit of ``units``; the ids ``name``'s compute needs.
        Under :meth:`_fsdp2_root` the embedding and the LM head are gathered as one root unit, and the units
        FSDP2 keeps unsharded after the forward (:meth:`_fsdp2_kept`) are not gathered again for the backward."""
        i = units.index(name)
        kept = self._fsdp2_kept(phase)
        root = self._fsdp2_root()
        for u in units[i:i + 2]:
            if u in store or u in kept:
                continue
            if root and u in ROOT_UNITS:  # (one gather of both, whichever is asked first)
                dense, expert = (sum(params[r][k] for r in ROOT_UNITS) for k in (0, 1))
                store["embedding"] = store["head"] = self._gather(f"root.{phase}", dense, expert)
            else:
                store[u] = self._gather(f"{u}.{phase}", *params[u])
        if name in kept:
            return []
        if self._fsdp2() and store[name] and not isinstance(store[name], _CopiedOut):
            # FSDP2's foreach_all_gather_copy_out: the gathered buffer split into each parameter's unsharded
            # tensor, on the compute stream once the gather is done (read and write of the unit's parameters)
            together = ROOT_UNITS if root and name in ROOT_UNITS else (name,)
            elems = sum(sum(params[u]) for u in together)
            t = ((elems,), self.ttype)
            unit = "root" if len(together) > 1 else name
            out = _CopiedOut([self.ew("aten::copy_", f"fsdp_copy_out.{unit}.{phase}", [t, t], store[name])])
            for u in together:
                store[u] = out
        return store[name]

    def _fsdp2_root(self):
        """torchtitan's FSDP2 wrapping without pipeline parallelism (``apply_fsdp``: ``fully_shard`` of each
        transformer block, then ``fully_shard(model)``): the parameters left to the root, the token embedding, the
        final norm and the LM head, form one unit, gathered together before the first layer and reduce-scattered
        together when the whole backward is done (FSDP2's post-backward of a group runs when its module's backward
        ends: the root's, after the embedding's). Only with --framework fsdp2, one stage, no virtual stages."""
        cfg = self.cfg
        return self._fsdp2() and cfg.zero == 3 and cfg.pp == 1 and cfg.virtual_stages == 1

    def _fsdp2_kept(self, phase):
        """The units FSDP2 under torchtitan does not reshard after the forward, so the backward (``phase``
        ``bwd...``) gathers nothing for them: the root (FSDP2's ``_lazy_init``: "For the root, do not reshard after
        forward since for training, the parameters would be freed and all-gathered immediately",
        ``post_forward_mesh_info = None``) and the last transformer block (torchtitan's ``apply_fsdp``:
        ``reshard_after_forward = int(layer_id) < len(model.layers) - 1``, "do not reshard after forward for the
        last transformer block since FSDP would prefetch it immediately"). Empty otherwise."""
        if not (self._fsdp2_root() and phase.startswith("bwd")):
            return ()
        return ROOT_UNITS + (f"l{self.dims.layers - 1}",)

    def fsdp2_gather_copy_in(self, label, shard, deps):
        """FSDP2's all-gather copy-in of this rank's ``shard`` parameters, on its all-gather copy-in stream (off
        the compute chain) before the gather: ``foreach_all_gather`` (pytorch/pytorch
        ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``) first takes ``_get_param_all_gather_inputs``,
        whose fast path for bf16/fp32 mixed precision ("foreach copy for lower CPU overhead and more efficient
        copying in eager") ``torch._foreach_copy_``-s the fp32 shards into one flat buffer in the parameter dtype
        (read 4 B, write 2 B an element), then ``all_gather_copy_in`` ``_foreach_copy_``-s those into this rank's
        slice of the all-gather output (read and write 2 B); with ``--dtype fp32`` (no mixed precision) only the
        second copy. Returns the ids the gather waits on; none with the memory-bound nodes off."""
        if not self.cfg.ew:
            return deps
        dep, t = list(deps), ((shard,), self.ttype)
        if self.nbytes != 4:  # (each foreach copy as one copy_ node over the shard: read src, write dst)
            dep = [self.ew("aten::copy_", f"fsdp_ag_cast.{label}", [((shard,), "Tensor(float)"), t], dep,
                           chain=False)]
        return [self.ew("aten::copy_", f"fsdp_ag_copy_in.{label}", [t, t], dep, chain=False)]

    def _fsdp2(self):
        """FSDP2's per-unit copies and fp32 reduction in a training step: only with ``--framework fsdp2`` given (a
        plain ``--zero 3`` keeps the generic ZeRO-3 step: gathers and reduce-scatters in --dtype, no copies)."""
        return not self.cfg.inference and self.cfg.framework == "fsdp2"

    def param_gathers(self, params):
        """``--overlap-param-gather`` (Megatron's ``--overlap-param-gather``, NeMo's ``overlap_param_sync``): the
        ZeRO-1/2 all-gathers of the parameters the previous step's optimizer updated, issued at the start of the
        step in forward order, one unit after the other (each waits for the previous, as bucketed prefetching
        does); a unit's first forward waits for its own. In steady state this is the same as gathering after
        the optimizer and overlapping with the next step's forward. Returns {unit: [gather ids]}."""
        cfg, p = self.cfg, self.p
        P, V = cfg.pp, cfg.virtual_stages
        if not cfg.overlap_param_gather:
            return {}
        split = stage_layers(self.dims.layers, cfg)
        out, prev = {}, []
        order = [(v, u) for v in range(p, P * V, P) for u in
                 (["embedding"] if v == 0 else []) + [f"l{i}" for i in split[v]]
                 + (["head"] if v == P * V - 1 else [])]
        for _, unit in order:
            dense, expert = params[unit]
            ids = []
            for group, n in ((self.dgroup, dense), ("edp", expert)):
                if n and self._group_size(group) > 1:
                    label = unit if group == self.dgroup else f"{unit}.experts"
                    size = self.param_gather_bytes(unit, n, group != self.dgroup)
                    prev = [self.coll(f"{group}_ag.{label}", T.ALL_GATHER, size, group, prev, chain=False)]
                    ids += prev
            out[unit] = ids
        return out

    def param_gather_bytes(self, unit, params, experts=False):
        """Bytes of ZeRO-1/2's all-gather of ``params`` updated parameters of ``unit``: ``--dtype`` each, but with
        ``--fp8-params`` (per-tensor FP8) a layer's linear weights are Transformer Engine ``Float8Tensor``s, which
        Megatron-Core's distributed optimizer keeps in a uint8 parameter buffer and gathers as such (core_r0.11.0
        ``distributed/distributed_data_parallel.py``: ``if is_float8tensor(param): param_dtype = torch.uint8``;
        NeMo v2.2.0 ``MegatronMixedPrecision``: ``fp8_params`` sets ``fp8_param_gather = True``): 1 B each. The
        norms, biases, router, embedding and LM head stay in ``--dtype``. ``experts``: the expert-DP gather (all
        linear weights)."""
        cfg = self.cfg
        if not (cfg.fp8_params and cfg.gemm_dtype == "fp8") or self.frozen or not unit.startswith("l"):
            return params * self.nbytes
        if experts:
            return params
        moe = self.dims.is_moe_layer(int(unit[1:]))
        linear = dense_layer_parameters(self.dims, moe) + (expert_layer_parameters(self.dims, moe) if cfg.ep == 1
                                                             else 0)
        linear = min(params, linear // cfg.tp)
        return linear + (params - linear) * self.nbytes

    def optimizer_params(self, params, sharded=True):
        """Parameters this rank updates: its stage's units (layers; embedding on the first, LM head on the last
        virtual stage; ``params``: build()'s {unit: (dense, expert) shard}), TP-sharded, and under ZeRO >= 1 also
        sharded over the (expert-)DP group (``sharded=False``: not that: the gradient buffer's)."""
        dims, cfg, p, P, V = self.dims, self.cfg, self.p, self.cfg.pp, self.cfg.virtual_stages
        split = stage_layers(dims.layers, cfg)
        dense = expert = 0
        for ch in range(V):
            v = ch * P + p
            units = ((["embedding"] if v == 0 else []) + [f"l{i}" for i in split[v]]
                     + (["head"] if v == P * V - 1 else []))
            if v == P * V - 1:  # the MTP modules (training; see .mtp)
                units += [u for u in params if u.startswith("mtp")]
            for unit in units:
                dense += params[unit][0]
                expert += params[unit][1]
        if cfg.zero and sharded:
            dense = -(-dense // self._group_size(self.dgroup))
            if expert:
                expert = -(-expert // self._group_size("edp"))
        return max(1, dense + expert)
