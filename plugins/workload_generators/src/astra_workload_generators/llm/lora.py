"""LoRA fine-tuning (``--lora-rank R [--lora-targets qkv,proj,fc1,fc2]``): frozen base weights, low-rank adapters
``W + A B`` (A: in x R, B: R x out) on the targeted linear layers of every transformer layer.

What changes against full training: the base weights get no weight gradient (their ``wgrad`` GEMMs, the LM
head's and the embedding's are not emitted), no gradient synchronisation and no optimizer state; the activation
gradients still flow through them (every ``dgrad`` stays). Each adapter adds two GEMMs to the forward (``x A``,
then ``(x A) B``) and four to the backward (B's and A's weight and input gradients); only the adapters'
gradients are reduced over DP and updated by the optimizer.

Tensor parallelism: a column-parallel target (QKV, FC1) keeps A whole on every TP rank and splits B's outputs
like the base weight's; a row-parallel target (projection, FC2) splits A's inputs like the base weight's and
keeps B whole, its partial output added to the base's before the TP reduction. The forward and the input
gradients then need no TP communication of their own; the whole factors' gradients are partial sums over TP,
all-reduced over TP once per layer when the gradients are synchronised (as Megatron all-reduces the
sequence-parallel LayerNorm gradients). The adapters' scaling (element-wise, on ``x A``) is not emitted.

``--lora-dropout P``: NeMo's LoRA drops each adapter's input, not the base's (``dropout_position="pre"``:
``linear_out(linear_in(dropout(x)))``; NVIDIA/NeMo nemo/collections/llm/peft/utils.py at 0cdc2a00,
``ParallelLinearAdapter.forward``: ``if self.dropout is not None and self.dropout_position == 'pre'``), so a
forward runs one dropout over the target's input ``x`` (tokens x adapter inputs) before A, and the backward its
``native_dropout_backward`` on the gradient A's input gradient gives, before it is added to the base's: two memory-bound
passes per target and layer, as :meth:`.layers.LayerOps.dropout_add` times the residual stream's. Its saved
output and mask are not in the memory estimate. MLPerf's Llama 2 70B LoRA runs it at 0.1 (mlcommons/
training_results_v5.1 441d65f4: NVIDIA's code ``LoRA(dim=16, alpha=32, dropout=0.1, dropout_position="pre", ...)``
in train.py, AMD's ``adapter_dropout: ${oc.env:LORA_DROPOUT,0.1}`` with LORA_DROPOUT unset).
"""

from __future__ import annotations

from astra_sim.chakra import types as T
from astra_sim.errors import ConfigError

#: the linear layers an adapter can target: (name, column-parallel?)
LORA_TARGETS = {"qkv": True, "proj": False, "fc1": True, "fc2": False}


def parse_lora_targets(text) -> tuple:
    """``"qkv,proj,fc1,fc2"`` (any non-empty subset, comma-separated) as a tuple in the layer's order."""
    if not isinstance(text, str):
        raise ConfigError(f"--lora-targets: expected comma-separated names of {', '.join(LORA_TARGETS)}, "
                          f"got {text!r}")
    names = [w.strip() for w in text.split(",")]
    if not names or any(not w for w in names):
        raise ConfigError(f"--lora-targets: expected comma-separated names of {', '.join(LORA_TARGETS)}, "
                          f"got {text!r}")
    for w in names:
        if w not in LORA_TARGETS:
            raise ConfigError(f"--lora-targets: unknown target {w!r} (known: {', '.join(LORA_TARGETS)})")
    if len(set(names)) != len(names):
        raise ConfigError(f"--lora-targets: a target is named twice in {text!r}")
    return tuple(t for t in LORA_TARGETS if t in names)


def adapter_dims(dims, tp, target):
    """(inputs, outputs) of ``target``'s adapter on one of ``tp`` TP ranks: A is inputs x R, B is R x outputs."""
    h = dims.hidden
    if target == "qkv":
        return h, (dims.q_width + 2 * dims.kv_heads * dims.head_dim) // tp
    if target == "proj":
        return dims.o_width // tp, h
    if target == "fc1":
        return h, (2 if dims.gated else 1) * dims.ffn_hidden // tp
    return dims.ffn_hidden // tp, h


