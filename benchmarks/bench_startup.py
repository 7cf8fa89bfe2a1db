"""Benchmark (issue 37, start-up): ``astra --version`` and folded ``astra run`` of the reference's scale cases, each a
fresh process, and what their imports cost (``python -X importtime``).

Issue 37's bars: ``astra --version`` under 0.1 s, a folded run of the reference's scale cases under 0.5 s of wall.
The cases are ``bench_reference.py``'s inputs: ``allreduce-4096`` and ``training-1024`` (per-rank files, the
analytical backend) and ``congestion-ring-256`` (the congestion backend); each run simulates one rank.

``--before DIR`` times a second checkout (a ``git worktree`` of an older commit) in the same rounds, the two sides
alternated: its ``core`` and ``plugins/*/src`` go first on ``PYTHONPATH``, so this environment's interpreter, packages
and entry points run the older code; this checkout's own folders then go on ``PYTHONPATH`` too, since every import
searches those 20-odd folders first (about 6 % more instructions on the 256-NPU Ring run). Every round runs every
command once per side; each figure is the median over ``--repeats`` rounds (wall and CPU: user + system of the
child). Both sides' reports must give every rank the same finish (exit status 1 otherwise). By default the bytecode
is cached (``PYTHONPYCACHEPREFIX`` in a temporary folder, ``PYTHONDONTWRITEBYTECODE`` unset, one untimed round
first), as an installed package runs; ``--no-bytecode-cache`` keeps the environment's setting (this checkout's shell
sets ``PYTHONDONTWRITEBYTECODE``: every module compiled from source in every run). ``--instructions`` also counts
each command's instructions once per side (valgrind's cachegrind, the whole process): the figure a busy machine
does not move. ``--top N`` lists the N imports with the most self time (the first case, this checkout, medians).

    python benchmarks/bench_startup.py [--before DIR] [--repeats 7] [--no-bytecode-cache] [--instructions]
        [--top 25] [CASE ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_reference import ASTRA, case_inputs, child_env, run_args, timed  # noqa: E402 (its cases and timing)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("allreduce-4096", "training-1024", "congestion-ring-256")
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def _env(tree, bytecode):
    """The environment of one side: ``tree``'s sources first on the path (None: the installed checkout)."""
    paths = [os.path.join(tree, "core"), *sorted(glob.glob(os.path.join(tree, "plugins", "*", "src")))] if tree else []
    return child_env(bytecode, paths)


def _run_args(inputs, report):
    prefix, system, network, memory, mode = inputs
    return run_args(prefix, system, network, memory, "analytical" if mode == "unaware" else "congestion", report)


def _imports(stderr):
    """(the top-level imports' cumulative microseconds, {module: self microseconds}) of ``-X importtime``'s lines."""
    total, own = 0, {}
    for match in IMPORT_LINE.finditer(stderr):
        own[match.group(4)] = int(match.group(1))
        if not match.group(3).replace(" ", "", 1):  # one space after the bar: a top-level import
            total += int(match.group(2))
    return total, own


def _instructions(command, env):
    """The whole process's instructions (valgrind's cachegrind, no cache simulation)."""
    out, _, _ = timed(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                        *command], env)
    return int(re.search(r"I\s+refs:\s+([\d,]+)", out.stderr).group(1).replace(",", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), help=f"any of {', '.join(CASES)}")
    parser.add_argument("--before", default="", metavar="DIR", help="an older checkout, timed in the same rounds")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-bytecode-cache", action="store_true", help="keep the environment's bytecode setting")
    parser.add_argument("--instructions", action="store_true", help="count instructions (valgrind) once per side")
    parser.add_argument("--top", type=int, default=0, help="list the N imports with the most self time")
    args = parser.parse_args()
    bad = [c for c in args.cases if c not in CASES]
    if bad:
        parser.error(f"unknown case(s) {', '.join(bad)}; expected some of {', '.join(CASES)}")
    from astra_sim.report import read_report

    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        bytecode = None if args.no_bytecode_cache else os.path.join(tmp, "pycache")
        sides = {"before": _env(os.path.abspath(args.before), bytecode)} if args.before else {}
        sides["now"] = _env(REPO if args.before else None, bytecode)
        inputs = {case: case_inputs(case, os.path.join(tmp, case)) for case in args.cases}
        report = os.path.join(tmp, "report.json")
        commands = {"astra --version": [ASTRA, "--version"]}
        for case in args.cases:
            commands[f"{case} run"] = [ASTRA, *_run_args(inputs[case], report)]
            commands[f"{case} imports"] = [sys.executable, "-X", "importtime", ASTRA,
                                           *_run_args(inputs[case], report)]
        walls, cpus, imports, own, finishes = {}, {}, {}, {}, {}
        for repeat in range(args.repeats + (bytecode is not None)):
            for label, command in commands.items():
                for side, env in sides.items():
                    out, wall, cpu = timed(command, env)
                    if label.endswith(" run"):
                        finish = [r["finish_ns"] for r in read_report(report)["ranks"]]
                        finishes.setdefault(label, {}).setdefault(side, finish)
                    if bytecode is not None and repeat == 0:
                        continue  # (the untimed round: the bytecode written)
                    key = (label, side)
                    walls.setdefault(key, []).append(wall)
                    cpus.setdefault(key, []).append(cpu)
                    if label.endswith(" imports"):
                        total, by_module = _imports(out.stderr)
                        imports.setdefault(key, []).append(total)
                        own.setdefault(key, []).append(by_module)
        for label in commands:
            for side in sides:
                key = (label, side)
                if label.endswith(" imports"):
                    print(f"{label:<32} {side:<6} imports {statistics.median(imports[key]) / 1e3:7.1f} ms "
                          f"(-X importtime's top-level cumulative, median of {len(imports[key])})", flush=True)
                    continue
                print(f"{label:<32} {side:<6} wall {statistics.median(walls[key]) * 1e3:7.1f} ms, "
                      f"CPU {statistics.median(cpus[key]) * 1e3:7.1f} ms (median of {len(walls[key])}; "
                      f"least {min(walls[key]) * 1e3:.1f} / {min(cpus[key]) * 1e3:.1f} ms)", flush=True)
            if label in finishes:
                same = len({tuple(f) for f in finishes[label].values()}) == 1
                ok &= same
                reference = next(iter(finishes[label].values()))
                print(f"{label:<32} {len(reference)} ranks, max finish {max(reference):,} ns; every rank's finish "
                      f"{'identical on both sides' if same else 'DIFFERENT'}" if len(sides) > 1 else
                      f"{label:<32} {len(reference)} ranks, max finish {max(reference):,} ns", flush=True)
        if args.instructions:
            for label, command in commands.items():
                if label.endswith(" imports"):
                    continue
                for side, env in sides.items():
                    print(f"{label:<32} {side:<6} {_instructions(command, env):,} instructions", flush=True)
        if args.top and args.cases:
            key = (f"{args.cases[0]} imports", "now")
            modules = {name for run in own[key] for name in run}
            median = {name: statistics.median(run.get(name, 0) for run in own[key]) for name in modules}
            print(f"the {args.top} imports with the most self time ({args.cases[0]}, now, median):")
            for name in sorted(median, key=median.get, reverse=True)[:args.top]:
                print(f"  {median[name] / 1e3:6.2f} ms  {name}")
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
