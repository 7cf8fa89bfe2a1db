"""Compare simulated Megatron-LM step times with published measurements (issue 6).

Source of the measured numbers: D. Narayanan et al., "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", SC'21 (arXiv:2104.04473), Table 1 (weak scaling, GPT, V = 51200,
s = 2048, mixed precision, Selene DGX A100 nodes: 8 A100-SXM4-80GB, NVSwitch, 8 x 200 Gb/s HDR per node)
and Table 2 (PTD-P rows, 174.6B model).  The paper reports achieved TFLOP/s per GPU X, computed with its
FLOPs-per-iteration formula (with full activation recomputation)

    F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))

so the measured time per iteration is F / (n X).  The simulated time per iteration is the max finish
time of `astra run` on the generated workload; the simulated TFLOP/s per GPU uses the same F.

Nothing here is fitted to these numbers: the gpu compute model, the dgx-a100 platform and the workload
generator are used exactly as shipped.

Usage:  python benchmarks/validate_llm_step_times.py [--only NAME ...] [--keep DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from astra_sim.report import read_report

SEQ = 2048
VOCAB = 51200
GPUS_PER_NODE = 8


@dataclass
class Config:
    name: str
    source: str
    layers: int
    hidden: int
    heads: int
    tp: int
    pp: int
    gpus: int
    batch: int  # global batch (sequences)
    micro_batch_size: int  # b
    measured_tflops: float  # achieved TFLOP/s per GPU (paper)
    # micro-batches actually simulated; None = all of them.  When fewer are simulated, the step time is
    # extrapolated linearly from two simulated counts (1F1B: T(M) = a + M * t_steady for M >= pp).
    sim_micro_batches: tuple[int, int] | None = None

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def micro_batches(self) -> int:
        return self.batch // (self.dp * self.micro_batch_size)


CONFIGS = [
    # Table 1 (micro-batch size is not given in Table 1; b = 4 is an assumption, see the docs).
    Config("gpt-1.7B", "Table 1", 24, 2304, 24, 1, 1, 32, 512, 4, 137.0),
    Config("gpt-3.6B", "Table 1", 30, 3072, 32, 2, 1, 64, 512, 4, 138.0),
    Config("gpt-7.5B", "Table 1", 36, 4096, 32, 4, 1, 128, 512, 4, 142.0),
    Config("gpt-18.4B", "Table 1", 40, 6144, 48, 8, 1, 256, 1024, 4, 135.0),
    # Table 2, PTD-P, 174.6B: model-parallel size 96 = TP 8 x PP 12, 384 GPUs (DP 4), batch 1536,
    # micro-batch size 1 (given) -> 384 micro-batches per pipeline; simulated with 12 and 24 and extrapolated.
    Config("gpt-175B", "Table 2 (PTD-P)", 96, 12288, 96, 8, 12, 384, 1536, 1, 153.0, (12, 24)),
]


def paper_flops(c: Config) -> float:
    B, s, l, h, V = c.batch, SEQ, c.layers, c.hidden, VOCAB
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def astra_exe(name: str) -> str:
    here = os.path.dirname(sys.executable)
    cand = os.path.join(here, name)
    return cand if os.path.exists(cand) else name


#: Extra ``astra workload llm`` flags for every configuration (``--attention unfused`` sets it).
EXTRA_LLM_FLAGS: list = []
#: ``--pp-scatter-gather``: Megatron-LM's 2021 scatter/gather of the stage boundary, for the rows with TP and PP
PP_SCATTER_GATHER = []


def gen_cmd(c: Config, m: int, prefix: str) -> list[str]:
    return [astra_exe("astra"), "workload", "llm", "--layers", str(c.layers), "--hidden", str(c.hidden),
            "--heads", str(c.heads), "--vocab", str(VOCAB), "--seq-len", str(SEQ), "--tp", str(c.tp),
            "--pp", str(c.pp), "--dp", str(c.dp), "--micro-batches", str(m), "--micro-batch-size",
            str(c.micro_batch_size), "--recompute", "--dtype", "fp16", *EXTRA_LLM_FLAGS,
            *(PP_SCATTER_GATHER if c.tp > 1 and c.pp > 1 else []), "-o", prefix]


def run_cmd(c: Config, prefix: str, report: str) -> list[str]:
    return [astra_exe("astra"), "run", "--platform", "dgx-a100", "--nodes", str(c.gpus // GPUS_PER_NODE),
            "--compute-model", "gpu", "--gpu", "A100-SXM4-80GB", "--workload-configuration", prefix,
            "--comm-group-configuration", prefix + ".groups.json", "--report-json", report, "-q"]


def simulate(c: Config, m: int, workdir: str) -> dict:
    prefix = os.path.join(workdir, f"{c.name}.m{m}", "w")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    report = prefix + ".report.json"
    subprocess.run(gen_cmd(c, m, prefix), check=True, stdout=subprocess.DEVNULL)
    t0 = time.time()
    subprocess.run(run_cmd(c, prefix, report), check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    r = read_report(report)  # astra run writes the compact layout by default; this gives every rank
    ranks = r["ranks"]
    out = {
        "micro_batches": m,
        "step_s": r["summary"]["max_finish_ns"] * 1e-9,
        "max_exposed_comm_s": r["summary"]["max_exposed_comm_ns"] * 1e-9,
        "max_compute_s": max(x["compute_ns"] for x in ranks) * 1e-9,
        "wall_s": wall,
        "warnings": r.get("warnings", []),
    }
    shutil.rmtree(os.path.dirname(prefix), ignore_errors=True)  # traces can be large
    return out


def evaluate(c: Config, workdir: str) -> dict:
    F = paper_flops(c)
    measured_s = F / (c.gpus * c.measured_tflops * 1e12)
    if c.sim_micro_batches is None:
        sims = [simulate(c, c.micro_batches, workdir)]
        step = sims[0]["step_s"]
        compute = sims[0]["max_compute_s"]
        note = f"M={c.micro_batches} simulated"
    else:
        m1, m2 = c.sim_micro_batches
        s1, s2 = simulate(c, m1, workdir), simulate(c, m2, workdir)
        sims = [s1, s2]
        slope = (s2["step_s"] - s1["step_s"]) / (m2 - m1)
        step = s2["step_s"] + slope * (c.micro_batches - m2)
        cslope = (s2["max_compute_s"] - s1["max_compute_s"]) / (m2 - m1)
        compute = s2["max_compute_s"] + cslope * (c.micro_batches - m2)
        note = f"M={c.micro_batches} extrapolated from M={m1},{m2}"
    sim_tflops = F / (c.gpus * step * 1e12)
    return {
        "name": c.name, "source": c.source, "tp": c.tp, "pp": c.pp, "dp": c.dp, "gpus": c.gpus,
        "batch": c.batch, "micro_batch_size": c.micro_batch_size, "micro_batches": c.micro_batches,
        "paper_flops_per_iter": F, "measured_tflops": c.measured_tflops, "measured_s": measured_s,
        "sim_s": step, "sim_compute_s": compute, "sim_tflops": sim_tflops,
        "err_pct": 100.0 * (step - measured_s) / measured_s, "note": note, "runs": sims,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="config names to run (default: all)")
    ap.add_argument("--keep", help="generate into this directory instead of a temp dir")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--attention", choices=("flash", "unfused"), default="flash",
                    help="attention as generated: one FlashAttention node (default) or the unfused "
                         "bmm + softmax kernels the 2021 measurements used")
    ap.add_argument("--pp-scatter-gather", action="store_true",
                    help="rows with TP and PP: each TP rank sends 1/TP of the stage boundary and the next stage "
                         "all-gathers it (Megatron-LM's scatter/gather optimisation, on in its 2021 runs)")
    a = ap.parse_args(argv)
    if a.pp_scatter_gather:
        PP_SCATTER_GATHER[:] = ["--pp-scatter-gather"]
    if a.attention == "unfused":
        EXTRA_LLM_FLAGS[:] = ["--attention", "unfused"]
    configs = [c for c in CONFIGS if not a.only or c.name in a.only]
    workdir = a.keep or tempfile.mkdtemp(prefix="astra-validate-llm-")
    rows = []
    try:
        for c in configs:
            t0 = time.time()
            rows.append(evaluate(c, workdir))
            print(f"# {c.name}: done in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    hdr = ("| config | source | TPxPPxDP | GPUs | B | b | M | meas. TFLOP/s/GPU | sim. TFLOP/s/GPU "
           "| meas. s/iter | sim. s/iter | error % | note |")
    print(hdr)
    print("|" + "---|" * 13)
    for r in rows:
        print(f"| {r['name']} | {r['source']} | {r['tp']}x{r['pp']}x{r['dp']} | {r['gpus']} | {r['batch']} "
              f"| {r['micro_batch_size']} | {r['micro_batches']} | {r['measured_tflops']:.0f} "
              f"| {r['sim_tflops']:.1f} | {r['measured_s']:.3f} | {r['sim_s']:.3f} | {r['err_pct']:+.1f} "
              f"| {r['note']} |")
    if rows:
        mean_abs = sum(abs(r["err_pct"]) for r in rows) / len(rows)
        print(f"\nmean |error| = {mean_abs:.1f} % (error = (simulated - measured) / measured time per iteration)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
