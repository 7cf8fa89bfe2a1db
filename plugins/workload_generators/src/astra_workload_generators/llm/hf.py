"""A Hugging Face ``config.json`` read as it is, mapped to :class:`.model.ModelDims` keyword arguments.

Users name a model by its config file, not by layer counts; every open model ships one. Each supported
``model_type`` has its own key names (GPT-2's ``n_embd``, DeepSeek's ``n_routed_experts``, ...); a key the
generator does not model but that changes the compute or the memory is reported as a warning that names it, so
that a simulated step is never silently wrong. Nothing is downloaded: the user passes the file (or a folder
holding ``config.json``); the shipped ones are in ``configs/``.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from astra_sim.config import load_json
from astra_sim.errors import ConfigError
from astra_sim.safeio import brief


#: Folder of the shipped configs (``--model NAME`` finds ``NAME.json`` here).
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

#: model_type -> family: which keys it uses (see :func:`_read`)
FAMILIES = {
    "llama": "llama", "mistral": "llama", "qwen2": "llama", "qwen3": "llama", "phi3": "llama",
    "mixtral": "mixtral", "gpt_oss": "mixtral",
    "qwen2_moe": "qwen_moe", "qwen3_moe": "qwen_moe",
    "gemma2": "gemma", "gemma3": "gemma", "gemma3_text": "gemma",
    "deepseek": "deepseek", "deepseek_v2": "deepseek", "deepseek_v3": "deepseek",
    "gpt2": "gpt2",
    "gpt_neox": "neox",
}

#: Keys that change the compute or the memory and that the generator does not model (warned about when set).
UNMODELLED = {
    "attn_logit_softcapping": "attention logit soft-capping (its element-wise ops)",
    "quantization_config": "quantized weights (weights are --dtype unless --gemm-dtype fp8 --fp8-params: an FP8 "
                           "checkpoint in inference)",
    "vision_config": "the vision encoder (the text decoder only is generated)",
    "mlp_only_layers": "dense layers listed in mlp_only_layers (every layer is MoE)",
}


#: What a model type has that the generator approximates (warned about whenever such a config is read).
APPROXIMATED = {
    "gpt_oss": ("attention sinks (one learned logit per head added to each softmax: no GEMM, not timed), the "
                "clamped SwiGLU (swiglu_limit: its clamps are emitted with --bias-activation-fusion, else it is timed "
                "as SwiGLU), and the attention and expert biases (counted as parameters; in training only the "
                "experts' fc2 bias is timed, added per expert outside the GEMM, as Megatron-Core does) are "
                "approximated"),
}


def resolve_model_path(spec) -> Path:
    """``spec``: a config file, a folder holding ``config.json``, the name of a shipped config, or a model's Hugging
    Face id or another spelling of a shipped config's name (``meta-llama/Meta-Llama-3-70B``, ``llama-3-70b``). A
    name that is none of these is a ConfigError with the nearest shipped names."""
    path = Path(spec)
    if path.is_dir():
        return path / "config.json"
    if path.exists():
        return path
    if os.sep not in str(spec) and (CONFIG_DIR / f"{spec}.json").exists():
        return CONFIG_DIR / f"{spec}.json"
    name = shipped_name(spec)
    if name is not None:
        return CONFIG_DIR / f"{name}.json"
    if path.suffix == ".json" or str(spec).startswith((".", os.sep, "~")):
        return path  # a file the user meant: the config reader's error names it
    import difflib

    names = shipped_configs()
    close = difflib.get_close_matches(_normalized(spec), [_normalized(n) for n in names], n=5, cutoff=0.6)
    hints = [n for n in names if _normalized(n) in close]
    hint = f" (did you mean {', '.join(repr(n) for n in hints)}?)" if hints else ""
    raise ConfigError(f"--model {spec!r}: not a config file, a folder holding config.json, or a shipped config{hint}; "
                      f"`astra workload llm --list-models` lists the {len(names)} shipped ones")


_SUFFIXES = ("-hf", "-base", "-pt", "-instruct", "-chat", "-it")


def _normalized(name) -> str:
    """A model name without its organisation, a leading ``meta-``, a ``-2501`` release tag, a
    ``-hf``/``-base``/``-instruct``... suffix, case and punctuation: ``meta-llama/Meta-Llama-3-70B-Instruct`` and
    ``llama3-70b`` are both ``llama370b``."""
    text = str(name).strip().strip("/").rsplit("/", 1)[-1].lower()
    if text.endswith(".json"):
        text = text[:-5]
    if text.startswith("meta-"):
        text = text[5:]
    if len(text) > 5 and text[-5] == "-" and text[-4:].isdigit():  # a release tag: Mistral-Small-24B-Base-2501
        text = text[:-5]
    for suffix in _SUFFIXES:
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    return "".join(c for c in text if c.isalnum())


@functools.lru_cache(maxsize=None)
def model_ids():
    """``{shipped config name: its Hugging Face id}`` (from each file's ``_source``; None for the GPT-3 configs, which
    have no Hugging Face page). Read once: the shipped configs are the package's own files."""
    out = {}
    for name in shipped_configs():
        source = str(json.loads((CONFIG_DIR / f"{name}.json").read_text(encoding="utf-8")).get("_source", ""))
        marker = "huggingface.co/"
        hf_id = None
        if marker in source:
            parts = source.split(marker, 1)[1].split("/")
            hf_id = "/".join(parts[:2]) if len(parts) >= 2 else None
        out[name] = hf_id
    return out


