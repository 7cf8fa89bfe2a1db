"""Benchmark (issue 37): astra-sim-py beside a locally built C++ reference, on the same inputs, on this machine.

The reference is never part of this repository; build it as ``tools/difftest.py``'s docstring says and give the
folder holding its binaries (``AstraSim_Analytical_Congestion_Unaware`` and ``..._Aware``). Without them this
script says so and exits 0; it is not part of the test suite.

Every case writes its inputs once (``benchmarks/workloads.py``'s traces: Chakra ETs, system JSON, network YAML,
memory JSON) and runs each side in a fresh process, the sides alternated, ``--repeats`` times; each side keeps its
least wall time and its least CPU time (user + system of the child, start-up and reading included). Every rank's
finish time must be the same on every side (exit status 1 otherwise).

* ``allreduce-4096``, ``training-1024``: ``bench_scale.py``'s two reference cases on the congestion-unaware
  binary, against ``astra run --no-fold`` (pure Python, and with ``--compiled DIR`` on ``PYTHONPATH``).
* ``congestion-N`` (N = 256, 512, 1024): ``bench_scale.py``'s 20-layer data-parallel step (50 us compute,
  16 MiB all-reduces) on a 1-D Switch of N NPUs (50 GB/s, 500 ns; halving-doubling all-reduce, 4 splits) on the
  official congestion-aware binary (1-D only), against ``astra run --network-backend congestion`` folded and
  ``--no-fold`` (folded, one rank is simulated: halving-doubling keeps every flip of a switch coordinate's bits).
* ``congestion-ring-N``: a 1 GiB all-reduce on a 1-D Ring of N NPUs (50 GB/s, 500 ns, ring algorithm, 4 splits),
  which the congestion backend folds to one rank.

    python benchmarks/bench_reference.py --reference-bin DIR [--compiled build/compiled] [--repeats 3] [CASE ...]

Without the binaries, ``--recorded`` runs astra-sim-py's sides alone and sets them beside the C++ times recorded in
the README's table (``RECORDED``: that build, this machine type, 2026-11-30; not re-run, so the load differs): every
side's per-rank finish times must agree, and their maximum must be the one the reference printed. ``--unfolded``
leaves out the folded runs of the congestion cases, ``--no-pure`` (with ``--compiled``) the pure-Python runs.
``--bytecode-cache DIR`` runs astra-sim-py's sides with their
bytecode cached in DIR (``PYTHONPYCACHEPREFIX``, ``PYTHONDONTWRITEBYTECODE`` unset) after one untimed round, as an
installed package runs: without it a checkout whose environment sets ``PYTHONDONTWRITEBYTECODE`` compiles every
module it imports from source in every run (about 0.1 s of CPU, a sixth of the 256-NPU congestion Ring's).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASES = ("allreduce-4096", "training-1024", "congestion-256", "congestion-512", "congestion-1024",
         "congestion-ring-256", "congestion-ring-512", "congestion-ring-1024")
BINARIES = {"unaware": "AstraSim_Analytical_Congestion_Unaware", "aware": "AstraSim_Analytical_Congestion_Aware"}
LINE = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
ASTRA = os.path.join(os.path.dirname(sys.executable), "astra")
#: per case, the C++ reference's least wall and CPU seconds and its maximum finish (ns), as the README's table
#: records them (astra-sim 518bd51 built as tools/difftest.py says, this machine type, 2026-11-30)
RECORDED = {"allreduce-4096": (8.20, 8.04, 10_540_204), "training-1024": (18.79, 18.45, 7_359_220),
            "congestion-256": (2.55, 1.72, 27_555_760), "congestion-512": (7.06, 5.58, 27_767_200),
            "congestion-1024": (19.97, 19.94, 27_953_600), "congestion-ring-256": (0.69, 0.68, 42_887_980),
            "congestion-ring-512": (3.04, 3.03, 44_009_404), "congestion-ring-1024": (17.51, 17.46, 46_129_156)}


def case_inputs(case, folder):
    """Write the case's inputs; return (prefix, system, network, memory, reference mode)."""
    import workloads
    from astra_sim_testing import write_network_config, write_system_config

    if case == "allreduce-4096":
        return (*workloads.all_reduce(folder), "unaware")
    if case == "training-1024":
        return (*workloads.data_parallel_training(folder), "unaware")
    npus = int(case.rsplit("-", 1)[1])
    if case.startswith("congestion-ring-"):
        prefix, system, network, memory = workloads.all_reduce(folder, npus=(1, 1, npus))
        write_network_config(network, topology=("Ring",), npus=(npus,), bandwidth_gbps=(50.0,), latency_ns=(500.0,))
        write_system_config(system, dims=1, algorithm="ring")
        return prefix, system, network, memory, "aware"
    prefix, system, network, memory = workloads.data_parallel_training(folder, npus=(1, 1, npus))
    write_network_config(network, topology=("Switch",), npus=(npus,), bandwidth_gbps=(50.0,), latency_ns=(500.0,))
    write_system_config(system, dims=1, algorithm="halvingDoubling", **{"all-to-all-implementation": ["ring"]})
    return prefix, system, network, memory, "aware"


