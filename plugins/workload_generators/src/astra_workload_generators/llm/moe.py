"""A mixture-of-experts FFN: the router, shared experts, the expert all-to-alls and the routed experts'
grouped GEMMs, forward and backward (routing arithmetic: :mod:`.routing`).

Three options shape what Megatron-Core and Transformer Engine run around the experts (docs/validation.md, "MoE:
the dispatcher, per-expert GEMMs and selective recompute"); their defaults keep the step as it was:

* ``--moe-dispatcher alltoall``: Megatron-Core's ``MoEAlltoAllTokenDispatcher`` with ``moe_permute_fusion``
  (NVIDIA/Megatron-LM 2a75ac12, ``megatron/core/transformer/moe/token_dispatcher.py``): the tokens-per-expert count
  (``routing_map.sum``), its all-gather over EP, the host synchronisation on those counts before the expert
  all-to-all ("A synchronization is needed before expert parallel AlltoAll communication": the node carries
  ``host_waits``), the fused permute (tokens to their expert copies) and, with more than one local expert, the
  chunk sort by local expert after the dispatch and its inverse before the combine, the fused unpermute, the
  probabilities' own all-to-all, and the backward of each. Default ``exchange``: the two all-to-alls alone.
* ``--moe-grouped-gemm cublas-streams``: Transformer Engine's grouped linear on Hopper without
  ``NVTE_USE_CUTLASS_GROUPED_GEMM``: one cuBLAS GEMM per local expert (TransformerEngine e7c550c5,
  ``transformer_engine/common/gemm/cublaslt_gemm.cu``, ``nvte_multi_tensor_gemm`` -> ``multi_stream_cublas_gemm``)
  emitted as one dense GEMM node each, timed by the gpu model's dense (cuBLAS) GEMM model and launched one by one by
  the host. ASSUMPTION: TE spreads them over 4 side streams (``util/multi_stream.cpp``, ``num_compute_streams = 4``)
  whose concurrent GEMMs share the SMs; the trace runs them one after another on the compute stream. Default
  ``grouped``: one grouped kernel node.
* ``--recompute-modules layernorm,moe_act``: Megatron's output-discarding recompute
  (``transformer_config.py`` ``recompute_modules``: "layernorm": the input_layernorm and pre_mlp_layernorm;
  "moe_act": the MoE MLP activation) re-runs those kernels before the layer's backward uses their outputs.
* ``--bias-activation-fusion``: Megatron-Core's ``bias_activation_fusion`` for gated experts: ``TEGroupedMLP`` runs
  the activation and the routing probabilities' product as one compiled kernel each way
  (``weighted_bias_swiglu_impl``, or ``weighted_bias_quick_geglu_impl`` with GPT-OSS's clamp and its cat before it;
  :meth:`MoeOps._fused_act_fwd`). Default: the SiLU and the product (two kernels forward, three backward).
* ``--moe-router-dtype fp32|fp64``: Megatron's ``moe_router_dtype``; without it the router's logits and
  probabilities are in the input's dtype (``TopKRouter.gating``), so the probabilities' all-to-all carries
  ``--dtype``'s bytes a copy (:attr:`MoeOps.prob_bytes`). The router GEMM itself is timed in ``--dtype`` either way.

A model whose experts have biases (GPT-OSS: ``ModelDims.expert_bias``) gets, in training, the fc2 bias as
Megatron-Core adds it: ``TEGroupedMLP`` builds ``linear_fc2`` with ``skip_bias_add=True`` and its unfused path
(``use_transformer_engine_op_fuser`` off, as Megatron-Bridge's benchmark recipes set it) adds
``b_e * p`` to each local expert's rows in a Python loop and concatenates them (``_apply_bias``; NVIDIA/Megatron-LM
2a75ac12 ``megatron/core/transformer/moe/experts.py``): two kernels per local expert and a cat forward, four per
expert and three more backward (:meth:`MoeOps.expert_bias_fwd`, :meth:`MoeOps.expert_bias_bwd`). fc1's bias is
in its GEMM (``skip_bias_add=False``: the cuBLAS epilogue) and costs nothing extra.
"""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError

