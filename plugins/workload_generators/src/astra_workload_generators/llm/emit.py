"""Writing nodes: the Chakra node of a compute kernel, a GEMM, an element-wise (memory-bound) op, a
collective or a send/receive, appended to a stage's graph with its rank-specific part left for later."""

from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache

from astra_sim.chakra import types as T

from .blockscale import block_format, low_precision_weight_bytes
from .config import implied_framework
from .encode import encode_node, memory_node
from .fp8 import FP8_FWD, FP8_GRAD, SCALED_MM


MM = "aten::mm"
#: a GEMM that adds its product to a matrix C (``self``): a weight gradient accumulated into ``main_grad``
ADDMM = "aten::addmm"
#: the micro-batch of a backward node's label (``bwd.l3.mb2.qkv.wgrad``, ``bwd.head.mb0.wgrad``)
_MICRO_BATCH = re.compile(r"\.mb(\d+)\.")
#: reductions: ``tensor_size`` is the bytes of their arguments, read once, as the gpu model counts them (its
#: ``REDUCTION_OPS``, the same names; astra_gpu_model/ops.py ``_memory``); a builder that wants the (not negligible)
#: output's write counted lists the output as a further argument (read the input, write the output). Before issue 36
#: ``sum`` and ``mean`` fell through to the broadcast rule here (input + an output as large as the input: twice what
#: the gpu model moves), which only the replay's compute model (``duration_micros`` from ``tensor_size``) saw
REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "var", "std", "argmax",
              "argmin", "all", "any", "prod", "logsumexp", "var_mean", "std_mean", "nansum", "count_nonzero",
              "_foreach_norm")
#: fills the builders emit (a memset): they write their argument and read nothing, as the gpu model's ``FILL_OPS``
FILLS = ("zero_", "fill_")
#: fused Adam/AdamW: read every tensor list, write the parameters and both moments (the gpu model's count)
FUSED_ADAM = ("_fused_adam_", "_fused_adamw_")
#: the tensor-list arguments a fused Adam writes: params, exp_avgs, exp_avg_sqs (the gpu model's FUSED_ADAM_WRITTEN)
FUSED_ADAM_WRITTEN = (0, 2, 3)
#: concatenations: read every piece and write the joined tensor (the gpu model's count of cat and stack)
CONCATS = ("cat", "stack")
#: norms whose output, listed as their last argument (the input's shape), is written in its own dtype and not read
#: (the gpu model's ``NORM_OUT_OPS``: Transformer Engine's norm writing an FP8 GEMM input, :mod:`.norms`)
NORM_OUT = ("native_layer_norm", "_fused_rms_norm", "rms_norm", "layer_norm")


#: Bandwidth used only for the nodes' ``duration_micros`` (replay); the gpu model times them from their shapes.
EW_REPLAY_BYTES_PER_S = 1.5e12


