"""What DeepSpeed ZeRO-3 runs in a training step besides the generic ZeRO-3 step's per-unit gathers and
reduce-scatters (``--framework deepspeed --zero 3``): the gathers' copies, the gradients reduced in buckets with
the fp16 overflow check on each reduced partition, and its optimizer step's own passes and small collectives.
Every other framework, and DeepSpeed at ZeRO 0-2, keep the step they had.

Sources: microsoft/DeepSpeed at tag v0.7.0 (2022-07-31; the release of the period of the registry's DeepSpeed case,
which does not state its version: an **assumption**), ``deepspeed/runtime/zero/``:

- the gathers (``partition_parameters.py``, ``all_gather_coalesced``): this rank's shards are ``torch.cat``-ed into
  the flat send buffer ("copy-in"), all-gathered in one call, and ``AllGatherCoalescedHandle.wait`` rebuilds each
  parameter with ``torch.cat`` of its gathered pieces ("copy-out"), on the coordinator's all-gather stream. The
  coordinator (``partitioned_param_coordinator.py``, ``fetch_sub_module``) coalesces its prefetches up to
  ``stage3_prefetch_bucket_size`` (5e7 elements) per call, so a steady-state step gathers about a layer or two at a
  time, not one submodule at a time: the generic step's one gather per unit is kept.
- the gradients (``stage3.py``): each parameter's gradient is copied into the flat reduce bucket
  (``__add_grad_to_ipg_bucket``, ``contiguous_gradients``), and when the next would overflow ``reduce_bucket_size``
  (``reduce_independent_p_g_buckets_and_remove_grads``) the bucket is interleaved by rank (``torch.cat``),
  pre-divided (``div_``) and reduce-scattered in one call (``comm/coalesced_collectives.py``,
  ``reduce_scatter_coalesced``); the reduced partition is copied into the gradient partition and checked for
  overflow, ``isinf(...).any()`` and ``isnan(...).any()`` (``__partition_grads``), all on its reduce stream; the
  backward's end reduces what is left (``independent_gradient_partition_epilogue``).
- the step (``stage3.py``, ``step``): the fp16 loss scaler's overflow flag all-reduced (``has_overflow``, one byte,
  MAX over DP); the gradient norm, every step even without clipping (``get_grad_norm_direct``: each gradient
  partition ``.double().norm(2)``, then an all-reduce of the sum); the fp32 gradient made from the fp16 partitions
  (``_prepare_fp32_grad_for_sub_group``: ``flatten`` and ``.to(fp32)``); unscaled in place (``unscale_and_clip_grads``,
  ``mul_``); the optimizer (FusedAdam, the generic ``_fused_adam_`` node); the fp32 master weights copied to the fp16
  partition (``_reassign_or_swap_out_partitioned_parameters``); and the persistent parameters (those of fewer than
  ``stage3_param_persistence_threshold`` = 1e5 elements, kept whole on every rank) all-gathered one by one
  (``_post_step`` -> ``_allgather_params_coalesced``: one ``all_gather_base`` per parameter).
- the host in the step (``stage3.py`` at v0.7.0): ``independent_gradient_partition_epilogue`` ends the backward with
  ``self.__reduce_and_partition_stream.synchronize()``; ``has_overflow`` reads the overflow flag with ``.item()`` before
  and after its all-reduce; ``get_grad_norm_direct`` takes the norm parameter by parameter (``for g, p in
  zip(gradients, params): grad_norms.append(g.cuda(non_blocking=True).double().norm(2))``, then ``torch.stack``,
  ``torch.pow``, ``torch.sum``, the all-reduce and ``total_norm_cuda.item()``); ``_allgather_params_coalesced`` ends
  with ``torch.cuda.synchronize()``. So the host waits for the GPU before the step and twice inside it, and launches
  the norm's two kernels per parameter tensor (``parameter_tensors``) with the GPU idle behind it: the overflow
  all-reduce, the norm's all-reduce and the last persistent all-gather are marked ``host_waits``.

The reduce and all-gather streams' copies run beside the compute stream on the GPU; here they are memory-bound nodes
off the compute chain, which the simulator runs on the one compute slot when their inputs are ready (an
**assumption**: they share the GPU's memory bandwidth with the compute stream).
"""

from __future__ import annotations

