"""One pipeline stage's node graph: the schedule's forwards and backwards of its layers, with the pipeline's
sends and receives, the gradient synchronisation and the optimizer."""

from __future__ import annotations

from astra_sim.chakra import types as T

from .attention import AttentionOps
from .config import DTYPES, LlmConfig, implied_framework
from .deepspeed_step import PARAM_PERSISTENCE_THRESHOLD, DeepSpeedStepOps
from .eager_step import EagerStepOps
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


def embedding_group_used(dims: ModelDims, cfg: LlmConfig) -> bool:
    """Whether the step all-reduces the shared word-embedding gradient between the first and the last pipeline
    stage (:meth:`_EmbeddingTpOps.embedding_grad_all_reduce`), so that the communicator groups include Megatron's
    embedding group (:func:`.layout.comm_groups`): a Megatron training step (ZeRO < 3, with the optimizer step's
    nodes, where the SP norm-gradient all-reduce of the same ``finalize_model_grads`` is emitted too) of a model
    whose LM head shares the embedding's weights, at PP > 1, whose embedding is trained (not LoRA's frozen base)."""
    return (dims.tied_embeddings and cfg.pp > 1 and not cfg.inference and cfg.ew and cfg.zero < 3
            and not cfg.lora_rank and implied_framework(cfg) == "megatron")