def shipped_name(spec):
    """The shipped config ``spec`` names: its Hugging Face id (any case), or a spelling whose :func:`_normalized`
    form is one shipped config's; None otherwise."""
    wanted = str(spec).strip().strip("/")
    for name, hf_id in model_ids().items():
        if hf_id is not None and hf_id.lower() == wanted.lower():
            return name
    key = _normalized(wanted)
    matches = [name for name in shipped_configs() if _normalized(name) == key]
    return matches[0] if len(matches) == 1 else None


def shipped_configs():
    """Names of the shipped configs (``--model NAME``)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


class _Reader:
    """Typed access to one config's keys; every error names the file and the key."""

    def __init__(self, path, data):
        self.path, self.data = path, data

    def _fail(self, key, what, value):
        raise ConfigError(f"{self.path}: key {key!r} must be {what}, got {brief(value)}")

    def int(self, key, default=None, *, minimum=1):
        """A required (``default`` None) or optional integer >= ``minimum``; JSON null reads as the default."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.path}: missing key {key!r}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self._fail(key, f"an integer >= {minimum}", value)
        return value

    def bool(self, key, default):
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self._fail(key, "true or false", value)
        return value

    def first_int(self, keys, default=None):
        """The first of ``keys`` present (GPT-2 and Llama spell the same thing differently)."""
        for key in keys:
            if self.data.get(key) is not None:
                return self.int(key)
        return self.int(keys[0], default)


def load_hf_config(spec):
    """``(dims kwargs, warnings, path)`` of a Hugging Face config (file, folder or shipped name)."""
    path = resolve_model_path(spec)
    data = load_json(str(path), "model config")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a model config is a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type == "gemma3" and isinstance(data.get("text_config"), dict):
        # the multimodal Gemma 3: the language model's keys are under text_config
        text = dict(data["text_config"])
        text.setdefault("model_type", "gemma3_text")
        warnings = [f"{path}: key 'vision_config': {UNMODELLED['vision_config']}"] if "vision_config" in data else []
        dims, more = _read(_Reader(f"{path} (text_config)", text), "gemma3_text")
        return dims, warnings + more, path
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ConfigError(f"{path}: key 'model_type' is {brief(model_type)}; known model types: "
                          f"{', '.join(sorted(FAMILIES))}")
    dims, warnings = _read(_Reader(str(path), data), model_type)
    return dims, warnings, path


def _read(r: _Reader, model_type):
    family = FAMILIES[model_type]
    d = r.data
    if family == "gpt2":
        hidden = r.int("n_embd")
        dims = dict(layers=r.int("n_layer"), hidden=hidden, heads=r.int("n_head"), vocab=r.int("vocab_size"),
                    seq_len=r.first_int(("n_positions", "n_ctx"), 1024), ffn_hidden=r.int("n_inner", 4 * hidden),
                    gated=False, tied_embeddings=r.bool("tie_word_embeddings", True))
        dims["kv_heads"] = dims["heads"]
    else:
        dims = dict(layers=r.int("num_hidden_layers"), hidden=r.int("hidden_size"),
                    heads=r.int("num_attention_heads"), vocab=r.int("vocab_size"),
                    seq_len=r.int("max_position_embeddings", 4096), ffn_hidden=r.int("intermediate_size"),
                    gated=family != "neox",
                    tied_embeddings=r.bool("tie_word_embeddings", family == "gemma"))
        dims["kv_heads"] = r.int("num_key_value_heads", dims["heads"])
        head = r.int("head_dim", 0, minimum=0)
        if head and head * dims["heads"] != dims["hidden"]:  # (equal: the default hidden/heads)
            dims["head_size"] = head
        elif not head and dims["hidden"] % dims["heads"]:
            raise ConfigError(f"{r.path}: hidden_size {dims['hidden']} is not divisible by num_attention_heads "
                              f"{dims['heads']} and no 'head_dim' is given")
    if family == "mixtral":
        dims.update(experts=r.int("num_local_experts"), top_k=r.int("num_experts_per_tok"),
                    moe_ffn=dims["ffn_hidden"])
        if model_type == "gpt_oss":  # (Hugging Face's GptOssExperts: gate_up_proj_bias, down_proj_bias)
            dims["expert_bias"] = True
            limit = r.data.get("swiglu_limit")  # (Megatron-Bridge: activation_func_clamp_value 7.0)
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))):
                r._fail("swiglu_limit", "a number", limit)
            dims["glu_clamp"] = bool(limit and limit > 0)
    elif family == "qwen_moe":
        dims.update(experts=r.int("num_experts"), top_k=r.int("num_experts_per_tok"),
                    moe_ffn=r.int("moe_intermediate_size"), moe_layer_freq=r.int("decoder_sparse_step", 1))
        shared = r.int("shared_expert_intermediate_size", 0, minimum=0)
        if shared:
            if shared % dims["moe_ffn"]:
                raise ConfigError(f"{r.path}: key 'shared_expert_intermediate_size' {shared} is not a multiple of "
                                  f"moe_intermediate_size {dims['moe_ffn']} (shared experts are modelled as "
                                  "experts of that size)")
            dims["shared_experts"] = shared // dims["moe_ffn"]
    elif family == "deepseek":
        dims.update(experts=r.int("n_routed_experts"), top_k=r.int("num_experts_per_tok"),
                    moe_ffn=r.int("moe_intermediate_size"), shared_experts=r.int("n_shared_experts", 0, minimum=0),
                    moe_dense_layers=r.int("first_k_dense_replace", 0, minimum=0),
                    moe_layer_freq=r.int("moe_layer_freq", 1))
        dims["mtp_layers"] = r.int("num_nextn_predict_layers", 0, minimum=0)
        if d.get("kv_lora_rank") is not None:  # multi-head latent attention
            rope, nope = r.int("qk_rope_head_dim"), r.int("qk_nope_head_dim")
            dims.update(kv_lora_rank=r.int("kv_lora_rank"), q_lora_rank=r.int("q_lora_rank", 0, minimum=0),
                        rope_dim=rope, head_size=rope + nope, v_head_dim=r.int("v_head_dim"),
                        kv_heads=dims["heads"])
    # RoPE on the whole of Q and K: every family but GPT-2's learned positions, and MLA's decoupled rotary part
    # (rope_dim, its own nodes); GPT-NeoX rotates rotary_pct of each head (timed over the whole head: ASSUMPTION)
    dims["rotary"] = family != "gpt2" and not dims.get("kv_lora_rank")
    # the norms: nn.LayerNorm in GPT-2's and GPT-NeoX's modeling files (huggingface/transformers v4.55.0
    # models/gpt2/modeling_gpt2.py ln_1/ln_2, models/gpt_neox/modeling_gpt_neox.py input_layernorm), RMSNorm in every
    # other family's (LlamaRMSNorm, MistralRMSNorm, Qwen2/3RMSNorm, Phi3RMSNorm, MixtralRMSNorm, GptOssRMSNorm,
    # Qwen2Moe/Qwen3MoeRMSNorm, Gemma2/3RMSNorm, DeepseekV2/V3RMSNorm: their configs' rms_norm_eps)
    dims["rms_norm"] = family not in ("gpt2", "neox")
    # the linear biases (huggingface/transformers v4.55.0): GPT-2's Conv1D and GPT-NeoX's linears have them (the
    # non-gated default of ModelDims.linear_bias); Qwen2's and Qwen2-MoE's q/k/v_proj are bias=True, o_proj
    # bias=False (models/qwen2/modeling_qwen2.py, qwen2_moe); GPT-OSS's q/k/v/o_proj bias=config.attention_bias
    # and its experts' gate_up_proj_bias / down_proj_bias (models/gpt_oss/modeling_gpt_oss.py); Llama, Mistral,
    # Mixtral, Phi-3, Qwen3, Gemma and DeepSeek have none (their attention_bias / mlp_bias false or absent: gated,
    # the default of linear_bias)
    if model_type in ("qwen2", "qwen2_moe"):
        dims["qkv_bias"] = True
    elif model_type == "gpt_oss":
        dims["linear_bias"] = r.bool("attention_bias", True)
    # query and key norms of head_dim (Qwen3Attention's and Qwen3MoeAttention's q_norm / k_norm, Gemma3Attention's)
    dims["qk_norm"] = model_type in ("qwen3", "qwen3_moe", "gemma3_text")
    warnings = []
    if dims.get("moe_layer_freq", 1) > 1 and family == "qwen_moe":
        warnings.append(f"{r.path}: key 'decoder_sparse_step': MoE layers are modelled as layers 0, N, 2N, ... "
                        "(Qwen's are N-1, 2N-1, ...: the same count, shifted)")
    if model_type.startswith("qwen"):
        if r.bool("use_sliding_window", False):  # (off in every released Qwen2/3 config)
            warnings.append(f"{r.path}: key 'use_sliding_window': Qwen's sliding window on the layers from "
                            "max_window_layers is not modelled (attention is timed over the whole context)")
    elif family in ("llama", "mixtral", "gemma"):
        dims.update(_window(r, model_type, dims["layers"]))
    if family in ("llama", "mixtral") and model_type not in ("gpt_oss", "qwen2") and (
            r.bool("attention_bias", False) or r.bool("mlp_bias", False)):
        warnings.append(f"{r.path}: keys 'attention_bias' / 'mlp_bias': a {model_type} model's linear biases are not "
                        "modelled (neither counted nor timed)")
    for key, what in UNMODELLED.items():
        if d.get(key) not in (None, False, 0, [], {}):
            warnings.append(f"{r.path}: key {key!r}: {what}")
    if model_type in APPROXIMATED:
        warnings.append(f"{r.path}: model_type {model_type!r}: {APPROXIMATED[model_type]}")
    return dims, warnings


def _window(r: _Reader, model_type, layers):
    """Sliding-window attention: ``window`` and which layers are local (``window_pattern``, see
    :meth:`.model.ModelDims.is_local`): Mistral and Phi-3 every layer, Gemma 2 every other one (layer 0 local),
    Gemma 3 five local to one global (``sliding_window_pattern``), or a ``layer_types`` list."""
    window = r.int("sliding_window", 0, minimum=0)
    if not window:
        return {}
    pattern = {"gemma2": 2, "gemma3_text": 6}.get(model_type, 0)
    if model_type == "gemma3_text":
        pattern = r.int("sliding_window_pattern", pattern)
    types = r.data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or any(t not in ("sliding_attention", "full_attention") for t in types):
            raise ConfigError(f"{r.path}: key 'layer_types' must be a list of 'sliding_attention' / "
                              f"'full_attention', got {brief(types)}")
        local = [t == "sliding_attention" for t in types]
        if not any(local):
            return {}
        pattern = 0 if all(local) else local.index(False) + 1
        if local != [pattern == 0 or (i + 1) % pattern != 0 for i in range(len(local))]:
            raise ConfigError(f"{r.path}: key 'layer_types': only a periodic pattern (every N-th layer global) is "
                              "modelled")
    return {"window": window, "window_pattern": pattern}
