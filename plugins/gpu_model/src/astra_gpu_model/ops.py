"""What a Chakra node says about its operator: op name, input shapes, dtypes and scalar arguments.

The PyTorch converter writes an ATen op name (``aten::mm``) and the IOInfo strings ``inputs.shapes``
(``"[[4096, 8192], [8192, 4096]]"``), ``inputs.types`` (``"['Tensor(c10::BFloat16)', ...]"``) and
``inputs.values`` (``str()`` of the argument list: tensors as ``[id, storage, offset, numel, itemsize,
device]``, scalars as themselves). :func:`classify` turns these into an :class:`Op`: a GEMM (``m, n, k,
batch``), an attention call, a memory-bound op (bytes moved), or "no GPU work" (views and allocations).

Where the shapes come from (first found wins), see :func:`node_io`.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace

# Which names are GEMMs, convolutions and attention is the kernel's (astra_sim.ops); re-exported for this package.
from astra_sim.ops import ATTENTION_OPS as ATTENTION_NAMES
from astra_sim.ops import CONV_OPS, GEMM_OPS, canonical_name

#: ``inputs.types`` element type -> (model dtype, bytes per element).
_TYPE_MAP = {
    "c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "float": ("fp32", 4), "double": ("fp64", 8),
    "c10::Float8_e4m3fn": ("fp8", 1), "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "c10::Float8_e8m0fnu": ("e8m0", 1), "c10::Float4_e2m1fn_x2": ("fp4x2", 1),
    "float6_e2m3fn_x4": ("fp6x4", 3),  # MXFP6 operands: four E2M3 elements in 3 bytes (astra workload llm's name)
    "long int": ("int64", 8), "long": ("int64", 8), "int": ("int32", 4), "short int": ("int16", 2),
    "short": ("int16", 2), "signed char": ("int8", 1), "unsigned char": ("uint8", 1), "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16),
    "c10::complex<c10::Half>": ("complex32", 4),
}
_DTYPE_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp64": 8, "fp8": 1, "int8": 1}
#: PyTorch ScalarType codes (``dtype`` arguments in ``inputs.values``) -> model dtype and size.
_SCALAR_TYPE = {0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4), 4: ("int64", 8),
                5: ("fp16", 2), 6: ("fp32", 4), 7: ("fp64", 8), 11: ("bool", 1), 15: ("bf16", 2),
                23: ("fp8", 1), 24: ("fp8", 1), 25: ("fp8", 1), 26: ("fp8", 1)}

#: attention op -> (index of is_causal in the arguments, layout: BHSD or BSHD, backward?); keyed by the kernel's
#: attention names (:data:`astra_sim.ops.ATTENTION_OPS`, which own which ops are attention), checked below.
ATTENTION_OPS = {
    "_scaled_dot_product_flash_attention": (4, "BHSD", False),
    "_scaled_dot_product_flash_attention_backward": (11, "BHSD", True),
    "_scaled_dot_product_efficient_attention": (6, "BHSD", False),
    "_scaled_dot_product_efficient_attention_backward": (None, "BHSD", True),
    "_scaled_dot_product_cudnn_attention": (6, "BHSD", False),
    "_scaled_dot_product_cudnn_attention_backward": (None, "BHSD", True),
    "scaled_dot_product_attention": (5, "BHSD", False),
    "_flash_attention_forward": (8, "BSHD", False),
    "_flash_attention_backward": (None, "BSHD", True),
    "_efficient_attention_forward": (None, "BSHD", False),
    "_efficient_attention_backward": (None, "BSHD", True),
}
if set(ATTENTION_OPS) != ATTENTION_NAMES:  # a name added on one side only would be timed as memory-bound
    raise ImportError("astra_gpu_model.ops.ATTENTION_OPS must list exactly astra_sim.ops.ATTENTION_OPS; differs in "
                      f"{sorted(set(ATTENTION_OPS) ^ ATTENTION_NAMES)}")
#: Ops that launch no GPU kernel (views, metadata, allocation).
NO_WORK_OPS = {
    "view", "reshape", "_reshape_alias", "_unsafe_view", "t", "transpose", "permute", "expand", "expand_as",
    "slice", "select", "narrow", "as_strided", "unsqueeze", "squeeze", "detach", "detach_", "alias", "split",
    "split_with_sizes", "chunk", "unbind", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "resize_", "set_", "lift_fresh", "is_same_size", "size", "stride", "numel", "dim",
    "result_type", "view_as", "flatten", "unflatten", "movedim", "diagonal", "real", "imag", "record_stream",
    "_local_scalar_dense", "item", "to", "type_as", "contiguous", "numpy_T", "_nested_tensor_from_mask",
    "lift", "unfold", "view_as_real", "view_as_complex", "_reshape_copy_alias",
}
#: Reductions: the output is small next to the input.
REDUCTION_OPS = {"sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "var", "std",
                 "argmax", "argmin", "all", "any", "prod", "logsumexp", "var_mean", "std_mean", "nansum",
                 "count_nonzero", "_foreach_norm"}
#: PyTorch's fused Adam/AdamW (``torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
#: state_steps, ...)``; Transformer Engine's and Apex's FusedAdam the same): they read every list and write three back,
#: the parameters and both moments (AdamW's 28 bytes per fp32 parameter, as fit/measure_gpu.py times it)
FUSED_ADAM_OPS = {"_fused_adam_", "_fused_adamw_"}
#: the tensor-list arguments a fused Adam writes: params, exp_avgs, exp_avg_sqs
FUSED_ADAM_WRITTEN = (0, 2, 3)
#: Norms whose trace may list the output they write as their last tensor argument (the input's shape, in its own
#: dtype): Transformer Engine's ``layernorm_fwd`` / ``rmsnorm_fwd`` take the output tensor and write it as FP8 where
#: the recipe's quantizer allows (TE v2.0-v2.8 ``pytorch/csrc/extensions/normalization.cpp``; astra workload llm
#: lists it so, :mod:`astra_workload_generators.llm.norms`). Such an argument is written, not read; without one the
#: output is the input's size (the broadcast rule).
NORM_OUT_OPS = {"native_layer_norm", "_fused_rms_norm", "rms_norm", "layer_norm"}
#: Ops that only write their first argument.
FILL_OPS = {"fill_", "zero_", "zeros_like", "ones_like", "full_like", "normal_", "uniform_", "bernoulli_",
            "random_"}


@dataclass(frozen=True)
class Op:
    """What the model needs to time one operator."""

    kind: str  # "gemm" | "attention" | "memory" | "none"
    name: str
    dtype: str = "bf16"
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    out_bytes: int = 2
    flops: float = 0.0  # attention FLOPs
    nbytes: float = 0.0  # attention / memory-bound bytes moved
    ctas: int = 0  # attention: number of thread blocks (for wave quantisation)
    seq_k: int = 0  # attention: keys per query (the kernel tables' sequence length)
    seq_q: int = 0  # attention: queries per sequence and head (1: a decode step's attention)
    causal: bool = False  # attention: the causal mask
    backward: bool = False  # attention: the backward kernel
    head_dim: int = 0  # attention: the query/key head width (the FP8 kernel tables' head dimension)
    head_dim_v: int = 0  # attention: the value head width (MLA: narrower than head_dim; 0: head_dim)
    heads: int = 0  # attention: batch x query heads
    window: int = 0  # attention: the node's band of this many keys a query (attention_window attribute; 0: none)


class OpError(ValueError):
    """The node's shapes or types cannot be used (the caller falls back to num_ops/tensor_size/replay)."""


