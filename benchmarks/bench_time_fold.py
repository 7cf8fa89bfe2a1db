"""Time folding (issue 37): ``astra run`` with and without ``--time-fold`` on the same files, alternated. Prints the
user CPU of each ``astra run`` (the whole command: start-up, reading the traces, the event loop, the report; min of
``--rounds``), its event loop's wall time (``stats.run_s``, min), what was jumped over (``settings.fold.time``) and
whether the two reports are the same, to the ns (every rank's numbers and every per-rank table).

* ``1f1b``: hand-made traces (``plugins/folding/tests/test_time_fold.write_pipeline``), 8 stages, 256
  micro-batches, 20 kernels per pass, ``--no-breakdown``;
* ``gpt3-pp8-m16`` / ``gpt3-pp8-m64``: GPT-3 175B's layers from ``astra workload llm`` (PP 8, 12 virtual stages,
  TP 1, DP 1, 16 or 64 micro-batches, per-rank files), kernels replayed from their durations, one 8-port switch;
* ``mlperf-tp1-m16`` / ``-m64`` / ``-m128``: the MLPerf Training v3.1 GPT-3 175B layout of
  ``benchmarks/validate_mlperf_gpt3.py`` (PP 8, 12 virtual stages, micro-batch 1, ZeRO-1 with overlapped
  parameter all-gather, FP8 GEMMs, no dropout) at TP 1 and DP 1 on ``--platform hgx-h100`` (one node: the gpu
  model on H100-SXM5-80GB, its measured contention and host launch model, ``--platform-collective ring``,
  ``--allow-oom``);
* ``mlperf-tp4-m32`` / ``-m64`` / ``-m128``: the validation case ``mlperf-v3.1-gpt3-512``'s own flags (TP 4, sequence
  parallelism, TP communication overlap, the case's SM budgets and userbuffers configuration) at DP 1: 32 ranks
  on 4 nodes of ``--platform hgx-h100`` with its defaults (NCCL's model for the collectives), folded by symmetry
  to 8 simulated; tensor-parallel exchanges and the amax all-reduces run through the steady state.

    python benchmarks/bench_time_fold.py [CASE ...|all] [--rounds N]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "folding", "tests"))

from test_time_fold import write_pipeline  # noqa: E402

from astra_sim.report import read_report  # noqa: E402

CASES = ("1f1b", "gpt3-pp8-m16", "gpt3-pp8-m64", "mlperf-tp1-m16", "mlperf-tp1-m64", "mlperf-tp1-m128",
         "mlperf-tp4-m32", "mlperf-tp4-m64", "mlperf-tp4-m128")
#: validate_mlperf_gpt3.LLM_FLAGS at TP 1 (--sequence-parallel and --tp-comm-overlap have no TP group to act on)
MLPERF_TP1 = ["--preset", "gpt3-175b", "--tp", "1", "--pp", "8", "--virtual-stages", "12", "--micro-batch-size", "1",
              "--zero", "1", "--overlap-param-gather", "--gemm-dtype", "fp8", "--no-dropout", "--dtype", "bf16",
              "--dp", "1"]
#: the validation case mlperf-v3.1-gpt3-512's workload flags at DP 1 (plugins/validation/.../cases.yaml)
OVERLAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "validation", "src",
                       "astra_validation", "cases", "mlperf_v31_gpt3_tp_overlap.yaml")
MLPERF_TP4 = ["--preset", "gpt3-175b", "--tp", "4", "--pp", "8", "--virtual-stages", "12", "--micro-batch-size", "1",
              "--sequence-parallel", "--zero", "1", "--overlap-param-gather", "--tp-comm-overlap", "--gemm-dtype", "fp8",
              "--no-dropout", "--dtype", "bf16", "--dp", "1", "--comm-sms", "tp=8,dp=8,pp=2,amax=1",
              "--tp-overlap-config", OVERLAP]


def _exe(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def _inputs(case, folder):
    """The ``astra run`` arguments of ``case`` (its files written under ``folder``)."""
    import pathlib

    if case == "1f1b":
        prefix, system, network = write_pipeline(pathlib.Path(folder), 8, 256, layers=20)
        return ["--workload-configuration", prefix, "--system-configuration", system, "--network-configuration",
                network, "--no-breakdown"]
    micro_batches = case.rsplit("-m", 1)[1]
    prefix = os.path.join(folder, "w")
    if case.startswith("gpt3"):
        subprocess.run([_exe("astra"), "workload", "llm", "--preset", "gpt3-175b", "--tp", "1", "--pp", "8",
                        "--virtual-stages", "12", "--micro-batches", micro_batches, "--micro-batch-size", "1",
                        "--dtype", "bf16", "--per-rank-files", "-o", prefix], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(folder, "net.yml"), "w") as handle:
            handle.write("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
        with open(os.path.join(folder, "sys.json"), "w") as handle:
            json.dump({"all-reduce-implementation": ["ring"], "local-mem-bw": 50}, handle)
        return ["--workload-configuration", prefix, "--system-configuration", os.path.join(folder, "sys.json"),
                "--network-configuration", os.path.join(folder, "net.yml"), "--comm-group-configuration",
                prefix + ".groups.json"]
    if case.startswith("mlperf-tp4"):
        subprocess.run([_exe("astra"), "workload", "llm", *MLPERF_TP4, "--micro-batches", micro_batches, "-o", prefix],
                       check=True, stdout=subprocess.DEVNULL)
        return ["--platform", "hgx-h100", "--nodes", "4", "--workload-configuration", prefix,
                "--comm-group-configuration", prefix + ".groups.json", "--allow-oom"]
    subprocess.run([_exe("astra"), "workload", "llm", *MLPERF_TP1, "--micro-batches", micro_batches, "-o", prefix],
                   check=True, stdout=subprocess.DEVNULL)
    return ["--platform", "hgx-h100", "--nodes", "1", "--compute-model", "gpu", "--gpu", "H100-SXM5-80GB",
            "--platform-collective", "ring", "--workload-configuration", prefix, "--comm-group-configuration",
            prefix + ".groups.json", "--allow-oom"]


def _run(argv, report):
    """(user CPU of one ``astra run``, its report)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    subprocess.run([_exe("astra"), "run", *argv, "--report-json", report, "-q"], check=True, stdout=subprocess.DEVNULL)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before, read_report(report)


