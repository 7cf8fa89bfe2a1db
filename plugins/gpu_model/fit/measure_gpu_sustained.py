"""Measure on a real GPU what ``measure_gpu.py`` could not: attention at long sequences, and clocks, power and
throughput under minutes of sustained load (issue 36).

Writes into OUT (default ./gpu-sustained):

* ``device.json``            the GPU, driver and library versions, the enforced power limit, each section's status,
                             and one summary per sustained phase (first and last seconds' rate, power, clock, energy);
* ``attention_long.csv``     SDPA flash (FlashAttention-2) and cuDNN, forward and backward, bf16, batch 1: causal
                             sequences of 16k-128k tokens (MHA, GQA, head dims 64/128), and the blocks a ring of
                             context parallelism computes (local queries against half or all of a peer's keys, not
                             causal; the local diagonal block, causal), with repeated and grouped KV heads;
* ``sustained_chunks.csv``   one row per ~100 ms chunk of a phase that runs one kernel back to back for tens of
                             seconds (bf16 GEMM, fp8 GEMM, ring-attention forward + backward, an HBM copy): its
                             achieved rate over time, so the fall from the boost clock to the settled clock shows;
* ``sustained_samples.csv``  NVML samples every 50 ms through every phase and the idle gaps between them: board power,
                             SM and memory clocks, temperature, clock-event reasons, the board's energy counter.

Long attention kernels (tens to hundreds of ms) are timed eagerly with CUDA events (launch cost is negligible at that
length), one warm-up and three timed calls, median. The sustained phases never change a device setting: they read
what the board does under its own limit.

Run on the GPU:  ``python3 plugins/gpu_model/fit/measure_gpu_sustained.py --out DIR [--budget-s 380]``.
"""

import argparse
import csv
import json
import os
import threading
import time
import traceback

import torch
import torch.nn.functional as F

from measure_common import CUDA, DEV, LOG_LINES, Rows, device_info, log, sync

# ----------------------------------------------------------------------------------------------- long attention

ATTN_FIELDS = ["set", "backend", "pass", "batch", "heads_q", "heads_kv", "head_dim", "seq_q", "seq_kv", "causal",
               "time_us", "tflops", "spread", "status"]


def _backends():
    from torch.nn.attention import SDPBackend
    out = {"flash": SDPBackend.FLASH_ATTENTION}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out["cudnn"] = SDPBackend.CUDNN_ATTENTION
    return out if CUDA else {"math": SDPBackend.MATH}


