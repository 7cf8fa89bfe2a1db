"""Measure what the gpu compute model assumes, on a real GPU, in one run.

Writes CSV/JSON files into OUT (default ./gpu-measurements):

* ``device.json``       the GPU, driver, CUDA/cuBLAS/cuDNN/torch versions, clocks and power limit read at start
                         and end, and how each section went;
* ``gemm.csv``           GEMM times: the linear layers of GPT-3 13B/175B and Llama-3 8B/70B at TP 1-8 (forward,
                         input-gradient and weight-gradient shapes), random shapes, and square sweeps, in bf16,
                         fp16, fp8 (``torch._scaled_mm``, per-tensor scales), tf32 and fp32;
* ``attention.csv``      fused attention (SDPA flash and cuDNN backends), forward and backward, causal training
                         shapes with MHA and GQA, and decode shapes (one query row);
* ``memops.csv``         norms, element-wise ops, casts, softmax, embedding, cross-entropy, fused AdamW and
                         gradient clipping, with the bytes each must move;
* ``launch.csv``         host dispatch cost per op, GPU-side gap between back-to-back kernels (eager and CUDA
                         graph), synchronise / ``.item()`` round trips, cross-stream event waits;
* ``layer.csv``          whole transformer layers (forward + backward) timed eagerly and as a CUDA graph, with
                         the sum of their kernels' busy time from the profiler, so the gaps between kernels of a
                         real layer are measured; ``layer_kernels.csv.gz`` lists every kernel of one iteration;
* ``interference.csv``   GEMMs, attention and HBM-bound ops while a communication-like kernel holding k SMs
                         streams memory (or only spins) on another stream, that kernel's own slowdown, and GEMMs
                         with cuBLAS told to leave SMs free;
* ``gemm_extra.csv``     a fine M sweep (wave quantisation), batched GEMMs and grouped (MoE) GEMMs.

Every kernel time is a median over repeats of a CUDA graph replaying the op many times on rotating input
buffers (larger than L2, so weights are not served from cache), so it is the GPU's time without host launch
cost; the launch section measures that cost on its own. Inputs are random, never zeros.

Run it on the GPU to calibrate:  ``python3 plugins/gpu_model/fit/measure_gpu.py --out DIR [--budget-s 420]``.
Each section stops at its share of the time budget and writes what it has; a failing item is recorded with its
error and the run goes on. ``--dry-run`` runs every code path on tiny shapes (CPU works) to check the script.
"""

import argparse
import csv
import gzip
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CUDA = DEV == "cuda"
START = time.perf_counter()
LOG_LINES = []


def log(*args):
    line = f"[{time.perf_counter() - START:7.1f}s] " + " ".join(str(a) for a in args)
    print(line, flush=True)
    LOG_LINES.append(line)


def sync():
    if CUDA:
        torch.cuda.synchronize()


class Budget:
    """A section's share of the run: ``left()`` is False once its seconds, or the run's, are spent."""

    def __init__(self, seconds, run_deadline):
        self.end = min(time.perf_counter() + seconds, run_deadline)

    def left(self):
        return time.perf_counter() < self.end


class Rows:
    """A CSV written row by row (flushed), so a run killed at its limit keeps what it measured."""

    def __init__(self, path, fields):
        self.fields = fields
        self.f = open(path, "w", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=fields, extrasaction="ignore")
        self.w.writeheader()
        self.n = 0

    def add(self, **row):
        self.w.writerow({k: _fmt(row.get(k, "")) for k in self.fields})
        self.f.flush()
        self.n += 1

    def close(self):
        self.f.close()


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


# ----------------------------------------------------------------------------------------------- timing


def _events():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def _elapsed_s(fn, inner):
    """Seconds for ``inner`` calls of fn(i), timed with events (CUDA) or the host clock (CPU)."""
    if CUDA:
        e0, e1 = _events()
        e0.record()
        for i in range(inner):
            fn(i)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e-3
    t0 = time.perf_counter()
    for i in range(inner):
        fn(i)
    return time.perf_counter() - t0


