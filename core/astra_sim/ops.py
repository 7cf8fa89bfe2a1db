"""Which operator a node runs and what class of work it is: the one place that names ATen ops
(``aten::<op>[.<overload>]``). The compute models that time ops from their shapes (``gpu``, ``systolic``) and the
breakdown must agree on which names are matrix multiplies, convolutions and attention; the models keep only per-op
details, keyed by these names.
"""

from __future__ import annotations

import re

#: The classes :func:`op_class` returns.
OP_CLASSES = ("gemm", "attention", "elementwise", "other")

#: Matrix multiplies (matrix-vector products included), by canonical ATen name.
GEMM_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm", "mv", "addmv", "addbmm", "_addmm_activation",
})
#: Convolutions (timed as implicit GEMMs).
CONV_OPS = frozenset({"convolution", "_convolution", "cudnn_convolution", "conv2d", "conv1d", "conv3d"})
#: Fused attention kernels (scaled dot-product attention, FlashAttention, memory-efficient attention).
ATTENTION_OPS = frozenset({
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "scaled_dot_product_attention", "_flash_attention_forward", "_flash_attention_backward",
    "_efficient_attention_forward", "_efficient_attention_backward",
})
#: Ops whose time is bounded by the math units, not by memory: everything above.
COMPUTE_BOUND_OPS = GEMM_OPS | CONV_OPS | ATTENTION_OPS

#: Words that make a name that is not listed above a GEMM or attention (matched on the lower-cased name).
_GEMM_WORDS = re.compile(r"(^|[^a-z])(b?mm|addb?mm|baddbmm|matmul|gemm|linear|conv\w*|_scaled_mm|dot)([^a-z]|$)")
_ATTENTION_WORDS = re.compile(r"attention|attn|sdpa|flash")


def canonical_name(name):
    """``'aten::addmm.default'`` -> ``'addmm'``; None for names that are not ATen ops."""
    if not isinstance(name, str) or not name.startswith("aten::"):
        return None
    return name[6:].split(".", 1)[0]


def op_class(name):
    """The breakdown's class of a node name when the compute model does not classify it: a listed ATen op's class;
    else by its words (``aten::convolution_backward``, the converters' ``aten::mm(0)``, ``COMP_NODE_conv1_FWD``)
    ``attention`` or ``gemm``; else ``elementwise`` for an ATen op and ``other`` for the rest."""
    op = canonical_name(name)
    if op is not None:
        if op in ATTENTION_OPS:
            return "attention"
        if op in GEMM_OPS or op in CONV_OPS:
            return "gemm"
    lower = name.lower() if isinstance(name, str) else ""
    if _ATTENTION_WORDS.search(lower):
        return "attention"
    if _GEMM_WORDS.search(lower):
        return "gemm"
    return "elementwise" if lower.startswith("aten::") else "other"


__all__ = ["OP_CLASSES", "GEMM_OPS", "CONV_OPS", "ATTENTION_OPS", "COMPUTE_BOUND_OPS", "canonical_name", "op_class"]
