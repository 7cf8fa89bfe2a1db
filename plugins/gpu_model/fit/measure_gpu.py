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
The kernel sections (GEMMs, attention, memory-bound ops) are in ``measure_kernels.py``, the timing, rows and
budget they share in ``measure_common.py``; this file holds the launch, layer and interference sections and
the run.
"""

import argparse
import csv
import gzip
import json
import os
import time
import traceback

import torch
import torch.nn.functional as F


from measure_common import (CUDA, DEV, LOG_LINES, START, Budget, Rows, cuda_events, device_info, elapsed_s, log,
                            run_command, sync, time_op)
from measure_kernels import (ATTN_FIELDS, GEMM_FIELDS, MEM_FIELDS, measure_attention, measure_gemm_extra,
                             measure_gemms, measure_memops)


LAUNCH_FIELDS = ["test", "kernel_us", "n", "value_us", "unit", "note"]


def measure_launch(rows, budget, dry):
    n = 2000 if not dry else 50
    x = torch.randn(1, device=DEV)
    # 1. host dispatch cost of a tiny op, and the GPU time it leaves (eager: the host is the bottleneck).
    for _ in range(100):
        x.add_(1.0)
    sync()
    if CUDA:
        e0, e1 = cuda_events()
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
        t_eager = sorted(elapsed_s(fn, inner) / inner for _ in range(5))[2]
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
                e0, e1 = cuda_events()
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
            e0, e1 = cuda_events()
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
                    alone = sorted(elapsed_s(lambda i: victim(), 10) / 10 for _ in range(3))[1]
                    n_vic = max(3, int(0.5 * 60e-3 / alone))  # victims fill the first half of the comm kernel
                    c0, c1 = cuda_events()
                    v0, v1 = cuda_events()
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
                    e0, e1 = cuda_events()
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
                    d0, d1 = cuda_events()
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
        info["nvidia_smi_end"] = run_command(["nvidia-smi", "--query-gpu=pstate,clocks.sm,clocks.mem,power.draw,"
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
