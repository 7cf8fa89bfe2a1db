"""One pipeline stage's node graph: the schedule's forwards and backwards of its layers, with the pipeline's
sends and receives, the gradient synchronisation and the optimizer."""

from __future__ import annotations

from .attention import AttentionOps
from .config import DTYPES, LlmConfig
from .deepspeed_step import PARAM_PERSISTENCE_THRESHOLD, DeepSpeedStepOps
from .eager_act import EagerActOps
from .eager_step import EagerStepOps
from .embedding import EmbeddingOps
from .emit import NodeEmitter
from .fp8 import Fp8Ops
from .hf_eager import HfEagerOps
from .layers import LayerOps
from .lora import LoraOps, adapter_parameters
from .maxtext_step import MaxTextOps
from .model import (MTP_MODULE_NORMS, ModelDims, _lengths, embedding_shard, layer_norm_parameters, layer_shards,
                    mtp_shards, norm_weights, vocab_padding, vocab_shard)
from .mla import MlaOps
from .mtp import MtpOps
from .moe import MoeOps
from .rope import RopeOps
from .routing import routed_rows
from .schedule import pipeline_schedule
from .split import stage_layers
from .torch_cp import TorchCpOps
from .zero import DataParallelOps


def _plus(shards, dense):
    """``(dense, expert)`` with ``dense`` more dense parameters."""
    return shards[0] + dense, shards[1]