def _time_long(fn, repeats=3):
    """Median seconds of fn() after one warm-up, eager with events; and the spread (max-min)/median."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        if CUDA:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e-3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    mid = times[len(times) // 2]
    return mid, (times[-1] - times[0]) / mid


def _attention_cases(dry):
    """(set, heads_q, heads_kv, head_dim, seq_q, seq_kv, causal), most needed first."""
    if dry:
        return [("ring", 4, 4, 16, 64, 32, False), ("causal", 4, 2, 16, 64, 64, True)]
    cases = []
    # Context parallelism's ring (PyTorch's load-balanced ring attention, as torchtitan runs it for Llama 3.1 8B:
    # 32 query heads, KV repeated to 32 before SDPA, or grouped 8): every CP degree of seq / CP = 32k local tokens
    # computes the local diagonal block (causal) and, on later steps, 32k queries x 16k keys or 16k x 32k.
    for hq, hkv in ((32, 32), (32, 8)):
        cases += [("ring", hq, hkv, 128, 32768, 16384, False), ("ring", hq, hkv, 128, 16384, 32768, False),
                  ("ring", hq, hkv, 128, 32768, 32768, True)]
    cases += [("ring", 32, 32, 128, 16384, 8192, False), ("ring", 32, 32, 128, 8192, 16384, False)]
    # Causal sequences past measure_gpu.py's 8k: GQA 32/8 (Llama 3 8B), 8/1 (70B at TP 8), MHA 32/32, head dim 64.
    for s in (16384, 32768, 65536, 131072):
        cases.append(("causal", 32, 8, 128, s, s, True))
    for s in (16384, 65536):
        cases += [("causal", 8, 1, 128, s, s, True), ("causal", 16, 16, 64, s, s, True)]
    cases += [("causal", 64, 8, 128, 32768, 32768, True), ("causal", 32, 32, 128, 131072, 131072, True)]
    return cases


def measure_attention_long(rows, deadline, dry):
    from torch.nn.attention import sdpa_kernel
    dt = torch.bfloat16 if CUDA else torch.float32
    cases = _attention_cases(dry)
    log(f"attention_long: {len(cases)} shapes x {list(_backends())}")
    for (setname, hq, hkv, d, sq, skv, causal) in cases:
        q = torch.randn(1, hq, sq, d, device=DEV, dtype=dt, requires_grad=True)
        k = torch.randn(1, hkv, skv, d, device=DEV, dtype=dt, requires_grad=True)
        v = torch.randn(1, hkv, skv, d, device=DEV, dtype=dt, requires_grad=True)
        gqa = {"enable_gqa": True} if hq != hkv else {}
        pairs = sq * skv if not causal else sq * (sq + 1) / 2
        flops_f = 4 * hq * pairs * d

        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
            return torch.autograd.grad(o, (q, k, v), grad_outputs=o.detach())

        for bname, backend in _backends().items():
            if time.perf_counter() > deadline:
                log("attention_long: out of time")
                return
            meta = dict(set=setname, backend=bname, batch=1, heads_q=hq, heads_kv=hkv, head_dim=d, seq_q=sq,
                        seq_kv=skv, causal=causal)
            try:
                with sdpa_kernel([backend]):
                    t_f, sp_f = _time_long(fwd)
                    rows.add(**meta, **{"pass": "fwd"}, time_us=t_f * 1e6, tflops=flops_f / t_f / 1e12,
                             spread=sp_f, status="ok")
                    t_fb, sp_fb = _time_long(fwd_bwd)
                    t_b = t_fb - t_f
                    rows.add(**meta, **{"pass": "bwd"}, time_us=t_b * 1e6, tflops=2.5 * flops_f / t_b / 1e12,
                             spread=sp_fb, status="ok")
                log(f"  {setname} {bname} h{hq}/{hkv} d{d} {sq}x{skv} causal={causal}: fwd {t_f * 1e3:.2f} ms "
                    f"({flops_f / t_f / 1e12:.0f} TF/s), bwd {t_b * 1e3:.2f} ms")
            except Exception as exc:  # noqa: BLE001 - record and go on
                rows.add(**meta, **{"pass": "fwd"}, status=f"error: {type(exc).__name__}: {str(exc)[:160]}")
                log(f"  {setname} {bname} {sq}x{skv}: {type(exc).__name__}: {str(exc)[:120]}")
        if CUDA:
            torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------- sustained load

SAMPLE_FIELDS = ["t_s", "phase", "power_w", "sm_mhz", "mem_mhz", "temp_c", "event_reasons", "energy_mj"]
CHUNK_FIELDS = ["t_end_s", "phase", "chunk_s", "ops", "rate", "unit"]


class Sampler(threading.Thread):
    """NVML every ``period_s`` into ``sustained_samples.csv``, tagged with the phase running at that moment."""

    def __init__(self, rows, period_s=0.05):
        super().__init__(daemon=True)
        self.rows, self.period_s, self.phase, self.stop_flag = rows, period_s, "start", False
        self.samples = []
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nv, self.h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # noqa: BLE001 - no NVML: nvidia-smi per sample (slower; no energy counter)
            log("sampler: NVML unavailable, nvidia-smi instead:", type(exc).__name__, str(exc)[:100])
            self.nv = self.h = None
            self.period_s = max(period_s, 0.2)

    def read(self):
        nv, h = self.nv, self.h
        out = {}
        if nv is None:
            fields = ("power_w", "sm_mhz", "mem_mhz", "temp_c")
            text = _smi(["nvidia-smi", "--query-gpu=power.draw,clocks.sm,clocks.mem,temperature.gpu",
                         "--format=csv,noheader,nounits"])
            parts = [p.strip() for p in text.split(",")]
            return {f: (parts[i] if len(parts) == len(fields) else "") for i, f in enumerate(fields)}
        for key, call in (("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                          ("sm_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
                          ("mem_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
                          ("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                          ("event_reasons", lambda: hex(_reasons(nv, h))),
                          ("energy_mj", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h))):
            try:
                out[key] = call()
            except Exception:  # noqa: BLE001 - a counter this board or VM does not expose stays empty
                out[key] = ""
        return out

    def run(self):
        while not self.stop_flag:
            row = {"t_s": round(time.perf_counter(), 4), "phase": self.phase, **self.read()}
            self.samples.append(row)
            self.rows.add(**row)
            time.sleep(self.period_s)


def _smi(cmd):
    import subprocess
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return ""


def _reasons(nv, h):
    if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons"):
        return nv.nvmlDeviceGetCurrentClocksEventReasons(h)
    return nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)


def _phase_work(name, dry):
    """(fn, work per call, unit): one kernel (or one forward + backward) to repeat for a phase."""
    n = 8192 if not dry else 64
    if name == "gemm_bf16":
        a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16 if CUDA else torch.float32)
        b = torch.randn(n, n, device=DEV, dtype=a.dtype)
        return (lambda: a @ b), 2 * n ** 3 / 1e12, "TFLOP/s"
    if name == "gemm_fp8":
        a = (torch.randn(n, n, device=DEV) * 0.5).to(torch.float8_e4m3fn)
        b = (torch.randn(n, n, device=DEV) * 0.5).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=DEV)
        return (lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                2 * n ** 3 / 1e12, "TFLOP/s")
    if name in ("attn_ring_flash", "attn_ring_cudnn"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        sq, skv, h, d = (32768, 16384, 32, 128) if not dry else (64, 32, 2, 16)
        dt = torch.bfloat16 if CUDA else torch.float32
        q = torch.randn(1, h, sq, d, device=DEV, dtype=dt, requires_grad=True)
        k = torch.randn(1, h, skv, d, device=DEV, dtype=dt, requires_grad=True)
        v = torch.randn(1, h, skv, d, device=DEV, dtype=dt, requires_grad=True)
        backend = (SDPBackend.FLASH_ATTENTION if name.endswith("flash") else SDPBackend.CUDNN_ATTENTION) if CUDA \
            else SDPBackend.MATH

        def fn():
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v)
                return torch.autograd.grad(o, (q, k, v), grad_outputs=o.detach())
        return fn, 3.5 * 4 * h * sq * skv * d / 1e12, "TFLOP/s"
    if name == "mix_gemm_attn":
        # A step's alternation at ms scale: 24 bf16 8192^3 GEMMs (~36 ms at the settled clock) then one flash ring
        # block forward + backward (~95 ms), so the power controller sees the mix, not either kernel alone. Work is
        # counted as calls of the pair; the samples' clock is what this phase is for.
        gemm, _, _ = _phase_work("gemm_bf16", dry)
        attn, _, _ = _phase_work("attn_ring_flash", dry)

        def fn():
            for _ in range(24):
                gemm()
            return attn()
        return fn, 1.0, "pairs/s"
    if name.startswith("gemm:"):  # gemm:DTYPE:M:N:K, C = A @ B^T with A [M, K], B [N, K] (nn.Linear's layout)
        _, dtype, m, n, k = name.split(":")
        m, n, k = (int(x) if not dry else 64 for x in (m, n, k))
        if dtype == "fp8":
            a = (torch.randn(m, k, device=DEV) * 0.5).to(torch.float8_e4m3fn)
            b = (torch.randn(n, k, device=DEV) * 0.5).to(torch.float8_e4m3fn)
            one = torch.tensor(1.0, device=DEV)
            return (lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                    2 * m * n * k / 1e12, "TFLOP/s")
        a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16 if CUDA else torch.float32)
        b = torch.randn(n, k, device=DEV, dtype=a.dtype)
        return (lambda: a @ b.t()), 2 * m * n * k / 1e12, "TFLOP/s"
    if name.startswith("decode:"):  # decode:B:HQ:HKV:SKV, one query a sequence against a KV cache (flash SDPA)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        _, b, hq, hkv, skv = name.split(":")
        b, hq, hkv, skv = (int(x) if not dry else 2 for x in (b, hq, hkv, skv))
        dt = torch.bfloat16 if CUDA else torch.float32
        q = torch.randn(b, hq, 1, 128, device=DEV, dtype=dt)
        k = torch.randn(b, hkv, skv, 128, device=DEV, dtype=dt)
        v = torch.randn(b, hkv, skv, 128, device=DEV, dtype=dt)
        backend = SDPBackend.FLASH_ATTENTION if CUDA else SDPBackend.MATH
        gqa = {"enable_gqa": True} if hq != hkv else {}

        def fn():
            with sdpa_kernel([backend]), torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, **gqa)
        return fn, 2 * k.numel() * k.element_size() / 1e12, "TB/s (KV read)"
    if name == "hbm_copy":
        elems = (1 << 30) if not dry else (1 << 16)
        src = torch.randn(elems, device=DEV, dtype=torch.bfloat16 if CUDA else torch.float32)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 2 * src.numel() * src.element_size() / 1e12, "TB/s"
    raise ValueError(name)


def run_phase(name, seconds, chunk_rows, sampler, dry, chunk_s=0.1):
    """Run ``name`` back to back for ``seconds`` in ~``chunk_s`` chunks; a summary of its first and last seconds."""
    fn, work, unit = _phase_work(name, dry)
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    per_call = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, int(chunk_s / per_call))
    sampler.phase = name
    start = time.perf_counter()
    chunks = []
    while time.perf_counter() - start < seconds:
        if CUDA:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(calls):
                fn()
            e1.record()
            e1.synchronize()
            dt = e0.elapsed_time(e1) * 1e-3
        else:
            c0 = time.perf_counter()
            for _ in range(calls):
                fn()
            dt = time.perf_counter() - c0
        t_end = time.perf_counter()
        chunks.append((t_end, dt, calls))
        chunk_rows.add(t_end_s=round(t_end, 4), phase=name, chunk_s=dt, ops=calls, rate=work * calls / dt, unit=unit)
    sampler.phase = "idle"
    end = time.perf_counter()
    del fn
    if CUDA:
        torch.cuda.empty_cache()
    return _summarise(name, unit, work, chunks, [s for s in sampler.samples if start <= s["t_s"] <= end], start)


def _mean(xs):
    xs = [float(x) for x in xs if x != ""]
    return sum(xs) / len(xs) if xs else None


def _num(x):
    return "n/a" if x is None else f"{x:.1f}"


def _summarise(name, unit, work, chunks, samples, start):
    """Rate, power and clock over the phase's first 2 s and last 20 s (or last third); energy per unit of work."""
    span = chunks[-1][0] - start if chunks else 0.0
    tail_from = start + max(span - 20.0, span * 2 / 3)

    def rate(sel):
        t = sum(dt for _, dt, _ in sel)
        return sum(c for _, _, c in sel) * work / t if t else None
    head = [c for c in chunks if c[0] <= start + 2.0]
    tail = [c for c in chunks if c[0] >= tail_from]
    tail_s = [s for s in samples if s["t_s"] >= tail_from]
    out = {"phase": name, "unit": unit, "seconds": round(span, 1), "chunks": len(chunks),
           "rate_first_chunk": rate(chunks[:1]), "rate_first_0.1s": rate([c for c in chunks if c[0] <= start + 0.1]),
           "rate_first_2s": rate(head), "rate_last": rate(tail), "last_window_s": round(chunks[-1][0] - tail_from, 1)
           if chunks else 0,
           "power_w_last": _mean(s["power_w"] for s in tail_s), "sm_mhz_first_2s":
           _mean(s["sm_mhz"] for s in samples if s["t_s"] <= start + 2.0),
           "sm_mhz_last": _mean(s["sm_mhz"] for s in tail_s), "mem_mhz_last": _mean(s["mem_mhz"] for s in tail_s),
           "temp_c_last": _mean(s["temp_c"] for s in tail_s),
           "event_reasons_last": sorted({s["event_reasons"] for s in tail_s})}
    energies = [(s["t_s"], float(s["energy_mj"])) for s in tail_s if s["energy_mj"] != ""]
    if len(energies) >= 2 and tail:
        joules = (energies[-1][1] - energies[0][1]) / 1000.0
        seconds = energies[-1][0] - energies[0][0]
        out["energy_w_last"] = joules / seconds if seconds > 0 else None
        done = rate(tail)
        out["joules_per_unit_last"] = (joules / seconds) / done if done and seconds > 0 else None
    log(f"sustained {name}: first chunk {_num(out['rate_first_chunk'])}, first 2 s {_num(out['rate_first_2s'])} {unit} at {_num(out['sm_mhz_first_2s'])} MHz; "
        f"last {out['last_window_s']} s {_num(out['rate_last'])} {unit} at {_num(out['sm_mhz_last'])} MHz, "
        f"{_num(out['power_w_last'])} W")
    return out