def adapter_parameters(dims, cfg, tp=None) -> int:
    """One layer's adapter parameters (A and B of every target) on one TP rank (``tp``: the TP size, default
    ``cfg.tp``; 1: the whole layer's)."""
    tp = cfg.tp if tp is None else tp
    return sum(cfg.lora_rank * sum(adapter_dims(dims, tp, t)) for t in cfg.lora_targets)


def replicated_adapter_parameters(dims, cfg) -> int:
    """One layer's adapter parameters kept whole on every TP rank (A of column-parallel targets, B of
    row-parallel ones): their gradients are partial sums all-reduced over TP."""
    r, h = cfg.lora_rank, dims.hidden
    return r * h * len(cfg.lora_targets)


def frozen_input_elements(dims, cfg) -> tuple:
    """(replicated, TP-sharded) elements per token of a layer's linear inputs that full training keeps for the base
    weights' gradients and LoRA does not: Transformer Engine saves a linear layer's input only when its weight
    needs a gradient (``backward_needs_input = is_grad_enabled and weight.requires_grad``, NVIDIA/TransformerEngine
    transformer_engine/pytorch/module/linear.py and layernorm_linear.py), so a frozen target without an adapter
    keeps none. The QKV and FC1 inputs (LayerNorm outputs, ``h`` wide) and FC2's (the activation's output,
    ``ffn_hidden`` wide); the projection's input is the attention's output, which the attention's backward keeps."""
    replicated = dims.hidden * sum(1 for t in ("qkv", "fc1") if t not in cfg.lora_targets)
    sharded = dims.ffn_hidden if "fc2" not in cfg.lora_targets else 0
    return replicated, sharded


def lora_training_flops(dims, cfg, sequences: int, tp: int = 1, forward: bool = False) -> int:
    """A LoRA step's FLOPs over all ranks: the base forward (2PT) and input gradients (2PT, no weight gradients),
    the adapters' 6 x parameters x tokens, and the attention's forward and backward (as in full training).
    ``forward``: the forward's share only (2PT, 2 x adapters x T, the attention's third), what full
    recomputation runs again."""
    from .model import activated_parameter_count, vocab_padding

    s = dims.seq_len
    tokens = sequences * s
    base = activated_parameter_count(dims, tp, vocab_padding(cfg))
    adapters = dims.layers * adapter_parameters(dims, cfg, tp=1)
    attention = 2 * s * dims.attn_key_sum(s) * (dims.q_width + dims.o_width) * sequences
    if forward:
        return 2 * base * tokens + 2 * adapters * tokens + attention
    return 4 * base * tokens + 6 * adapters * tokens + 3 * attention


def check_lora(dims, cfg) -> None:
    """What LoRA is modelled with (clear errors for the rest)."""
    if cfg.lora_targets and not cfg.lora_rank:
        raise ConfigError("--lora-targets needs --lora-rank")
    p = cfg.lora_dropout
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ConfigError(f"--lora-dropout must be a probability in [0, 1), got {p!r}")
    if p and not cfg.lora_rank:
        raise ConfigError("--lora-dropout needs --lora-rank")
    if not cfg.lora_rank:
        return
    if isinstance(cfg.lora_rank, bool) or not isinstance(cfg.lora_rank, int) or cfg.lora_rank < 0:
        raise ConfigError(f"--lora-rank must be a positive integer, got {cfg.lora_rank!r}")
    if not cfg.lora_targets or any(t not in LORA_TARGETS for t in cfg.lora_targets):
        raise ConfigError(f"--lora-targets: expected a non-empty subset of {', '.join(LORA_TARGETS)}, got "
                          f"{cfg.lora_targets!r}")
    if cfg.inference:
        raise ConfigError("--lora-rank is for --mode train (LoRA fine-tuning)")
    if dims.moe or dims.mla or dims.mtp_layers:
        raise ConfigError("--lora-rank is not modelled for mixture-of-experts, multi-head latent attention or "
                          "multi-token-prediction models")
    if cfg.zero in (2, 3):
        raise ConfigError(f"--lora-rank is modelled with --zero 0 or 1 (the adapters' optimizer sharded), not "
                          f"--zero {cfg.zero}")
    if cfg.tp_comm_overlap:
        raise ConfigError("--lora-rank with --tp-comm-overlap is not modelled (the adapters beside the "
                          "userbuffers rings)")