def time_op(fn, target_s=2e-3, repeats=5, max_inner=200, use_graph=True):
    """Median seconds per call of ``fn(i)`` (i rotates buffers), and how it was timed.

    CUDA graph replay of ``inner`` calls when it captures (GPU time, no host launch cost), else eager with
    events (``eager``: the host may be the bottleneck for kernels of a few µs)."""
    fn(0)
    sync()
    single = _elapsed_s(fn, 1)
    inner = int(max(2, min(max_inner, math.ceil(target_s / max(single, 1e-6)))))
    if CUDA and use_graph:
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for i in range(2):
                    fn(i)
            torch.cuda.current_stream().wait_stream(side)
            sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(inner):
                    fn(i)
            graph.replay()
            sync()
            times = []
            for _ in range(repeats):
                e0, e1 = _events()
                e0.record()
                graph.replay()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1e-3 / inner)
            del graph
            times.sort()
            return times[len(times) // 2], "graph", inner, (times[-1] - times[0]) / times[len(times) // 2]
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to eager timing
            log("  graph capture failed, eager:", type(exc).__name__, str(exc)[:120])
            sync()
    times = sorted(_elapsed_s(fn, inner) / inner for _ in range(repeats))
    return times[len(times) // 2], "eager", inner, (times[-1] - times[0]) / times[len(times) // 2]


def n_buffers(bytes_per_set, l2_bytes, cap=8):
    """Input sets to rotate so that one pass over them is at least 3x L2 (cold operands, as in training)."""
    return int(max(1, min(cap, math.ceil(3 * l2_bytes / max(bytes_per_set, 1)))))


# ----------------------------------------------------------------------------------------------- device


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {exc}"


def device_info():
    info = {
        "host": platform.node(), "python": sys.version.split()[0], "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if CUDA:
        p = torch.cuda.get_device_properties(0)
        info.update({
            "name": p.name, "sm_count": p.multi_processor_count, "total_memory_bytes": p.total_memory,
            "compute_capability": f"{p.major}.{p.minor}",
            "l2_cache_bytes": getattr(p, "L2_cache_size", None),
            "cudnn": torch.backends.cudnn.version(),
            "cublas": _cublas_version(),
        })
        info["nvidia_smi"] = _run(["nvidia-smi", "--query-gpu=name,driver_version,pstate,clocks.sm,clocks.mem,"
                                   "clocks.max.sm,clocks.max.mem,power.limit,power.draw,temperature.gpu,"
                                   "ecc.mode.current", "--format=csv"]).strip()
        info["nvidia_smi_q_clocks"] = _run(["nvidia-smi", "-q", "-d", "CLOCK,POWER,PERFORMANCE"])[:6000]
    else:
        info.update({"name": "cpu (dry run)", "sm_count": 8, "l2_cache_bytes": 4 << 20})
    return info


def _cublas_version():
    try:
        import ctypes
        import glob
        for path in glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cublas", "lib",
                                           "libcublas.so*")) + ["libcublas.so"]:
            try:
                lib = ctypes.CDLL(path)
                v = ctypes.c_int()
                lib.cublasGetProperty(0, ctypes.byref(v))
                major = v.value
                lib.cublasGetProperty(1, ctypes.byref(v))
                minor = v.value
                lib.cublasGetProperty(2, ctypes.byref(v))
                return f"{major}.{minor}.{v.value}"
            except OSError:
                continue
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"
    return "unknown"


# ----------------------------------------------------------------------------------------------- GEMMs

#: name: (hidden, ffn, heads, kv_heads, head_dim, gated FFN), and the TP degrees measured.
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

LAUNCH_FIELDS = ["test", "kernel_us", "n", "value_us", "unit", "note"]


def measure_launch(rows, budget, dry):
    n = 2000 if not dry else 50
    x = torch.randn(1, device=DEV)
    # 1. host dispatch cost of a tiny op, and the GPU time it leaves (eager: the host is the bottleneck).
    for _ in range(100):
        x.add_(1.0)
    sync()
    if CUDA:
        e0, e1 = _events()
        e0.record()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    t1 = time.perf_counter()
    if CUDA:
        e1.record()
    sync()
    t2 = time.perf_counter()
    rows.add(test="host_dispatch_tiny_add", n=n, value_us=(t1 - t0) / n * 1e6, unit="us/op (host, eager)",
             note="python + torch dispatch + cudaLaunchKernel per op")
    if CUDA:
        rows.add(test="eager_gpu_per_tiny_op", n=n, value_us=e0.elapsed_time(e1) * 1e3 / n, unit="us/op (gpu span)",
                 note="GPU span / ops when the host issues as fast as it can")
        rows.add(test="eager_drain", n=n, value_us=(t2 - t1) * 1e6, unit="us", note="sync after the loop")
    # 2. back-to-back kernels of several sizes: eager (events) vs CUDA graph, per kernel.
    for numel in (1, 1 << 16, 1 << 20, 1 << 22, 1 << 24):
        if dry:
            numel = min(numel, 1 << 12)
        y = torch.randn(numel, device=DEV)
        fn = (lambda i: y.mul_(1.0000001))
        t_graph, how, inner, _ = time_op(fn, target_s=5e-3, max_inner=2000)
        t_eager = sorted(_elapsed_s(fn, inner) / inner for _ in range(5))[2]
        rows.add(test="kernel_back_to_back", kernel_us=t_graph * 1e6, n=inner, value_us=t_graph * 1e6,
                 unit="us/kernel (graph)", note=f"mul_ on {numel} fp32 ({how})")
        rows.add(test="kernel_back_to_back", kernel_us=t_graph * 1e6, n=inner, value_us=t_eager * 1e6,
                 unit="us/kernel (eager)", note=f"mul_ on {numel} fp32; eager - graph = launch gap when GPU-bound")
    # 3. synchronisation round trips.
    for test, fn in (("synchronize_after_tiny", lambda: (x.add_(1.0), sync())),
                     ("item_after_tiny", lambda: (x.add_(1.0), x.item())),
                     ("h2d_4_bytes_pageable", lambda: (torch.ones(1).to(DEV), sync()))):
        for _ in range(20):
            fn()
        reps = 500 if not dry else 10
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        rows.add(test=test, n=reps, value_us=(time.perf_counter() - t0) / reps * 1e6, unit="us (host wall)",
                 note="includes the tiny kernel's own dispatch")
    # 4. dependent kernels alternating between two streams (event record + wait per hop) vs one stream.
    if CUDA:
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        z = torch.randn(1 << 20, device=DEV)
        hops = 200
        for label, cross in (("same_stream", False), ("cross_stream_event_wait", True)):
            def chain():
                cur = s1
                for j in range(hops):
                    nxt = (s2 if j % 2 else s1) if cross else s1
                    if nxt is not cur:
                        nxt.wait_stream(cur)
                        cur = nxt
                    with torch.cuda.stream(cur):
                        z.mul_(1.0000001)
                torch.cuda.current_stream().wait_stream(cur)
            chain()
            sync()
            times = []
            for _ in range(5):
                e0, e1 = _events()
                e0.record()
                chain()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1e3 / hops)
            rows.add(test=label, n=hops, value_us=sorted(times)[2], unit="us/kernel (eager, 4 MB mul_)",
                     note="difference = cost of an event wait between streams per dependent kernel")