from astra_sim.chakra import types as T

from .memory_terms import DS_REDUCE_BUCKET
from .model import linear_bias_tensors, mla_projections, position_embedding_parameters
from .split import stage_layers

F32 = "Tensor(float)"
F64 = "Tensor(double)"
BOOL = "Tensor(bool)"
#: DeepSpeed's ``stage3_param_persistence_threshold`` default (elements; v0.7.0 ``runtime/zero/config.py``:
#: ``param_persistence_threshold: int = Field(1e5, ...)``): smaller parameters are not partitioned
PARAM_PERSISTENCE_THRESHOLD = 100_000
#: the gradient bucket (elements): DeepSpeed's ``reduce_bucket_size`` default (:data:`.memory_terms.DS_REDUCE_BUCKET`;
#: PyTorch Lightning's ``DeepSpeedStrategy`` passes 2e8, which no flag expresses)
REDUCE_BUCKET_ELEMS = DS_REDUCE_BUCKET


def persistent_parameters(dims, layers=None, final=True, first=False):
    """The sizes (elements) of the parameters ZeRO-3 keeps whole, one list entry each: per layer the two norms'
    weights, LayerNorm's biases (not RMSNorm's: ``dims.rms_norm``), the query and key norms (``dims.qk_norm``) and
    the linear layers' biases (:func:`.model.linear_bias_tensors`: QKV, projection, FC1, FC2 as Hugging Face's GPT-2
    ``Conv1D`` has them; QKV's only with ``dims.qkv_bias``), as :func:`.model.layer_norm_parameters` counts the norms. Plus the final norm (``final``), and first a learned position table (``first``: GPT-2's ``wpe``,
    :func:`.model.position_embedding_parameters`). Only those under ``PARAM_PERSISTENCE_THRESHOLD``. ``layers``: how
    many layers (default: the model's)."""
    per_layer = _layer_small_tensors(dims)
    final_norm = [dims.hidden] * (1 if dims.rms_norm else 2)
    positions = [position_embedding_parameters(dims)] if first and dims.learned_positions else []
    sizes = positions + per_layer * (dims.layers if layers is None else layers) + (final_norm if final else [])
    return [n for n in sizes if n < PARAM_PERSISTENCE_THRESHOLD]


def _layer_small_tensors(dims):
    """One layer's norms and linear biases, one entry each (see :func:`persistent_parameters`)."""
    h, d = dims.hidden, dims.head_dim
    norm = 1 if dims.rms_norm else 2  # (weight, or weight and bias)
    per_layer = [h, h] * norm + ([d, d] * norm if dims.qk_norm else [])
    return per_layer + [n for n, _ in linear_bias_tensors(dims, moe=False)]


def layer_weight_tensors(dims, moe=False):
    """One layer's weight matrices (elements), one entry each: for a biased (GPT-2-style) model Hugging Face GPT-2's
    four ``Conv1D`` (``c_attn`` holds Q, K and V in one tensor; ``c_proj``; ``mlp.c_fc``; ``mlp.c_proj``), otherwise
    Llama-style separate ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` (MLA: its projections and ``o_proj``) and the
    FFN's two or three matrices (gated: gate, up, down); an MoE layer (``moe``) has each routed and shared expert's
    and the router's. ASSUMPTION: the model's dimensions do not say how its code splits the tensors; these are the
    Hugging Face layouts of the two families (only the count changes the step: the bytes are the same)."""
    h, d = dims.hidden, dims.head_dim
    if dims.mla:
        attn = [k * n for _, k, n in mla_projections(dims)] + [dims.o_width * h]
    elif dims.has_linear_bias:
        attn = [h * (dims.q_width + 2 * dims.kv_heads * d), dims.q_width * h]
    else:
        attn = [h * dims.q_width, h * dims.kv_heads * d, h * dims.kv_heads * d, dims.q_width * h]
    mats = 3 if dims.gated else 2
    if dims.moe and moe:
        return attn + [h * dims.expert_ffn] * mats * (dims.experts + dims.shared_experts) + [h * dims.experts]
    return attn + [h * dims.ffn_hidden] * mats