def timed(args, env=None, cwd=None):
    """Run ``args`` to completion: (the completed process, wall s, the child's user + system CPU s); exits on a
    failure with its output's tail (bench_startup.py times its commands with it too)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"{' '.join(args[:2])} ... failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_args(prefix, system, network, memory, backend, report):
    """``astra run``'s arguments for a case's inputs on ``backend``, its report at ``report``."""
    return ["run", "--workload-configuration", prefix, "--system-configuration", system, "--network-configuration",
            network, "--remote-memory-configuration", memory, "--network-backend", backend, "-q", "-o", report]


def child_env(bytecode=None, paths=()):
    """This environment for an astra-sim-py child: its bytecode cached in ``bytecode`` (``PYTHONPYCACHEPREFIX``,
    ``PYTHONDONTWRITEBYTECODE`` unset) when given, ``paths`` first on ``PYTHONPATH``."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = bytecode
    if paths:
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _reference(binary, prefix, system, network, memory):
    # run in the case's folder: the reference writes its log/ folder into the working directory
    out, wall, cpu = timed([binary, f"--workload-configuration={prefix}", f"--system-configuration={system}",
                                f"--network-configuration={network}", f"--remote-memory-configuration={memory}"],
                               cwd=os.path.dirname(prefix))
    finish = {int(m.group(1)): int(m.group(2)) for m in LINE.finditer(out.stdout)}
    return [finish[r] for r in sorted(finish)], wall, cpu


def _astra(prefix, system, network, memory, folder, backend, fold, path, bytecode=None):
    from astra_sim.report import read_report

    report = os.path.join(folder, "report.json")
    args = [ASTRA, *run_args(prefix, system, network, memory, backend, report)]
    if not fold:
        args.append("--no-fold")
    _, wall, cpu = timed(args, child_env(bytecode, [path] if path else []))
    return [r["finish_ns"] for r in read_report(report)["ranks"]], wall, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), help=f"any of {', '.join(CASES)}")
    parser.add_argument("--reference-bin", default=os.environ.get("ASTRA_REFERENCE_BIN", ""),
                        help="folder with the reference's AstraSim_Analytical_Congestion_{Unaware,Aware}")
    parser.add_argument("--compiled", default="", help="a compiled tree (tools/compile_core.py) to run as well")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--recorded", action="store_true",
                        help="without the binaries: run astra-sim-py alone, beside the C++ times recorded (RECORDED)")
    parser.add_argument("--unfolded", action="store_true", help="leave out the congestion cases' folded runs")
    parser.add_argument("--bytecode-cache", default="", metavar="DIR",
                        help="cache astra-sim-py's bytecode in DIR and time it after one untimed round")
    parser.add_argument("--no-pure", action="store_true",
                        help="with --compiled: leave out the pure-Python sides (minutes each on the scale cases)")
    args = parser.parse_args()
    bad = [c for c in args.cases if c not in CASES]
    if bad:
        parser.error(f"unknown case(s) {', '.join(bad)}; expected some of {', '.join(CASES)}")
    binaries = {mode: os.path.join(args.reference_bin, name) for mode, name in BINARIES.items()}
    if not args.recorded and (not args.reference_bin or not any(os.access(b, os.X_OK) for b in binaries.values())):
        print(f"skipped: no reference binaries in {args.reference_bin or '(none given: --reference-bin)'}; "
              "tools/difftest.py's docstring says how to build them")
        return 0
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench_reference_") as tmp:
        for case in args.cases:
            folder = os.path.join(tmp, case)
            prefix, system, network, memory, mode = case_inputs(case, folder)
            recorded = not os.access(binaries[mode], os.X_OK)
            if recorded and not args.recorded:
                print(f"{case}: skipped, no {binaries[mode]}")
                continue
            backend = "analytical" if mode == "unaware" else "congestion"
            sides = {} if recorded else {"C++": lambda: _reference(binaries[mode], prefix, system, network, memory)}
            for label, path in (("pure", ""), ("compiled", args.compiled)):
                if (label == "compiled" and not path) or (label == "pure" and args.no_pure and args.compiled):
                    continue
                folds = (False,) if mode == "unaware" or args.unfolded else (True, False)
                for fold in folds:
                    sides[f"{label} {'folded' if fold else '--no-fold'}"] = (
                        lambda path=path, fold=fold: _astra(prefix, system, network, memory, folder, backend, fold,
                                                            path, args.bytecode_cache))
            best, finishes = {}, {}
            for repeat in range(args.repeats + bool(args.bytecode_cache)):
                for side, run in sides.items():
                    finish, wall, cpu = run()
                    finishes.setdefault(side, finish)
                    if args.bytecode_cache and repeat == 0:
                        continue  # (the untimed round: the bytecode written)
                    old = best.get(side, (wall, cpu))
                    best[side] = (min(old[0], wall), min(old[1], cpu))
            if recorded:  # the sides agree with each other, and with the maximum the reference printed
                reference = next(iter(finishes.values()))
                ref_wall, ref_cpu, ref_max = RECORDED[case]
                ok &= max(reference) == ref_max
                print(f"{case}: C++ recorded (not re-run) {ref_wall:.2f} s wall, {ref_cpu:.2f} s CPU, max finish "
                      f"{ref_max:,} ns; here {len(reference)} ranks, max finish {max(reference):,} ns", flush=True)
            else:
                reference = finishes["C++"]
                ref_wall, ref_cpu = best["C++"]
                print(f"{case}: C++ {ref_wall:.2f} s wall, {ref_cpu:.2f} s CPU; {len(reference)} ranks, max finish "
                      f"{max(reference) if reference else 0:,} ns", flush=True)
            for side, (wall, cpu) in best.items():
                if side == "C++":
                    continue
                same = finishes[side] == reference
                ok &= same
                print(f"  {side:<19} {wall:6.2f} s wall ({wall / ref_wall:.2f}x), {cpu:6.2f} s CPU "
                      f"({cpu / ref_cpu:.2f}x); every rank's finish {'identical' if same else 'DIFFERENT'}",
                      flush=True)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
