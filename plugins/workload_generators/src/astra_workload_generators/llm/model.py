"""The transformer being generated: its dimensions (presets or given), parameter counts and FLOPs.

Everything here depends on the model only (plus the TP degree and the step's padding of the vocabulary,
:func:`vocab_padding`, and the mode's sequence lengths): the parallel layout is :mod:`.layout`, the
configuration of a run :mod:`.config`. A new source of model dimensions (a Hugging Face ``config.json``, say)
should produce a :class:`ModelDims` here.

FLOPs (what the COMP nodes' ``num_ops`` add up to over all ranks, without recomputation)::

    6 * P * tokens + 12 * L * s^2 * h * sequences

(``h`` in the attention term is really heads x head_dim, half for the scores' and half for the values' width:
they differ from h with an explicit ``head_dim`` and with MLA; ``s^2`` is ``s * window`` on a sliding-window
layer), with ``P = L * (h*(h + 2*kv*d) + h*h + m*h*f) + V*h`` (matmul weights: QKV, output projection, FFN
with m = 3 for gated (SwiGLU) FFNs and 2 otherwise, plus the LM head; no biases, norms or embedding lookup); for
mixture-of-experts models P is the *activated* parameter count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from typing import TYPE_CHECKING

from astra_sim.errors import ConfigError

if TYPE_CHECKING:
    from .config import LlmConfig


# Published dimensions. gpt3-13b uses hidden 5120 (Megatron; the GPT-3 paper's 5140 is not divisible by its
# 40 heads). Llama's ffn_hidden is the SwiGLU inner size. GPT-3 ties its LM head to the token embedding, as the
# shipped configs of the same name do (GPT-2 format: tie_word_embeddings defaults true): Brown et al. 2020, 2.1, "the
# same model and architecture as GPT-2", whose LM head is the embedding table (openai/gpt-2 122c55a5 src/model.py:
# logits = tf.matmul(h_flat, wte, transpose_b=True)); Megatron-LM's GPT ties unless
# --untie-embeddings-and-output-weights (megatron/training/arguments.py, action='store_true'), NeMo's GPTConfig
# share_embeddings_and_output_weights = True (v2.2.0, gpt/model/base.py 175).
PRESETS = {
    "gpt3-175b": dict(layers=96, hidden=12288, heads=96, kv_heads=96, ffn_hidden=49152, vocab=50257, seq_len=2048,
                      gated=False, tied_embeddings=True),
    "gpt3-13b": dict(layers=40, hidden=5120, heads=40, kv_heads=40, ffn_hidden=20480, vocab=50257, seq_len=2048,
                     gated=False, tied_embeddings=True),
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000, seq_len=4096,
                      gated=True, rotary=True, rms_norm=True),
    "llama2-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000, seq_len=4096,
                       gated=True, rotary=True, rms_norm=True),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=128256, seq_len=8192,
                      gated=True, rotary=True, rms_norm=True),
    "llama3-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256, seq_len=8192,
                       gated=True, rotary=True, rms_norm=True),
    # Mixture of experts: 8 experts, top-2, every layer MoE (Mixtral 8x7B).
    "mixtral-8x7b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336, vocab=32000, seq_len=4096,
                         gated=True, experts=8, top_k=2, moe_ffn=14336, rotary=True, rms_norm=True),
    # DeepSeekMoE 16B: 64 fine-grained routed experts (top-6) + 2 shared, expert inner size 1408; the first layer
    # keeps a dense FFN of 10944 (its config's first_k_dense_replace = 1).
    "deepseek-moe-16b": dict(layers=28, hidden=2048, heads=16, kv_heads=16, ffn_hidden=10944, vocab=102400,
                             seq_len=4096, gated=True, experts=64, top_k=6, moe_ffn=1408, shared_experts=2,
                             moe_dense_layers=1, rotary=True, rms_norm=True),
}


@dataclass(frozen=True)
class ModelDims:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    gated: bool = False
    experts: int = 0          # routed experts E (0: dense FFN)
    top_k: int = 1            # experts per token
    moe_ffn: int = 0          # expert inner size (0: ffn_hidden)
    shared_experts: int = 0   # always-active experts of size moe_ffn
    moe_dense_layers: int = 0  # MoE: the first K layers keep a dense FFN of ffn_hidden (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1    # MoE: layer i has experts only if i % freq == 0 (Megatron's --moe-layer-freq N)
    head_size: int = 0         # explicit head dimension (Qwen3, Gemma: heads * head_size != hidden); 0: hidden/heads
    tied_embeddings: bool = False  # the LM head shares the embedding's weights (counts in params_total only)
    # multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank > 0): queries through a rank-q_lora_rank
    # bottleneck (0: a full projection), keys/values from a cached kv_lora_rank latent plus rope_dim shared
    # positional dims; head_dim = qk_nope + rope_dim, values v_head_dim wide
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0        # multi-token-prediction modules (DeepSeek-V3): counted by --summary, not emitted
    window: int = 0            # sliding-window attention: a local layer's queries see the last `window` keys
    window_pattern: int = 0    # 0: every layer local; N: layer i global when (i + 1) % N == 0 (Gemma 2: 2, 3: 6)
    expert_bias: bool = False  # the routed experts' linears have biases (GPT-OSS; Megatron adds fc2's outside the GEMM)
    glu_clamp: bool = False    # the gated activation clamps both halves first (GPT-OSS swiglu_limit; Megatron's
    #                            activation_func_clamp_value): fused, two clamps and a cat run before the kernel (.moe)
    rotary: bool = False       # rotary position embedding of Q and K (Llama, Mistral, Qwen, GPT-NeoX, ...; a Hugging
    #                            Face config's model_type, see .hf); False: learned absolute positions (GPT-2/3, and
    #                            Megatron-LM's --position-embedding-type default, learned_absolute) or MLA (rope_dim)
    rms_norm: bool = False     # the layers' norms are RMSNorm (Llama, Mistral, Qwen, Gemma, DeepSeek, GPT-OSS, ...: a
    #                            Hugging Face config's model_type, see .hf; Megatron-LM's --normalization RMSNorm);
    #                            False: LayerNorm (GPT-2/3, GPT-NeoX; Megatron-LM's default)
    linear_bias: bool | None = None  # the linear layers have biases: QKV, output projection, FC1, FC2 (and each
    #                            expert's): Megatron-LM's add_bias_linear (default True; --disable-bias-linear),
    #                            GPT-2/3, GPT-NeoX, GPT-OSS; None: a non-gated model has them, a gated (Llama-style)
    #                            one not (the per-family assumption the generator made before it had this field)
    qkv_bias: bool = False     # biases on Q, K and V only (Qwen2, Qwen1.5/2-MoE; Megatron-LM's --add-qkv-bias)
    qk_norm: bool = False      # a norm of head_dim over each query and key head before attention (Qwen3's q_norm /
    #                            k_norm, Gemma 3's; Megatron-Core's qk_layernorm)

    @property
    def has_linear_bias(self):
        """:attr:`linear_bias`, or when not given: a non-gated (GPT-2-style) model has biases, a gated one not."""
        return (not self.gated) if self.linear_bias is None else self.linear_bias

    @property
    def learned_positions(self):
        """A learned absolute position embedding (GPT-2/3, Megatron-LM's default ``learned_absolute``): neither
        rotary nor MLA's decoupled rotary keys."""
        return not self.rotary and not self.mla

    @property
    def head_dim(self):
        return self.head_size or self.hidden // self.heads

    def is_local(self, layer):
        """Whether layer ``layer`` (0-based) has sliding-window attention."""
        return self.window > 0 and (self.window_pattern == 0 or (layer + 1) % self.window_pattern != 0)

    def attn_keys(self, layer, ctx):
        """Keys a query attends to in ``layer`` at a context of ``ctx``: the window on local layers."""
        return min(ctx, self.window) if self.is_local(layer) else ctx

    def attn_key_sum(self, ctx):
        """``attn_keys`` summed over the layers (the attention FLOPs' per-query factor)."""
        return sum(self.attn_keys(i, ctx) for i in range(self.layers))

    @property
    def mla(self):
        return self.kv_lora_rank > 0

    @property
    def v_dim(self):
        """Width of one head's values (MLA: v_head_dim; else head_dim)."""
        return self.v_head_dim or self.head_dim

    @property
    def o_width(self):
        """The output projection's input width: heads x value width."""
        return self.heads * self.v_dim

    @property
    def q_width(self):
        """Width of the queries (and of the output projection's input): heads x head_dim, which is not the hidden
        size when the config gives head_dim (Qwen3-30B-A3B: 32 x 128 = 4096 against hidden 2048)."""
        return self.heads * self.head_dim

    @property
    def moe(self):
        return self.experts > 0

    @property
    def expert_ffn(self):
        return self.moe_ffn or self.ffn_hidden

    def is_moe_layer(self, layer):
        """Whether layer ``layer`` (0-based) has routed experts: not one of the first ``moe_dense_layers``, and a
        multiple of ``moe_layer_freq``; the others keep a dense FFN."""
        return self.moe and layer >= self.moe_dense_layers and layer % self.moe_layer_freq == 0

    @property
    def moe_layers(self):
        return sum(1 for i in range(self.layers) if self.is_moe_layer(i))

    def moe_index(self, layer):
        """The MoE layer ``layer`` is among the model's MoE layers (0 for the first)."""
        return sum(1 for i in range(layer) if self.is_moe_layer(i))


def model_dims(preset=None, base=None, **overrides) -> ModelDims:
    """A preset's dimensions (or ``base``: the keyword arguments of :class:`ModelDims` read from a Hugging Face
    config, see :mod:`.hf`), with any non-None ``overrides`` (layers, hidden, heads, ...) applied."""
    base = dict(base or {})
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        base = dict(PRESETS[preset])
    base.update({k: v for k, v in overrides.items() if v is not None})
    if "kv_heads" not in base and "heads" in base:
        base["kv_heads"] = base["heads"]
    if "ffn_hidden" not in base and "hidden" in base:
        base["ffn_hidden"] = 4 * base["hidden"]
    missing = [k for k in ("layers", "hidden", "heads", "vocab", "seq_len") if k not in base]
    if missing:
        raise ConfigError(f"give --preset or the model dimensions; missing: {', '.join('--' + m.replace('_', '-') for m in missing)}")
    dims = ModelDims(**base)
    for k, v in asdict(dims).items():
        if k in ("experts", "moe_ffn", "shared_experts", "moe_dense_layers", "head_size", "q_lora_rank",
                 "kv_lora_rank", "rope_dim", "v_head_dim", "mtp_layers", "window",
                 "window_pattern"):
            if not isinstance(v, int) or v < 0:
                raise ConfigError(f"{k} must be a non-negative integer, got {v!r}")
        elif k == "linear_bias":
            if v is not None and not isinstance(v, bool):
                raise ConfigError(f"linear_bias must be true, false or null, got {v!r}")
        elif k not in ("gated", "tied_embeddings", "expert_bias", "glu_clamp", "rotary", "rms_norm", "qkv_bias",
                       "qk_norm") and (
                not isinstance(v, int) or v < 1):
            raise ConfigError(f"{k} must be a positive integer, got {v!r}")
    if dims.moe and dims.top_k > dims.experts:
        raise ConfigError(f"top-k {dims.top_k} exceeds the {dims.experts} experts")
    for key in ("moe_dense_layers", "moe_layer_freq"):
        if getattr(dims, key) != ModelDims.__dataclass_fields__[key].default and not dims.moe:
            raise ConfigError(f"--{key.replace('_', '-')} needs a mixture-of-experts model (--experts)")
    if dims.moe and not dims.moe_layers:
        raise ConfigError(f"--moe-dense-layers {dims.moe_dense_layers} and --moe-layer-freq {dims.moe_layer_freq} "
                          f"leave no MoE layer of the {dims.layers} layers (use a dense model instead)")
    if dims.window_pattern and not dims.window:
        raise ConfigError("window_pattern needs a sliding window (window)")
    if (dims.q_lora_rank or dims.rope_dim or dims.v_head_dim) and not dims.mla:
        raise ConfigError("q_lora_rank, rope_dim and v_head_dim are multi-head latent attention's: they need "
                          "kv_lora_rank")
    if dims.mla and not (dims.head_size and dims.rope_dim < dims.head_size and dims.v_head_dim):
        raise ConfigError(f"multi-head latent attention needs head_size (qk_nope + qk_rope) > rope_dim "
                          f"{dims.rope_dim} and v_head_dim > 0")
    if dims.mla and dims.kv_heads != dims.heads:
        raise ConfigError(f"multi-head latent attention has one key/value per head: kv heads {dims.kv_heads} != "
                          f"heads {dims.heads}")
    if not dims.head_size and dims.hidden % dims.heads:
        raise ConfigError(f"hidden {dims.hidden} is not divisible by heads {dims.heads}")
    if dims.heads % dims.kv_heads:
        raise ConfigError(f"heads {dims.heads} is not divisible by kv heads {dims.kv_heads}")
    return dims


#: Megatron-LM pads the vocabulary to a multiple of ``--make-vocab-size-divisible-by`` (default 128) x TP
#: (NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/training/arguments.py`` 1476, ``megatron/training/
#: tokenizer/tokenizer.py`` 115-128 ``_vocab_size_with_padding``; ``pretrain_gpt.py`` 183 builds the model with
#: ``args.padded_vocab_size``); NeMo 2 the same (NVIDIA/NeMo v2.2.0 7192a2c9 ``nemo/collections/llm/gpt/model/
#: base.py`` 176, 220-228 ``make_vocab_size_divisible_by: int = 128``, ``nemo/lightning/base.py`` 37-52
#: ``get_vocab_size``: ``make_vocab_size_divisible_by * tensor_model_parallel_size``)
MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128


def vocab_padding(cfg: "LlmConfig") -> int:
    """The multiple a step pads the vocabulary to (:func:`padded_vocab`). A Megatron training step
    (``config.implied_framework``): ``--make-vocab-size-divisible-by`` (:data:`MAKE_VOCAB_SIZE_DIVISIBLE_BY`) x TP,
    as Megatron-LM and NeMo 2 do: GPT-2's 50257 becomes 50304 at TP 1, 50688 at TP 4, 51200 at TP 8; Llama 3's
    128256 stays itself at TP 1 and 2 and becomes 129024 at TP 8. ``fsdp2`` and ``deepspeed``: 1, no padding:
    torchtitan builds ``nn.Embedding(vocab_size, dim)`` and ``nn.Linear(dim, vocab_size)`` with the tokenizer's
    ``n_words`` (pytorch/torchtitan 9dec370 ``train.py`` 106, ``torchtitan/models/llama/model.py`` 359, 378) and
    shards them over TP as DTensors, unevenly where TP does not divide it (:func:`vocab_shard`); Hugging Face's
    GPT-2 (the DeepSpeed case) ``nn.Embedding(config.vocab_size, ...)``; MaxText (written ``fsdp2``) its config's
    ``vocab_size``. Inference: TP, the rule before (the serving step names no engine; vLLM pads to a multiple of
    64 and asserts that TP divides that, ``DEFAULT_VOCAB_PADDING_SIZE``, ``pad_vocab_size`` and ``divide`` in
    ``vllm/model_executor/layers/vocab_parallel_embedding.py`` read at 00db0119: the same shard for Llama 3's
    vocabulary). Not expressed: Megatron-Bridge pads only a vocabulary taken from the tokenizer
    (``should_pad_vocab``; NVIDIA-NeMo/Megatron-Bridge v0.2.0 717c62de ``src/megatron/bridge/training/setup.py``
    432-465): a provider's explicit ``vocab_size`` (a Hugging Face import) is its own (``--vocab`` states it
    there, with ``--make-vocab-size-divisible-by 1`` where TP divides it)."""
    from .config import implied_framework  # (config imports this module)

    if cfg.inference:
        return cfg.tp
    if implied_framework(cfg) == "megatron":
        return cfg.make_vocab_size_divisible_by * cfg.tp
    return 1


def padded_vocab(dims: ModelDims, tp: int, padding: int | None = None) -> int:
    """The rows of the embedding table and the LM head: the vocabulary padded up to a multiple of ``padding``
    (:func:`vocab_padding`; None: of TP, for callers without a step). A vocabulary given already padded
    (``--vocab 51200``) stays itself: padding twice changes nothing."""
    multiple = tp if padding is None else padding
    return -(-dims.vocab // multiple) * multiple


def vocab_shard(dims: ModelDims, tp: int, padding: int | None = None) -> int:
    """Vocabulary rows of one TP rank's embedding shard, LM head shard and logits: the padded vocabulary / TP
    (:func:`padded_vocab`), or, where TP does not divide it (no padding: ``fsdp2``, ``deepspeed``), the largest
    shard, ``ceil(vocab / TP)``: DTensor's ``Shard(0)`` splits as ``torch.chunk`` does (PyTorch
    ``torch/distributed/tensor/placement_types.py`` ``Shard._split_tensor``), and the TP group waits for its
    slowest rank."""
    return -(-padded_vocab(dims, tp, padding) // tp)


def _ffn_mats(dims: ModelDims) -> int:
    return 3 if dims.gated else 2


# Per-layer parameter counts take ``moe``: whether the layer has routed experts (``dims.is_moe_layer(i)``; a
# dense model's layers and an MoE model's first ``moe_dense_layers`` have a dense FFN of ffn_hidden instead).

def dense_layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    """Per layer: attention plus the dense FFN (dense layer) or the shared experts (MoE layer) -- synced over
    full DP."""
    h = dims.hidden
    attn = attention_parameters(dims)
    if dims.moe and moe:
        return attn + dims.shared_experts * _ffn_mats(dims) * h * dims.expert_ffn
    return attn + _ffn_mats(dims) * h * dims.ffn_hidden


def attention_parameters(dims: ModelDims) -> int:
    """Per layer: the QKV projection (h x (heads*d + 2*kv*d)) and the output projection (heads*d x h); MLA: its
    down- and up-projections (:func:`mla_projections`) and the output projection (heads*v x h)."""
    h, d = dims.hidden, dims.head_dim
    if dims.mla:
        return sum(k * n for _, k, n in mla_projections(dims)) + dims.o_width * h
    return h * (dims.q_width + 2 * dims.kv_heads * d) + dims.q_width * h


def mla_projections(dims: ModelDims):
    """MLA's input GEMMs, whole (not TP-sharded): ``[(name, k, n)]`` of ``[tokens, k] x [k, n]``. The
    down-projections (q_a, kv_a) are replicated over TP; the up-projections (q_b, kv_b) split by heads."""
    h, H, r = dims.hidden, dims.heads, dims.rope_dim
    nope = dims.head_dim - r
    q = [("q_a", h, dims.q_lora_rank), ("q_b", dims.q_lora_rank, H * dims.head_dim)] if dims.q_lora_rank \
        else [("q", h, H * dims.head_dim)]
    return q + [("kv_a", h, dims.kv_lora_rank + r), ("kv_b", dims.kv_lora_rank, H * (nope + dims.v_dim))]


def expert_layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    """Per layer: all routed experts' weights (0 for a dense layer)."""
    return dims.experts * _ffn_mats(dims) * dims.hidden * dims.expert_ffn if dims.moe and moe else 0


def router_parameters(dims: ModelDims, moe: bool = True) -> int:
    """Per layer: the MoE router (gate) ``h x E``, replicated on every TP rank (0 for a dense layer)."""
    return dims.hidden * dims.experts if dims.moe and moe else 0


def layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    return dense_layer_parameters(dims, moe) + expert_layer_parameters(dims, moe) + router_parameters(dims, moe)


def activated_layer_parameters(dims: ModelDims, moe: bool = True) -> int:
    if not (dims.moe and moe):
        return layer_parameters(dims, False)
    return (dense_layer_parameters(dims) + dims.top_k * _ffn_mats(dims) * dims.hidden * dims.expert_ffn
            + router_parameters(dims))


def linear_bias_tensors(dims: ModelDims, moe: bool = True) -> list[tuple[int, bool]]:
    """One layer's linear biases outside the routed experts, one entry per tensor in the layer's order (QKV, the
    output projection, FC1, FC2; an MoE layer's FC1/FC2 are its shared experts', absent without them), each
    ``(elements, column)``: whole, and whether its linear is column-parallel. The one rule :func:`bias_widths` sums
    and DeepSpeed's persistent parameters list (:func:`.deepspeed_step.persistent_parameters`)."""
    h = dims.hidden
    qkv = (sum(n for _, _, n in mla_projections(dims)) if dims.mla
           else dims.q_width + 2 * dims.kv_heads * dims.head_dim)
    if not dims.has_linear_bias:
        return [(qkv, True)] if dims.qkv_bias else []
    fc1 = _ffn_mats(dims) - 1  # FC1's outputs per unit of FFN width: 2 gated halves, or 1
    ffn = dims.shared_experts * dims.expert_ffn if dims.moe and moe else dims.ffn_hidden
    return [(qkv, True), (h, False)] + ([(fc1 * ffn, True), (h, False)] if ffn else [])


def bias_widths(dims: ModelDims, moe: bool = True):
    """One layer's linear biases, whole: ``(column, row, expert_column, expert_row)`` elements, where ``column``
    are the column-parallel linears' (QKV, FC1, the shared experts' FC1: split over TP like their outputs),
    ``row`` the row-parallel ones' (the output projection's and FC2's ``h`` each: whole on every TP rank), and
    ``expert_*`` one routed expert's. Megatron-Core core_r0.14.0 32ad5c89 ``megatron/core/tensor_parallel/
    layers.py``: ``ColumnParallelLinear``'s bias is ``output_size_per_partition`` long, ``RowParallelLinear``'s
    ``output_size`` (marked ``sequence_parallel``); ``arguments.py``: ``--disable-bias-linear`` (``add_bias_linear``
    default True, which also sets ``add_qkv_bias``), ``--add-qkv-bias``. A gated FC1 has a bias per half. MLA's
    query/key/value projections count their outputs' widths (:func:`mla_projections`; no released MLA model has
    biases). The shared experts are one MLP of ``shared_experts x moe_ffn`` (Megatron's ``SharedExpertMLP``): one FC2
    bias. The tensors themselves: :func:`linear_bias_tensors`."""
    tensors = linear_bias_tensors(dims, moe)
    column = sum(n for n, is_column in tensors if is_column)
    row = sum(n for n, is_column in tensors if not is_column)
    layer_moe = dims.moe and moe
    per_expert = ((_ffn_mats(dims) - 1) * dims.expert_ffn, dims.hidden) if layer_moe and (
        dims.has_linear_bias or dims.expert_bias) else (0, 0)
    return column, row, *per_expert


def layer_bias_parameters(dims: ModelDims, moe: bool = True, activated: bool = False) -> int:
    """One layer's linear biases, whole (:func:`bias_widths`): all experts', or (``activated``) the top-k's."""
    col, row, ecol, erow = bias_widths(dims, moe)
    experts = (dims.top_k if activated else dims.experts) if dims.moe and moe else 0
    return col + row + experts * (ecol + erow)


def layer_shards(dims: ModelDims, cfg: "LlmConfig", moe: bool = True, biases: bool = True):
    """(dense, expert) parameters of one layer on one rank: the dense part is TP-sharded (plus the replicated
    router and row-parallel biases, :func:`bias_widths`) and synced over DP; with EP > 1 this rank's E/EP experts
    (TP-sharded, their FC2 biases whole) are synced over expert-DP. The norms are apart
    (:func:`layer_norm_parameters`); ``biases`` False leaves the biases out too (DeepSpeed ZeRO-3 keeps its small
    parameters whole, :func:`.deepspeed_step.persistent_parameters`)."""
    tp = cfg.tp
    router = router_parameters(dims, moe)
    col, row, ecol, erow = bias_widths(dims, moe) if biases else (0, 0, 0, 0)
    dense_biases = col // tp + row
    expert_biases = dims.experts * (ecol // tp + erow) if dims.moe and moe else 0
    if cfg.ep == 1:
        return ((dense_layer_parameters(dims, moe) + expert_layer_parameters(dims, moe)) // tp + router
                + dense_biases + expert_biases, 0)
    return (dense_layer_parameters(dims, moe) // tp + router + dense_biases,
            expert_layer_parameters(dims, moe) // cfg.ep // tp + expert_biases // cfg.ep)


def sequence_parallel_biases(dims: ModelDims, moe: bool = True) -> int:
    """One layer's biases that are whole on every TP rank and marked ``sequence_parallel`` (the row-parallel
    ones of the dense part, :func:`bias_widths`): with sequence parallelism Megatron all-reduces their gradients
    over TP with the norms' (``finalize_model_grads``; ``RowParallelLinear``: ``setattr(self.bias,
    "sequence_parallel", self.sequence_parallel)``, core_r0.14.0 ``tensor_parallel/layers.py`` 1208). The experts'
    are left out (expert-parallel linears: ``allreduce`` False)."""
    return bias_widths(dims, moe)[1]


def norm_weights(dims: ModelDims, width: int = 0) -> int:
    """Elements of one norm over ``width`` (default the hidden size): RMSNorm's weight, or LayerNorm's weight and
    bias (Megatron-Core's ``TENorm`` / Transformer Engine's ``LayerNorm`` has both, ``RMSNorm`` the weight only;
    torch.nn.LayerNorm / RMSNorm, Hugging Face's ``LlamaRMSNorm`` and GPT-2's ``ln_1``/``ln_2``/``ln_f`` likewise).
    Replicated on every TP rank (not sharded)."""
    return (width or dims.hidden) * (1 if dims.rms_norm else 2)


def layer_norm_parameters(dims: ModelDims) -> int:
    """Per layer: the input and the pre-MLP norm (Megatron-Core ``TransformerLayer.input_layernorm`` /
    ``pre_mlp_layernorm``, inside ``TELayerNormColumnParallelLinear`` as ``layer_norm_weight`` (+ ``_bias``) with
    Transformer Engine; torchtitan ``attention_norm`` / ``ffn_norm``), and with MLA the latent query and key/value
    norms (``MultiLatentAttention.q_layernorm`` over q_lora_rank when there is one, ``kv_layernorm`` over
    kv_lora_rank; NVIDIA/Megatron-LM core_r0.14.0 32ad5c89 ``megatron/core/transformer/multi_latent_attention.py``
    447-458, ``transformer_layer.py``), and with ``qk_norm`` the query and key norms of head_dim each (one weight
    shared by the heads: Hugging Face's Qwen3 ``self.q_norm = Qwen3RMSNorm(self.head_dim, ...)``, ``k_norm`` the
    same, huggingface/transformers v4.55.0 ``models/qwen3/modeling_qwen3.py`` ``Qwen3Attention``; Gemma 3's;
    Megatron-Core's ``SelfAttention.q_layernorm`` / ``k_layernorm`` built with ``hidden_size=self.hidden_size_per_
    attention_head`` when ``qk_layernorm``, core_r0.14.0 ``megatron/core/transformer/attention.py``)."""
    per = 2 * norm_weights(dims)
    if dims.mla:
        per += norm_weights(dims, dims.kv_lora_rank)
        per += norm_weights(dims, dims.q_lora_rank) if dims.q_lora_rank else 0
    if dims.qk_norm:
        per += 2 * norm_weights(dims, dims.head_dim)
    return per


#: norms of a multi-token-prediction module besides its layer's: ``enorm``, ``hnorm`` and ``final_layernorm``
#: (Megatron-Core core_r0.14.0 ``megatron/core/transformer/multi_token_prediction.py`` 438-477)
MTP_MODULE_NORMS = 3


def embedding_shard(dims: ModelDims, tp: int, small_apart: int = 0, padding: int | None = None) -> int:
    """The first stage's embedding parameters on one rank: the vocabulary-parallel table's ``vocab/TP x h``
    (:func:`vocab_shard`, padded to ``padding``) and a learned position embedding's whole table
    (:func:`position_embedding_parameters`), unless that table has fewer than ``small_apart`` elements (DeepSpeed
    ZeRO-3 keeps those whole, apart)."""
    positions = position_embedding_parameters(dims)
    return vocab_shard(dims, tp, padding) * dims.hidden + (positions if positions >= small_apart else 0)


def eh_proj_parameters(dims: ModelDims) -> int:
    """An MTP module's ``eh_proj`` (2h -> h, no bias), whole."""
    return 2 * dims.hidden * dims.hidden


def mtp_shards(dims: ModelDims, cfg: "LlmConfig"):
    """(dense, expert) parameters of one MTP module on one rank: its layer (like a layer after the model's last)
    and eh_proj split over TP by its outputs: a column-parallel linear (``MultiTokenPredictionLayer``'s spec
    ``eh_proj=column_parallel_linear_impl``, built with ``gather_output=False, bias=False``; NVIDIA/Megatron-LM
    core_r0.14.0 32ad5c89 ``megatron/core/transformer/multi_token_prediction.py`` 326, 457-467). Training only
    (inference does not run them). The norms are apart (:data:`MTP_MODULE_NORMS`)."""
    dense, expert = layer_shards(dims, cfg, dims.is_moe_layer(dims.layers))
    return dense + eh_proj_parameters(dims) // cfg.tp, expert


def mtp_training_flops(dims: ModelDims, sequences: int, tp: int = 1, padding: int | None = None) -> int:
    """FLOPs of the MTP modules in a training step: 6 x tokens x (eh_proj + the layer's activated weights + the
    LM head) + the layer's attention (eh_proj split over TP like the layers' linears, :func:`mtp_shards`)."""
    s = dims.seq_len
    total = 0
    for k in range(dims.mtp_layers):
        layer = dims.layers + k
        weights = eh_proj_parameters(dims) + activated_layer_parameters(dims, dims.is_moe_layer(layer)) \
            + padded_vocab(dims, tp, padding) * dims.hidden
        total += 6 * weights * s * sequences + 6 * s * dims.attn_keys(layer, s) * (dims.q_width + dims.o_width) \
            * sequences
    return total


def _over_layers(dims: ModelDims, per_layer) -> int:
    """``per_layer(dims, moe)`` summed over the model's layers (MoE and dense layers)."""
    dense = dims.layers - dims.moe_layers
    return dims.moe_layers * per_layer(dims, True) + (dense * per_layer(dims, False) if dense else 0)


def parameter_count(dims: ModelDims, tp: int = 1, padding: int | None = None) -> int:
    """Matmul parameters: all layers (all experts) plus the LM head (the vocabulary padded to ``padding``, the
    step's :func:`vocab_padding`; None: to TP)."""
    return _over_layers(dims, layer_parameters) + padded_vocab(dims, tp, padding) * dims.hidden


def activated_parameter_count(dims: ModelDims, tp: int = 1, padding: int | None = None) -> int:
    """Matmul parameters a token passes through (P of the 6*P*tokens rule; = parameter_count for dense models)."""
    return _over_layers(dims, activated_layer_parameters) + padded_vocab(dims, tp, padding) * dims.hidden


def position_embedding_parameters(dims: ModelDims) -> int:
    """A learned absolute position embedding's table (:attr:`ModelDims.learned_positions`): ``seq_len x h``,
    Megatron-Core's ``LanguageModelEmbedding.position_embeddings = torch.nn.Embedding(max_sequence_length,
    hidden_size)`` (core_r0.14.0 ``megatron/core/models/common/embeddings/language_model_embedding.py``), GPT-2's
    ``wpe`` (``n_positions x n_embd``). Whole on every TP rank, on the first stage. ASSUMPTION: the table is as
    long as the model's context (Megatron's ``--max-position-embeddings`` may be longer)."""
    return dims.seq_len * dims.hidden if dims.learned_positions else 0


def model_parameters(dims: ModelDims, activated: bool = False) -> dict:
    """Every parameter of the model as its checkpoint holds them, by kind (the vocabulary unpadded, the MTP
    modules apart: :func:`mtp_parameters`); ``activated``: those one token passes through (the top-k experts').
    The one count ``--summary`` reports and the per-rank shards (:func:`layer_shards`, :func:`layer_norm_
    parameters`, :func:`position_embedding_parameters`) split: ``matmul`` the weights of the 6 x P x tokens
    rule, ``embedding`` the input table unless tied to the LM head, ``norms`` every layer's
    (:func:`layer_norm_parameters`) and the final one, ``biases`` the linear layers' (:func:`bias_widths`)."""
    per_layer_bias = (lambda d, moe: layer_bias_parameters(d, moe, True)) if activated else layer_bias_parameters
    return {"matmul": (activated_parameter_count if activated else parameter_count)(dims),
            "embedding": 0 if dims.tied_embeddings else dims.vocab * dims.hidden,
            "position_embedding": position_embedding_parameters(dims),
            "norms": dims.layers * layer_norm_parameters(dims) + norm_weights(dims),
            "biases": _over_layers(dims, per_layer_bias)}


def total_parameters(dims: ModelDims, activated: bool = False) -> int:
    """The sum of :func:`model_parameters` (a model card's count: every expert, the embeddings; MTP apart)."""
    return sum(model_parameters(dims, activated).values())


def mtp_parameters(dims: ModelDims) -> int:
    """The multi-token-prediction modules' own parameters, whole: per module its layer (weights, biases, norms),
    ``eh_proj`` and the ``enorm``, ``hnorm`` and final norm (:data:`MTP_MODULE_NORMS`); the embedding and the LM
    head are the main model's (Megatron-Core shares them)."""
    moe = dims.is_moe_layer(dims.layers)
    one = (layer_parameters(dims, moe) + layer_bias_parameters(dims, moe) + layer_norm_parameters(dims)
           + eh_proj_parameters(dims) + MTP_MODULE_NORMS * norm_weights(dims))
    return dims.mtp_layers * one


def training_flops(dims: ModelDims, sequences: int, tp: int = 1, padding: int | None = None) -> int:
    """6 * P_activated * tokens + 6 * L * s^2 * (heads*d + heads*v) * sequences (= 12*L*s^2*h when heads*d = h)."""
    s = dims.seq_len
    return (6 * activated_parameter_count(dims, tp, padding) * sequences * s
            + 6 * s * dims.attn_key_sum(s) * (dims.q_width + dims.o_width) * sequences
            + mtp_training_flops(dims, sequences, tp, padding))


def inference_flops(dims: ModelDims, cfg: "LlmConfig") -> int:
    """Forward FLOPs of the prefill step, the decode steps or the mixed step over all ranks."""
    seqs = cfg.dp * cfg.micro_batches * cfg.micro_batch_size
    q, c = _lengths(dims, cfg)
    P = activated_parameter_count(dims, cfg.tp)
    head = padded_vocab(dims, cfg.tp) * dims.hidden
    last = cfg.logits == "last"  # the LM head on one position per sequence (and per prefill chunk)
    flops = sum(2 * (P - head) * seqs * q + 2 * head * seqs * (1 if last else q)
                + 2 * q * dims.attn_key_sum(c + i) * (dims.q_width + dims.o_width) * seqs for i in range(cfg.steps))
    if cfg.mode == "mixed":  # one prefill chunk per micro-batch and DP replica
        chunk, keys = cfg.prefill_chunk, cfg.prefill_done + cfg.prefill_chunk
        flops += cfg.dp * cfg.micro_batches * (2 * (P - head) * chunk + 2 * head * (1 if last else chunk)
                                               + 2 * chunk * dims.attn_key_sum(keys) * (dims.q_width + dims.o_width))
    return flops


def _lengths(dims: ModelDims, cfg: "LlmConfig"):
    """(query positions per sequence, attended context positions) for the mode."""
    if cfg.mode == "train":
        return dims.seq_len, dims.seq_len
    prompt = cfg.prompt_len or dims.seq_len
    if cfg.mode == "prefill":
        return prompt, prompt
    return 1, prompt + cfg.decode_len  # decode, and the decode tokens of a mixed step