from .routing import busiest_rank_rows, ep_loads, local_expert_rows

#: --moe-dispatcher: the expert exchange alone, or Megatron-Core's alltoall token dispatcher (fused permutes)
MOE_DISPATCHERS = ("exchange", "alltoall")
#: --moe-grouped-gemm: one grouped kernel, or Transformer Engine's one cuBLAS GEMM per local expert
MOE_GROUPED_GEMMS = ("grouped", "cublas-streams")
#: --recompute-modules: the Megatron-Core recompute_modules the generator emits
RECOMPUTE_MODULES = ("layernorm", "moe_act")
#: --moe-router-dtype: Megatron's moe_router_dtype choices; without it the router runs in the input's dtype
MOE_ROUTER_DTYPES = ("fp32", "fp64")
#: Bytes of one routing probability per router dtype (Megatron-Core's TopKRouter: the logits in the router dtype,
#: the probabilities cast back "to the same dtype as the logits"; NVIDIA/Megatron-LM 2a75ac12 router.py, moe_utils.py)
ROUTER_DTYPE_BYTES = {"fp32": 4, "fp64": 8}
#: Bytes of one tokens-per-expert count (``routing_map.sum(dim=0).long()``: int64)
COUNT_BYTES = 8


def parse_recompute_modules(text):
    """``--recompute-modules a,b``: the module names as a tuple (each one of :data:`RECOMPUTE_MODULES`)."""
    names = tuple(part.strip() for part in str(text).split(",") if part.strip())
    for name in names:
        if name not in RECOMPUTE_MODULES:
            raise ConfigError(f"--recompute-modules: {name!r} is not one of {', '.join(RECOMPUTE_MODULES)} (Megatron's "
                              "other modules are not emitted; --recompute full or selective covers the attention)")
    if not names:
        raise ConfigError("--recompute-modules needs at least one of " + ", ".join(RECOMPUTE_MODULES))
    return names


def check_moe_kernels(dims, cfg):
    """ConfigErrors for --moe-dispatcher, --moe-grouped-gemm and --recompute-modules (called by check_config)."""
    if cfg.moe_dispatcher not in MOE_DISPATCHERS:
        raise ConfigError(f"--moe-dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got {cfg.moe_dispatcher!r}")
    if cfg.moe_grouped_gemm not in MOE_GROUPED_GEMMS:
        raise ConfigError(f"--moe-grouped-gemm must be one of {', '.join(MOE_GROUPED_GEMMS)}, got "
                          f"{cfg.moe_grouped_gemm!r}")
    for flag, value, default in (("--moe-dispatcher", cfg.moe_dispatcher, "exchange"),
                                 ("--moe-grouped-gemm", cfg.moe_grouped_gemm, "grouped")):
        if value != default and not dims.moe:
            raise ConfigError(f"{flag} {value} needs a mixture-of-experts model (--experts)")
    if cfg.moe_dispatcher == "alltoall" and (cfg.moe_capacity_factor is not None or cfg.moe_expert_load):
        raise ConfigError("--moe-dispatcher alltoall is emitted for dropless balanced routing (no "
                          "--moe-capacity-factor or --moe-expert-load)")
    if cfg.moe_router_dtype is not None:
        if cfg.moe_router_dtype not in MOE_ROUTER_DTYPES:
            raise ConfigError(f"--moe-router-dtype must be one of {', '.join(MOE_ROUTER_DTYPES)}, got "
                              f"{cfg.moe_router_dtype!r}")
        if not dims.moe:
            raise ConfigError("--moe-router-dtype needs a mixture-of-experts model (--experts)")
    if getattr(cfg, "moe_force_load_balancing", False):
        if not dims.moe:
            raise ConfigError("--moe-force-load-balancing needs a mixture-of-experts model (--experts)")
        if cfg.moe_capacity_factor is not None or cfg.moe_expert_load or cfg.moe_imbalance != 1:
            raise ConfigError("--moe-force-load-balancing is the random router's dropless spread; "
                              "--moe-capacity-factor, --moe-expert-load and --moe-imbalance are other models of the "
                              "routing (give one)")
    if cfg.bias_activation_fusion and not (dims.moe and dims.gated):
        raise ConfigError("--bias-activation-fusion is emitted for a mixture-of-experts model with gated experts "
                          "(Megatron's TEGroupedMLP fuses SwiGLU and quick-GeGLU only; the dense FFN is not changed "
                          "by it)")
    modules = cfg.recompute_modules
    if modules:
        bad = [m for m in modules if m not in RECOMPUTE_MODULES]
        if bad:
            raise ConfigError(f"--recompute-modules: {bad[0]!r} is not one of {', '.join(RECOMPUTE_MODULES)}")
        if cfg.inference:
            raise ConfigError("--recompute-modules is for training (the backward's recomputation)")
        if cfg.recompute:
            raise ConfigError("--recompute-modules is Megatron's selective recompute; --recompute full already "
                              "re-runs whole layers")
        if "moe_act" in modules and not dims.moe:
            raise ConfigError("--recompute-modules moe_act needs a mixture-of-experts model (--experts)")