class NodeEmitter:
    """Node emission for a stage builder (see :class:`.stage._StageBuilder` for the state it keeps).

    ``in_memory``: each node is the :class:`~astra_sim.chakra.EtNode` its bytes read back as, not the bytes."""

    in_memory = False
    #: ids the next node on the compute chain waits for (:meth:`wait_for`), whatever that node is
    waits = ()

    @contextmanager
    def graphed(self):
        """With ``--cuda-graphs``, the nodes emitted inside (one layer's forward, or its backward with what it
        recomputes) are one CUDA graph: each carries the attribute ``cuda_graph`` (the graph's number in the
        trace), and astra run's host model launches the graph once for all of them."""
        if not self.cfg.cuda_graphs:
            yield
            return
        self.graphs += 1
        self.graph = self.graphs
        try:
            yield
        finally:
            self.graph = None

    # -- node emission ------------------------------------------------------------------------------------
    def _add(self, name, type_, attrs, deps=(), dyn=None, duration=0, shapes=None, types=None, chain=True,
             values=None):
        nid = len(self.items)
        if self.graph is not None:
            attrs["cuda_graph"] = self.graph
        deps = list(deps)
        if chain and self.prev is not None:
            deps.insert(0, self.prev)
        if chain and self.waits:
            deps += [i for i in self.waits if i not in deps]
            self.waits = ()
        if self.in_memory:  # the EtNode reading the bytes back gives (test_llm_in_memory compares them)
            item = memory_node(nid, name, type_, deps, duration, attrs, shapes, types, values)
        else:  # (encode_node: the bytes make_node(...)._raw has, written directly; test_llm_encode compares them)
            item = encode_node(nid, name, type_, data_deps=deps, duration_micros=duration, attrs=attrs,
                               inputs_shapes=shapes, inputs_types=types, inputs_values=values)
        self.items.append((item, dyn))
        if chain:
            self.prev = nid
        return nid

    def wait_for(self, ids):
        """The compute stream waits for ``ids`` from here on (``handle.wait()`` on an asynchronous collective after
        other kernels were queued beside it): the next node emitted on the compute chain depends on them."""
        self.waits = tuple(self.waits) + tuple(ids)

    def take_waits(self):
        """The pending :meth:`wait_for` ids, for a node off the compute chain that must still wait for them (a
        pipeline send of the chain's last output); they are consumed."""
        out, self.waits = list(self.waits), ()
        return out

    def comp(self, op, label, shapes, flops, elems, deps=(), extra=None, types=None, nbytes=None, values=None):
        """A compute node; ``elems`` counts ``--dtype`` elements (``tensor_size = elems * bytes`` unless
        ``nbytes`` gives it); ``types``: the inputs' types (default: every input ``--dtype``); ``values``: the
        ``inputs.values`` text (the op's non-tensor arguments, e.g. attention's ``is_causal``)."""
        types = _types_text(tuple(types) if types is not None else (self.ttype,) * (shapes.count("[") - 1))
        dur = max(1, round(flops / (self.cfg.tflops * 1e12) * 1e6))
        attrs = {"is_cpu_op": False, "num_ops": flops, "tensor_size": elems * self.nbytes if nbytes is None else nbytes,
                 "label": label}
        attrs.update(extra or {})
        return self._add(op, T.COMP_NODE, attrs, deps, duration=dur, shapes=shapes, types=types, values=values)

    def mm(self, label, m, k, n, deps=(), linear=True, overlap=None, grouped=None):
        """``[m,k] x [k,n]``. ``linear``: a transformer linear layer (QKV, projection, FFN, experts), which
        ``--gemm-dtype fp8`` runs as an FP8 ``_scaled_mm`` (E4M3 operands, E5M2 for the gradient operand of
        ``*.dgrad``/``*.wgrad``, two fp32 scales, bf16 output); the router and LM head stay in ``--dtype``.
        ``overlap``: the Transformer Engine userbuffers overlap this GEMM runs beside; with its ``set_sm_margin``
        (``--tp-overlap-config``) the node gets ``sm_margin`` = that overlap's SMs, which TE keeps free of it.
        ``grouped``: ``(dim, sizes)`` for a grouped GEMM (the routed experts): ``dim`` (``"m"`` or ``"k"``) is
        split into groups of ``sizes`` (adding up to it), each with its own ``[k,n]`` (``"m"``) or ``[m,n]``
        (``"k"``) matrix; the node gets ``grouped_gemm_dim``/``grouped_gemm_sizes`` and its ``tensor_size``
        counts that matrix once per group with work. ``--gemm-dtype fp4 | mxfp8 | mxfp6 | mxfp4``: see
        :meth:`_block_mm`."""
        margin = self.sm_margins.get(overlap) if overlap else None
        extra = {"sm_margin": margin} if margin else None
        fmt = block_format(self.cfg) if linear else None
        if linear and (fmt is not None or self.cfg.gemm_dtype == "fp8"):  # (the weight, once a step: .fp8)
            groups = sum(1 for s in grouped[1] if s > 0) if grouped and grouped[0] == "m" else 1
            if self.weight_quantize(fmt, label, groups * n, k, deps) is not None:
                deps = ()  # (the GEMM follows it on the compute chain)
        if fmt is not None:
            return self._block_mm(fmt, label, m, k, n, deps, extra, grouped)
        fp8 = linear and self.cfg.gemm_dtype == "fp8"
        buffer = self._grad_buffer(label, linear)
        if buffer is not None:
            return self._wgrad_mm(label, m, k, n, deps, extra, grouped, fp8, *buffer)
        out = 2 if fp8 else 1  # the output's bytes per operand byte (FP8: bf16 output)
        extra, weights, outputs = _grouped(grouped, extra, k * n, out * m * n)
        if not fp8:
            return self.comp(MM, label, f"[[{m}, {k}], [{k}, {n}]]", 2 * m * k * n, m * k + weights + outputs,
                             deps, extra)
        a = FP8_GRAD if label.endswith(".dgrad") else FP8_FWD
        b = FP8_GRAD if label.endswith(".wgrad") else FP8_FWD
        return self.comp(SCALED_MM, label, f"[[{m}, {k}], [{k}, {n}], [], []]", 2 * m * k * n, 0, deps, extra,
                         types=[a, b, "Tensor(float)", "Tensor(float)"], nbytes=m * k + weights + outputs)

    def _grad_buffer(self, label, linear):
        """``(type, accumulate)`` of the buffer a Megatron training step's weight-gradient GEMM writes, else None.
        Megatron's ``gradient_accumulation_fusion`` (on by default: ``--no-gradient-accumulation-fusion`` turns it
        off, NVIDIA/Megatron-LM core_r0.14.0 ``megatron/training/arguments.py`` 1998-2002) has each GEMM write its
        parameter's ``main_grad`` in the gradient buffer (fp32, or ``--dtype`` with ``--grad-buffer same``):

        - Transformer Engine's linears (``linear``; ``fuse_wgrad_accumulation=config.gradient_accumulation_fusion``,
          ``extensions/transformer_engine.py`` 354, 525, 1088) call ``general_gemm(..., out=main_grad,
          out_dtype=main_grad.dtype, accumulate=fuse_wgrad_accumulation and not is_first_microbatch)`` (TE v2.2
          ``module/linear.py`` 532-538, 640-648; the same in ``layernorm_linear.py``, ``grouped_linear.py`` and at
          v2.8): the first micro-batch writes it, later ones read and add (cuBLAS beta = 1). Megatron passes
          ``is_first_microbatch`` True only to a module's first forward of the step (``TELinear.forward`` 382-386
          sets it False after): with ``--recompute`` (full) the backward's forward is the recomputation, so every
          micro-batch accumulates.
        - Megatron's own ``ColumnParallelLinear`` (the LM head, ``linear=False``): ``wgrad_gemm_accum_fp32`` /
          ``_fp16`` into ``main_grad`` on every micro-batch (``tensor_parallel/layers.py`` 553-570).

        Not the router's weight (``RouterGatingLinearFunction.backward`` returns a gradient of its own, added to
        ``main_grad`` apart, not emitted: ``transformer/moe/moe_utils.py`` 914-975), nor LoRA's adapters (NeMo's
        ``ParallelLinearAdapter`` takes the model's config: not read through, left as they were), nor another
        framework's step (FSDP2 / DeepSpeed / eager: autograd writes a fresh gradient). ASSUMPTION: NeMo's and Megatron-Bridge's steps keep the fusion on (Megatron-Bridge enables it
        wherever TE imports, ``utils/fusions.py`` at 067f987d), and so do the 2021 Megatron-LM rows (SC'21:
        f559787d had no fusion and accumulated the fp16 ``.grad`` through autograd, a separate add not emitted)."""
        cfg = self.cfg
        if not label.endswith(".wgrad") or cfg.inference or implied_framework(cfg) != "megatron":
            return None
        if not linear and "head" not in label.split("."):
            return None
        mb = _MICRO_BATCH.search(label)
        first = linear and mb is not None and mb.group(1) == "0" and not cfg.recompute
        return (self.ttype if cfg.grad_buffer == "same" else "Tensor(float)"), not first

    def _main_grad_bytes(self, elements, ctype, accumulate):
        """Bytes a weight-gradient GEMM moves in ``main_grad``: written, and read first when it accumulates."""
        return elements * (4 if ctype == "Tensor(float)" else self.nbytes) * (2 if accumulate else 1)

    def _wgrad_mm(self, label, m, k, n, deps, extra, grouped, fp8, ctype, accumulate):
        """A weight-gradient GEMM into ``main_grad`` (:meth:`_grad_buffer`): accumulating, C listed where the gpu
        model reads it (``addmm``'s ``self``, ``_scaled_mm``'s ``bias``: read and written, twice its size an
        element); the first micro-batch's, the output buffer listed last (written in its type, not read)."""
        extra, weights, outputs = _grouped(grouped, extra, k * n, m * n)
        written = self._main_grad_bytes(outputs, ctype, accumulate)
        if not fp8:
            operands = (m * k + weights) * self.nbytes
            if accumulate:
                return self.comp(ADDMM, label, f"[[{m}, {n}], [{m}, {k}], [{k}, {n}]]", 2 * m * k * n, 0, deps,
                                 extra, types=[ctype, self.ttype, self.ttype], nbytes=operands + written)
            return self.comp(MM, label, f"[[{m}, {k}], [{k}, {n}], [{m}, {n}]]", 2 * m * k * n, 0, deps, extra,
                             types=[self.ttype, self.ttype, ctype], nbytes=operands + written)
        scales = [FP8_FWD, FP8_GRAD, "Tensor(float)", "Tensor(float)"]
        if accumulate:
            return self.comp(SCALED_MM, label, f"[[{m}, {k}], [{k}, {n}], [], [], [{m}, {n}]]", 2 * m * k * n, 0,
                             deps, extra, types=scales + [ctype], nbytes=m * k + weights + written)
        return self.comp(SCALED_MM, label, f"[[{m}, {k}], [{k}, {n}], [], [], [], [{m}, {n}]]", 2 * m * k * n, 0,
                         deps, extra, types=scales + ["None", ctype], nbytes=m * k + weights + written)

    def _block_mm(self, fmt, label, m, k, n, deps, extra, grouped):
        """A block-scaled linear-layer GEMM (:mod:`.blockscale`): ``aten::_scaled_mm`` on ``fmt`` operands (E2M1
        pairs packed along K: ``[m, k/2] x [k/2, n]``; FP6: four in three bytes, ``[m, k/4]``) with their block
        scales (``[m, k/block]``, ``[k/block, n]``) and a bf16 output; ``tensor_size`` = both operands with their
        scales + the output. Its activation input is quantized first (:meth:`block_quantize`): a forward GEMM's
        input, a ``*.dgrad`` GEMM's output gradient; a ``*.wgrad`` GEMM reads the column-wise copies those
        quantizations wrote. Weights are held quantized."""
        extra, weights, outputs = _grouped(grouped, extra, k * n, m * n)
        if self.cfg.ew_forward and ".wgrad" not in label:  # (a chunk too; the GEMM follows it on the compute chain)
            self.block_quantize(fmt, label, m, k, deps)
            deps = ()
        kp = -(-k // fmt.packing)  # stored elements along K
        ks = -(-k // fmt.block)  # scales along K
        types = [fmt.element_type, fmt.element_type, fmt.scale_type, fmt.scale_type]
        shapes, written = f"[[{m}, {kp}], [{kp}, {n}], [{m}, {ks}], [{ks}, {n}]", 2 * outputs
        buffer = self._grad_buffer(label, True)  # (into main_grad: as :meth:`_wgrad_mm` lists it)
        if buffer is not None:
            ctype, accumulate = buffer
            written = self._main_grad_bytes(outputs, ctype, accumulate)
            shapes += f", [{m}, {n}]" if accumulate else f", [], [{m}, {n}]"
            types += [ctype] if accumulate else ["None", ctype]
        nbytes = low_precision_weight_bytes(fmt, m * k) + low_precision_weight_bytes(fmt, weights) + written
        return self.comp(SCALED_MM, label, shapes + "]", 2 * m * k * n, 0, deps, extra, types=types, nbytes=nbytes)

    def ew(self, op, label, args, deps=(), chain=True):
        """An element-wise / memory-bound ATen node. ``args``: per argument ``(shape, type)`` or a list of those
        (a tensor list). ``num_ops = 0`` (FLOP totals stay the matmul/attention FLOPs); ``tensor_size`` = the
        bytes moved as the gpu model counts them (it re-derives them from ``inputs_shapes``/``inputs_types``).
        ``chain=False``: off the compute chain (a side stream's kernel, waiting on ``deps`` only)."""
        # the layers repeat the same ops on the same shapes for every micro-batch: computed once per (op, args)
        # (repr: exact for the ints and strings of args, where 2 == 2.0 == True would not be)
        key = (op, repr(args))
        known = self.ew_cache.get(key)
        if known is None:
            known = self.ew_cache[key] = self._ew_shapes(op, args)
        nbytes, shapes, types = known
        return self._memory_node(op, label, nbytes, shapes, types, deps, chain)

    def _ew_shapes(self, op, args):
        """``(tensor_size, inputs_shapes, inputs_types)`` of :meth:`ew`'s node."""
        shapes, types, tensors = [], [], []
        for a in args:
            if isinstance(a, list):
                shapes.append([list(sh) for sh, _ in a])
                types.append("GenericList[" + ",".join(t for _, t in a) + "]")
                tensors.extend(a)
            else:
                shapes.append(list(a[0]))
                types.append(a[1])
                tensors.append(a)
        size = {"Tensor(float)": 4, "Tensor(double)": 8, "Tensor(long int)": 8, "Tensor(bool)": 1, FP8_FWD: 1,
                FP8_GRAD: 1}

        def nb(t):
            sh, ty = t
            n = 1
            for v in sh:
                n *= v
            return n * size.get(ty, self.nbytes)
        read = sum(nb(t) for t in tensors)
        first = args[0] if isinstance(args[0], list) else [args[0]]
        name = op.split("::")[-1]
        if name == "copy_" or name in REDUCTIONS:  # read src, write dst (its old content is not read); reductions
            nbytes = read
        elif name in FILLS:  # a memset: writes its argument, reads nothing
            nbytes = sum(nb(t) for t in first)
        elif name in FUSED_ADAM:  # (params, grads, exp_avgs, exp_avg_sqs): writes the params and both moments
            lists = [a for a in args if isinstance(a, list)]
            nbytes = read + sum(nb(t) for i in FUSED_ADAM_WRITTEN if i < len(lists) for t in lists[i])
        elif name in CONCATS:  # reads its pieces, writes them all once more (joined)
            nbytes = 2 * read
        elif name in NORM_OUT and len(tensors) > 1 and tensors[-1][0] == first[0][0]:
            nbytes = read  # a norm's output listed last in its own dtype (FP8): written, never read
        elif name.endswith("_"):
            nbytes = read + sum(nb(t) for t in first)
        elif name == "embedding":
            nbytes = nb(args[1]) + 2 * nb((args[1][0], args[0][1])) * args[0][0][1]
        elif name == "embedding_dense_backward":
            nbytes = 2 * nb(args[0])
        else:
            ndim = max(len(sh) for sh, _ in tensors)
            out = [1] * ndim
            for sh, _ in tensors:
                for i, v in enumerate(sh):
                    j = ndim - len(sh) + i
                    out[j] = v if out[j] == 1 else (out[j] if v == 1 else max(out[j], v))
            nbytes = read + nb((out, first[0][1]))
        return nbytes, repr(shapes), repr(types)

    def _memory_node(self, op, label, nbytes, shapes, types, deps, chain=True):
        """A memory-bound COMP node moving ``nbytes`` (``tensor_size``; replayed at ``EW_REPLAY_BYTES_PER_S``)."""
        dur = max(1, round(nbytes / EW_REPLAY_BYTES_PER_S * 1e6))
        attrs = {"is_cpu_op": False, "num_ops": 0, "tensor_size": nbytes, "label": label}
        return self._add(op, T.COMP_NODE, attrs, deps, duration=dur, shapes=shapes, types=types, chain=chain)

    def _t(self, *shape):
        return (tuple(shape), self.ttype)

    def coll(self, label, comm_type, size, group, deps=(), chain=True, overlap=None):
        """A collective over ``group`` on a buffer of ``size`` bytes: the input of an all-reduce, reduce-scatter
        or all-to-all, the gathered output of an all-gather, whose ``comm_size`` becomes each rank's share.
        ``overlap``: its Transformer Engine userbuffers name, if it is one (for ``--comm-sms``)."""
        if comm_type == T.ALL_GATHER:
            size = self._gather_bytes(size, group)
        attrs = {"is_cpu_op": False, "comm_type": comm_type, "comm_size": size}
        self._sms(attrs, overlap, "dp" if group in ("dpcp", "edp") else group)
        return self._add(label, T.COMM_COLL_NODE, attrs, deps, dyn=(group,), chain=chain)

    def send(self, label, direction, tag, deps, size=None, kind="send", sms_key="pp"):
        size = self.p2p_bytes if size is None else size
        attrs = {"is_cpu_op": False, "comm_size": size, "comm_tag": tag}
        self._sms(attrs, sms_key)
        return self._add(label, T.COMM_SEND_NODE, attrs, deps, dyn=(kind, direction), chain=False)

    def recv(self, label, direction, tag, size=None, kind="recv", sms_key="pp"):
        size = self.p2p_bytes if size is None else size
        attrs = {"is_cpu_op": False, "comm_size": size, "comm_tag": tag}
        self._sms(attrs, sms_key)
        return self._add(label, T.COMM_RECV_NODE, attrs, (), dyn=(kind, direction), chain=False)

    def _pp_arrival(self, label, direction, tag):
        """A pipeline receive (``label``) and what the stage's first node waits for after it: the receive, or with
        ``--pp-scatter-gather`` the TP all-gather (``tp_ag.<label>``) that rebuilds the whole ``b*s*h``
        activation or gradient from the TP ranks' 1/TP pieces (Megatron-LM's scatter-gather optimisation)."""
        recv = self.recv(label, direction, tag)
        if not self.cfg.pp_scatter_gather:
            return [recv]
        return [self.coll(f"tp_ag.{label}", T.ALL_GATHER, self.act_bytes, "tp", [recv], chain=False)]

    def _sms(self, attrs, *keys):
        """``--comm-sms``: the first of ``keys`` that has a value sets the node's ``comm_sms`` attribute (the SMs
        its kernel occupies, for the gpu model's contention)."""
        for key in keys:
            if key is not None and key in self.comm_sms:
                attrs["comm_sms"] = self.comm_sms[key]
                return

    def _group_size(self, group):
        cfg = self.cfg
        return {"tp": cfg.tp, "dp": cfg.dp, "cp": cfg.cp, "dpcp": cfg.dp * cfg.cp,
                "edp": cfg.dp // cfg.ep * cfg.cp, "amax": cfg.tp * cfg.dp * cfg.cp}[group]

    def _gather_bytes(self, total_bytes, group):
        """An all-gather's ``comm_size``: what each rank contributes, i.e. the gathered ``total_bytes`` over the
        group's ranks, rounded up (Chakra's and the reference's meaning: the output is group size x comm_size)."""
        n = self._group_size(group)
        return -(-total_bytes // n)


@lru_cache(maxsize=1024)
def _types_text(types):
    """The ``inputs_types`` text of a node whose inputs have ``types``: ``['Tensor(c10::BFloat16)', ...]``."""
    return "[" + ", ".join(repr(t) for t in types) + "]"


def _grouped(grouped, extra, weights, outputs):
    """A grouped GEMM's (``grouped = (dim, sizes)``: the experts' GEMMs as one) attributes and the weights and
    outputs it touches: every active expert's weights when the groups split M, every active expert's outputs
    when they split another dimension. ``(extra, weights, outputs)`` unchanged without it."""
    if grouped is None:
        return extra, weights, outputs
    dim, sizes = grouped
    extra = dict(extra or {}, grouped_gemm_dim=dim, grouped_gemm_sizes=list(sizes))
    active = sum(1 for s in sizes if s > 0)
    return (extra, weights * active, outputs) if dim == "m" else (extra, weights, outputs * active)