def parameter_tensors(dims, layer_ids, final=True, first=False):
    """The element counts of every parameter tensor of the layers ``layer_ids`` (their weights,
    :func:`layer_weight_tensors`, norms and biases), with ``first`` the token embedding and a learned position
    table before them, with ``final`` the final norm and an untied LM head after them: what ``get_grad_norm_direct``
    takes one norm of each (DeepSpeed keeps one gradient partition per parameter, ``averaged_gradients``)."""
    h = dims.hidden
    out = [dims.vocab * h] if first else []
    if first and dims.learned_positions:
        out.append(position_embedding_parameters(dims))
    for i in layer_ids:
        out += layer_weight_tensors(dims, dims.is_moe_layer(i)) + _layer_small_tensors(dims)
    if final:
        out += [h] * (1 if dims.rms_norm else 2)
        if not dims.tied_embeddings:
            out.append(dims.vocab * h)
    return out


class DeepSpeedStepOps:
    """DeepSpeed ZeRO-3's copies, bucketed gradient reduction and optimizer step (a stage-builder mixin)."""

    def _deepspeed(self):
        """Only under ``--framework deepspeed --zero 3`` in a training step."""
        cfg = self.cfg
        return not cfg.inference and cfg.framework == "deepspeed" and cfg.zero == 3

    def _ds_side(self, op, label, args, dep):
        """A memory-bound node on one of DeepSpeed's side streams (off the compute chain) after ``dep`` (a node id
        or None); with the memory-bound nodes off (``--no-elementwise``) none, and ``dep`` is what follows waits on."""
        if not self.cfg.ew:
            return dep
        return self.ew(op, label, args, [] if dep is None else [dep], chain=False)

    def ds_gather(self, label, elems, group, deps):
        """One ``all_gather_coalesced`` of ``elems`` parameters over ``group``: the copy-in of this rank's shard,
        the gather, the copy-out of the whole parameters; returns the copy-out (what compute waits on)."""
        shard = ((-(-elems // self._group_size(group)),), self.ttype)
        whole = ((elems,), self.ttype)
        copy_in = self._ds_side("aten::cat", f"ds_ag_copy_in.{label}", [[shard]], deps[0] if deps else None)
        gather = self.coll(f"{group}_ag.{label}", T.ALL_GATHER, elems * self.nbytes, group,
                           [] if copy_in is None else [copy_in], chain=False)
        return self._ds_side("aten::cat", f"ds_ag_copy_out.{label}", [[whole]], gather)

    def ds_grad_sync(self, label, params, group):
        """A unit's gradients (``params`` elements, produced now) copied into the open reduce bucket; the bucket is
        reduced first if it holds something and they would take it past ``REDUCE_BUCKET_ELEMS`` (stage3.py
        ``reduce_independent_p_g_buckets_and_remove_grads``)."""
        total = sum(n for _, n in self._ds_bucket)
        if self._ds_bucket and total + params > REDUCE_BUCKET_ELEMS:
            self.ds_flush(group)
        t = ((params,), self.ttype)
        if self.cfg.ew:  # (after the unit's backward and, on the reduce stream, the previous copy)
            deps = [self.prev] + ([self._ds_stream] if self._ds_stream is not None else [])
            self._ds_stream = self.ew("aten::copy_", f"ds_ipg_copy.{label}", [t, t], deps, chain=False)
        self._ds_bucket.append((label, params))

    def ds_flush(self, group="dp"):
        """Reduce the open bucket: interleave by rank, pre-divide, reduce-scatter, copy the partition out and check
        it for inf and nan; the last node joins the gradient reductions the optimizer waits for."""
        bucket = self._ds_bucket
        if not bucket:
            return
        group = self.dgroup if group == "dp" else group
        k = self._ds_buckets
        self._ds_buckets += 1
        n = sum(p for _, p in bucket)
        flat = ((n,), self.ttype)
        part = ((-(-n // self._group_size(group)),), self.ttype)
        flags = ((part[0][0],), BOOL)
        # the bucket's gradients are ready after the copies into it (without them: now, on the compute chain)
        node = self._ds_stream if self.cfg.ew else self.prev
        node = self._ds_side("aten::cat", f"ds_rs_interleave.b{k}", [[flat]], node)
        node = self._ds_side("aten::div_", f"ds_rs_predivide.b{k}", [flat], node)
        node = self.coll(f"{group}_rs.ds_bucket{k}", T.REDUCE_SCATTER, n * self.nbytes, group,
                         [] if node is None else [node], chain=False)
        node = self._ds_side("aten::copy_", f"ds_grad_partition.b{k}", [part, part], node)
        for check in ("isinf", "isnan"):
            node = self._ds_side(f"aten::{check}", f"ds_overflow.{check}.b{k}", [part], node)
            node = self._ds_side("aten::any", f"ds_overflow.{check}.any.b{k}", [flags], node)
        self._ds_stream = node
        self.syncs.append(node)
        self._ds_bucket = []

    def ds_optimizer(self, params):
        """DeepSpeed ZeRO-3's ``step`` over this rank's ``params`` partition (see the module's docstring); returns
        the last node (the backward's end reduced the last gradient bucket: ``_StageBuilder.build``). The host waits
        for the overflow flag's all-reduce, the norm's all-reduce and the last persistent all-gather
        (:meth:`_ds_host_waits`), and launches the norm one parameter tensor at a time."""
        g = ((params,), self.ttype)
        g32 = ((params,), F32)
        dp = self._group_size(self.dgroup)
        P, V = self.cfg.pp, self.cfg.virtual_stages
        mine = range(self.p, P * V, P)  # this rank's virtual stages
        split = stage_layers(self.dims.layers, self.cfg)
        layer_ids = [i for v in mine for i in split[v]]
        first, final = 0 in mine, P * V - 1 in mine
        deps = self.syncs
        if dp > 1:  # has_overflow: the local flag, MAX over DP, read back with .item()
            self._ds_host_waits("optimizer.ds_overflow_all_reduce", T.ALL_REDUCE, 1, self.syncs)
            deps = ()  # (the norm follows it on the compute chain)
        # get_grad_norm_direct: each parameter's gradient partition .double().norm(2), then stack, pow and sum
        tensors = [-(-n // dp) for n in parameter_tensors(self.dims, layer_ids, final, first)]
        for k, n in enumerate(tensors):
            self.ew("aten::copy_", f"optimizer.ds_norm.double.{k}", [((n,), self.ttype), ((n,), F64)], deps)
            self.ew("aten::linalg_vector_norm", f"optimizer.ds_norm.{k}", [((n,), F64)])
            deps = ()
        norms = ((len(tensors),), F64)
        self.ew("aten::stack", "optimizer.ds_norm.stack", [norms], deps)  # (read and write each)
        self.ew("aten::pow", "optimizer.ds_norm.pow", [norms])
        self.ew("aten::sum", "optimizer.ds_norm.sum", [norms, ((1,), F64)])
        if dp > 1:  # the sum over DP, read back with .item()
            self._ds_host_waits("optimizer.ds_norm_all_reduce", T.ALL_REDUCE, 8)
        self.ew("aten::cat", "optimizer.ds_flatten_grads", [[g]])
        self.ew("aten::copy_", "optimizer.ds_grads_fp32", [g, g32])
        self.ew("aten::mul_", "optimizer.ds_unscale", [g32])
        one = [g32]
        self.ew("aten::_fused_adam_", "optimizer.adam", [one, one, one, one])
        node = self.ew("aten::copy_", "optimizer.ds_fp16_params", [g32, g])
        if dp > 1:  # _post_step: this stage's persistent parameters, one all-gather each, then torch.cuda.synchronize()
            sizes = persistent_parameters(self.dims, len(layer_ids), final=final, first=first)
            for i, n in enumerate(sizes):
                label = f"optimizer.ds_persistent_ag.{i}"
                if i == len(sizes) - 1:
                    node = self._ds_host_waits(label, T.ALL_GATHER, n * self.nbytes)
                else:
                    node = self.coll(label, T.ALL_GATHER, n * self.nbytes, self.dgroup)
        return node

    def _ds_host_waits(self, label, comm_type, size, deps=()):
        """A collective over DP on the compute chain that the host waits for (``host_waits``: the ``.item()`` or
        ``torch.cuda.synchronize()`` after it); the host launches what follows once it is done."""
        if comm_type == T.ALL_GATHER:
            size = self._gather_bytes(size, self.dgroup)
        attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size, "host_waits": True}
        self._sms(attrs, "dp")
        return self._add(label, T.COMM_COLL_NODE, attrs, deps, dyn=(self.dgroup,))
