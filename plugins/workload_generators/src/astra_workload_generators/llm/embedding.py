"""The embedding's step around its lookup (a stage-builder mixin): the vocabulary-parallel table's tensor-parallel
reduction and the memory-bound kernels Megatron runs around it, the gradient's gather, the tied word embedding's
gradient all-reduce between the first and the last stage, and a tied LM head held as the embedding's own weight."""

from __future__ import annotations

from astra_sim.chakra import types as T

from .config import LlmConfig, implied_framework
from .model import ModelDims, vocab_padding, vocab_shard


def embedding_group_used(dims: ModelDims, cfg: LlmConfig) -> bool:
    """Whether the step all-reduces the shared word-embedding gradient between the first and the last pipeline
    stage (:meth:`EmbeddingOps.embedding_grad_all_reduce`), so that the communicator groups include Megatron's
    embedding group (:func:`.layout.comm_groups`): a Megatron training step (ZeRO < 3, with the optimizer step's
    nodes, where the SP norm-gradient all-reduce of the same ``finalize_model_grads`` is emitted too) of a model
    whose LM head shares the embedding's weights, at PP > 1, whose embedding is trained (not LoRA's frozen base)."""
    return (dims.tied_embeddings and cfg.pp > 1 and not cfg.inference and cfg.ew and cfg.zero < 3
            and not cfg.lora_rank and implied_framework(cfg) == "megatron")


class EmbeddingOps:
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