class _EmbeddingTpOps:
    """The embedding's communication (a stage-builder mixin): its tensor-parallel reduction (forward) and the
    gradient's gather (backward, sequence parallelism), and the tied word-embedding gradient's all-reduce."""

    def _embedding_tp_kind(self):
        """The forward reduction of the vocabulary-parallel embedding's output over TP: ``"ar"``, ``"rs"`` or None.

        Megatron (LM, NeMo, Megatron-Bridge; :attr:`.layers.LayerOps.megatron_training`): ``VocabParallelEmbedding.
        forward`` looks up this rank's ``vocab/TP`` rows (zeros elsewhere) and, with ``reduce_scatter_embeddings``,
        runs ``reduce_scatter_to_sequence_parallel_region`` (a reduce-scatter along the sequence), else
        ``reduce_from_tensor_model_parallel_region`` (an all-reduce); ``LanguageModelEmbedding`` sets
        ``reduce_scatter_embeddings`` only with sequence parallelism and no learned absolute position embedding
        (nor token types); with sequence parallelism and learned positions it all-reduces, adds the positions and
        splits the sum along the sequence (``scatter_to_sequence_parallel_region``: no communication forward).
        NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/tensor_parallel/layers.py`` 262-295,
        ``megatron/core/models/common/embeddings/language_model_embedding.py`` 48-53, 111-146; Megatron-LM of
        2021-22 (the SC'21 rows) all-reduced the same way (cfd2e216 ``megatron/mpu/layers.py`` 180-199).
        torchtitan (``--framework fsdp2``, implied by ``--zero 3``): ``"tok_embeddings": RowwiseParallel(
        input_layouts=Replicate(), output_layouts=Shard(1))`` (pytorch/torchtitan 9dec370 ``torchtitan/
        parallelisms/parallelize_llama.py`` 133-136): the table sharded by rows (``Shard(0)``), its ``Partial``
        output redistributed to a sequence shard, "to shard -> reduce_scatter" (PyTorch ``torch/distributed/
        tensor/parallel/style.py``, ``RowwiseParallel._prepare_output_fn``): a reduce-scatter with sequence
        parallelism (torchtitan's only TP layout); without it nothing is emitted (not a torchtitan layout).
        DeepSpeed (ZeRO of a Hugging Face model: no tensor parallelism in its step) and MaxText's one-hot embedding
        (``--iota-embed``: XLA's partitioning, not read): nothing. None at TP 1.

        Inference (``--mode prefill/decode/mixed``, the serving steps) by ``--inference-embedding``:
        ``vocab-parallel`` (default), an all-reduce of the step's ``tokens x h`` output: vLLM's
        ``VocabParallelEmbedding.forward`` masks the rows outside this rank's vocabulary shard and returns
        ``tensor_model_parallel_all_reduce(output_parallel)`` (vllm-project/vllm ``vllm/model_executor/layers/
        vocab_parallel_embedding.py``, read at 00db0119, a V0 version of the v0.6.0 period; the all-reduce
        returns its input at TP 1); SGLang's Llama embeds with a ``VocabParallelEmbedding`` adapted from vLLM's
        (sgl-project/sglang ``python/sglang/srt/models/llama.py`` read at 00239548, later than the v0.3.0 of the
        registry's SGLang rows: ASSUMPTION, the same at v0.3.0).
        ``replicated``: nothing: LMDeploy TurboMind v0.1.0a1 keeps the whole ``vocab_size_padded x hidden`` table
        on every TP rank and looks it up with no collective (InternLM/lmdeploy v0.1.0a1 9c46b27c
        ``src/turbomind/models/llama/LlamaWeight.cc`` ``pre_decoder_embedding_table``, ``LlamaV2.cc``
        ``embeddingLookup`` / ``contextDecode``); TensorRT-LLM's example build scripts leave the embedding whole
        unless built with ``--use_parallel_embedding`` ("By default embedding parallelism is disabled", read in
        the search index, not at the v0.5 tag)."""
        cfg = self.cfg
        if cfg.tp == 1 or cfg.iota_embed:
            return None
        if cfg.inference:
            return "ar" if cfg.inference_embedding == "vocab-parallel" else None
        framework = implied_framework(cfg)
        if framework == "megatron":
            if not cfg.sequence_parallel:
                return "ar"
            return "ar" if self.dims.learned_positions else "rs"
        if framework == "fsdp2" and cfg.sequence_parallel:
            return "rs"
        return None

    def embedding_tp_forward(self, mb, deps=()):
        """The embedding output's TP reduction (:meth:`_embedding_tp_kind`) on this micro-batch's ``b x s/CP x h``
        rows in ``--dtype`` (the all-reduce's buffer; the reduce-scatter's input, each rank keeping ``1/TP``, as
        the layers' sequence-parallel reduce-scatters count it), on the compute chain after the lookup: the first
        layer's first node waits for it. Returns its id, None where there is none."""
        kind = self._embedding_tp_kind()
        if kind is None:
            return None
        comm = T.ALL_REDUCE if kind == "ar" else T.REDUCE_SCATTER
        return self.coll(f"tp_{kind}.{self.fwd_tag}.embedding.mb{mb}", comm, self.act_bytes, "tp", deps)

    def embedding_grad_gather(self, mb):
        """With sequence parallelism the gradient reaching the embedding is this rank's ``s/TP`` rows: the
        backward of the forward's sequence split all-gathers it (Megatron: ``_ReduceScatterToSequenceParallel
        Region.backward`` and ``_ScatterToSequenceParallelRegion.backward`` are ``_gather_along_first_dim``,
        core_r0.14.0 ``megatron/core/tensor_parallel/mappings.py`` 276-293, 351-378; the all-reduce's backward is
        the identity, 217-233. torchtitan: DTensor's ``Redistribute.backward`` takes the ``Shard(1)`` gradient
        back to the ``Partial`` input's placement normalised to ``Replicate``, an all-gather), before the
        embedding's weight gradient, on the compute chain. Not without a weight gradient (LoRA: autograd does
        not reach a frozen embedding). Returns its id or None."""
        if not self.cfg.sequence_parallel or self._embedding_tp_kind() is None or self.frozen:
            return None
        return self.coll(f"tp_ag.bwd.embedding.mb{mb}", T.ALL_GATHER, self.act_bytes, "tp")

    def embedding_grad_all_reduce(self):
        """Tied embeddings at PP > 1 (:func:`embedding_group_used`): the first stage's word embedding and the last
        stage's LM head are copies of one weight, so after the DP reduction (and the SP norm-gradient
        all-reduce) Megatron sums their gradients over the embedding group (the first and the last stage's ranks
        of one pipeline): ``finalize_model_grads`` -> ``_allreduce_word_embedding_grads`` ->
        ``torch.distributed.all_reduce(grad, group=embd_group)`` of the weight's whole main gradient (``vocab/TP x
        h``, fp32, or --dtype with ``--grad-buffer same``) on the compute stream, before the optimizer
        (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/distributed/finalize_model_grads.py`` 164-251,
        421-436; the group: ``parallel_state.default_embedding_ranks``, the first and last of each pipeline
        group; Megatron-LM of 2022 likewise, cfd2e216 ``megatron/training.py`` 448-470). The position
        embedding's ``_allreduce_position_embedding_grads`` runs over ``default_position_embedding_ranks``, the
        first stage alone: nothing. Emitted on those two stages only; returns its id or None."""
        cfg = self.cfg
        if not embedding_group_used(self.dims, cfg) or self.p not in (0, cfg.pp - 1):
            return None
        grad_bytes = self.nbytes if cfg.grad_buffer == "same" else 4
        rows = vocab_shard(self.dims, cfg.tp, vocab_padding(cfg))
        return self.coll("emb_ar.word_embedding_grads", T.ALL_REDUCE, rows * self.dims.hidden * grad_bytes, "emb",
                         self.syncs)

    def _embedding_kernels(self):
        """Whether the memory-bound kernels of Megatron's embedding around the lookup are emitted: a Megatron
        training step (:attr:`.layers.LayerOps.megatron_training`) with the memory-bound nodes on (``cfg.ew``)."""
        return self.cfg.ew and self.megatron_training and not self.cfg.iota_embed

    def _out_of_shard_rows(self):
        """Rows of this micro-batch whose token lies outside this rank's ``vocab/TP`` shard: ``n - n/TP``
        (ASSUMPTION: the token ids spread evenly over the TP shards of the vocabulary)."""
        n = self.tokens
        return n - n // self.cfg.tp

    def embedding_input_mask(self, mb, deps=()):
        """At TP > 1, before the lookup, ``VocabParallelEmbedding.forward`` masks the ids outside this rank's
        shard (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/tensor_parallel/layers.py`` 268-273):
        ``input_ < start`` and ``input_ >= end`` (bool), their ``|``, ``input_.clone() - start`` and
        ``masked_input[input_mask] = 0``: six small kernels on the ``b x s/CP`` int64 ids (launch-bound).
        Returns whether they were emitted (the lookup then follows them on the chain)."""
        if not self._embedding_kernels() or self.cfg.tp == 1:
            return False
        ids = ((self.tokens,), "Tensor(long int)")
        mask = ((self.tokens,), "Tensor(bool)")
        lab = f"fwd.embedding.mb{mb}.input_mask"
        self.ew("aten::lt", lab + ".lt", [ids], deps)
        self.ew("aten::ge", lab + ".ge", [ids])
        self.ew("aten::bitwise_or", lab + ".or", [mask, mask])
        self.ew("aten::clone", lab + ".clone", [ids])
        self.ew("aten::sub", lab + ".sub", [ids])
        self.ew("aten::index_put_", lab + ".zero", [ids, mask])
        return True

    def embedding_output_mask(self, mb):
        """At TP > 1, after the lookup, ``output_parallel[input_mask, :] = 0.0`` (core_r0.14.0
        ``tensor_parallel/layers.py`` 283-284): an ``index_put_`` with a boolean index, whose ``nonzero`` reads the
        mask, then a scattered write of zeros into the :meth:`_out_of_shard_rows` rows of ``h`` (timed as the
        fill of those rows, what the kernel writes)."""
        if not self._embedding_kernels() or self.cfg.tp == 1:
            return
        lab = f"fwd.embedding.mb{mb}.output_mask"
        self.ew("aten::nonzero", lab + ".nonzero", [((self.tokens,), "Tensor(bool)")])
        self.ew("aten::fill_", lab + ".rows", [self._t(self._out_of_shard_rows(), self.dims.hidden)])

    def _transpose_copy(self, label):
        """``[b, s, h] -> [s, b, h]``: ``transpose(0, 1).contiguous()``, one copy of the ``b x s/CP x h`` rows."""
        b, h = self.cfg.micro_batch_size, self.dims.hidden
        s = self.tokens // b
        return self.ew("aten::copy_", label, [self._t(b, s, h), self._t(s, b, h)])

    def embedding_before_reduction(self, mb):
        """With ``reduce_scatter_embeddings`` (sequence parallelism without learned positions, the ``"rs"`` kind
        of :meth:`_embedding_tp_kind`) the ``[b s h] -> [s b h]`` copy happens inside ``VocabParallelEmbedding``,
        before the reduce-scatter (core_r0.14.0 ``tensor_parallel/layers.py`` 286-291)."""
        if self._embedding_kernels() and self._embedding_tp_kind() == "rs":
            self._transpose_copy(f"fwd.embedding.mb{mb}.transpose")

    def embedding_after_reduction(self, mb):
        """``LanguageModelEmbedding.forward`` after the word embeddings (core_r0.14.0 ``megatron/core/models/
        common/embeddings/language_model_embedding.py`` 111-148): with learned absolute positions (GPT-2/3) the
        position table's lookup of the ``[b, s]`` position ids and the add; unless ``reduce_scatter_embeddings``
        the ``[b s h] -> [s b h]`` ``transpose(0, 1).contiguous()`` copy (120); with sequence parallelism
        ``clone_scatter_output_in_embedding`` (default True, ``transformer_config.py`` 601) clones this rank's
        ``s/TP`` shard (143-144); then the embedding dropout (``hidden_dropout``, on the ``s/TP`` rows with SP).
        Megatron-LM of 2021 (f559787d, the SC'21 rows) ran the same kernels, the dropout before the transpose:
        ``megatron/mpu/layers.py`` 178-198 (the masks), ``megatron/model/language_model.py`` 187-199 (positions,
        dropout), ``megatron/model/transformer.py`` 608-615 (the first stage's transpose). Returns whether
        anything was emitted."""
        if not self._embedding_kernels():
            return False
        cfg, h, n = self.cfg, self.dims.hidden, self.tokens
        lab = f"fwd.embedding.mb{mb}"
        if self.dims.learned_positions:
            pos = ((cfg.micro_batch_size, n // cfg.micro_batch_size), "Tensor(long int)")
            self.ew("aten::embedding", lab + ".positions", [self._t(self.dims.seq_len, h), pos])
            self.ew("aten::add", lab + ".positions.add", [self._t(n, h), self._t(n, h)])
        if self._embedding_tp_kind() != "rs":
            self._transpose_copy(lab + ".transpose")
        if cfg.sequence_parallel:
            self.ew("aten::clone", lab + ".sp_clone", [self._t(self.ln_rows, h)])
        if cfg.dropout:
            self.ew("aten::native_dropout", lab + ".dropout", [self._t(self.ln_rows, h)])
        return True

    def embedding_bwd_before_gather(self, mb):
        """The embedding dropout's backward, on this rank's rows (the ``s/TP`` shard with sequence parallelism,
        before :meth:`embedding_grad_gather`); the SP clone's backward is the identity."""
        if self._embedding_kernels() and not self.frozen:
            self.dropout_bwd(f"bwd.embedding.mb{mb}")

    def embedding_bwd_kernels(self, mb):
        """Before the lookups' weight gradients: the transpose's backward hands ``embedding_dense_backward`` a
        ``[b, s, h]`` view of the ``[s, b, h]`` gradient, which it makes contiguous (PyTorch ``aten/src/ATen/
        native/cuda/Embedding.cu`` ``embedding_dense_backward_cuda``: ``grad_.contiguous()``, read in the search
        index, not at a pinned commit): one copy for the word embedding and, with learned positions, one for the
        position table's, whose gradient follows (``embedding_dense_backward`` of the ``s x h`` table). At TP > 1
        the output mask's backward (PyTorch ``tools/autograd/derivatives.yaml`` ``_index_put_impl_``: ``self:
        grad.index_put(indices, zeros_like(values))``, read in the search index): a clone of the gradient and
        the zeros written into the :meth:`_out_of_shard_rows`. Not with a frozen (LoRA) embedding."""
        if not self._embedding_kernels() or self.frozen:
            return
        cfg, h, n = self.cfg, self.dims.hidden, self.tokens
        lab = f"bwd.embedding.mb{mb}"
        if self.dims.learned_positions:
            self._transpose_copy(lab + ".positions.contiguous")
            pos = ((cfg.micro_batch_size, n // cfg.micro_batch_size), "Tensor(long int)")
            self.ew("aten::embedding_dense_backward", lab + ".positions", [self._t(n, h), pos])
        if cfg.tp > 1:
            self.ew("aten::clone", lab + ".output_mask.clone", [self._t(n, h)])
            self.ew("aten::fill_", lab + ".output_mask.rows", [self._t(self._out_of_shard_rows(), h)])
        self._transpose_copy(lab + ".contiguous")

    def one_weight_head(self):
        """Whether the LM head is the embedding's own weight on this rank: a tied model (``dims.tied_embeddings``,
        ``--tie-embeddings``) at PP 1, where one rank holds both ends (at PP > 1 the first and last stage keep a
        copy each, summed by :meth:`embedding_grad_all_reduce`). Then the step has ONE such parameter: its gradient
        reduced once over DP, updated once, one ZeRO shard, held by the embedding's unit (the head's unit keeps
        the final norm). Megatron: ``share_embeddings_and_output_weights`` leaves ``output_layer.weight`` None and
        the head's GEMM takes ``shared_embedding_or_output_weight()``, the embedding's ``word_embeddings.weight``,
        whose wgrad accumulates into that parameter's one ``main_grad`` in the DDP buffer (NVIDIA/Megatron-LM
        core_r0.14.0 32ad5c89 ``megatron/core/models/gpt/gpt_model.py``, ``megatron/core/models/common/
        language_module/language_module.py``); its bucket is ready when the parameter's one gradient-accumulation
        hook fires, after the embedding's backward (the last use). DeepSpeed ZeRO-3: one ``param_group`` entry and
        one ``grad_acc`` hook per parameter (microsoft/DeepSpeed v0.7.0 5fe9d610 ``deepspeed/runtime/zero/
        stage3.py`` ``create_reduce_and_remove_grad_hooks``: reduced once, when autograd's one AccumulateGrad of
        the shared leaf runs, after its last use). FSDP2: ``_get_managed_states`` skips a parameter already
        visited, so the tied weight is one FSDP parameter of the root unit (torchtitan's root holds the token
        embedding, the final norm and the output: :meth:`.zero.DataParallelOps._fsdp2_root`; PyTorch
        ``torch/distributed/fsdp/_fully_shard/_fsdp_init.py``, read in the search index, not at a pinned
        commit). Training only (inference reduces and updates nothing)."""
        return self.dims.tied_embeddings and self.cfg.pp == 1 and not self.cfg.inference

    def head_gathered(self, params, table):
        """``params`` as the ZeRO-3 gathers fetch them (:meth:`.zero.DataParallelOps._z3`): the same, except that
        with :meth:`one_weight_head` under DeepSpeed (and the generic ZeRO-3 step) the head's unit gathers the
        ``table`` (``vocab/TP x h``) again. DeepSpeed fetches every parameter a module uses at that module
        (``PartitionedParameterCoordinator.fetch_sub_module``: ``iter_params(current_submodule)``, gathered where
        ``NOT_AVAILABLE``) and after the module releases it unless a module within ``stage3_max_reuse_distance``
        (1e9 elements, ``runtime/zero/config.py``) of parameters ahead in the recorded trace uses it, or the
        prefetcher (``stage3_prefetch_bucket_size``, 5e7) already scanned past its next use
        (``__params_to_release``; v0.7.0 5fe9d610 ``deepspeed/runtime/zero/partitioned_param_coordinator.py``).
        The word embedding's next use is the LM head after every layer (forward), and the embedding after every
        layer's recompute and backward (backward): GPT-2 XL's 48 layers are 1.47e9 elements, past both bounds,
        so the tied table is released after the embedding and gathered again for the head, and likewise in the
        backward (ASSUMPTION: a model whose layers hold fewer elements than the reuse distance would keep it;
        not modelled). The generic ZeRO-3 step gathers per module the same way (ASSUMPTION). FSDP2's root unit
        holds the weight once, gathered once (``params`` as they are)."""
        if not self.one_weight_head() or self.cfg.zero != 3 or self._fsdp2_root():
            return params
        dense, expert = params["head"]
        return {**params, "head": (dense + table, expert)}


class _StageBuilder(NodeEmitter, Fp8Ops, AttentionOps, LayerOps, LoraOps, MlaOps, MtpOps, MoeOps, DataParallelOps,
                    RopeOps, EagerStepOps, DeepSpeedStepOps, HfEagerOps, TorchCpOps, MaxTextOps, _EmbeddingTpOps):
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
        fp8_ag = cfg.gemm_dtype == "fp8" and cfg.tp_comm_overlap
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