class _StageBuilder(NodeEmitter, Fp8Ops, AttentionOps, LayerOps, LoraOps, MlaOps, MtpOps, MoeOps, DataParallelOps,
                    RopeOps, EagerStepOps, DeepSpeedStepOps, HfEagerOps, EagerActOps, TorchCpOps, MaxTextOps,
                    EmbeddingOps):
    """The node graph of one pipeline stage, identical for every rank of the stage except for rank-specific
    attributes (``pg_name``, ``comm_src``/``comm_dst``), which are appended per rank as trailing attributes."""

    def __init__(self, dims: ModelDims, cfg: LlmConfig, stage: int, ep_index: int = 0):
        self.dims, self.cfg, self.p = dims, cfg, stage
        self.e = ep_index  # this graph's EP index (--moe-expert-load gives each EP index its own graph)
        self._ep_loads = {}  # layer -> ep_loads()
        self._expert_groups = {}  # layer -> token copies per local expert (expert_groups())

        self.nbytes, tname = DTYPES[cfg.dtype]
        self.ttype = f"Tensor({tname})"
        self.items = []  # (static bytes, dynamic key or None)
        self.ew_cache = {}  # (op, repr(args)) -> what .emit's ew computes from them
        self.prev = None  # last node of the compute chain
        self.seq, self.ctx = _lengths(dims, cfg)
        self.seq //= cfg.cp  # context parallelism: this rank's query chunk (keys/values: the whole sequence)
        # dense-gradient group: DP, or DP x CP with context parallelism
        self.dgroup = "dp" if cfg.cp == 1 else ("cp" if cfg.dp == 1 else "dpcp")
        self.tokens = cfg.micro_batch_size * self.seq + cfg.prefill_chunk  # (mixed: + the prefill chunk)
        self.act_bytes = self.tokens * dims.hidden * self.nbytes
        # --tp-comm-overlap with FP8 GEMMs: Transformer Engine's userbuffers all-gather the FP8 GEMM inputs (its
        # default FP8 buffers: qkv/fc1 fprop, proj/fc2 dgrad rings, qkv/fc1 bulk re-gathers), 1 byte per element;
        # the reduce-scatters stay in --dtype
        # torchao's Float8ColwiseParallel / PrepareFloat8ModuleInput (torchtitan's TP plan with Float8, 9dec370
        # apply_tp) cast the SP shard to FP8 before the all-gather, and Float8RowwiseParallel casts the output
        # gradient before its backward all-gather (pytorch/ao eab345c float8/float8_tensor_parallel.py): FP8 too
        fp8_ag = cfg.gemm_dtype == "fp8" and (cfg.tp_comm_overlap or cfg.fp8_recipe == "tensorwise")
        self.ag_bytes = self.tokens * dims.hidden * (1 if fp8_ag else self.nbytes)
        # pipeline p2p: with sequence parallelism the stage boundary's activation is already split over TP (each
        # TP rank sends its s/TP rows, as Megatron does); without it every TP rank sends the whole b*s*h
        # (--pp-scatter-gather: Megatron-LM 2021's split of the boundary activation without SP, all-gathered over TP
        # on arrival, see _pp_arrival)
        split = cfg.sequence_parallel or cfg.pp_scatter_gather
        self.p2p_bytes = self.act_bytes // cfg.tp if split else self.act_bytes
        # MoE: token copies this rank dispatches, and (balanced routing) rows its experts compute
        self.routed = routed_rows(dims, cfg, self.tokens) if dims.moe else 0
        self.a2a_bytes = self.routed * dims.hidden * self.nbytes
        # rows of the element-wise ops on the residual stream (LayerNorm, dropout, residual add): this rank's
        # tokens, split over TP with sequence parallelism (replicated on every TP rank otherwise)
        self.ln_rows = self.tokens // cfg.tp if cfg.sequence_parallel else self.tokens
        self.fwd_tag = "fwd"  # label prefix of forward nodes ("fwd.s<i>" for decode step i of several)
        self.syncs = []      # gradient reductions the optimizer waits for
        self.tp_tags = 0     # --tp-comm-overlap ring messages so far (their tags; identical on every TP rank)
        self.comm_sms = dict(cfg.comm_sms)  # --comm-sms: key -> SMs (the comm_sms attribute)
        self.sm_margins = dict(cfg.sm_margins)  # TE overlap name -> its GEMMs' sm_margin
        self.deferred = []   # ZeRO-1/2 parameter all-gathers, issued after the optimizer
        self.deferred_head = []  # --defer-embedding-wgrad-compute: head calls whose wgrad waits for the drain
        # DeepSpeed ZeRO-3 (.deepspeed_step): the open gradient bucket [(unit, elements)], the last node on its
        # reduce stream, buckets reduced so far
        self._ds_bucket, self._ds_stream, self._ds_buckets = [], None, 0
        self.graph = None    # --cuda-graphs: the id of the CUDA graph the nodes emitted now belong to (.emit.graphed)
        self.graphs = 0      # CUDA graphs so far

    def schedule(self):
        """[(kind 'F'/'B', model chunk, micro-batch)] of this pipeline rank, in execution order."""
        return pipeline_schedule(self.cfg, self.p)

    def _steps(self):
        """``(step, (kind, chunk, micro-batch))`` in execution order: the schedule once, or once per decode step
        (each attends to one more cached position and labels its forward nodes ``fwd.s<step>``)."""
        steps = self.cfg.steps
        ctx = self.ctx
        for step in range(steps):
            self.ctx = ctx + step
            if steps > 1:
                self.fwd_tag = f"fwd.s{step}"
            for item in self.schedule():
                yield step, item
        self.ctx = ctx

    def build(self):
        dims, cfg, p, P = self.dims, self.cfg, self.p, self.cfg.pp
        V = cfg.virtual_stages
        split = stage_layers(dims.layers, cfg)
        vocab = vocab_shard(dims, cfg.tp, vocab_padding(cfg))  # (the framework's padding, .model)
        n, h = self.tokens, dims.hidden
        M = cfg.micro_batches
        # torchtitan's op-level selective checkpointing: part of each dense layer's forward again
        op_sac = cfg.recompute_selective and cfg.framework == "fsdp2" and not cfg.inference  # (given, not implied)
        # the parameters trained: {unit: (dense, expert) on this rank}; LoRA: the adapters only
        # the parameters' gradients the step reduces include the norms' (whole on every TP rank: .model
        # layer_norm_parameters; the final norm's with the head's unit, torchtitan's root), except under DeepSpeed
        # ZeRO-3, which keeps them whole and gathers them apart (.deepspeed_step persistent_parameters)
        norms = 0 if self._deepspeed() else layer_norm_parameters(dims)
        final = 0 if self._deepspeed() else norm_weights(dims)
        small = PARAM_PERSISTENCE_THRESHOLD if self._deepspeed() else 0  # (DeepSpeed's persistent parameters)
        # a tied LM head on the rank that holds the embedding (PP 1) is the embedding's own weight: one gradient
        # reduction, one optimizer update, one shard (.one_weight_head); DeepSpeed still gathers it again for the
        # head's module (gathered: what each unit's ZeRO-3 gather fetches)
        head = 0 if self.one_weight_head() else vocab * h
        table = embedding_shard(dims, cfg.tp, small, vocab_padding(cfg))
        params = {"embedding": (table, 0), "head": (head + final, 0)}
        params.update({f"l{i}": _plus(layer_shards(dims, cfg, dims.is_moe_layer(i), biases=not self._deepspeed()),
                                      norms) for i in range(dims.layers)})
        if self.frozen:
            params = {"embedding": (0, 0), "head": (0, 0)}
            params.update({f"l{i}": (adapter_parameters(dims, cfg), 0) for i in range(dims.layers)})
        mtp = dims.mtp_layers if not cfg.inference else 0  # (training only; see .mtp)
        params.update({f"mtp{k}": _plus(mtp_shards(dims, cfg), norms + MTP_MODULE_NORMS * final) for k in range(mtp)})
        gathered = self.head_gathered(params, vocab * h)
        # ZeRO-3: (chunk, phase[, mb]) -> {unit: gather ids}; gathered once per step per phase and reused by the
        # micro-batches, or with --reshard-after-forward again for every micro-batch (labels .fwd|bwd.mb<k>)
        z3 = {}
        reshard = cfg.reshard_after_forward
        every = cfg.grad_sync_every_micro_batch
        steps = cfg.steps
        token_tags = 2 * M * V * steps  # decode: next-token messages (last stage -> first) use tags from here
        token_bytes = cfg.micro_batch_size * 8  # one int64 token id per sequence
        pg = self.param_gathers(params)
        if cfg.overlap_param_gather:  # Megatron's step starts with the gradient buffer's memset (beside the gathers)
            self.zero_grad_buffer(self.optimizer_params(params, sharded=False))
        for step, (kind, ch, mb) in self._steps():
            base = 2 * M * V * step  # p2p tags of this decode step
            v = ch * P + p  # virtual stage
            first, last = v == 0, v == P * V - 1
            layers = split[v]
            cs = f".c{ch}" if V > 1 else ""
            if kind == "F":
                units = (["embedding"] if first else []) + [f"l{i}" for i in layers] + (["head"] if last else [])
                gather = cfg.zero == 3 and (mb == 0 or reshard)
                phase = f"fwd.mb{mb}" if reshard else "fwd"
                store = z3.setdefault((ch, phase), {})
                sc = ch if p > 0 else ch - 1  # the sender's chunk
                deps = [] if first else self._pp_arrival(f"recv_act{cs}.mb{mb}", -1, base + 2 * (sc * M + mb))
                if first and step > 0 and P > 1:  # the token the last stage sampled in the previous step
                    deps = [self.recv(f"recv_token.s{step}.mb{mb}", -1, token_tags + step * M + mb, token_bytes)]
                for i, layer in enumerate(layers):
                    extra = []
                    emb = pg["embedding"] if pg and mb == 0 and first and i == 0 else []
                    if pg and mb == 0:
                        extra += pg[f"l{layer}"]
                    if gather:
                        if first and i == 0:
                            extra += self._z3(units, "embedding", store, gathered, phase)
                        extra += self._z3(units, f"l{layer}", store, gathered, phase)
                    lookup = deps + emb + (extra if cfg.zero == 3 else [])  # (what the embedding waits for)
                    if i == 0 and first and cfg.iota_embed:  # (MaxText's one-hot matmul, .maxtext_step)
                        self.iota_embed_fwd(mb, vocab, lookup)
                        deps = emb = lookup = []
                    elif i == 0 and first and cfg.ew:  # the embedding lookup
                        if self.embedding_input_mask(mb, lookup):  # (Megatron, TP > 1: the ids' mask first)
                            lookup = []
                        idx = ((cfg.micro_batch_size, self.seq), "Tensor(long int)")
                        self.ew("aten::embedding", f"fwd.embedding.mb{mb}", [self._t(vocab, h), idx], lookup)
                        self.embedding_output_mask(mb)
                        self.embedding_before_reduction(mb)
                        deps = emb = lookup = []  # (the layer's first GEMM still names its ZeRO-3 gathers)
                    if i == 0 and first and self.embedding_tp_forward(mb, lookup) is not None:  # (TP > 1)
                        deps = emb = []
                    if i == 0 and first and self.embedding_after_reduction(mb):  # (Megatron's kernels after it)
                        deps = emb = []
                    with self.graphed():
                        self.layer_forward(layer, mb, (deps if i == 0 else []) + emb + extra)
                self.fp8_amax(f"{self.fwd_tag}{cs}.mb{mb}", len(layers), backward=False)
                if last:
                    extra = self._z3(units, "head", store, gathered, phase) if gather else []
                    if pg and mb == 0:
                        extra += pg["head"]
                    # the final norm, on every position (.layers final_norm); its weight is gathered with the head's
                    # unit (torchtitan's FSDP root: embedding, norm and output)
                    if self.final_norm(mb, extra) is not None:
                        extra = []
                    if self.head_gather(mb, extra) is not None:  # (sequence parallelism: its s/TP rows gathered)
                        extra = []
                    rows = n
                    if cfg.logits == "last":  # serving: only each sequence's last position (and the chunk's) is sampled
                        rows = cfg.micro_batch_size + (1 if cfg.mode == "mixed" else 0)
                    self.mm(f"{self.fwd_tag}.head.mb{mb}", rows, h, vocab, extra, linear=False)
                    if cfg.ew:  # vocab-parallel cross entropy over this rank's logits
                        self.loss_fwd(mb, n, vocab)
                    if mtp:
                        self.mtp_forward(mb, vocab)
                if last and step + 1 < steps and P > 1:
                    self.send(f"send_token.s{step + 1}.mb{mb}", +1, token_tags + (step + 1) * M + mb, [self.prev],
                              token_bytes)
                if not last:
                    self.send(f"send_act{cs}.mb{mb}", +1, base + 2 * (ch * M + mb), [self.prev])
            else:
                units = (["head"] if last else []) + [f"l{i}" for i in reversed(layers)] + \
                        (["embedding"] if first else [])
                gather = cfg.zero == 3 and (mb == 0 or reshard)
                phase = f"bwd.mb{mb}" if reshard else "bwd"
                store = z3.setdefault((ch, phase), {})
                sync = mb == M - 1 or every  # gradients reduced after this micro-batch
                smb = mb if every else None
                sc = ch if p < P - 1 else ch + 1
                deps = [] if last else self._pp_arrival(f"recv_grad{cs}.mb{mb}", +1, 2 * (sc * M + mb) + 1)
                if last:
                    extra = self._z3(units, "head", store, gathered, phase) if gather else []
                    if mtp:
                        self.mtp_backward(mb, vocab, deps + extra, sync, smb, params)
                        deps, extra = [], []
                    if cfg.ew:
                        self.loss_bwd(mb, n, vocab, deps + extra)
                        deps, extra = [], []
                    # (sequence parallelism: Megatron's re-gather and reduce-scatter; the wgrad maybe deferred)
                    scattered = self.head_backward(mb, vocab, deps + extra)
                    # (after the head's backward, before the last layer's)
                    deps = [] if self.final_norm_bwd(mb, scattered) is not None else scattered
                    if sync:
                        self.grad_sync("head", params["head"][0], mb=smb)
                for layer in reversed(layers):
                    if gather:
                        deps = deps + self._z3(units, f"l{layer}", store, gathered, phase)
                    with self.graphed():
                        if cfg.recompute:
                            self.layer_forward(layer, mb, deps, tag="recompute")
                            deps = []
                        elif op_sac and not self.dims.is_moe_layer(layer) and not self.dims.mla:
                            self.layer_recompute_op_sac(layer, mb, deps)
                            deps = []
                        self.layer_backward(layer, mb, deps)
                    deps = []
                    if sync:
                        lp, elp = params[f"l{layer}"]
                        self.grad_sync(f"l{layer}", lp, mb=smb)
                        self.grad_sync(f"l{layer}.experts", elp, "edp", mb=smb)
                        self.lora_tp_sync(layer, smb)
                self.fp8_amax(f"bwd{cs}.mb{mb}", len(layers), backward=True)
                if not first:
                    # (with the memory-bound nodes off, the first layer's last reduce-scatter is still pending)
                    self.send(f"send_grad{cs}.mb{mb}", -1, 2 * (ch * M + mb) + 1, [self.prev] + self.take_waits())
                else:
                    self.embedding_bwd_before_gather(mb)  # (Megatron: the embedding dropout's backward)
                    self.embedding_grad_gather(mb)  # (sequence parallelism: the s/TP rows' gradient gathered)
                    self.embedding_bwd_kernels(mb)  # (Megatron: the transpose's, positions' and mask's backward)
                    if cfg.iota_embed and not self.frozen:  # (the one-hot matmul's, .maxtext_step)
                        self.iota_embed_bwd(mb, vocab)
                    elif cfg.ew and not self.frozen:  # (the embedding's weight gradient)
                        idx = ((cfg.micro_batch_size, self.seq), "Tensor(long int)")
                        self.ew("aten::embedding_dense_backward", f"bwd.embedding.mb{mb}", [self._t(n, h), idx])
                    if gather:  # FSDP gathers every unit before its backward (the embedding's needs no weights)
                        self._z3(units, "embedding", store, gathered, phase)
                    if sync:
                        self.grad_sync("embedding", params["embedding"][0], mb=smb, table=params)
        self.drain_head_wgrads(vocab)  # (--defer-embedding-wgrad-compute: the last stage's pipeline drain)
        if self._deepspeed():  # DeepSpeed reduces its last gradient bucket at the backward's end
            self.ds_flush()
        if cfg.ew:
            self.optimizer(self.optimizer_params(params), self.optimizer_params(params, sharded=False))
        return self.items
