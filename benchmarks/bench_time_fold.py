"""Time folding (issue 37): a pipeline's steady state jumped over, against the same run with every event
simulated (the default; ``--time-fold`` is ``time_fold=True``). Prints the event loop's time (``stats.run_s``, min of ``--rounds`` alternated runs),
what was jumped over (``settings.fold.time``) and whether every rank's numbers are the same, to the ns.

* ``1f1b``: hand-made traces (``plugins/folding/tests/test_time_fold.write_pipeline``), 8 stages, 256
  micro-batches, 20 kernels per pass, breakdown off;
* ``gpt3-pp8-m16`` / ``gpt3-pp8-m64``: GPT-3 175B's layers from ``astra workload llm`` (PP 8, 12 virtual stages,
  TP 1, DP 1, 16 or 64 micro-batches, per-rank files), kernels replayed from their durations, one 8-port switch.

    python benchmarks/bench_time_fold.py [1f1b|gpt3-pp8-m16|gpt3-pp8-m64|all] [--rounds N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "folding", "tests"))

from test_time_fold import numbers, write_pipeline  # noqa: E402

from astra_sim import simulate  # noqa: E402

CASES = ("1f1b", "gpt3-pp8-m16", "gpt3-pp8-m64")


def _inputs(case, folder):
    if case == "1f1b":
        return write_pipeline(folder, 8, 256, layers=20), {"breakdown": False}
    micro_batches = case.rsplit("-m", 1)[1]
    prefix = os.path.join(folder, "g")
    astra = os.path.join(os.path.dirname(sys.executable), "astra")
    subprocess.run([astra, "workload", "llm", "--preset", "gpt3-175b", "--tp", "1", "--pp", "8", "--virtual-stages",
                    "12", "--micro-batches", micro_batches, "--micro-batch-size", "1", "--dtype", "bf16",
                    "--per-rank-files", "-o", prefix], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(folder, "net.yml"), "w") as handle:
        handle.write("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    with open(os.path.join(folder, "sys.json"), "w") as handle:
        json.dump({"all-reduce-implementation": ["ring"], "local-mem-bw": 50}, handle)
    return ((prefix, os.path.join(folder, "sys.json"), os.path.join(folder, "net.yml")),
            {"comm_groups": prefix + ".groups.json"})


def bench(case, rounds):
    import pathlib

    with tempfile.TemporaryDirectory() as folder:
        args, kwargs = _inputs(case, pathlib.Path(folder))
        best = {True: None, False: None}
        reports = {}
        for _ in range(rounds):
            for fold in (False, True):
                report = simulate(*args, time_fold=fold, **kwargs)
                reports[fold] = report
                run_s = report.stats["run_s"]
                best[fold] = run_s if best[fold] is None else min(best[fold], run_s)
    info = reports[True].settings["fold"].get("time", {})
    same = numbers(reports[True]) == numbers(reports[False])
    what = (f"{info['periods']:,} periods of {info['period_ns']:,} ns jumped over ({info['skipped_events']:,} events)"
            if info.get("folded") else f"not folded: {info.get('reason')}")
    print(f"{case}: {reports[False].stats['events']:,} events; {what}; run {best[False]:.2f} s unfolded in time, "
          f"{best[True]:.2f} s folded ({best[False] / best[True]:.2f}x); every rank's numbers "
          f"{'identical' if same else 'DIFFERENT'}")
    return same


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", default="all", choices=(*CASES, "all"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ok = all([bench(case, args.rounds) for case in (CASES if args.case == "all" else (args.case,))])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
