"""The MLPerf Training v3.1 GPT-3 175B layout (issue 37's case: PP 8, interleaved, 16-64 micro-batches) through
``astra run --platform hgx-h100``, this checkout against an earlier one, alternated, with the reports compared.

The layout is the validation case ``mlperf-v3.1-gpt3-512``'s (``astra workload llm`` with its flags: TP 4, PP 8,
12 virtual stages, sequence parallelism, micro-batch 1, ZeRO-1 with overlapped parameter all-gather, TP
communication overlap, FP8 GEMMs, no dropout, bf16, the submission's SM caps and userbuffers settings) at DP 1
(32 ranks, ``--allow-oom``: ZeRO-1 over one replica does not fit) and at the case's DP 16 (512 ranks, folded by
symmetry to 8 simulated), with 16, 32 or 64 micro-batches. For each, prints the user CPU, wall time and peak RSS
of the whole ``astra run`` (start-up, reading the traces, the fold plan, the event loop, the report), its event
count, and whether the two reports are the same (every number but the run's own timings).

``--baseline DIR``: a checkout of an earlier commit (``git worktree add DIR COMMIT``); its sources are run with
this interpreter (PYTHONPATH set to DIR's ``core``, ``plugins/*/src`` and ``testing/src``). Without it only this
checkout runs.

    python benchmarks/bench_mlperf_gpt3.py [--cases dp1-m16,dp16-m64,...] [--baseline DIR] [--rounds N]
                                           [--workdir DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_YAML_DIR = os.path.join(HERE, "..", "plugins", "validation", "src", "astra_validation", "cases")
#: the validation case's workload flags but --dp and --micro-batches (cases.yaml, mlperf-v3.1-gpt3-512)
LLM_FLAGS = ["--preset", "gpt3-175b", "--tp", "4", "--pp", "8", "--virtual-stages", "12", "--micro-batch-size", "1",
             "--sequence-parallel", "--zero", "1", "--overlap-param-gather", "--tp-comm-overlap", "--gemm-dtype", "fp8",
             "--no-dropout", "--dtype", "bf16", "--comm-sms", "tp=8,dp=8,pp=2,amax=1",
             "--tp-overlap-config", os.path.join(CASES_YAML_DIR, "mlperf_v31_gpt3_tp_overlap.yaml")]
CASES = ("dp1-m16", "dp1-m32", "dp1-m64", "dp16-m16", "dp16-m32", "dp16-m64")
#: report fields that are the run's own timings (they differ between any two runs)
TIMINGS = ("run_s", "build_s", "analysis_s", "events_per_s", "peak_python_memory_bytes")


def _source_path(root):
    return os.pathsep.join([os.path.join(root, "core"), *sorted(glob.glob(os.path.join(root, "plugins", "*", "src"))),
                            os.path.join(root, "testing", "src")])


def _workload(case, workdir):
    dp, micro_batches = case.split("-")
    prefix = os.path.join(workdir, case, "w")
    if not os.path.exists(prefix + ".workload.json"):
        subprocess.run([sys.executable, "-m", "astra_sim.cli", "workload", "llm", *LLM_FLAGS, "--dp", dp[2:],
                        "--micro-batches", micro_batches[1:], "-o", prefix], check=True, stdout=subprocess.DEVNULL)
    return prefix, int(dp[2:])


def _run(prefix, dp, report, source_root):
    env = dict(os.environ)
    if source_root is not None:
        env["PYTHONPATH"] = _source_path(source_root)
    args = [sys.executable, "-m", "astra_sim.cli", "run", "--workload-configuration", prefix, "--platform", "hgx-h100",
            "--nodes", str(max(1, dp * 32 // 8)), "--report-json", report, *(["--allow-oom"] if dp < 16 else [])]
    start = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    _pid, status, usage = os.wait4(child.pid, 0)  # this child's own CPU and peak RSS
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"astra run failed ({child.returncode}): {' '.join(args)}")
    return usage.ru_utime, wall, usage.ru_maxrss / 1024


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES))
    parser.add_argument("--baseline", help="a checkout of an earlier commit, run beside this one")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each (min CPU kept)")
    parser.add_argument("--workdir", default=os.path.join("/tmp", "bench-mlperf-gpt3"),
                        help="where the workloads are written (kept between runs)")
    args = parser.parse_args(argv)
    trees = [("this", None)] + ([("baseline", os.path.abspath(args.baseline))] if args.baseline else [])
    print("| case | events | " + " | ".join(f"{name} user CPU / wall / peak RSS" for name, _ in trees)
          + (" | speed-up (CPU) | reports" if args.baseline else "") + " |")
    for case in args.cases.split(","):
        prefix, dp = _workload(case, args.workdir)
        best = {}
        reports = {}
        for _ in range(args.rounds):
            for name, root in reversed(trees):
                path = os.path.join(args.workdir, case, f"report-{name}.json")
                cpu, wall, rss = _run(prefix, dp, path, root)
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, wall, rss)
                with open(path) as handle:
                    reports[name] = json.load(handle)
        events = reports["this"]["stats"]["events"]
        cells = [f"{best[n][0]:.1f} s / {best[n][1]:.1f} s / {best[n][2]:.0f} MB" for n, _ in trees]
        row = f"| {case} | {events:,} | " + " | ".join(cells)
        if args.baseline:
            same = _without_timings(reports["this"]) == _without_timings(reports["baseline"])
            row += f" | {best['baseline'][0] / best['this'][0]:.2f}x | {'identical' if same else 'DIFFER'}"
        print(row + " |", flush=True)


if __name__ == "__main__":
    main()