def _same(a, b):
    """Whether two reports give every rank the same numbers and per-rank tables (wall times and the fold aside)."""
    def strip(report):
        stats = {k: v for k, v in report["stats"].items() if not k.endswith("_s") and k != "time_fold"}
        return json.dumps([report["ranks"], report.get("summary"), report.get("breakdown"), stats], sort_keys=True)
    return strip(a) == strip(b)


def bench(case, rounds):
    with tempfile.TemporaryDirectory() as folder:
        argv = _inputs(case, folder)
        cpu, loop, reports = {True: [], False: []}, {True: [], False: []}, {}
        for _ in range(rounds):
            for fold in (False, True):
                seconds, report = _run(argv + (["--time-fold"] if fold else []), os.path.join(folder, "r.json"))
                cpu[fold].append(seconds)
                loop[fold].append(report["stats"]["run_s"])
                reports[fold] = report
    info = reports[True]["settings"]["fold"].get("time", {})
    same = _same(reports[True], reports[False])
    what = (f"{info.get('jumps', 1)} jump(s), the longest {info['periods']:,} periods of {info['period_ns']:,} ns "
            f"({info['skipped_events']:,} of {reports[False]['stats']['events']:,} events jumped over)"
            if info.get("folded") else f"not folded: {info.get('reason')}")
    plain, folded = min(cpu[False]), min(cpu[True])
    print(f"{case}: {what}; astra run user CPU {plain:.2f} s -> {folded:.2f} s with --time-fold "
          f"({plain / folded:.2f}x); event loop {min(loop[False]):.2f} s -> {min(loop[True]):.2f} s "
          f"({min(loop[False]) / min(loop[True]):.2f}x); reports {'identical' if same else 'DIFFERENT'}", flush=True)
    return same


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="*", default=["all"], choices=(*CASES, "all"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = CASES if "all" in args.case else args.case
    ok = all([bench(case, args.rounds) for case in cases])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
