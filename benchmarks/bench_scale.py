"""Scale benchmarks (issue 17): wall time, simulated time and peak memory at cluster scale.

* ``allreduce``: one 1 GiB all-reduce on 4096 ranks (Ring 8 x FullyConnected 8 x Switch 64), per-rank files;
  the reference C++ simulator took 13 s on this machine class.
* ``training``: a 20-layer data-parallel step on 1024 ranks (Ring 8 x FullyConnected 8 x Switch 16): per rank
  20 forward and 20 backward 50 us compute nodes and 20 all-reduces of 16 MiB; reference: 16 s.
* ``dp100k``: the same training step on 100,000 ranks (Ring 8 x FullyConnected 10 x Switch 1250), as a compact
  workload (one trace and a rank map; 100,000 per-rank files would be the slow part).
* ``gpt3-4096`` / ``gpt3-16384``: GPT-3 175B in the MLPerf layout (TP 4, PP 8, 12 virtual stages, sequence
  parallelism, ZeRO-1, FP8 GEMMs, TP comm overlap, 16 micro-batches) on 4096 / 16,384 H100s
  (``--platform hgx-h100 --compute-model gpu --platform-collective nccl``): generating the workload
  (``astra workload llm``, compact by default) and simulating it, each timed.
* ``llama405b-cp``: Llama-3.1 405B as MLPerf submitters ran it (TP 4, PP 8, CP 2, 8 virtual stages, FP8 GEMMs,
  ZeRO-1, sequence 8,192, 40 micro-batches) on 2,048 H100s (``--platform hgx-h100``, which implies the measured
  kernel contention): context parallelism must fold (issue 37: under 2 minutes and 4 GiB). ``--allow-oom``:
  this layout's activations, without recomputation, need more than 80 GB here.

Each case prints its wall time (generation and simulation apart), the simulated step, how many ranks were
simulated (symmetric ranks are folded), events per second and peak memory (RSS of the process that ran
it). ``--check`` also runs the reference cases unfolded (``--no-fold``) and fails unless every rank's finish
time is the same to the ns. Budgets are issue 17's; the exit status is 1 when one is missed.

    python benchmarks/bench_scale.py [allreduce|training|dp100k|gpt3-4096|gpt3-16384|llama405b-cp|all] [--check]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads  # noqa: E402

from astra_sim.simulation import Simulation  # noqa: E402

#: the reference C++ simulator's wall time on this machine class (issue 17)
REFERENCE_WALL_S = {"allreduce": 13.0, "training": 16.0}
GPT3_FLAGS = ["--preset", "gpt3-175b", "--tp", "4", "--pp", "8", "--virtual-stages", "12", "--micro-batch-size",
              "1", "--sequence-parallel", "--zero", "1", "--overlap-param-gather", "--tp-comm-overlap",
              "--gemm-dtype", "fp8", "--no-dropout", "--dtype", "bf16", "--micro-batches", "16"]
GPT3_CASES = {"gpt3-4096": (128, 512, 60.0, 60.0, 4 << 30), "gpt3-16384": (512, 2048, None, None, None)}
LLAMA405B_CP_FLAGS = ["--model", "llama3.1-405b", "--seq-len", "8192", "--tp", "4", "--pp", "8", "--cp", "2",
                      "--dp", "32", "--virtual-stages", "8", "--pipeline-embedding-layer", "--pipeline-loss-layer",
                      "--micro-batches", "40", "--micro-batch-size", "1", "--sequence-parallel", "--gemm-dtype",
                      "fp8", "--zero", "1"]


def _peak_rss_bytes(children=False):
    usage = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return usage.ru_maxrss * 1024


def _simulate(inputs, fold=True):
    start = time.perf_counter()
    report = Simulation(*inputs, fold=fold).run()
    return report, time.perf_counter() - start


def bench_reference_case(name, folder, check):
    inputs = (workloads.all_reduce(folder) if name == "allreduce" else workloads.data_parallel_training(folder))
    report, wall = _simulate(inputs)
    stats = report.stats
    budget = 0.1 * REFERENCE_WALL_S[name]
    ok = wall <= budget
    print(f"{name}: {len(report.ranks)} ranks ({stats['simulated_ranks']} simulated), simulated "
          f"{report.max_finish_ns:,} ns; wall {wall:.2f} s (build {stats['build_s']:.2f} s, run {stats['run_s']:.2f} s), "
          f"{stats['events']:,} events, peak RSS {_peak_rss_bytes() / 2**20:.0f} MiB; budget 0.1 x the reference's "
          f"{REFERENCE_WALL_S[name]:.0f} s = {budget:.1f} s: {'OK' if ok else 'TOO SLOW'}")
    if check:
        unfolded, unfolded_wall = _simulate(inputs, fold=False)
        same = [r.finish_ns for r in unfolded.ranks] == [r.finish_ns for r in report.ranks]
        print(f"  unfolded: {unfolded_wall:.2f} s, every rank's finish time {'identical' if same else 'DIFFERENT'}")
        ok &= same
    return ok


def bench_dp100k(folder):
    start = time.perf_counter()
    inputs = workloads.data_parallel_training(folder, npus=(8, 10, 1250), compact=True)
    generated = time.perf_counter() - start
    report, wall = _simulate(inputs)
    peak = _peak_rss_bytes()
    ok = generated + wall < 60 and peak < 8 << 30
    print(f"dp100k: {len(report.ranks):,} ranks ({report.stats['simulated_ranks']} simulated), simulated "
          f"{report.max_finish_ns:,} ns; generate {generated:.2f} s, simulate {wall:.2f} s, peak RSS "
          f"{peak / 2**20:.0f} MiB; budget 60 s and 8 GiB: {'OK' if ok else 'MISSED'}")
    return ok


def _astra():
    return os.path.join(os.path.dirname(sys.executable), "astra")


def bench_gpt3(name, folder):
    dp, nodes, gen_budget, sim_budget, mem_budget = GPT3_CASES[name]
    prefix = os.path.join(folder, name, "g")
    start = time.perf_counter()
    subprocess.run([_astra(), "workload", "llm", *GPT3_FLAGS, "--dp", str(dp), "-o", prefix], check=True,
                   stdout=subprocess.DEVNULL)
    generated = time.perf_counter() - start
    report_path = prefix + ".report.json"
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", _astra(), "run", "--workload-configuration", prefix,
                           "--platform", "hgx-h100", "--nodes", str(nodes), "--compute-model", "gpu",
                           "--platform-collective", "nccl", "--report-json", report_path, "-q"],
                          check=True, capture_output=True, text=True)
    simulated = time.perf_counter() - start
    peak = int(done.stderr.strip().splitlines()[-1]) * 1024
    with open(report_path) as handle:
        report = json.load(handle)
    if gen_budget is None:
        ok = generated + simulated < 120
        budget = "budget 120 s in all"
    else:
        ok = generated < gen_budget and simulated < sim_budget and peak < mem_budget
        budget = f"budget {gen_budget:.0f} s, {sim_budget:.0f} s and {mem_budget >> 30} GiB"
    print(f"{name}: {report['summary']['npus']:,} GPUs ({report['stats']['simulated_ranks']} simulated), step "
          f"{report['summary']['max_finish_ns'] / 1e9:.3f} s; generate {generated:.1f} s, simulate {simulated:.1f} s "
          f"(build {report['stats']['build_s']:.1f} s, run {report['stats']['run_s']:.1f} s), peak RSS "
          f"{peak / 2**20:.0f} MiB; {budget}: {'OK' if ok else 'MISSED'}")
    return ok


def bench_llama405b_cp(folder):
    prefix = os.path.join(folder, "llama405b-cp", "w")
    start = time.perf_counter()
    subprocess.run([_astra(), "workload", "llm", *LLAMA405B_CP_FLAGS, "-o", prefix], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    generated = time.perf_counter() - start
    report_path = prefix + ".report.json"
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", _astra(), "run", "--workload-configuration", prefix,
                           "--comm-group-configuration", prefix + ".groups.json", "--platform", "hgx-h100",
                           "--nodes", "256", "--allow-oom", "-o", report_path, "-q"],
                          check=True, capture_output=True, text=True)
    simulated = time.perf_counter() - start
    peak = int(done.stderr.strip().splitlines()[-1]) * 1024
    with open(report_path) as handle:
        report = json.load(handle)
    folded = report["stats"]["simulated_ranks"] < report["summary"]["npus"]
    ok = folded and simulated < 120 and peak < 4 << 30
    print(f"llama405b-cp: {report['summary']['npus']:,} GPUs ({report['stats']['simulated_ranks']} simulated: "
          f"{report['settings']['fold'].get('reason') or 'folded'}), step {report['summary']['max_finish_ns'] / 1e9:.3f} s; "
          f"generate {generated:.1f} s, simulate {simulated:.1f} s, peak RSS {peak / 2**20:.0f} MiB; budget 120 s "
          f"and 4 GiB, folded: {'OK' if ok else 'MISSED'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cases = ["allreduce", "training", "dp100k", *GPT3_CASES, "llama405b-cp"]
    parser.add_argument("which", nargs="?", default="all", choices=[*cases, "all"])
    parser.add_argument("--check", action="store_true", help="also run the reference cases unfolded and compare")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    names = cases if args.which == "all" else [args.which]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = os.path.join(args.workdir or tmp, name)
            if name in REFERENCE_WALL_S:
                ok &= bench_reference_case(name, folder, args.check)
            elif name == "dp100k":
                ok &= bench_dp100k(folder)
            elif name == "llama405b-cp":
                ok &= bench_llama405b_cp(args.workdir or tmp)
            else:
                ok &= bench_gpt3(name, args.workdir or tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