# ----------------------------------------------------------------------------------------------- whole layers

LAYER_FIELDS = ["config", "hidden", "heads", "kv_heads", "ffn", "seq", "batch", "layers", "mode", "time_us",
                "per_layer_us", "kernel_busy_us", "kernels", "gap_us", "status"]


class Block(torch.nn.Module):
    """A transformer layer as one tensor-parallel rank computes it (no communication): GPT or Llama style."""

    def __init__(self, h, heads, kv, ffn, gated, dtype):
        super().__init__()
        self.heads, self.kv, self.d, self.gated = heads, kv, 128, gated  # head_dim 128 in every config
        lin = dict(device=DEV, dtype=dtype)
        self.norm1 = (torch.nn.RMSNorm if gated else torch.nn.LayerNorm)(h, **lin)
        self.qkv = torch.nn.Linear(h, (heads + 2 * kv) * self.d, bias=not gated, **lin)
        self.proj = torch.nn.Linear(heads * self.d, h, bias=not gated, **lin)
        self.norm2 = (torch.nn.RMSNorm if gated else torch.nn.LayerNorm)(h, **lin)
        self.fc1 = torch.nn.Linear(h, (2 if gated else 1) * ffn, bias=not gated, **lin)
        self.fc2 = torch.nn.Linear(ffn, h, bias=not gated, **lin)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self.norm1(x))
        q, k, v = qkv.split([self.heads * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(b, s, self.heads, self.d).transpose(1, 2)
        k = k.view(b, s, self.kv, self.d).transpose(1, 2)
        v = v.view(b, s, self.kv, self.d).transpose(1, 2)
        gqa = {"enable_gqa": True} if self.heads != self.kv else {}
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        a = a.transpose(1, 2).reshape(b, s, self.heads * self.d)
        x = x + F.dropout(self.proj(a), 0.1, self.training)
        y = self.fc1(self.norm2(x))
        if self.gated:
            g, u = y.chunk(2, dim=-1)
            y = F.silu(g) * u
        else:
            y = F.gelu(y, approximate="tanh")
        return x + F.dropout(self.fc2(y), 0.1, self.training)


LAYER_CONFIGS = {
    # name: (hidden, heads per rank, kv heads per rank, ffn per rank, gated, seq, micro-batch)
    "gpt3-13b-tp8": (5120, 5, 5, 2560, False, 2048, 1),
    "gpt3-13b-tp1": (5120, 40, 40, 20480, False, 2048, 1),
    "gpt3-175b-tp8": (12288, 12, 12, 6144, False, 2048, 1),
    "llama3-70b-tp8": (8192, 8, 1, 3584, True, 4096, 1),
    "llama3-8b-tp1": (4096, 32, 8, 14336, True, 8192, 1),
    "gpt3-13b-tp4": (5120, 10, 10, 5120, False, 2048, 1),
    "gpt3-13b-tp2": (5120, 20, 20, 10240, False, 2048, 1),
    "gpt3-13b-tp8-mb4": (5120, 5, 5, 2560, False, 2048, 4),
    "gpt3-175b-tp4": (12288, 24, 24, 12288, False, 2048, 1),
    "gpt3-175b-tp8-mb2": (12288, 12, 12, 6144, False, 2048, 2),
    "llama3-70b-tp4": (8192, 16, 2, 7168, True, 4096, 1),
}


def measure_layers(rows, budget, outdir, dry):
    dt = torch.bfloat16 if CUDA else torch.float32
    kernel_rows = []
    nlayers = 4
    traced = False
    for name, (h, heads, kv, ffn, gated, seq, mb) in LAYER_CONFIGS.items():
        if not budget.left():
            break
        if dry:
            h, heads, kv, ffn, seq = 256, 2, (1 if gated else 2), 256, 64
        meta = dict(config=name, hidden=h, heads=heads, kv_heads=kv, ffn=ffn, seq=seq, batch=mb, layers=nlayers)
        try:
            torch.manual_seed(0)
            model = torch.nn.Sequential(*[Block(h, heads, kv, ffn, gated, dt) for _ in range(nlayers)]).train()
            x = torch.randn(mb, seq, h, device=DEV, dtype=dt, requires_grad=True)
            params = list(model.parameters())

            def step(i=0):
                y = model(x)
                return torch.autograd.grad(y, [x] + params, grad_outputs=y.detach())

            t_e, how, inner, _ = time_op(step, target_s=20e-3, max_inner=10, use_graph=False)
            busy, count, krows = _kernel_busy(step, name)
            kernel_rows += krows
            rows.add(**meta, mode="eager", time_us=t_e * 1e6, per_layer_us=t_e * 1e6 / nlayers,
                     kernel_busy_us=busy, kernels=count, gap_us=t_e * 1e6 - busy if busy else "", status="ok")
            if CUDA:
                try:
                    t_g, how, inner, _ = time_op(step, target_s=20e-3, max_inner=5, use_graph=True)
                    rows.add(**meta, mode=how, time_us=t_g * 1e6, per_layer_us=t_g * 1e6 / nlayers,
                             kernel_busy_us=busy, kernels=count, gap_us=t_g * 1e6 - busy if busy else "",
                             status="ok")
                except Exception as exc:  # noqa: BLE001
                    rows.add(**meta, mode="graph", status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
            if not traced:
                traced = _trace_pair(step, outdir)
            del model, x, params
        except Exception as exc:  # noqa: BLE001
            rows.add(**meta, mode="eager", status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
            log("  layer", name, "failed:", traceback.format_exc()[-400:])
    with gzip.open(os.path.join(outdir, "layer_kernels.csv.gz"), "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "kernel", "start_us", "dur_us", "stream"])
        w.writerows(kernel_rows)
    _bundle(outdir, ["layer_kernels.csv.gz", "layer_et.json.gz", "layer_kineto.json.gz"], "layer_traces.tar")


def _bundle(outdir, names, tar_name):
    """One tar of the trace files (the device tool returns at most 8 files)."""
    import tarfile
    with tarfile.open(os.path.join(outdir, tar_name), "w") as tar:
        for n in names:
            p = os.path.join(outdir, n)
            if os.path.exists(p):
                tar.add(p, arcname=n)
                os.remove(p)


def _kernel_busy(step, name):
    """GPU busy time (union of kernel intervals) of one call of step, from the profiler, and its kernels."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    step()
    sync()
    with profile(activities=acts) as prof:
        step()
        sync()
    kernels = []
    for ev in prof.events():
        dev_type = str(getattr(ev, "device_type", ""))
        if CUDA and "CUDA" not in dev_type:
            continue
        if not CUDA and dev_type and "CPU" not in dev_type:
            continue
        start = ev.time_range.start
        end = ev.time_range.end
        if CUDA:
            kernels.append((start, end, ev.name, getattr(ev, "device_index", 0)))
    if not kernels:
        return "", 0, []
    kernels.sort()
    busy, cur_s, cur_e = 0, None, None
    for s, e, _, _ in kernels:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    t0 = kernels[0][0]
    rows = [(name, k[:120], round(s - t0, 3), round(e - s, 3), st) for s, e, k, st in kernels]
    return busy, len(kernels), rows


def _trace_pair(step, outdir):
    """One step recorded by PyTorch's execution-trace observer and Kineto together (a host+device pair)."""
    try:
        from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
        et_path = os.path.join(outdir, "layer_et.json")
        kineto_path = os.path.join(outdir, "layer_kineto.json")
        et = ExecutionTraceObserver()
        et.register_callback(et_path)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
        with profile(activities=acts, record_shapes=True) as prof:
            et.start()
            step()
            sync()
            et.stop()
        et.unregister_callback()
        prof.export_chrome_trace(kineto_path)
        for p in (et_path, kineto_path):
            with open(p, "rb") as src, gzip.open(p + ".gz", "wb") as dst:
                dst.write(src.read())
            os.remove(p)
        return True
    except Exception as exc:  # noqa: BLE001
        log("  trace pair failed:", type(exc).__name__, str(exc)[:200])
        return False


# ----------------------------------------------------------------------------------------------- interference

INTF_FIELDS = ["victim", "comm_kind", "comm_ctas", "victim_alone_us", "victim_with_comm_us", "slowdown",
               "comm_gbps_alone", "comm_gbps_with_victim", "comm_slowdown", "overlap_ok", "status"]


def _comm_kernels():
    """Triton kernels standing in for a communication kernel running on `ctas` CTAs (NCCL: one per channel).

    ``stream``: each CTA copies its own 8 MB slice over and over (SMs and HBM taken, as a collective's
    channels do); ``spin``: each CTA only computes (SMs taken, no memory traffic). Loop counts are not
    specialised, so no launch recompiles inside a timed region."""
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["per_prog", "iters"])
    def stream_copy(src, dst, per_prog, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        base = pid * per_prog
        for _ in range(iters):
            for off in range(0, per_prog, BLOCK):
                idx = base + off + tl.arange(0, BLOCK)
                tl.store(dst + idx, tl.load(src + idx))

    @triton.jit(do_not_specialize=["per_prog", "iters"])
    def spin(src, dst, per_prog, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        x = tl.load(src + pid * BLOCK + tl.arange(0, BLOCK))
        for _ in range(iters):
            for _j in range(0, per_prog, BLOCK):
                x = x * 0.999999 + 0.000001
        tl.store(dst + pid * BLOCK + tl.arange(0, BLOCK), x)

    def launcher(kernel):
        def launch(src, dst, ctas, per_prog, iters):
            kernel[(ctas,)](src, dst, per_prog, iters, BLOCK=2048, num_warps=8)
        return launch
    return {"stream": launcher(stream_copy), "spin": launcher(spin)}


def measure_interference(rows, budget, dry):
    if not CUDA:
        rows.add(victim="none", status="skipped: no GPU")
        return
    kernels = _comm_kernels()
    per_prog = 1 << 21  # 8 MB of fp32 per CTA: k CTAs stream k x 8 MB (> L2 from 8 CTAs on)
    src = torch.randn(128 * per_prog, device=DEV)
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    a2 = torch.randn(4096, 5120, device=DEV, dtype=torch.bfloat16)
    w2 = torch.randn(20480, 5120, device=DEV, dtype=torch.bfloat16)
    w3 = torch.randn(2560, 5120, device=DEV, dtype=torch.bfloat16)
    big = torch.randn(1 << 28, device=DEV, dtype=torch.bfloat16)
    q = torch.randn(1, 40, 2048, 128, device=DEV, dtype=torch.bfloat16)
    ln_x = torch.randn(8192, 5120, device=DEV, dtype=torch.bfloat16)
    victims = {"gemm_8192^3_bf16": lambda: a @ b, "gemm_4096x20480x5120_bf16": lambda: a2 @ w2.t(),
               "gemm_4096x2560x5120_bf16": lambda: a2 @ w3.t(),
               "flash_attn_fwd_b1h40s2048": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
               "layer_norm_8192x5120": lambda: F.layer_norm(ln_x, (5120,)),
               "add_512MB_bf16": lambda: big.add(1.0)}
    comm = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    for kind, launch in kernels.items():
        for ctas in (2, 4, 8, 16, 24, 32, 48, 64):
            if kind == "spin" and ctas not in (8, 16, 32, 64):
                continue
            launch(src, dst, ctas, per_prog, 2)  # compiles once (loop counts not specialised)
            sync()
            e0, e1 = _events()
            e0.record()
            launch(src, dst, ctas, per_prog, 2)
            e1.record()
            e1.synchronize()
            t2 = e0.elapsed_time(e1) * 1e-3 / 2
            iters = max(2, int(60e-3 / t2))
            comm_bytes = 2 * 4 * ctas * per_prog * iters if kind == "stream" else 0
            for vname, victim in victims.items():
                if not budget.left():
                    return
                try:
                    victim()
                    sync()
                    alone = sorted(_elapsed_s(lambda i: victim(), 10) / 10 for _ in range(3))[1]
                    n_vic = max(3, int(0.5 * 60e-3 / alone))  # victims fill the first half of the comm kernel
                    c0, c1 = _events()
                    v0, v1 = _events()
                    with torch.cuda.stream(comm):
                        c0.record(comm)
                        launch(src, dst, ctas, per_prog, iters)
                        c1.record(comm)
                    time.sleep(0.002)  # the comm kernel takes its SMs first, as a running collective has them
                    v0.record(main)
                    for _ in range(n_vic):
                        victim()
                    v1.record(main)
                    sync()
                    with_comm = v0.elapsed_time(v1) * 1e-3 / n_vic
                    ok = c0.elapsed_time(v0) >= 0 and v1.elapsed_time(c1) >= 0
                    sync()
                    e0, e1 = _events()
                    with torch.cuda.stream(comm):
                        e0.record(comm)
                        launch(src, dst, ctas, per_prog, iters)
                        e1.record(comm)
                    sync()
                    t_comm_alone = e0.elapsed_time(e1) * 1e-3
                    # The comm kernel while victims run through all of it.
                    n_cover = int(2 * t_comm_alone / alone) + 2
                    for _ in range(n_cover):
                        victim()
                    d0, d1 = _events()
                    with torch.cuda.stream(comm):
                        d0.record(comm)
                        launch(src, dst, ctas, per_prog, iters)
                        d1.record(comm)
                    sync()
                    comm_with = d0.elapsed_time(d1) * 1e-3
                    rows.add(victim=vname, comm_kind=kind, comm_ctas=ctas, victim_alone_us=alone * 1e6,
                             victim_with_comm_us=with_comm * 1e6, slowdown=with_comm / alone,
                             comm_gbps_alone=comm_bytes / t_comm_alone / 1e9,
                             comm_gbps_with_victim=comm_bytes / comm_with / 1e9,
                             comm_slowdown=comm_with / t_comm_alone, overlap_ok=ok, status="ok")
                except Exception as exc:  # noqa: BLE001
                    rows.add(victim=vname, comm_kind=kind, comm_ctas=ctas,
                             status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
    # cuBLAS told to leave SMs free (what Transformer Engine's sm_margin / async-TP carve-outs do).
    setter = getattr(torch._C, "_set_sm_carveout_experimental", None)
    for carve in (0, 8, 16, 32, 64):
        if setter is None or not budget.left():
            break
        for vname in ("gemm_8192^3_bf16", "gemm_4096x20480x5120_bf16", "gemm_4096x2560x5120_bf16"):
            try:
                setter(carve if carve else None)
                victim = victims[vname]
                t_, how, inner, _ = time_op(lambda i: victim(), use_graph=False, target_s=10e-3)
                rows.add(victim=vname, comm_kind="cublas_sm_carveout", comm_ctas=carve, victim_with_comm_us=t_ * 1e6,
                         status="ok")
            except Exception as exc:  # noqa: BLE001
                rows.add(victim=vname, comm_kind="cublas_sm_carveout", comm_ctas=carve,
                         status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
    if setter is not None:
        setter(None)


# ----------------------------------------------------------------------------------------------- more GEMMs


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-measurements")
    ap.add_argument("--budget-s", type=float, default=420.0, help="seconds for the whole run (sections share it)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes, every code path (works on CPU)")
    ap.add_argument("--only", default="", help="comma-separated sections to run (default all)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    deadline = START + args.budget_s
    info = device_info()
    l2 = info.get("l2_cache_bytes") or (50 << 20)
    log("device:", info.get("name"), "SMs", info.get("sm_count"), "torch", info["torch"])
    with open(os.path.join(args.out, "device.json"), "w") as f:  # rewritten at the end with the sections
        json.dump(info, f, indent=1)
    # Share of the budget per section, in the order they run (most needed first).
    sections = [
        ("launch", 0.04, LAUNCH_FIELDS, lambda r, b: measure_launch(r, b, args.dry_run)),
        ("gemm", 0.40, GEMM_FIELDS, lambda r, b: measure_gemms(r, b, l2, args.dry_run)),
        ("attention", 0.14, ATTN_FIELDS, lambda r, b: measure_attention(r, b, l2, args.dry_run)),
        ("memops", 0.12, MEM_FIELDS, lambda r, b: measure_memops(r, b, l2, args.dry_run)),
        ("layer", 0.16, LAYER_FIELDS, lambda r, b: measure_layers(r, b, args.out, args.dry_run)),
        ("interference", 0.10, INTF_FIELDS, lambda r, b: measure_interference(r, b, args.dry_run)),
        ("gemm_extra", 0.10, GEMM_FIELDS, lambda r, b: measure_gemm_extra(r, b, l2, args.dry_run)),
    ]
    only = {s for s in args.only.split(",") if s}
    info["sections"] = {}
    for name, share, fields, run in sections:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        rows = Rows(os.path.join(args.out, f"{name}.csv"), fields)
        status = "ok"
        try:
            run(rows, Budget(share * args.budget_s, deadline))
        except Exception:  # noqa: BLE001 - record and go on to the next section
            status = "error: " + traceback.format_exc()[-600:]
            log(name, "FAILED", status)
        rows.close()
        info["sections"][name] = {"rows": rows.n, "seconds": round(time.perf_counter() - t0, 1), "status": status}
        log(f"{name}: {rows.n} rows in {time.perf_counter() - t0:.1f} s")
        if CUDA:
            torch.cuda.empty_cache()
    if CUDA:
        info["nvidia_smi_end"] = _run(["nvidia-smi", "--query-gpu=pstate,clocks.sm,clocks.mem,power.draw,"
                                       "temperature.gpu,clocks_throttle_reasons.active", "--format=csv"]).strip()
    info["log"] = LOG_LINES
    with open(os.path.join(args.out, "device.json"), "w") as f:
        json.dump(info, f, indent=1)
    _summary(args.out)


def _summary(outdir):
    """A short table last (what the device tool's output tail shows)."""
    def read(name):
        p = os.path.join(outdir, name)
        return list(csv.DictReader(open(p))) if os.path.exists(p) else []
    gem = [r for r in read("gemm.csv") if r["status"] == "ok"]
    for dtype in ("bf16", "fp8", "fp16", "tf32", "fp32"):
        sq = [r for r in gem if r["set"] == "square" and r["dtype"] == dtype]
        if sq:
            print(dtype, "square TFLOP/s:", " ".join(f"{r['m']}:{float(r['tflops']):.0f}" for r in sq))
    for r in read("launch.csv"):
        print("launch", r["test"], r["value_us"], r["unit"], r["note"][:40])
    for r in read("layer.csv"):
        print("layer", r["config"], r["mode"], r["per_layer_us"], "busy", r["kernel_busy_us"], "gap", r["gap_us"],
              r["status"][:60])
    for r in read("interference.csv"):
        print("intf", r["victim"], r["comm_kind"], r["comm_ctas"], r["slowdown"], r["comm_slowdown"],
              r["victim_with_comm_us"], r["overlap_ok"], r["status"][:60])
    for r in read("gemm_extra.csv"):
        if r["set"] != "m_sweep":
            print("gemm", r["set"], r["model"], r["m"], r["n"], r["k"], r["time_us"], r["tflops"], r["status"][:60])
    errs = sum(1 for n in ("gemm.csv", "attention.csv", "memops.csv") for r in read(n) if r["status"] != "ok"
               and not r["status"].startswith("ok"))
    print("rows with errors:", errs)


if __name__ == "__main__":
    main()