class MoeOps:
    """Mixture-of-experts layers (a stage-builder mixin)."""

    def _a2a(self, label, layer, deps=()):
        """An expert all-to-all (EP > 1; returns whether there is one). Balanced routing: ``a2a_bytes`` per rank;
        under ``--moe-force-load-balancing`` the busiest rank's rows (:meth:`busiest_rows`: the receiver that
        finishes the dispatch last, the sender that finishes the combine last).
        With ``--moe-expert-load`` it is an all-to-all-v: rank e sends ``loads[j]`` token copies to EP rank j
        (:func:`ep_loads`) and gets ``loads[e]`` from each in the dispatch, the reverse in the combine. Its time
        is set by the busiest receiver (dispatch) or sender (combine), whose EP - 1 messages all carry
        ``max(loads)`` copies, so it is timed as the all-to-all whose per-peer message has that size:
        ``comm_size = EP * max(loads) * h * bytes`` on every rank (balanced loads: ``a2a_bytes``)."""
        cfg = self.cfg
        if cfg.ep == 1:
            return False
        rows = self.busiest_rows()
        size = self.a2a_bytes if rows == self.routed else rows * self.dims.hidden * self.nbytes
        if cfg.moe_expert_load:
            size = cfg.ep * max(self.ep_loads(layer)) * self.dims.hidden * self.nbytes
        self.coll(f"ep_a2a.{label}", T.ALL_TO_ALL, size, "ep", deps)
        return True

    def ep_loads(self, layer):
        """Token copies this rank sends to each EP rank's experts in ``layer`` (see :func:`ep_loads`; computed
        once per layer, as every micro-batch and phase routes the same)."""
        if layer not in self._ep_loads:
            self._ep_loads[layer] = ep_loads(self.dims, self.cfg, self.tokens, self.dims.moe_index(layer))
        return self._ep_loads[layer]

    def expert_rows(self, layer):
        """Token copies this rank's experts compute in ``layer``: :func:`routed_rows` (balanced routing, or the
        --moe-imbalance straggler), the busiest rank's under --moe-force-load-balancing (:meth:`busiest_rows`), or
        with --moe-expert-load EP x its share from every rank."""
        if not self.cfg.moe_expert_load:
            return self.busiest_rows()
        return self.cfg.ep * self.ep_loads(layer)[self.e]

    def busiest_rows(self):
        """The token copies the busiest EP rank's experts compute (and receive in the dispatch, send back in the
        combine), which every rank of the group waits for: :func:`busiest_rank_rows` under
        ``--moe-force-load-balancing`` in training with EP > 1 (the random router's spread over the ranks), else
        the rank's own ``routed``. (Decode and prefill are left at the mean: the law's normal limit needs many
        tokens, a training micro-batch's thousands.)"""
        dims, cfg = self.dims, self.cfg
        if not getattr(cfg, "moe_force_load_balancing", False) or cfg.inference or cfg.ep < 2:
            return self.routed
        return busiest_rank_rows(self.routed, dims.experts // cfg.ep, dims.experts, dims.top_k, cfg.ep)

    def expert_groups(self, layer):
        """Token copies each of this rank's E/EP experts computes in ``layer`` (:func:`local_expert_rows`),
        adding up to :meth:`expert_rows`; None with one local expert (its GEMMs are plain GEMMs)."""
        if layer not in self._expert_groups:
            dims, cfg = self.dims, self.cfg
            groups = None
            if dims.experts // cfg.ep > 1:
                groups = local_expert_rows(dims, cfg, self.tokens, dims.moe_index(layer), self.e,
                                           self.expert_rows(layer))
            self._expert_groups[layer] = groups
        return self._expert_groups[layer]

    def expert_mm(self, label, m, k, n, layer, dim, deps=()):
        """A routed experts' GEMM ``[m,k] x [k,n]`` (``m`` or, for a weight gradient, ``k`` = the token copies
        of all local experts; the weight operand shows one expert's): a grouped GEMM whose groups are the
        local experts, marked with the Chakra attributes ``grouped_gemm_dim`` (``"m"`` or ``"k"``, the
        dimension split over the experts) and ``grouped_gemm_sizes`` (that dimension per expert) for the gpu
        compute model's grouped-GEMM time."""
        groups = self.expert_groups(layer)
        if groups is not None and self.cfg.moe_grouped_gemm == "cublas-streams":
            return self._per_expert_mm(label, m, k, n, dim, groups, deps)
        return self.mm(label, m, k, n, deps, grouped=None if groups is None else (dim, groups))

    def _per_expert_mm(self, label, m, k, n, dim, groups, deps):
        """``--moe-grouped-gemm cublas-streams``: the grouped GEMM as Transformer Engine runs it on Hopper, one cuBLAS
        GEMM per local expert with work (``[m_g, k] x [k, n]`` when the experts split M, ``[m, k_g] x [k_g, n]``
        for a weight gradient), one node each on the compute chain (see the module docstring)."""
        node = None
        for rows in groups:
            if rows <= 0:
                continue
            gm, gk = (rows, k) if dim == "m" else (m, rows)
            node = self.mm(label, gm, gk, n, deps)
            deps = ()
        return node

    # -- --moe-dispatcher alltoall (Megatron-Core's MoEAlltoAllTokenDispatcher, moe_permute_fusion) -------------
    def _dispatch_prepare(self, lab):
        """Before the dispatch: the tokens-per-expert count (``routing_map.sum(dim=0)``: the ``rows x E`` boolean
        map read once), with EP > 1 its all-gather over EP (``gather_from_sequence_parallel_region`` of the E int64
        counts), the host synchronisation on the counts' copy to the host (``host_waits`` on the gather, or on the
        count with EP 1, whose sync point is "before_finish"), and the fused permute of the ``tokens x h``
        activation into its ``routed`` expert copies (read both, Transformer Engine's ``moe_permute_with_probs``)."""
        if self.cfg.moe_dispatcher != "alltoall":
            return
        dims, cfg = self.dims, self.cfg
        rows, E = self.ln_rows, dims.experts
        shapes = repr([[rows, E]])
        types = repr(["Tensor(bool)"])
        attrs = {"is_cpu_op": False, "num_ops": 0, "tensor_size": rows * E, "label": lab + ".dispatch.counts"}
        if cfg.ep == 1:
            attrs["host_waits"] = True
        self._add("aten::sum", T.COMP_NODE, attrs, duration=1, shapes=shapes, types=types)
        if cfg.ep > 1:
            gather = {"is_cpu_op": False, "comm_type": T.ALL_GATHER, "comm_size": E * COUNT_BYTES,
                      "host_waits": True}
            self._sms(gather, "ep")
            self._add(lab + ".dispatch.counts_ag", T.COMM_COLL_NODE, gather, dyn=("ep",))
        self._permute(lab + ".dispatch.permute", self.routed, self.tokens)

    def _permute(self, label, out_rows, in_rows, deps=()):
        """A fused (un)permute: ``in_rows x h`` read, ``out_rows x h`` written (the copies gathered or scattered by
        the row map; ``aten::copy_`` of the two, the bytes it moves). None without the alltoall dispatcher."""
        if self.cfg.moe_dispatcher != "alltoall":
            return None
        h = self.dims.hidden
        return self.ew("aten::copy_", label, [self._t(out_rows, h), self._t(in_rows, h)], deps)

    def _sort_chunks(self, label, layer, deps=()):
        """The chunk sort by local expert (``sort_chunks_by_idxs``, fused) of the ``rows x h`` copies this rank's
        experts compute: after the dispatch, its inverse before the combine, and each one's backward; only with
        more than one local expert (the dispatcher skips it otherwise). None when not emitted."""
        if self.cfg.moe_dispatcher != "alltoall" or self.dims.experts // self.cfg.ep < 2:
            return None
        rows = self.expert_rows(layer)
        h = self.dims.hidden
        return self.ew("aten::copy_", label, [self._t(rows, h), self._t(rows, h)], deps)

    @property
    def prob_bytes(self):
        """Bytes of one routing probability: the router dtype's (``--moe-router-dtype``), else the input's
        (``--dtype``): Megatron-Core's ``TopKRouter.gating`` sets ``router_dtype = input.dtype`` unless
        ``moe_router_dtype`` is fp32 or fp64, its GEMM writes the logits in that dtype and ``topk_routing_with_
        score_function`` casts the probabilities back to the logits' dtype (NVIDIA/Megatron-LM 2a75ac12
        ``megatron/core/transformer/moe/router.py``, ``moe_utils.py``)."""
        router = self.cfg.moe_router_dtype
        return ROUTER_DTYPE_BYTES[router] if router else self.nbytes

    def _router_t(self, rows, cols):
        """A ``[rows, cols]`` tensor of the router's logits or probabilities, in the router dtype."""
        router = self.cfg.moe_router_dtype
        if not router:
            return self._t(rows, cols)
        return ((rows, cols), {"fp32": "Tensor(float)", "fp64": "Tensor(double)"}[router])

    def _probs_a2a(self, label):
        """The dispatcher's second all-to-all: the routing probabilities of the token copies (:attr:`prob_bytes`
        each)."""
        if self.cfg.moe_dispatcher == "alltoall":
            self.coll(f"ep_a2a.{label}.probs", T.ALL_TO_ALL, self.busiest_rows() * self.prob_bytes, "ep")

    # -- GPT-OSS's expert biases (Megatron-Core TEGroupedMLP, linear_fc2 skip_bias_add=True: _apply_bias) ------
    def _bias_groups(self, layer):
        """The local experts' token copies for ``_apply_bias`` (one group with one local expert), or None when the
        model has no expert biases or element-wise nodes are not emitted (training only)."""
        if not getattr(self.dims, "expert_bias", False) or not self.cfg.ew:
            return None
        groups = self.expert_groups(layer) or (self.expert_rows(layer),)
        return [rows for rows in groups if rows > 0]

    def expert_bias_fwd(self, lab, layer):
        """The fc2 biases as Megatron-Core adds them outside the grouped GEMM (``TEGroupedMLP._apply_bias``: per
        local expert ``t + b * p`` on its rows of the fc2 output, the bias scaled by each copy's routing
        probability, then ``torch.cat`` of the pieces): per expert with work an ``aten::mul`` (``[h] x [rows, 1]``)
        and an ``aten::add`` (``[rows, h]`` twice), then one ``aten::cat``. Returns whether nodes were emitted."""
        groups = self._bias_groups(layer)
        if not groups:
            return False
        h = self.dims.hidden
        for rows in groups:
            self.ew("aten::mul", lab + ".experts.fc2.bias.scale", [self._t(h), self._t(rows, 1)])
            self.ew("aten::add", lab + ".experts.fc2.bias.add", [self._t(rows, h), self._t(rows, h)])
        self._cat(lab + ".experts.fc2.bias.cat", groups, h)
        return True

    def expert_bias_bwd(self, lab, layer, deps=()):
        """The backward of :meth:`expert_bias_fwd` as autograd runs it: per expert ``b * p``'s two gradients
        (``grad * p`` summed over the rows for the bias, ``grad * b`` summed over ``h`` for the probability: an
        ``aten::mul`` and an ``aten::sum`` each), then ``torch.split``'s backward on the fc2 output (``aten::cat`` of
        the rows' gradients) and on the probabilities (``aten::cat`` of the ``[rows, 1]`` pieces), which autograd
        adds to the activation's gradient of the same probabilities (``aten::add``). Returns whether nodes were
        emitted (the first waits on ``deps``)."""
        groups = self._bias_groups(layer)
        if not groups:
            return False
        h, lab = self.dims.hidden, lab + ".experts.fc2.bias"
        for rows in groups:
            self.ew("aten::mul", lab + ".dbias.mul", [self._t(rows, h), self._t(rows, 1)], deps)
            deps = ()
            self._reduce(lab + ".dbias.sum", (rows, h))
            self.ew("aten::mul", lab + ".dprob.mul", [self._t(rows, h), self._t(h)])
            self._reduce(lab + ".dprob.sum", (rows, h))
        self._cat(lab + ".split.bwd", groups, h)
        self._cat(lab + ".dprob.cat", groups, 1)
        total = sum(groups)
        self.ew("aten::add", lab + ".dprob.accumulate", [self._t(total, 1), self._t(total, 1)])
        return True

    def _cat(self, label, groups, cols):
        """``torch.cat`` of ``[rows, cols]`` pieces, one per group: reads and writes them all (2 x their bytes)."""
        self.ew("aten::cat", label, [[self._t(rows, cols) for rows in groups]])

    def _reduce(self, label, shape):
        """An ``aten::sum`` over ``shape`` (a reduction: the gpu model moves its input once)."""
        self._memory_node("aten::sum", label, shape[0] * shape[1] * self.nbytes, repr([list(shape)]),
                          repr([self.ttype]), ())

    # -- --bias-activation-fusion: the experts' activation as TEGroupedMLP runs it fused ----------------------------
    def _fused_act_fwd(self, label, rows, cols, deps=()):
        """The experts' fused activation forward (Megatron-Core ``TEGroupedMLP.bias_act_func`` with
        ``bias_activation_fusion``; NVIDIA/Megatron-LM 2a75ac12 ``megatron/core/transformer/moe/experts.py``):
        SwiGLU runs ``weighted_bias_swiglu_impl`` and GPT-OSS's quick-GeGLU ``weighted_bias_quick_geglu_impl``
        (``megatron/core/fusions/fused_bias_swiglu.py``, ``fused_bias_geglu.py``), each one ``jit_fuser``
        (torch.compile) kernel that reads the ``[rows, 2 x cols]`` fc1 output and the ``[rows, 1]`` routing
        probabilities and writes ``[rows, cols]``: an ``aten::mul`` node of the two halves and the probabilities.
        With a clamp (``dims.glu_clamp``: ``activation_func_clamp_value``) ``weighted_bias_quick_geglu_impl`` first
        clamps each half outside the compiled function (``x_glu.clamp(max=v)``, ``x_linear.clamp(-v, v)``: an
        ``aten::clamp`` each) and concatenates them (``aten::cat``). fc1's bias is in its GEMM (no bias here).
        Returns whether nodes were emitted (the first waits on ``deps``)."""
        if not self.cfg.ew_forward:
            return False
        half = self._t(rows, cols)
        if self.dims.glu_clamp:
            self.ew("aten::clamp", label + ".act.clamp.glu", [half], deps)
            deps = ()
            self.ew("aten::clamp", label + ".act.clamp.linear", [half])
            self._cat(label + ".act.cat", (rows, rows), cols)
        self.ew("aten::mul", label + ".act.fused", [half, half, self._router_t(rows, 1)], deps)
        return True

    def _fused_act_bwd(self, label, rows, cols):
        """The backward of :meth:`_fused_act_fwd`: the compiled backward (``weighted_swiglu_back`` /
        ``weighted_quick_geglu_back``: reads the ``[rows, cols]`` gradient, the saved ``[rows, 2 x cols]`` input
        and the probabilities, writes the input's ``[rows, 2 x cols]`` gradient and the probabilities' one kernel);
        with a clamp, autograd's backward of the two clamps (``clamp_backward``: ``where(mask, grad, 0)``, the mask
        ``x <= v`` for the gate half, ``(x >= -v).logical_and_(x <= v)`` for the linear half: PyTorch's
        ``torch/csrc/autograd/FunctionsManual.cpp`` ``clamp_backward``; ASSUMPTION: the recipe's container runs that
        formula, read in current copies, not at its torch commit; its one-element zero tensors are not emitted) and of ``chunk``
        (``split_backward``: the two halves' gradients concatenated). The cat's backward is views. The comparisons'
        bool outputs are counted at their input's size and ``where``'s at its bool condition's (the gpu model
        sizes an element-wise output like its first argument); per clamp the two errors cancel to 0.5 x
        ``rows x cols`` bytes."""
        if not self.cfg.ew:
            return
        half, full = self._t(rows, cols), self._t(rows, 2 * cols)
        self.ew("aten::mul", label + ".act.fused.bwd", [half, full, self._router_t(rows, 1)])
        if not self.dims.glu_clamp:
            return
        mask = ((rows, cols), "Tensor(bool)")
        self.ew("aten::le", label + ".act.clamp.glu.mask", [half])
        self.ew("aten::where", label + ".act.clamp.glu.bwd", [mask, half])
        self.ew("aten::ge", label + ".act.clamp.linear.mask_lo", [half])
        self.ew("aten::le", label + ".act.clamp.linear.mask_hi", [half])
        self.ew("aten::logical_and_", label + ".act.clamp.linear.mask", [mask, mask])
        self.ew("aten::where", label + ".act.clamp.linear.bwd", [mask, half])
        self._cat(label + ".act.chunk.bwd", (rows, rows), cols)

    def _act_recompute(self, label, rows, cols, deps):
        """``--recompute-modules moe_act``: the experts' activation forward again before its backward (SiLU x up for
        a gated FFN, else the GeLU; with ``--bias-activation-fusion`` :meth:`_fused_act_fwd`). Returns whether
        nodes were emitted."""
        if not self.cfg.ew:
            return False
        if self.cfg.bias_activation_fusion:
            return self._fused_act_fwd(label + ".recompute", rows, cols, deps)
        t = self._t(rows, cols)
        if self.dims.gated:
            self.ew("aten::silu", label + ".recompute.silu", [t], deps)
            self.ew("aten::mul", label + ".recompute.mul", [t, t])
        else:
            self.ew("aten::gelu", label + ".recompute.gelu", [t, self._t(cols)], deps)
        return True

    def norms_recompute(self, lab, deps=()):
        """``--recompute-modules layernorm``: the layer's two norms (input_layernorm, pre_mlp_layernorm) forward
        again at the start of its backward. Returns the deps left for the next node (``[]`` once used)."""
        if "layernorm" not in self.cfg.recompute_modules or not self.cfg.ew:
            return deps
        self.layer_norm(lab + ".recompute.ln1", deps)
        self.layer_norm(lab + ".recompute.ln2")
        return []

    def moe_forward(self, lab, layer):
        """The router (gate GEMM + softmax over the experts) on this rank's tokens (split over TP with sequence
        parallelism, replicated without); shared experts on every token; all-to-all dispatch; the routed experts
        as grouped GEMMs (:meth:`expert_mm`, one group per local expert) over the token copies this rank
        receives (balanced routing: tokens*top_k, or :func:`routed_rows` with a capacity factor;
        :meth:`expert_rows`); all-to-all combine."""
        dims, tp, n, h = self.dims, self.cfg.tp, self.tokens, self.dims.hidden
        mf = dims.expert_ffn // tp
        gm = 2 if dims.gated else 1
        self.mm(lab + ".router", self.ln_rows, h, dims.experts, linear=False)
        if self.cfg.ew:
            self.ew("aten::_softmax", lab + ".router.softmax", [self._router_t(self.ln_rows, dims.experts)])
        self._dispatch_prepare(lab)
        if dims.shared_experts:
            sf = dims.shared_experts * mf
            self.fp8_cast(lab + ".shared.fc1", n, h)  # (FP8: the expert MLPs are plain TE linears, no fused casts)
            self.mm(lab + ".shared.fc1", n, h, gm * sf)
            self.act_fwd(lab + ".shared.fc1", n, sf)
            self.fp8_cast(lab + ".shared.fc2", n, sf)
            self.mm(lab + ".shared.fc2", n, sf, h)
        if self._a2a(lab + ".dispatch", layer):
            self._probs_a2a(lab + ".dispatch")
        nk = self.expert_rows(layer)
        self._sort_chunks(lab + ".dispatch.sort", layer)
        self.fp8_cast(lab + ".experts.fc1", nk, h)
        self.expert_mm(lab + ".experts.fc1", nk, h, gm * mf, layer, "m")
        if self.cfg.bias_activation_fusion:
            self._fused_act_fwd(lab + ".experts.fc1", nk, mf)
        else:
            self.act_fwd(lab + ".experts.fc1", nk, mf)
        self.fp8_cast(lab + ".experts.fc2", nk, mf)
        self.expert_mm(lab + ".experts.fc2", nk, mf, h, layer, "m")
        self.expert_bias_fwd(lab, layer)
        self._sort_chunks(lab + ".combine.unsort", layer)
        self._a2a(lab + ".combine", layer)
        self._permute(lab + ".combine.unpermute", self.tokens, self.routed)

    def moe_backward(self, lab, layer, deps=()):
        dims, tp, n, h = self.dims, self.cfg.tp, self.tokens, self.dims.hidden
        mf = dims.expert_ffn // tp
        f1 = (2 if dims.gated else 1) * mf
        nk = self.expert_rows(layer)
        if self._permute(lab + ".combine.unpermute.bwd", self.routed, self.tokens, deps) is not None:
            deps = ()
        if self._a2a(lab + ".combine", layer, deps):
            deps = ()
        if self._sort_chunks(lab + ".combine.unsort.bwd", layer, deps) is not None:
            deps = ()
        if self.expert_bias_bwd(lab, layer, deps):
            deps = ()
        if "moe_act" in self.cfg.recompute_modules and self._act_recompute(lab + ".experts.fc1", nk, mf, deps):
            deps = ()
        if self.fp8_cast(lab + ".experts.fc2.dgrad", nk, h, deps) is not None:  # FP8: the output gradients
            deps = ()
        self.expert_mm(lab + ".experts.fc2.dgrad", nk, h, mf, layer, "m", deps)
        self.expert_mm(lab + ".experts.fc2.wgrad", mf, nk, h, layer, "k")
        if self.cfg.bias_activation_fusion:
            self._fused_act_bwd(lab + ".experts.fc1", nk, mf)
        else:
            self.act_bwd(lab + ".experts.fc1", nk, mf)
        self.fp8_cast(lab + ".experts.fc1.dgrad", nk, f1)
        self.expert_mm(lab + ".experts.fc1.dgrad", nk, f1, h, layer, "m")
        self.expert_mm(lab + ".experts.fc1.wgrad", h, nk, f1, layer, "k")
        self._sort_chunks(lab + ".dispatch.sort.bwd", layer)
        if self._a2a(lab + ".dispatch", layer):
            self._probs_a2a(lab + ".dispatch")
        self._permute(lab + ".dispatch.permute.bwd", self.tokens, self.routed)
        if dims.shared_experts:
            sf, sf1 = dims.shared_experts * mf, dims.shared_experts * f1
            self.fp8_cast(lab + ".shared.fc2.dgrad", n, h)
            self.mm(lab + ".shared.fc2.dgrad", n, h, sf)
            self.mm(lab + ".shared.fc2.wgrad", sf, n, h)
            self.act_bwd(lab + ".shared.fc1", n, sf)
            self.fp8_cast(lab + ".shared.fc1.dgrad", n, sf1)
            self.mm(lab + ".shared.fc1.dgrad", n, sf1, h)
            self.mm(lab + ".shared.fc1.wgrad", h, n, sf1)
        rows, E = self.ln_rows, dims.experts
        if self.cfg.ew:
            self.ew("aten::_softmax_backward_data", lab + ".router.softmax",
                    [self._router_t(rows, E), self._router_t(rows, E)])
        self.mm(lab + ".router.dgrad", rows, E, h, linear=False)
        self.mm(lab + ".router.wgrad", h, rows, E, linear=False)
