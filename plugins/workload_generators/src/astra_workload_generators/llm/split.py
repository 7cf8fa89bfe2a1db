"""The pipeline split: which transformer layers each virtual stage builds (Megatron's ``get_num_layers_to_build``
and ``get_transformer_layer_offset``).

By default the layers split evenly over PP x VP virtual stages. With ``pipeline_embedding_layer`` /
``pipeline_loss_layer`` (Megatron-LM's ``account_for_embedding_in_pipeline_split`` /
``account_for_loss_in_pipeline_split``, which NeMo sets for Llama-3.1 405B) the embedding and the loss (the LM
head and cross entropy) each count as one layer: ``layers + 1 (+ 1)`` slots split evenly, and the first (last)
virtual stage builds one transformer layer fewer. Llama-3.1 405B: 126 + 2 = 128 = PP 8 x VP 8 x 2, so the first
and last virtual stages hold 1 transformer layer and the others 2.
"""

from __future__ import annotations

from astra_sim.errors import ConfigError


def _extra(cfg):
    return int(cfg.pipeline_embedding_layer) + int(cfg.pipeline_loss_layer)


def check_split(layers: int, cfg) -> None:
    """A clear error when ``layers`` (plus the embedding and loss slots the options count) do not split evenly
    over the virtual stages, or when a virtual stage would keep no transformer layer."""
    P, V = cfg.pp, cfg.virtual_stages
    extra = _extra(cfg)
    slots = layers + extra
    counted = " + ".join([f"layers {layers}"] + ["embedding 1"] * cfg.pipeline_embedding_layer
                         + ["loss 1"] * cfg.pipeline_loss_layer)
    what = f"{counted} = {slots}" if extra else f"layers {layers}"
    if slots % P:
        raise ConfigError(f"{what} are not divisible by --pp {P}" + _hint(layers, cfg))
    if V > 1 and slots % (P * V):
        raise ConfigError(f"{what} are not divisible by --pp x --virtual-stages {P * V}" + _hint(layers, cfg))
    if extra and min(len(r) for r in stage_layers(layers, cfg)) < 1:
        raise ConfigError(f"{what} split over --pp x --virtual-stages {P * V} leaves a virtual stage without a "
                          "transformer layer (the embedding or the loss takes its only slot)")


def _hint(layers, cfg):
    """Names the split options when they would make the layers divide (e.g. Llama-3.1 405B's 126 over 8 x 8)."""
    if _extra(cfg):
        return ""
    total = cfg.pp * cfg.virtual_stages
    for extra, flags in ((2, "--pipeline-embedding-layer --pipeline-loss-layer"), (1, "--pipeline-embedding-layer"),
                         (1, "--pipeline-loss-layer")):
        if (layers + extra) % total == 0:
            return f" ({flags}, counting them as layers as NeMo does, would make them divide)"
    return ""


def stage_layers(layers: int, cfg) -> tuple:
    """The transformer layer indices (a range) of every virtual stage v = chunk x PP + p, in order."""
    P, V = cfg.pp, cfg.virtual_stages
    total = P * V
    per = (layers + _extra(cfg)) // total
    out, start = [], 0
    for v in range(total):
        n = per - (cfg.pipeline_embedding_layer and v == 0) - (cfg.pipeline_loss_layer and v == total - 1)
        out.append(range(start, start + n))
        start += n
    return tuple(out)