PHASES = [("idle", 8), ("gemm_bf16", 80), ("idle", 8), ("attn_ring_flash", 50), ("idle", 6), ("gemm_fp8", 40),
          ("idle", 6), ("hbm_copy", 25), ("idle", 4)]
#: the second run's (``--phases run2``): cuDNN's ring block alone, then the GEMM + attention mix
PHASES_RUN2 = [("idle", 5), ("attn_ring_cudnn", 40), ("idle", 6), ("mix_gemm_attn", 45), ("idle", 4)]
#: the third run's (``--phases run3``): LLM-shaped GEMMs (Llama 3.1 8B's at 32k tokens, GPT-3 175B's at TP 8, a
#: small one), each after an idle gap, in 20 ms chunks: the burst at the boost clock and the settled rate, per shape
PHASES_RUN3 = [(name, 9) for name in (
    "gemm:bf16:32768:14336:4096", "gemm:fp8:32768:14336:4096", "gemm:bf16:32768:6144:4096",
    "gemm:fp8:32768:4096:14336", "gemm:bf16:8192:6144:12288", "gemm:bf16:4096:4096:4096",
    "gemm:bf16:16384:16384:16384")]
PHASES_RUN3 = [p for name in PHASES_RUN3 for p in (("idle", 4), name)]
#: the fourth run's (``--phases run4``): memory-bound kernels' power, by how much of HBM they use: bf16 GEMMs of a
#: decode step (M tokens x 8192 x 8192: the weights streamed once a call) and flash decode attention (one query a
#: sequence, Llama 3 8B's 32/8 heads) at a few batches
PHASES_RUN4 = [p for name in (
    "gemm:bf16:1:8192:8192", "gemm:bf16:16:8192:8192", "gemm:bf16:64:8192:8192", "gemm:bf16:128:8192:8192",
    "gemm:bf16:512:8192:8192", "decode:8:32:8:8192", "decode:64:32:8:8192", "decode:64:32:8:1024")
    for p in (("idle", 3), (name, 8))]