def parse_list(text, what):
    if text is None:
        return None
    if isinstance(text, (list, tuple)):
        return list(text)
    if not isinstance(text, str):
        raise OpError(f"{what} is {type(text).__name__}, expected a string such as '[[2, 3], [3, 4]]'")
    text = text.strip()
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # TypeError: {[1]: 2}
        raise OpError(f"{what} {text[:80]!r} is not a Python literal list") from None
    if not isinstance(value, (list, tuple)):
        raise OpError(f"{what} {text[:80]!r} is not a list")
    return list(value)


def parse_values(text):
    """``inputs.values`` as a list, tolerating PyTorch's ``'<None>'`` and unparsable text (-> [])."""
    if not text:
        return []
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):  # TypeError: {[1]: 2}
        return []
    return list(value) if isinstance(value, (list, tuple)) else []


def _is_shape(x):
    return isinstance(x, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in x)


def element_type(type_str, default_dtype):
    """``'Tensor(c10::BFloat16)'`` -> ('bf16', 2); unknown -> the default dtype."""
    inner = type_str
    if "(" in type_str and type_str.endswith(")"):
        inner = type_str[type_str.index("(") + 1:-1]
    if inner in _TYPE_MAP:
        return _TYPE_MAP[inner]
    return default_dtype, _DTYPE_SIZE.get(default_dtype, 2)