class LoraOps:
    """The adapters' GEMMs and their TP gradient reduction (a stage-builder mixin)."""

    @property
    def frozen(self):
        """The base weights are frozen (LoRA): no weight gradients for them."""
        return bool(self.cfg.lora_rank)

    def needs_input(self, target):
        """The layer input of ``target`` is needed in backward: for its weight gradient, or its adapter's A."""
        return not self.frozen or target in self.cfg.lora_targets

    def lora_forward(self, label, target, node):
        """``x A`` then ``(x A) B`` after ``target``'s base GEMM ``node`` (labelled ``label``); returns the last
        node (``node`` when ``target`` has no adapter)."""
        if target not in self.cfg.lora_targets:
            return node
        k, n = adapter_dims(self.dims, self.cfg.tp, target)
        r, m = self.cfg.lora_rank, self.tokens
        if self.cfg.lora_dropout and self.cfg.ew:  # --lora-dropout: the adapter's input dropped before A
            self.ew("aten::native_dropout", f"{label}.lora_dropout", [self._t(self._lora_rows(target), k)])
        self.mm(f"{label}.lora_a", m, k, r, linear=False)
        return self.mm(f"{label}.lora_b", m, r, n, linear=False)

    def lora_backward(self, lab, target, gathered=()):
        """B's weight gradient ``(x A)^T dY``, the gradient into ``x A`` (``dY B^T``), A's weight gradient
        ``x^T d(x A)`` (after ``gathered``: the sequence-parallel re-gather of ``x``) and the input gradient
        ``d(x A) A^T`` (added to the base's dgrad)."""
        if target not in self.cfg.lora_targets:
            return
        k, n = adapter_dims(self.dims, self.cfg.tp, target)
        r, m = self.cfg.lora_rank, self.tokens
        self.mm(f"{lab}.{target}.lora_b.wgrad", r, m, n, linear=False)
        self.mm(f"{lab}.{target}.lora_b.dgrad", m, n, r, linear=False)
        self.mm(f"{lab}.{target}.lora_a.wgrad", k, m, r, gathered, linear=False)
        self.mm(f"{lab}.{target}.lora_a.dgrad", m, r, k, linear=False)
        if self.cfg.lora_dropout and self.cfg.ew:  # the gradient through the input dropout (grad and mask read)
            rows = self._lora_rows(target)
            self.ew("aten::native_dropout_backward", f"{lab}.{target}.lora_dropout",
                    [self._t(rows, k), ((rows, k), "Tensor(bool)")])

    def _lora_rows(self, target):
        """Rows of ``target``'s adapter input where the dropout runs: a column-parallel target's input is the
        (sequence-parallel: this TP rank's rows of the) LayerNorm output, dropped before the adapter's gather;
        a row-parallel target's is the TP-sharded activation of all the rank's tokens."""
        return self.ln_rows if LORA_TARGETS[target] else self.tokens

    def lora_tp_sync(self, layer, mb=None):
        """The TP all-reduce of the whole (TP-replicated) factors' partial gradients of ``layer``, off the
        chain; the optimizer waits for it."""
        if not self.frozen or self.cfg.tp == 1:
            return
        size = replicated_adapter_parameters(self.dims, self.cfg) * self.nbytes
        label = f"tp_ar.l{layer}.lora_grads" + ("" if mb is None else f".mb{mb}")
        self.syncs.append(self.coll(label, T.ALL_REDUCE, size, "tp", [self.prev], chain=False))
