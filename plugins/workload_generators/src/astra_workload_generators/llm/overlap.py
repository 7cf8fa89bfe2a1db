"""Which communication kernels occupy SMs, and Transformer Engine's TP communication overlaps (userbuffers):
``--comm-sms`` and ``--tp-overlap-config``, read into the ``comm_sms`` / ``sm_margin`` node attributes."""

from __future__ import annotations

from astra_sim.errors import ConfigError


#: ``--comm-sms`` keys for NCCL communicators: TP collectives (without --tp-comm-overlap, and the backward
#: re-gathers when no userbuffers name is given), DP gradient/parameter collectives (dense and expert), pipeline
#: messages, expert all-to-alls, context-parallel ring messages and FP8 amax all-reduces
COMM_SMS_GROUPS = ("tp", "dp", "pp", "ep", "cp", "amax")


#: Transformer Engine's userbuffers overlaps (``--tp-comm-overlap``), keyed by what the generator emits: (ring or
#: re-gather, the activation it carries) -> TE's name for it. TE overlaps the backward reduce-scatter of the QKV / FC1
#: input gradient ("bulk") with the weight-gradient GEMM and names it after that GEMM; so does the generator in a
#: Megatron step (``LayerOps._bulk_wgrad_scatter``; torchtitan's AsyncTP pipelines it with the dgrad GEMM chunks).
TE_OVERLAPS = {
    ("ag", "attn_in"): "qkv_fprop", ("ag", "mlp_in"): "fc1_fprop",
    ("ag", "mlp_out"): "fc2_dgrad", ("ag", "attn_out"): "proj_dgrad",
    ("rs", "attn_out"): "proj_fprop", ("rs", "mlp_out"): "fc2_fprop",
    ("rs", "attn_in"): "qkv_wgrad", ("rs", "mlp_in"): "fc1_wgrad",
    ("regather", "attn_in"): "qkv_dgrad", ("regather", "mlp_in"): "fc1_dgrad",
}


TE_OVERLAP_NAMES = tuple(sorted(set(TE_OVERLAPS.values())))


TE_OVERLAP_METHODS = ("ring_exchange", "pipeline", "bulk")


#: TE's ``initialize_ub`` defaults: ``num_sm`` 16; ``ring_exchange`` uses the copy engines (``use_ce``) unless told not to
TE_DEFAULT_NUM_SM = 16


#: keys a TE ``tp_overlap`` YAML entry may have (``initialize_ub``'s ``add_ub`` arguments)
TE_OVERLAP_KEYS = ("method", "num_sm", "cga_size", "set_sm_margin", "num_splits", "aggregate", "atomic_gemm",
                   "use_ce", "fp8_buf", "is_reduce_scatter")


def parse_comm_sms(spec):
    """``--comm-sms "dp=8,pp=2,qkv_fprop=0"`` -> ``{"dp": 8, "pp": 2, "qkv_fprop": 0}`` (checked by the config)."""
    out = {}
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        try:
            if not eq:
                raise ValueError
            out[key.strip()] = int(value)
        except ValueError:
            raise ConfigError(f"--comm-sms: expected KEY=SMS (an integer), got {item!r}") from None
    return out


def load_tp_overlap_sms(path, with_margins=False):
    """SMs of each userbuffers overlap in a Transformer Engine ``tp_overlap`` YAML (the ``ub_cfgs`` NeMo and
    Megatron pass to ``initialize_ub``: per layer name ``method``, ``num_sm``, ``use_ce``, ...). A
    ``ring_exchange`` takes 0 SMs (copy engines) unless ``use_ce`` is false; ``pipeline`` and ``bulk`` take
    ``num_sm`` (TE's default 16). Returns ``{te name: SMs}``; ``with_margins``: also ``{te name: SMs}`` of the
    overlaps with ``set_sm_margin`` (TE's default off), whose GEMMs TE launches on the other SMs only, for
    their whole duration (``sm_margin`` attribute, see :meth:`_StageBuilder.mm`)."""
    from astra_sim.safeio import load_yaml

    data = load_yaml(path, "--tp-overlap-config")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of Transformer Engine layer names (qkv_fprop, ...) to their "
                          f"overlap settings, got {type(data).__name__}")
    out, margins = {}, {}
    for name, entry in data.items():
        if name not in TE_OVERLAP_NAMES:
            raise ConfigError(f"{path}: unknown layer {name!r} (Transformer Engine's userbuffers names: "
                              f"{', '.join(TE_OVERLAP_NAMES)})")
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: {name}: expected a mapping (method, num_sm, ...), got {entry!r}")
        for key in entry:
            if key not in TE_OVERLAP_KEYS:
                raise ConfigError(f"{path}: {name}: unknown key {key!r} (known: {', '.join(TE_OVERLAP_KEYS)})")
        method = entry.get("method")
        if method not in TE_OVERLAP_METHODS:
            raise ConfigError(f"{path}: {name}.method must be one of {', '.join(TE_OVERLAP_METHODS)}, got "
                              f"{method!r}")
        sms = entry.get("num_sm", TE_DEFAULT_NUM_SM)
        if isinstance(sms, bool) or not isinstance(sms, int) or sms < 0:
            raise ConfigError(f"{path}: {name}.num_sm must be a non-negative integer, got {sms!r}")
        use_ce = entry.get("use_ce", True)
        if not isinstance(use_ce, (bool, int)):
            raise ConfigError(f"{path}: {name}.use_ce must be true or false, got {use_ce!r}")
        out[name] = 0 if method == "ring_exchange" and use_ce else sms
        margin = entry.get("set_sm_margin", False)
        if not isinstance(margin, (bool, int)) or margin not in (0, 1):
            raise ConfigError(f"{path}: {name}.set_sm_margin must be true or false (1 or 0), got {margin!r}")
        if margin and out[name]:
            margins[name] = out[name]
    return (out, margins) if with_margins else out


def _te_overlap(label):
    """Transformer Engine's userbuffers name of a TP ring or re-gather labelled ``"<ag|rs|regather>.<...>.<site>"``."""
    return TE_OVERLAPS.get((label.split(".", 1)[0], label.rsplit(".", 1)[-1]))
