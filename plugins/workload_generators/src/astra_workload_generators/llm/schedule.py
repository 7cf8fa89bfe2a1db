"""The pipeline schedule (Megatron's ``schedules``): the order in which a pipeline rank runs the forward and
backward passes of its micro-batches and model chunks: 1F1B, interleaved 1F1B with virtual stages, or
forwards only for inference."""

from __future__ import annotations


def pipeline_schedule(cfg, p):
    """[(kind 'F'/'B', model chunk, micro-batch)] of pipeline rank ``p``, in execution order."""
    P, M, V = cfg.pp, cfg.micro_batches, cfg.virtual_stages
    if cfg.inference:
        return [("F", 0, i) for i in range(M)]
    if V == 1:
        warmup = min(P - p - 1, M)
        order = [("F", 0, i) for i in range(warmup)]
        for i in range(M - warmup):
            order += [("F", 0, warmup + i), ("B", 0, i)]
        return order + [("B", 0, i) for i in range(M - warmup, M)]
    # Megatron's interleaved schedule: virtual micro-batch k runs chunk (k mod PV) // P (backward: reversed)
    total = M * V
    warmup = min((P - p - 1) * 2 + (V - 1) * P, total)

    def item(kind, k):
        c = (k % (P * V)) // P
        return (kind, c if kind == "F" else V - 1 - c, (k // (P * V)) * P + k % P)
    order = [item("F", k) for k in range(warmup)]
    for i in range(total - warmup):
        order += [item("F", warmup + i), item("B", i)]
    return order + [item("B", k) for k in range(total - warmup, total)]