def _split_generic(type_str):
    """``'GenericList[Tensor(float),Tensor(float)]'`` -> ['Tensor(float)', 'Tensor(float)']."""
    inner = type_str[type_str.index("[") + 1:-1] if "[" in type_str else ""
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([<"
        depth -= ch in ")]>"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def tensor_args(shapes, types, default_dtype):
    """Per argument: ``(shape, dtype, itemsize)`` for a tensor, a list of those for a tensor list, or None."""
    args = []
    for i, shape in enumerate(shapes):
        t = types[i] if types is not None and i < len(types) else None
        if isinstance(t, str) and t.startswith("Tensor"):
            if _is_shape(shape):
                args.append((tuple(shape),) + element_type(t, default_dtype))
            else:
                args.append(None)
        elif isinstance(t, str) and t.startswith("GenericList[") and "Tensor" in t:
            elems = _split_generic(t)
            items = []
            if isinstance(shape, (list, tuple)):
                for j, s in enumerate(shape):
                    if _is_shape(s):
                        et = elems[j] if j < len(elems) else (elems[-1] if elems else "")
                        items.append((tuple(s),) + element_type(et, default_dtype))
            args.append(items)
        elif t is None and _is_shape(shape) and len(shape) > 0:
            args.append((tuple(shape), default_dtype, _DTYPE_SIZE.get(default_dtype, 2)))
        else:
            args.append(None)
    return args


def _numel(shape):
    return math.prod(shape) if shape else 1


def _broadcast(shapes):
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, v in enumerate(s):
            j = ndim - len(s) + i
            out[j] = v if out[j] == 1 else (out[j] if v == 1 else max(out[j], v))
    return tuple(out)


def _tensors(args):
    """Flattened ``(shape, dtype, size)`` of every tensor argument, in order."""
    out = []
    for a in args:
        if a is None:
            continue
        if isinstance(a, list):
            out.extend(a)
        else:
            out.append(a)
    return out


def _gemm_from_operands(name, a, b, gemm_dtype, out_size):
    (sa, _, _), (sb, _, _) = a, b
    if len(sa) == 0 or len(sb) == 0:
        raise OpError(f"{name}: scalar operand")
    if len(sb) == 1:  # matrix-vector
        sb = (sb[0], 1)
    if len(sa) == 1:
        sa = (1, sa[0])
    m, k = sa[-2], sa[-1]
    k2, n = sb[-2], sb[-1]
    if k != k2 and k2 != 1 and k != 1:
        raise OpError(f"{name}: inner dimensions differ ({sa} @ {sb})")
    batch_shape = _broadcast([sa[:-2], sb[:-2]])
    batch = _numel(batch_shape)
    return Op("gemm", name, gemm_dtype, m=m, n=n, k=k, batch=batch, out_bytes=out_size)


def _gemm(name, args, values, default_dtype):
    ts = [a for a in args]
    tensors = [a for a in ts if a is not None and not isinstance(a, list)]
    if name in ("mm", "bmm", "matmul", "mv", "_scaled_mm"):
        if len(tensors) < 2:
            raise OpError(f"{name}: needs two tensor operands, found {len(tensors)}")
        a, b = tensors[0], tensors[1]
    elif name in ("addmm", "baddbmm", "addmv", "addbmm", "_addmm_activation"):
        # (bias/self, mat1, mat2, ...): the operands are the 2nd and 3rd arguments
        if len(ts) < 3 or ts[1] is None or ts[2] is None or isinstance(ts[1], list) or isinstance(ts[2], list):
            raise OpError(f"{name}: expected (self, mat1, mat2) tensor arguments")
        a, b = ts[1], ts[2]
    elif name == "linear":
        if len(tensors) < 2:
            raise OpError("linear: needs input and weight tensors")
        x, w = tensors[0], tensors[1]
        sx, sw = x[0], w[0]
        if len(sw) != 2 or len(sx) == 0:
            raise OpError(f"linear: weight must be 2-D [out, in], got {sw}")
        m = _numel(sx[:-1])
        return Op("gemm", name, x[1], m=m, n=sw[0], k=sx[-1], batch=1, out_bytes=x[2])
    else:
        raise OpError(f"{name}: not a GEMM")
    dtype = a[1]
    out_size = a[2]
    if name == "_scaled_mm":
        out_size = 2  # bf16 output is the common case
        dtype, a, b = _scaled_format(a, b, tensors[2:4])
    op = _gemm_from_operands(name, a, b, dtype, out_size)
    written = _output_bytes(name, ts, op.batch * op.m * op.n)
    return op if written is None else replace(op, out_bytes=written)


#: Where a GEMM's accumulator C (``D = A @ B + C``, cuBLAS's beta = 1) is listed: ``addmm``'s / ``baddbmm``'s
#: ``self``, ``_scaled_mm``'s ``bias``. One of the output's whole shape is read and D written in its dtype, each
#: element twice its size (a broadcast bias vector is not: negligible, as before). A Megatron training step's
#: gradient-accumulation fusion runs each weight-gradient GEMM so, into the fp32 ``main_grad``: Transformer Engine's
#: ``general_gemm(..., out=main_grad, out_dtype=main_grad.dtype, accumulate=True)`` (TE v2.2-v2.8
#: ``pytorch/module/linear.py``), Megatron-Core's ``wgrad_gemm_accum_fp32`` (core_r0.14.0
#: ``megatron/core/tensor_parallel/layers.py`` 553-570); astra workload llm lists them so. ASSUMPTION: beta is not
#: read (``inputs.values`` of GEMMs are not parsed): a traced ``addmm`` with beta = 0 over a whole C is counted as
#: reading it.
ACCUMULATOR_ARG = {"addmm": 0, "baddbmm": 0, "_scaled_mm": 4}
#: The first position an output buffer D may be listed at (``mm(self, mat2, *, out)``; ``_scaled_mm``'s after its
#: positional arguments up to the bias): one of the output's whole shape, last, is written in its dtype and not read
#: (TE's first micro-batch, ``accumulate=False``, still writes ``main_grad``'s dtype).
OUT_ARG_FROM = {"mm": 2, "bmm": 2, "_scaled_mm": 5}


def _output_bytes(name, ts, elements):
    """Bytes a GEMM's output element costs where its node lists C or D (:data:`ACCUMULATOR_ARG`,
    :data:`OUT_ARG_FROM`), else None (the operands' or bf16, as before)."""

    def whole(t):
        return t is not None and not isinstance(t, list) and _numel(t[0]) == elements

    c = ACCUMULATOR_ARG.get(name)
    if c is not None and c < len(ts) and whole(ts[c]):
        return 2 * ts[c][2]
    d = OUT_ARG_FROM.get(name)
    if d is not None and len(ts) > d and whole(ts[-1]):
        return ts[-1][2]
    return None


def _scaled_format(a, b, scales):
    """``(format, a, b)`` of an ``_scaled_mm``: ``fp8`` (per-tensor fp32 scales), ``mxfp8`` (E4M3/E5M2 operands, E8M0
    block scales), ``mxfp4`` / ``nvfp4`` (E2M1 pairs packed along K, E8M0 / E4M3 block scales), ``mxfp6`` (four
    E2M3 elements in 3 bytes along K, E8M0 scales only); packed operands are returned with K in elements
    (``[m, k/2] x [k/2, n]`` is a K of ``k``, FP6's ``[m, k/4]`` too)."""
    mx = any(s[1] == "e8m0" for s in scales)
    if a[1] not in ("fp4x2", "fp6x4"):
        return ("mxfp8" if mx and a[1] == "fp8" else a[1]), a, b
    (sa, _, _), (sb, _, _) = a, b
    if len(sa) < 2 or len(sb) < 2:
        raise OpError("_scaled_mm: packed FP4 / FP6 operands must be matrices")
    if a[1] == "fp6x4" and not mx:
        raise OpError("_scaled_mm: FP6 operands need E8M0 block scales (MXFP6); no other FP6 scaling is modelled")
    per = 4 if a[1] == "fp6x4" else 2
    a = (tuple(sa[:-1]) + (per * sa[-1],), a[1], a[2])
    b = (tuple(sb[:-2]) + (per * sb[-2], sb[-1]), b[1], b[2])
    if per == 4:
        return "mxfp6", a, b
    return ("mxfp4" if mx else "nvfp4"), a, b


def _conv(name, args, values):
    tensors = [a for a in args if a is not None and not isinstance(a, list)]
    if len(tensors) < 2:
        raise OpError(f"{name}: needs input and weight tensors")
    x, w = tensors[0], tensors[1]
    sx, sw = x[0], w[0]
    nd = len(sx) - 2
    if nd < 1 or len(sw) != len(sx):
        raise OpError(f"{name}: input {sx} and weight {sw} are not N-d conv shapes")

    def vec(i, default):
        v = values[i] if i < len(values) else None
        if isinstance(v, int) and not isinstance(v, bool):
            return [v] * nd
        if isinstance(v, (list, tuple)) and len(v) == nd and all(isinstance(e, int) for e in v):
            return list(v)
        return [default] * nd

    stride, padding, dilation = vec(3, 1), vec(4, 0), vec(5, 1)
    groups = values[8] if len(values) > 8 and isinstance(values[8], int) and values[8] > 0 else 1
    out_sp = []
    for i in range(nd):
        size = (sx[2 + i] + 2 * padding[i] - dilation[i] * (sw[2 + i] - 1) - 1) // stride[i] + 1
        out_sp.append(max(size, 1))
    m = sx[0] * _numel(out_sp)
    n = sw[0] // groups if groups > 1 else sw[0]
    k = sw[1] * _numel(sw[2:])
    return Op("gemm", name, x[1], m=m, n=n, k=k, batch=groups, out_bytes=x[2])


def _attention(name, args, values, default_dtype):
    causal_idx, layout, backward = ATTENTION_OPS[name]
    tensors = [a for a in args if a is not None and not isinstance(a, list)]
    if backward:  # (grad_out, query, key, value, out, ...)
        if len(tensors) < 4:
            raise OpError(f"{name}: expected grad_out, query, key, value tensors")
        q, kk, v = tensors[1], tensors[2], tensors[3]
    else:
        if len(tensors) < 3:
            raise OpError(f"{name}: expected query, key, value tensors")
        q, kk, v = tensors[0], tensors[1], tensors[2]
    sq, sk, sv = q[0], kk[0], v[0]
    if len(sq) != 4 or len(sk) != 4 or len(sv) != 4:
        raise OpError(f"{name}: query/key/value must be 4-D, got {sq}, {sk}, {sv}")
    if layout == "BHSD":
        b, h, s_q, d = sq
        s_k, d_v = sk[2], sv[3]
    else:
        b, s_q, h, d = sq
        s_k, d_v = sk[1], sv[3]
    causal = False
    if causal_idx is not None and causal_idx < len(values) and isinstance(values[causal_idx], bool):
        causal = values[causal_idx]
    pairs = s_q * s_k
    if causal:
        # only the lower triangle (aligned to the end of the keys when s_q < s_k)
        pairs = s_q * s_k - s_q * (s_q - 1) / 2 if s_q <= s_k else s_k * (s_k + 1) / 2
    flops = 2.0 * b * h * pairs * (d + d_v)
    size = q[2]
    io = (_numel(sq) + _numel(sk) + _numel(sv) + b * h * s_q * d_v) * size
    if backward:
        flops *= 2.5  # FlashAttention-2 backward: 5 matmuls vs 2 (recompute of S included)
        io = io * 2 + _numel(sq) * size  # + grad_out, dq, dk, dv
    ctas = b * h * max(1, -(-s_q // 128))
    return Op("attention", name, q[1], flops=flops, nbytes=float(io), ctas=ctas, out_bytes=size, seq_k=s_k,
              seq_q=s_q, causal=causal, backward=backward, head_dim=d, head_dim_v=d_v, heads=b * h)


def _memory(name, args, values, default_dtype):
    tensors = _tensors(args)
    if not tensors:
        raise OpError(f"{name}: no tensor arguments")
    first = tensors[0]
    read = sum(_numel(s) * size for s, _, size in tensors)
    first_arg = next(a for a in args if a is not None and a != [])
    first_bytes = sum(_numel(s) * size for s, _, size in (first_arg if isinstance(first_arg, list) else [first_arg]))
    if name in FILL_OPS:
        nbytes = first_bytes
    elif name == "copy_":
        nbytes = read  # read src + write self (self's old content is not read)
    elif name in REDUCTION_OPS:
        nbytes = read
    elif name in FUSED_ADAM_OPS:
        lists = [a for a in args if isinstance(a, list)]
        nbytes = read + sum(_numel(s) * size for i in FUSED_ADAM_WRITTEN if i < len(lists) for s, _, size in lists[i])
    elif name.endswith("_"):
        nbytes = read + first_bytes  # in place (also _foreach_*_ / _fused_*_): write the first argument back
    elif name == "cat" or name == "stack":
        nbytes = 2 * read
    elif name in NORM_OUT_OPS and len(tensors) > 1 and tensors[-1][0] == first[0]:
        # the norm's output, listed last in its own dtype: written once (counted in read), never read
        return Op("memory", name, first[1], nbytes=float(read), out_bytes=tensors[-1][2])
    elif isinstance(first_arg, list):
        nbytes = read + first_bytes  # _foreach_* (out of place): one output per element of the first list
    elif name == "embedding":
        if len(tensors) < 2:
            raise OpError("embedding: expected weight and indices")
        (sw, _, zw), (si, _, zi) = tensors[0], tensors[1]
        row = _numel(sw[1:]) * zw
        nbytes = _numel(si) * zi + 2 * _numel(si) * row
    elif name == "embedding_dense_backward":
        (sg, _, zg) = tensors[0]
        nbytes = 2 * _numel(sg) * zg
    else:
        out_shape = _broadcast([s for s, _, _ in tensors])
        out_size = first[2]
        if name in ("_to_copy", "to_copy", "_autocast_to_reduced_precision", "_autocast_to_full_precision"):
            for v in values[1:3]:
                if isinstance(v, int) and not isinstance(v, bool) and v in _SCALAR_TYPE:
                    out_size = _SCALAR_TYPE[v][1]
                    break
        nbytes = read + _numel(out_shape) * out_size
    return Op("memory", name, first[1], nbytes=float(nbytes), out_bytes=first[2])


def classify(name, shapes_text, types_text, values_text, default_dtype="bf16", launched_kernel=False):
    """The :class:`Op` for an ATen op ``name`` with these IOInfo strings (raises :class:`OpError`).

    View/allocation ops are ``Op("none")`` unless ``launched_kernel`` (the trace shows a GPU kernel under
    the op, e.g. ``aten::to`` whose inner copy was not recorded): then they are timed as memory-bound.
    """
    op = canonical_name(name)
    if op is None:
        raise OpError(f"{name!r} is not an ATen op")
    if op in NO_WORK_OPS and not launched_kernel:
        return Op("none", op)
    shapes = parse_list(shapes_text, "inputs.shapes")
    if shapes is None:
        raise OpError(f"{name}: no input shapes")
    types = parse_list(types_text, "inputs.types") if types_text else None
    if types is not None and any(not isinstance(t, str) for t in types):
        raise OpError(f"{name}: inputs.types must be a list of strings")
    args = tensor_args(shapes, types, default_dtype)
    values = parse_values(values_text) if op in ATTENTION_OPS or op in CONV_OPS or op.startswith("_to") else []
    if op in GEMM_OPS:
        return _gemm(op, args, values, default_dtype)
    if op in CONV_OPS:
        return _conv(op, args, values)
    if op in ATTENTION_OPS:
        return _attention(op, args, values, default_dtype)
    return _memory(op, args, values, default_dtype)


# ------------------------------------------------------------------------------ where shapes come from
#: Attribute names accepted for the IOInfo strings while the kernel does not expose them on EtNode.
SHAPE_ATTRS = ("inputs_shapes", "input_shapes", "inputs.shapes")
TYPE_ATTRS = ("inputs_types", "input_types", "inputs.types")
VALUE_ATTRS = ("inputs_values", "input_values", "inputs.values")


def node_io(node):
    """``(shapes, types, values)`` strings of ``node`` ('' when absent), looked up in this order:

    1. EtNode fields ``inputs_shapes`` / ``inputs_types`` (not in the kernel yet: see README, "kernel
       changes"), and ``inputs_values`` (exposed by the kernel);
    2. node attributes ``inputs_shapes``/``input_shapes``/``inputs.shapes`` (and ``*types``/``*values``),
       string_val in the same ``str()`` format (what a trace writer can put there today);
    3. the node's serialized IOInfo, when it was read with ``read_et(..., keep_raw=True)`` (the kernel's
       Chakra loader reads with ``keep_raw=False``, so not during ``astra run``).
    """
    try:  # (an EtNode's fields; called for every node, twice: kept cheap)
        shapes, types, values = node.inputs_shapes or "", node.inputs_types or "", node.inputs_values or ""
    except AttributeError:
        shapes = getattr(node, "inputs_shapes", "") or ""
        types = getattr(node, "inputs_types", "") or ""
        values = getattr(node, "inputs_values", "") or ""
    attrs = node.attrs
    if not shapes and not attrs.keys().isdisjoint(SHAPE_ATTRS):
        for key in SHAPE_ATTRS:
            if attrs.get(key):
                shapes = attrs[key]
                break
    if not types and not attrs.keys().isdisjoint(TYPE_ATTRS):
        for key in TYPE_ATTRS:
            if attrs.get(key):
                types = attrs[key]
                break
    if not values and not attrs.keys().isdisjoint(VALUE_ATTRS):
        for key in VALUE_ATTRS:
            if attrs.get(key):
                values = attrs[key]
                break
    if not shapes and getattr(node, "_raw", None) is not None:
        msg = node.to_proto()
        shapes = msg.inputs.shapes
        types = types or msg.inputs.types
        values = values or msg.inputs.values
    return shapes, types, values


__all__ = ["Op", "OpError", "classify", "canonical_name", "node_io", "GEMM_OPS", "CONV_OPS", "ATTENTION_OPS",
           "NO_WORK_OPS"]
