"""``measure_gpu.py``'s kernel sections: GEMMs (the LLM layers' shapes, random and square sets, and the extra
fine M sweep, batched and grouped GEMMs), fused attention and the memory-bound ops, each timed by
``measure_common.time_op``."""

import math
import random

import torch
import torch.nn.functional as F


from measure_common import CUDA, DEV, n_buffers, time_op, log

MODELS = {
    "gpt3-13b": ((5120, 20480, 40, 40, 128, False), (1, 2, 4, 8)),
    "gpt3-175b": ((12288, 49152, 96, 96, 128, False), (4, 8)),
    "llama3-8b": ((4096, 14336, 32, 8, 128, True), (1, 2)),
    "llama3-70b": ((8192, 28672, 64, 8, 128, True), (1, 2, 4, 8)),
}
TOKENS = (1, 16, 64, 256, 1024, 2048, 4096, 8192, 16384)


def llm_gemms(dry):
    """(model, tp, layer, pass, m, n, k) for every linear layer's forward, dgrad and wgrad GEMM."""
    out = []
    for model, ((h, ffn, heads, kv, d, gated), tps) in MODELS.items():
        for tp in tps:
            qkv = (heads + 2 * kv) * d // tp
            layers = {"qkv": (qkv, h), "proj": (h, heads * d // tp),
                      "fc1": ((2 if gated else 1) * ffn // tp, h), "fc2": (h, ffn // tp)}
            for layer, (n_out, k_in) in layers.items():
                for m in (TOKENS if not dry else (1, 64)):
                    if dry:
                        n_out, k_in = max(8, n_out // 64), max(8, k_in // 64)
                    out.append((model, tp, layer, "fwd", m, n_out, k_in))
                    if m >= 256 or dry:  # training shapes: decode-sized M has no backward
                        out.append((model, tp, layer, "dgrad", m, k_in, n_out))
                        out.append((model, tp, layer, "wgrad", n_out, k_in, m))
    return out


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}


def gemm_fn(m, n, k, dtype, l2):
    """fn(i): C = A @ B^T with A [m, k], B [n, k] (the nn.Linear layout), on rotating operands."""
    if dtype == "fp8":
        elem = 1
        nb = n_buffers((m * k + n * k) * elem, l2)
        a = [(torch.randn(m, k, device=DEV) * 0.5).to(torch.float8_e4m3fn) for _ in range(nb)]
        b = [(torch.randn(n, k, device=DEV) * 0.5).to(torch.float8_e4m3fn) for _ in range(nb)]
        sa = torch.tensor(1.0, device=DEV)
        sb = torch.tensor(1.0, device=DEV)

        def fn(i):
            return torch._scaled_mm(a[i % nb], b[i % nb].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return fn, nb
    tdt = DTYPES[dtype]
    elem = torch.finfo(tdt).bits // 8
    nb = n_buffers((m * k + n * k) * elem, l2)
    a = [torch.randn(m, k, device=DEV, dtype=tdt) for _ in range(nb)]
    b = [torch.randn(n, k, device=DEV, dtype=tdt) for _ in range(nb)]

    def fn(i):
        return torch.matmul(a[i % nb], b[i % nb].t())
    return fn, nb


GEMM_FIELDS = ["set", "model", "tp", "layer", "pass", "dtype", "m", "n", "k", "time_us", "tflops",
               "timing", "inner", "spread", "buffers", "status"]


def measure_gemms(rows, budget, l2, dry):
    seen = {}

    def one(setname, dtype, m, n, k, **meta):
        if not budget.left():
            return False
        key = (dtype, m, n, k)
        if key in seen:
            rows.add(set=setname, dtype=dtype, m=m, n=n, k=k, **seen[key], **meta)
            return True
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        try:
            fn, nb = gemm_fn(m, n, k, dtype, l2)
            t, how, inner, spread = time_op(fn)
            res = {"time_us": t * 1e6, "tflops": 2 * m * n * k / t / 1e12, "timing": how, "inner": inner,
                   "spread": spread, "buffers": nb, "status": "ok"}
            del fn
        except Exception as exc:  # noqa: BLE001
            res = {"status": f"error: {type(exc).__name__}: {str(exc)[:160]}"}
        seen[key] = res
        rows.add(set=setname, dtype=dtype, m=m, n=n, k=k, **res, **meta)
        return True

    shapes = llm_gemms(dry)
    log(f"gemm: {len(shapes)} LLM shapes (bf16)")
    for model, tp, layer, ps, m, n, k in shapes:
        if not one("llm", "bf16", m, n, k, model=model, tp=tp, layer=layer, **{"pass": ps}):
            break
    squares = (256, 512, 1024, 2048, 4096, 8192, 16384) if not dry else (16, 32)
    for dtype in ("fp8", "fp16", "tf32", "fp32"):
        for s in squares:
            if dtype == "fp32" and s > 8192:
                continue
            one("square", dtype, s, s, s)
    for s in squares:
        one("square", "bf16", s, s, s)
    log("gemm: fp8 LLM shapes")
    for model, tp, layer, ps, m, n, k in shapes:
        if m % 16 or n % 16 or k % 16 or m < 64:
            continue
        if not one("llm", "fp8", m, n, k, model=model, tp=tp, layer=layer, **{"pass": ps}):
            break
    rng = random.Random(7)
    log("gemm: random shapes")
    for i in range(200 if not dry else 4):
        def dim():
            return int(round(math.exp(rng.uniform(math.log(16), math.log(16384 if not dry else 64)))))
        m, n, k = dim(), dim(), dim()
        if i % 5:  # most real shapes are multiples of 8; one in five is left ragged
            m, n, k = (max(8, 8 * round(x / 8)) for x in (m, n, k))
        if not one("random", "bf16", m, n, k):
            break
    torch.backends.cuda.matmul.allow_tf32 = False


# ----------------------------------------------------------------------------------------------- attention

ATTN_FIELDS = ["kind", "backend", "pass", "batch", "heads_q", "heads_kv", "head_dim", "seq_q", "seq_kv",
               "causal", "time_us", "tflops", "gbps", "timing", "inner", "status"]


def _sdpa_backends():
    from torch.nn.attention import SDPBackend
    out = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out["cudnn"] = SDPBackend.CUDNN_ATTENTION
    if not CUDA:
        out = {"math": SDPBackend.MATH}
    return out


def attention_fns(b, hq, hkv, d, sq, skv, causal, l2, train):
    dt = torch.bfloat16 if CUDA else torch.float32
    per = 2 * (b * hq * sq * d + 2 * b * hkv * skv * d)
    nb = n_buffers(per, l2, cap=4)
    qs = [torch.randn(b, hq, sq, d, device=DEV, dtype=dt, requires_grad=train) for _ in range(nb)]
    ks = [torch.randn(b, hkv, skv, d, device=DEV, dtype=dt, requires_grad=train) for _ in range(nb)]
    vs = [torch.randn(b, hkv, skv, d, device=DEV, dtype=dt, requires_grad=train) for _ in range(nb)]
    gqa = {"enable_gqa": True} if hq != hkv else {}

    def fwd(i):
        return F.scaled_dot_product_attention(qs[i % nb], ks[i % nb], vs[i % nb], is_causal=causal, **gqa)

    def fwd_bwd(i):
        j = i % nb
        o = F.scaled_dot_product_attention(qs[j], ks[j], vs[j], is_causal=causal, **gqa)
        return torch.autograd.grad(o, (qs[j], ks[j], vs[j]), grad_outputs=o.detach())
    return fwd, fwd_bwd, per


def measure_attention(rows, budget, l2, dry):
    from torch.nn.attention import sdpa_kernel
    backends = _sdpa_backends()
    train = []
    heads = [(5, 5, 128), (12, 12, 128), (24, 24, 128), (40, 40, 128), (8, 1, 128), (32, 8, 128),
             (16, 16, 64), (64, 8, 128)]
    for b in (1, 2):
        for s in (1024, 2048, 4096, 8192):
            for hq, hkv, d in heads:
                train.append((b, hq, hkv, d, s, s, True))
    for hq, hkv, d in heads[:3]:
        train.append((1, hq, hkv, d, 2048, 2048, False))
    decode = [(b, hq, hkv, 128, 1, skv, False) for b in (1, 16, 64) for skv in (2048, 8192, 32768)
              for hq, hkv in ((32, 8), (8, 1))]
    if dry:
        train, decode = [(1, 2, 1, 16, 32, 32, True), (1, 2, 2, 16, 32, 32, False)], [(2, 2, 1, 16, 1, 64, False)]
    log(f"attention: {len(train)} training and {len(decode)} decode shapes x {list(backends)}")
    for kind, cases in (("train", train), ("decode", decode)):
        for (b, hq, hkv, d, sq, skv, causal) in cases:
            for bname, backend in backends.items():
                if bname == "efficient" and kind == "train":
                    continue  # the memory-efficient kernel is what runs when flash cannot; keep it for decode
                if not budget.left():
                    return
                pairs = b * hq * (sq * skv if not causal else sq * (sq + 1) / 2)
                flops_f = 4 * pairs * d
                meta = dict(kind=kind, backend=bname, batch=b, heads_q=hq, heads_kv=hkv, head_dim=d, seq_q=sq,
                            seq_kv=skv, causal=causal)
                try:
                    fwd, fwd_bwd, nbytes = attention_fns(b, hq, hkv, d, sq, skv, causal, l2, kind == "train")
                    with sdpa_kernel([backend]):
                        t_f, how, inner, _ = time_op(fwd)
                        rows.add(**meta, **{"pass": "fwd"}, time_us=t_f * 1e6, tflops=flops_f / t_f / 1e12,
                                 gbps=(nbytes + 2 * b * hq * sq * d) / t_f / 1e9, timing=how, inner=inner,
                                 status="ok")
                        if kind == "train":
                            t_fb, how, inner, _ = time_op(fwd_bwd)
                            t_b = t_fb - t_f
                            rows.add(**meta, **{"pass": "bwd"}, time_us=t_b * 1e6,
                                     tflops=2.5 * flops_f / t_b / 1e12, timing=how, inner=inner, status="ok")
                    del fwd, fwd_bwd
                except Exception as exc:  # noqa: BLE001
                    rows.add(**meta, **{"pass": "fwd"}, status=f"error: {type(exc).__name__}: {str(exc)[:160]}")


# ----------------------------------------------------------------------------------------------- memory-bound ops

MEM_FIELDS = ["op", "pass", "tokens", "hidden", "dtype", "elements", "bytes", "time_us", "gbps", "timing",
              "inner", "status"]


def memops_cases(dry):
    """(op, tokens, hidden) for the memory-bound ops of a transformer step."""
    tokens = (16, 256, 2048, 8192, 16384) if not dry else (4, 16)
    hidden = (4096, 5120, 12288) if not dry else (32,)
    ops = ["add", "mul", "gelu_tanh", "gelu", "silu", "swiglu", "dropout", "bias_dropout_add", "layer_norm",
           "rms_norm", "softmax", "to_fp32", "to_bf16", "clone", "embedding", "cross_entropy"]
    return [(op, t, h) for op in ops for t in tokens for h in hidden]


def memop_fns(op, t, h, l2):
    """(fwd(i), fwd_bwd(i) or None, bytes the forward must move, bytes the backward must move)."""
    bf = torch.bfloat16 if CUDA else torch.float32
    n = t * h

    def bufs(count, shape=(t, h), dtype=bf, grad=False, scale=1.0):
        nb = n_buffers(count * n * 2, l2, cap=4)
        return [torch.randn(*shape, device=DEV, dtype=dtype).mul_(scale).requires_grad_(grad) for _ in range(nb)]

    if op in ("add", "mul"):
        a, b = bufs(3), bufs(3)
        f = torch.add if op == "add" else torch.mul
        return (lambda i: f(a[i % len(a)], b[i % len(b)])), None, 3 * n * 2, 0
    if op in ("gelu_tanh", "gelu", "silu"):
        x = bufs(2, grad=True)
        act = {"gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "gelu": F.gelu, "silu": F.silu}[op]

        def fb(i):
            y = act(x[i % len(x)])
            return torch.autograd.grad(y, x[i % len(x)], grad_outputs=y.detach())
        return (lambda i: act(x[i % len(x)])), fb, 2 * n * 2, 3 * n * 2
    if op == "swiglu":
        x = bufs(3, shape=(t, 2 * h), grad=True)

        def f(i):
            a, b = x[i % len(x)].chunk(2, dim=-1)
            return F.silu(a) * b

        def fb(i):
            y = f(i)
            return torch.autograd.grad(y, x[i % len(x)], grad_outputs=y.detach())
        return f, fb, 3 * n * 2, 5 * n * 2
    if op == "dropout":
        x = bufs(2, grad=True)

        def fb(i):
            y = F.dropout(x[i % len(x)], 0.1, training=True)
            return torch.autograd.grad(y, x[i % len(x)], grad_outputs=y.detach())
        return (lambda i: F.dropout(x[i % len(x)], 0.1, training=True)), fb, 2 * n * 2 + n, 2 * n * 2 + n
    if op == "bias_dropout_add":
        x, r = bufs(3, grad=True), bufs(3)
        bias = torch.randn(h, device=DEV, dtype=bf)

        def f(i):
            return r[i % len(r)] + F.dropout(x[i % len(x)] + bias, 0.1, training=True)
        return f, None, 3 * n * 2 + n, 0
    if op in ("layer_norm", "rms_norm"):
        x = bufs(2, grad=True)
        w = torch.randn(h, device=DEV, dtype=bf, requires_grad=True)
        bias = torch.randn(h, device=DEV, dtype=bf, requires_grad=True)
        if op == "layer_norm":
            def f(i):
                return F.layer_norm(x[i % len(x)], (h,), w, bias)
        else:
            def f(i):
                return F.rms_norm(x[i % len(x)], (h,), w)

        def fb(i):
            y = f(i)
            return torch.autograd.grad(y, (x[i % len(x)], w), grad_outputs=y.detach())
        return f, fb, 2 * n * 2, 3 * n * 2
    if op == "softmax":
        x = bufs(2, grad=True)

        def fb(i):
            y = torch.softmax(x[i % len(x)], dim=-1)
            return torch.autograd.grad(y, x[i % len(x)], grad_outputs=y.detach())
        return (lambda i: torch.softmax(x[i % len(x)], dim=-1)), fb, 2 * n * 2, 3 * n * 2
    if op in ("to_fp32", "to_bf16"):
        if op == "to_fp32":
            x = bufs(2)
            return (lambda i: x[i % len(x)].float()), None, n * 6, 0
        x = bufs(4, dtype=torch.float32)
        return (lambda i: x[i % len(x)].to(bf)), None, n * 6, 0
    if op == "clone":
        x = bufs(2)
        return (lambda i: x[i % len(x)].clone()), None, n * 4, 0
    if op == "embedding":
        vocab = 50304 if CUDA else 128
        table = torch.randn(vocab, h, device=DEV, dtype=bf)
        idx = [torch.randint(0, vocab, (t,), device=DEV) for _ in range(4)]
        return (lambda i: F.embedding(idx[i % 4], table)), None, 2 * n * 2, 0
    if op == "cross_entropy":
        vocab = h * 8  # logits [tokens, vocab/tp]: vocab 32k-98k-wide shards
        logits = [torch.randn(t, vocab, device=DEV, dtype=bf, requires_grad=True)
                  for _ in range(n_buffers(t * vocab * 2, l2, cap=4))]
        target = torch.randint(0, vocab, (t,), device=DEV)

        def f(i):
            return F.cross_entropy(logits[i % len(logits)].float(), target)

        def fb(i):
            loss = f(i)
            return torch.autograd.grad(loss, logits[i % len(logits)])
        return f, fb, t * vocab * 2, t * vocab * 4
    raise ValueError(op)


def measure_memops(rows, budget, l2, dry):
    cases = memops_cases(dry)
    log(f"memops: {len(cases)} cases")
    for op, t, h in cases:
        if not budget.left():
            return
        meta = dict(op=op, tokens=t, hidden=h, dtype="bf16", elements=t * h)
        try:
            f, fb, bytes_f, bytes_b = memop_fns(op, t, h, l2)
            t_f, how, inner, _ = time_op(f)
            rows.add(**meta, **{"pass": "fwd"}, bytes=bytes_f, time_us=t_f * 1e6, gbps=bytes_f / t_f / 1e9,
                     timing=how, inner=inner, status="ok")
            if fb is not None:
                t_fb, how, inner, _ = time_op(fb)
                t_b = t_fb - t_f
                rows.add(**meta, **{"pass": "bwd"}, bytes=bytes_b, time_us=t_b * 1e6,
                         gbps=bytes_b / t_b / 1e9 if t_b > 0 else "", timing=how, inner=inner, status="ok")
        except Exception as exc:  # noqa: BLE001
            rows.add(**meta, **{"pass": "fwd"}, status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
    # HBM ceilings: a large copy (read + write) and a large read-only reduction.
    for op, nbytes in (("hbm_copy", 2 << 30), ("hbm_read_sum", 2 << 30)):
        if dry:
            nbytes = 1 << 20
        try:
            x = torch.randn(nbytes // 4, device=DEV)
            if op == "hbm_copy":
                y = torch.empty_like(x)
                fn, moved = (lambda i: y.copy_(x)), 2 * nbytes
            else:
                fn, moved = (lambda i: x.sum()), nbytes
            t_, how, inner, _ = time_op(fn, target_s=20e-3, max_inner=20)
            rows.add(op=op, **{"pass": "fwd"}, dtype="fp32", elements=nbytes // 4, bytes=moved, time_us=t_ * 1e6,
                     gbps=moved / t_ / 1e9, timing=how, inner=inner, status="ok")
            del x
        except Exception as exc:  # noqa: BLE001
            rows.add(op=op, status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
    # Optimizer step and gradient clipping over a layer-like list of fp32 tensors (Megatron: fp32 master
    # weights, fp32 main grads; AdamW reads p, g, m, v and writes p, m, v: 28 bytes per parameter).
    for params in ((10_000_000, 100_000_000, 400_000_000) if not dry else (10_000,)):
        if not budget.left():
            return
        try:
            sizes = _layer_like_sizes(params)
            ps = [torch.randn(s, device=DEV, requires_grad=True) for s in sizes]
            for p in ps:
                p.grad = torch.randn_like(p)
            opt = torch.optim.AdamW(ps, lr=1e-4, fused=CUDA, foreach=None if CUDA else False)
            opt.step()
            t_, how, inner, _ = time_op(lambda i: opt.step(), target_s=10e-3, use_graph=False)
            rows.add(op="adamw_fused", **{"pass": "step"}, dtype="fp32", elements=params, bytes=28 * params,
                     time_us=t_ * 1e6, gbps=28 * params / t_ / 1e9, timing=how, inner=inner,
                     status=f"ok ({len(sizes)} tensors)")
            t_, how, inner, _ = time_op(lambda i: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True),
                                        target_s=10e-3, use_graph=False)
            rows.add(op="clip_grad_norm", **{"pass": "step"}, dtype="fp32", elements=params, bytes=8 * params,
                     time_us=t_ * 1e6, gbps=8 * params / t_ / 1e9, timing=how, inner=inner,
                     status=f"ok ({len(sizes)} tensors)")
            t_, how, inner, _ = time_op(lambda i: [p.grad.zero_() for p in ps], target_s=10e-3, use_graph=False)
            rows.add(op="zero_grad", **{"pass": "step"}, dtype="fp32", elements=params, bytes=4 * params,
                     time_us=t_ * 1e6, gbps=4 * params / t_ / 1e9, timing=how, inner=inner,
                     status=f"ok ({len(sizes)} tensors)")
            del opt, ps
        except Exception as exc:  # noqa: BLE001
            rows.add(op="adamw_fused", elements=params, status=f"error: {type(exc).__name__}: {str(exc)[:160]}")



def _layer_like_sizes(params):
    """Tensor sizes of a transformer's parameters (per layer: 4 matrices in ratio 3:1:4:4 and 6 vectors)."""
    h = 4096
    per_layer = 12 * h * h + 6 * h
    layers = max(1, params // per_layer)
    sizes = []
    for _ in range(layers):
        sizes += [3 * h * h, h * h, 4 * h * h, 4 * h * h] + [h] * 6
    rest = params - sum(sizes)
    if rest > 0:
        sizes.append(rest)
    elif rest < 0:
        sizes = [params]
    return sizes


# ----------------------------------------------------------------------------------------------- launch gaps



def measure_gemm_extra(rows, budget, l2, dry):
    """Wave quantisation (a fine M sweep), batched GEMMs (unfused attention) and grouped GEMMs (MoE)."""
    step = 128 if not dry else 16
    for m in range(step, (8192 if not dry else 64) + 1, step):
        if not budget.left():
            return
        for n, k in ((5120, 5120), (2560, 5120)) if not dry else ((32, 32),):
            try:
                fn, nb = gemm_fn(m, n, k, "bf16", l2)
                t, how, inner, spread = time_op(fn)
                rows.add(set="m_sweep", dtype="bf16", m=m, n=n, k=k, time_us=t * 1e6, tflops=2 * m * n * k / t / 1e12,
                         timing=how, inner=inner, spread=spread, buffers=nb, status="ok")
            except Exception as exc:  # noqa: BLE001
                rows.add(set="m_sweep", dtype="bf16", m=m, n=n, k=k, status=f"error: {type(exc).__name__}: {exc}")
    dt = torch.bfloat16 if CUDA else torch.float32
    for bsz, m, n, k in ((40, 2048, 2048, 128), (40, 2048, 128, 2048), (5, 2048, 2048, 128), (96, 2048, 2048, 128),
                         (12, 2048, 128, 2048), (32, 4096, 4096, 128), (8, 1024, 1024, 64)):
        if dry:
            bsz, m, n, k = 2, 16, 16, 16
        try:
            nb = n_buffers(bsz * (m * k + k * n) * 2, l2, cap=4)
            xa = [torch.randn(bsz, m, k, device=DEV, dtype=dt) for _ in range(nb)]
            xb = [torch.randn(bsz, k, n, device=DEV, dtype=dt) for _ in range(nb)]
            t, how, inner, spread = time_op(lambda i: torch.bmm(xa[i % nb], xb[i % nb]))
            rows.add(set="bmm", model=f"batch={bsz}", dtype="bf16", m=m, n=n, k=k, time_us=t * 1e6,
                     tflops=2 * bsz * m * n * k / t / 1e12, timing=how, inner=inner, spread=spread, buffers=nb,
                     status="ok")
        except Exception as exc:  # noqa: BLE001
            rows.add(set="bmm", model=f"batch={bsz}", m=m, n=n, k=k, status=f"error: {type(exc).__name__}: {exc}")
    grouped = getattr(torch, "_grouped_mm", None)
    for experts, tokens_per_expert, n, k in ((8, 512, 14336, 4096), (8, 2048, 14336, 4096), (8, 4096, 4096, 14336),
                                             (64, 64, 1408, 2048), (64, 256, 1408, 2048), (128, 32, 768, 2048),
                                             (128, 128, 768, 2048), (128, 512, 768, 2048), (16, 1024, 2048, 7168),
                                             (32, 256, 4096, 7168), (256, 16, 2048, 7168), (8, 16, 14336, 4096)):
        if dry:
            experts, tokens_per_expert, n, k = 2, 16, 16, 16
        meta = dict(set="grouped", model=f"experts={experts}", dtype="bf16", m=tokens_per_expert, n=n, k=k)
        if grouped is None or not budget.left():
            rows.add(**meta, status="skipped: no torch._grouped_mm")
            continue
        try:
            total = experts * tokens_per_expert
            xs = torch.randn(total, k, device=DEV, dtype=dt)
            ws = torch.randn(experts, n, k, device=DEV, dtype=dt)
            offs = torch.arange(tokens_per_expert, total + 1, tokens_per_expert, device=DEV, dtype=torch.int32)
            t, how, inner, spread = time_op(lambda i: grouped(xs, ws.transpose(-2, -1), offs=offs))
            rows.add(**meta, time_us=t * 1e6, tflops=2 * total * n * k / t / 1e12, timing=how, inner=inner,
                     spread=spread, buffers=1, status="ok")
        except Exception as exc:  # noqa: BLE001
            rows.add(**meta, status=f"error: {type(exc).__name__}: {str(exc)[:160]}")


# ----------------------------------------------------------------------------------------------- main