def measure_sustained(outdir, deadline, dry, info, phases=PHASES):
    samples = Rows(os.path.join(outdir, "sustained_samples.csv"), SAMPLE_FIELDS)
    chunks = Rows(os.path.join(outdir, "sustained_chunks.csv"), CHUNK_FIELDS)
    sampler = Sampler(samples)
    try:
        h, nv = sampler.h, sampler.nv
        info["power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        info["max_sm_mhz"] = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
    except Exception as exc:  # noqa: BLE001
        info["power_limit_w"] = f"unavailable: {exc}"
    sampler.start()
    summaries = []
    scale = 1.0 if not dry else 0.02
    for name, seconds in phases:
        left = deadline - time.perf_counter()
        if left < 5:
            log("sustained: out of time before", name)
            break
        seconds = min(seconds * scale, left - 3)
        if name == "idle":
            sampler.phase = "idle"
            time.sleep(seconds)
            continue
        try:
            summaries.append(run_phase(name, seconds, chunks, sampler, dry, 0.02 if name.startswith("gemm:") else 0.1))
        except Exception:  # noqa: BLE001 - record and go on to the next phase
            sampler.phase = "idle"
            summaries.append({"phase": name, "status": "error: " + traceback.format_exc()[-500:]})
            log(name, "FAILED", summaries[-1]["status"])
    sampler.stop_flag = True
    sampler.join(timeout=2)
    samples.close()
    chunks.close()
    return summaries


# ----------------------------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="gpu-sustained")
    ap.add_argument("--budget-s", type=float, default=380.0, help="seconds for the whole run")
    ap.add_argument("--attention-s", type=float, default=130.0, help="of which for the long-attention section")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes and seconds (CPU works, without NVML)")
    ap.add_argument("--only", default="", help="attention_long or sustained (default both)")
    ap.add_argument("--phases", default="run1", choices=("run1", "run2", "run3", "run4"), help="which sustained phases")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    deadline = start + args.budget_s
    info = device_info()
    log("device:", info.get("name"), "SMs", info.get("sm_count"), "torch", info["torch"])
    info["sections"] = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.only in ("", "attention_long"):
        t0 = time.perf_counter()
        rows = Rows(os.path.join(args.out, "attention_long.csv"), ATTN_FIELDS)
        status = "ok"
        try:
            measure_attention_long(rows, min(deadline, t0 + args.attention_s), args.dry_run)
        except Exception:  # noqa: BLE001
            status = "error: " + traceback.format_exc()[-600:]
            log("attention_long FAILED", status)
        rows.close()
        info["sections"]["attention_long"] = {"rows": rows.n, "seconds": round(time.perf_counter() - t0, 1),
                                              "status": status}
        if CUDA:
            torch.cuda.empty_cache()
    if args.only in ("", "sustained"):
        t0 = time.perf_counter()
        try:
            info["sustained"] = measure_sustained(args.out, deadline, args.dry_run, info,
                                                  {"run1": PHASES, "run2": PHASES_RUN2,
                                                   "run3": PHASES_RUN3, "run4": PHASES_RUN4}[args.phases])
            status = "ok"
        except Exception:  # noqa: BLE001
            status = "error: " + traceback.format_exc()[-600:]
            log("sustained FAILED", status)
        info["sections"]["sustained"] = {"seconds": round(time.perf_counter() - t0, 1), "status": status}
    info["log"] = LOG_LINES
    tmp = os.path.join(args.out, "device.json.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f, indent=1, default=str)
    os.replace(tmp, os.path.join(args.out, "device.json"))
    for s in info.get("sustained", []):
        print(json.dumps(s, default=str))
    if os.path.exists(os.path.join(args.out, "attention_long.csv")):
        with open(os.path.join(args.out, "attention_long.csv")) as f:
            bad = sum(1 for r in csv.DictReader(f) if r["status"] != "ok")
        print("attention rows with errors:", bad)


if __name__ == "__main__":
    main()
