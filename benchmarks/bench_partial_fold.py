"""Benchmark (issue 37): the folded engine's cost per event against the unfolded engine's, on runs that fold by
2, 4, 8 and fully, on the ``analytical`` and ``congestion`` backends. It measured the planner's
``astra_folding.plan.FOLDED_EVENT_COST``: a fold by ``k`` simulates ``1/k`` of the ranks, so it pays off only when
``k`` exceeds the folded engine's cost per event over the unfolded one's.

Every case runs folded (forced: the planner's cost rule off, ``event_cost=0``) and with ``fold=False``,
alternated, ``--repeats`` times; each side keeps its fastest ``run_s`` (the event loop; ``report.stats``). The
factor is (folded run_s / folded events) / (unfolded run_s / unfolded events), ``(cpu)`` the same in the event
loop's CPU seconds (``cpu_s``; wall time on a shared machine counts the other processes too); ``speedup`` is unfolded
over folded, in run_s, loop CPU seconds and the whole ``simulate`` call's CPU seconds (``all``: trace reading, the
symmetry search, the report); ``planner`` what the default rule (``FOLDED_EVENT_COST`` x ``FOLD_COST_MARGIN``)
chooses. Cases:

* ``chakra``: hand-made traces on a Switch x Switch network of 48 ranks, ``k`` x ``48/k`` (k = 2, 3, 4, 8): per
  layer a kernel whose time grows with the rank's second coordinate (so only the first dimension is symmetric: a
  fold by ``k``), an all-reduce of every rank and a send/receive to the next rank of the first dimension; ``48``:
  every rank alike.
* ``moe``: ``astra workload llm`` (a small Mixtral, TP k with sequence parallelism (Megatron-Core refuses MoE at TP > 1
  without it; measured without it until session 47), DP 8, EP 8, 4 micro-batches) on ``--platform hgx-h100``
  with a Zipf expert load (``moe_expert_load="zipf:1.2:7"``): EP ranks differ, TP ranks do not (a fold by the TP
  size); ``full``: balanced routing.
* ``pipeline``: a dense GPT-3 13B step (PP 4, DP k, 32 micro-batches) on ``--platform hgx-h100``: the stages differ,
  the DP replicas do not (a fold by k); ``full``: PP 1, DP 16.

    python benchmarks/bench_partial_fold.py [--repeats N] [--backend analytical|congestion|both] [--layers L]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from astra_sim import hookimpl, simulate
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_folding.plan import FOLD_COST_MARGIN, FoldPlanner, folded_event_cost

RANKS = 48


class ForcedFold:
    """The fold planner with the cost rule off (folds whenever a symmetry is found), and the CPU seconds of the
    event loop: from ``astra_run_start`` (the first event is next) to ``astra_run_finish``."""

    loop_cpu_s = [0.0, 0.0]  # [at the start, spent]

    @staticmethod
    @hookimpl
    def astra_fold_planner(setup, catalogue, requested, refused):
        return FoldPlanner(setup, catalogue, requested, refused, event_cost=0)

    @staticmethod
    @hookimpl
    def astra_run_start(run):
        ForcedFold.loop_cpu_s[0] = time.process_time()

    @staticmethod
    @hookimpl
    def astra_run_finish(run, report):
        ForcedFold.loop_cpu_s[1] = time.process_time() - ForcedFold.loop_cpu_s[0]


def chakra_case(folder, order, layers):
    """Traces and configs of a 48-rank run that folds by ``order`` (``RANKS``: every rank alike)."""
    os.makedirs(folder, exist_ok=True)
    first = order if order < RANKS else 8
    second = RANKS // first
    network = os.path.join(folder, "network.yml")
    with open(network, "w") as handle:
        handle.write(f"topology: [ Switch, Switch ]\nnpus_count: [ {first}, {second} ]\n"
                     "bandwidth: [ 200.0, 50.0 ]  # GB/s\nlatency: [ 500.0, 1000.0 ]  # ns\n")
    system = os.path.join(folder, "system.json")
    with open(system, "w") as handle:
        json.dump({"all-reduce-implementation": ["ring", "ring"], "preferred-dataset-splits": 4,
                   "active-chunks-per-dimension": 1, "local-mem-bw": 1600}, handle)
    prefix = os.path.join(folder, "t")
    for rank in range(RANKS):
        a, b = rank % first, rank // first
        uneven = 0 if order == RANKS else b  # the second coordinate's kernels differ: it does not fold
        nodes, last = [], []
        for layer in range(layers):
            base = 4 * layer
            nodes.append(make_node(base, "gemm", T.COMP_NODE, data_deps=last, duration_micros=20 + uneven,
                                   attrs={"is_cpu_op": False}))
            nodes.append(make_node(base + 1, "ar", T.COMM_COLL_NODE, data_deps=[base], attrs={
                "is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1 << 20}))
            nodes.append(make_node(base + 2, "send", T.COMM_SEND_NODE, data_deps=[base], attrs={
                "is_cpu_op": False, "comm_dst": (a + 1) % first + first * b, "comm_size": 65536, "comm_tag": layer}))
            nodes.append(make_node(base + 3, "recv", T.COMM_RECV_NODE, data_deps=[base], attrs={
                "is_cpu_op": False, "comm_src": (a - 1) % first + first * b, "comm_size": 65536, "comm_tag": layer}))
            last = [base + 1, base + 2, base + 3]
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    return dict(workload=prefix, system=system, network=network)


def moe_case(folder, order, layers):
    """A small Mixtral step on hgx-h100 that folds by ``order`` (the TP size; ``full``: balanced routing)."""
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    tp = 4 if order == "full" else order
    spec = LlmSpec(preset="mixtral-8x7b", layers=layers, seq_len=1024, tp=tp, dp=8, ep=8, micro_batches=4,
                   sequence_parallel=True, moe_expert_load=None if order == "full" else "zipf:1.2:7")
    prefix = os.path.join(folder, "m")
    generate_llm_workload(spec, prefix)
    return dict(workload=prefix, platform="hgx-h100", comm_groups=prefix + ".groups.json")


def pipeline_case(folder, order, layers=8):
    """A dense GPT-3 13B step (PP 4, 32 micro-batches) whose stages differ: a fold by the DP size ``order``
    (``full``: PP 1, DP 16)."""
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    pp, dp = (1, 16) if order == "full" else (4, order)
    spec = LlmSpec(preset="gpt3-13b", layers=layers, seq_len=1024, pp=pp, dp=dp, micro_batches=32)
    prefix = os.path.join(folder, "p")
    generate_llm_workload(spec, prefix)
    return dict(workload=prefix, platform="hgx-h100", comm_groups=prefix + ".groups.json")


def measure(args, backend, repeats):
    """Fastest folded and unfolded runs, each ``(events, simulated ranks, run_s, loop cpu_s, whole cpu_s)``: the
    event loop's wall seconds (``report.stats``) and CPU seconds (:class:`ForcedFold`; less disturbed than wall time
    on a shared machine), and the whole ``simulate`` call's CPU seconds. Checks that both runs give every rank the
    same finish time."""
    best = {}
    finishes = {}
    for _ in range(repeats):
        for fold in (True, False):
            cpu = time.process_time()
            report = simulate(**args, network_backend=backend, fold=fold, block=("folding",),
                              extra_plugins=(ForcedFold,), breakdown=False)
            row = (report.stats["run_s"], ForcedFold.loop_cpu_s[1], time.process_time() - cpu)
            old = best.get(fold, (0, 0, 1e9, 1e9, 1e9))
            best[fold] = (report.stats["events"], report.stats["simulated_ranks"],
                          *(min(a, b) for a, b in zip(row, old[2:])))
            finishes.setdefault(fold, [r.finish_ns for r in report.ranks])
    if finishes[True] != finishes[False]:
        raise SystemExit(f"folded and unfolded finish times differ: {args}")
    return best[True], best[False]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--backend", choices=["analytical", "congestion", "both"], default="both")
    ap.add_argument("--layers", type=int, default=16,
                    help="layers of the chakra case (moe: a quarter of it)")
    ap.add_argument("--cases", default="chakra,moe,pipeline", help="comma-separated: chakra, moe, pipeline")
    opts = ap.parse_args()
    backends = ["analytical", "congestion"] if opts.backend == "both" else [opts.backend]
    with open("/proc/loadavg") as handle:
        print(f"load average at start: {handle.read().split()[:3]}")
    print(f"{'':<31}{'folded':-^34}  {'unfolded':-^34}")
    print(f"{'case':<15}{'backend':<12}{'by':>4}{'events':>11}{'run_s':>8}{'cpu_s':>8}{'all':>7}  "
          f"{'events':>11}{'run_s':>8}{'cpu_s':>8}{'all':>7}{'factor':>7}{'(cpu)':>6}{'speedup':>8}{'(cpu)':>7}"
          f"{'(all)':>7}  planner")
    factors = {}
    with tempfile.TemporaryDirectory(prefix="bench_partial_fold_") as tmp:
        for name in opts.cases.split(","):
            orders = [2, 3, 4, 8, RANKS] if name == "chakra" else [2, 4, 8, "full"]
            for order in orders:
                folder = os.path.join(tmp, f"{name}{order}")
                if name == "chakra":
                    args = chakra_case(folder, order, opts.layers)
                elif name == "moe":
                    args = moe_case(folder, order, max(1, opts.layers // 4))
                else:
                    args = pipeline_case(folder, order)
                for backend in backends:
                    folded, unfolded = measure(args, backend, opts.repeats)
                    if folded[1] == unfolded[1]:
                        print(f"{name} {order}: {backend} did not fold", file=sys.stderr)
                        continue
                    factor = (folded[2] / folded[0]) / (unfolded[2] / unfolded[0])
                    cpu_factor = (folded[3] / folded[0]) / (unfolded[3] / unfolded[0])
                    factors.setdefault(backend, []).append((factor, cpu_factor))
                    fold_by = unfolded[1] // folded[1]
                    folds = fold_by > folded_event_cost("replay" if name == "chakra" else "gpu", name != "chakra") \
                        * FOLD_COST_MARGIN  # the planner's rule
                    print(f"{f'{name} {order}':<15}{backend:<12}{fold_by:>4}"
                          f"{folded[0]:>11,}{folded[2]:>8.3f}{folded[3]:>8.3f}{folded[4]:>7.3f}  "
                          f"{unfolded[0]:>11,}{unfolded[2]:>8.3f}{unfolded[3]:>8.3f}{unfolded[4]:>7.3f}"
                          f"{factor:>7.2f}{cpu_factor:>6.2f}{unfolded[2] / folded[2]:>7.2f}x"
                          f"{unfolded[3] / folded[3]:>6.2f}x{unfolded[4] / folded[4]:>6.2f}x  "
                          f"{'folds' if folds else 'all ranks'}", flush=True)
    for backend, values in factors.items():
        run, cpu = [v[0] for v in values], [v[1] for v in values]
        print(f"{backend}: the folded engine's cost per event is {min(run):.2f}..{max(run):.2f}x the unfolded "
              f"engine's in wall seconds (run_s), {min(cpu):.2f}..{max(cpu):.2f}x in CPU seconds")
    with open("/proc/loadavg") as handle:
        print(f"load average at end: {handle.read().split()[:3]}")


if __name__ == "__main__":
    main()
