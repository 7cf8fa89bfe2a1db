"""Time folding (issue 37): a pipeline's steady state is simulated once per period and its repeats jumped
over; every rank's numbers are the same, to the ns, as when every event is simulated."""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim import hookimpl, simulate
from astra_sim.chakra import make_metadata, make_node, read_et, types as T, write_et
from astra_sim.cli import main


def schedule(stages, micro_batches, chunks, p):
    """[(kind, chunk, micro-batch)] of stage ``p``: 1F1B (``chunks`` 1) or the interleaved 1F1B (micro-batches a
    multiple of ``stages``), written from the schedules' definitions (forwards in warm-up, then one forward
    and one backward, then the backwards)."""
    total = micro_batches * chunks
    if chunks == 1:
        warmup = min(stages - p - 1, micro_batches)
    else:
        warmup = min((stages - p - 1) * 2 + (chunks - 1) * stages, total)

    def item(kind, k):
        group, within = divmod(k, stages * chunks)
        chunk = within // stages
        return kind, chunk if kind == "F" else chunks - 1 - chunk, group * stages + k % stages

    order = [item("F", k) for k in range(warmup)]
    for i in range(total - warmup):
        order += [item("F", warmup + i), item("B", i)]
    return order + [item("B", k) for k in range(total - warmup, total)]


def write_pipeline(folder, stages, micro_batches, chunks=1, layers=2, forward_us=10, backward_us=20,
                   size=1 << 20, preposted=True, last_us=None, overlap=False, tp=1, tp_bytes=None, splits=1,
                   policy="LIFO", tp_overlap=False):
    """One trace per stage: per (forward or backward, chunk, micro-batch) a receive from the previous (next)
    virtual stage, ``layers`` kernels and a send on; virtual stage ``chunk * stages + p``. Receives have no
    parents (posted at the start, as the LLM generator writes them) unless ``preposted`` is False (then each
    waits for the node before it). ``last_us``: the last stage's kernels take that long instead. ``overlap``: the
    next pass waits for the last kernel, not for the send (which then runs beside its kernels).

    ``tp``: ranks per stage (rank ``p * tp + t``, its peers ``t`` of the next and previous stages), each stage a
    communicator group (``{prefix}.groups.json``, group ``p + 1``); ``tp_bytes``: after every kernel an all-reduce
    of that many bytes on the stage's group, priced by NCCL's model (the system config's ``nccl``, ``splits``
    chunks per collective, ``policy`` the scheduling policy, per-communicator streams), the next kernel after it
    (``tp_overlap``: beside it, the pass's send after them all)."""
    virtual = stages * chunks
    for rank in range(stages * tp):
        p, t = divmod(rank, tp)
        nodes = []
        last = None

        def add(name, node_type, deps, **attrs):
            nonlocal last
            node_id = len(nodes)
            nodes.append(make_node(node_id, name, node_type, data_deps=deps, **attrs))
            last = node_id
            return node_id

        for kind, chunk, mb in schedule(stages, micro_batches, chunks, p):
            v = chunk * stages + p
            forward = kind == "F"
            edge_in = v - 1 if forward else v  # the edge (u, u + 1) the input comes over
            has_in = v > 0 if forward else v < virtual - 1
            has_out = v < virtual - 1 if forward else v > 0
            deps = [] if last is None else [last]
            if has_in:
                peer = ((p - 1) % stages if forward else (p + 1) % stages) * tp + t
                tag = 2 * (mb * virtual + edge_in) + (0 if forward else 1)
                recv = add(f"recv.{kind}{mb}", T.COMM_RECV_NODE, [] if preposted else list(deps),
                           attrs={"comm_src": peer, "comm_dst": rank, "comm_size": size, "comm_tag": tag})
                deps = deps + [recv]
            us = (forward_us if forward else backward_us) if last_us is None or p < stages - 1 else last_us
            side = []
            for layer in range(layers):
                add("k", T.COMP_NODE, deps, duration_micros=us)
                deps = [last]
                if tp_bytes:
                    add("ar", T.COMM_COLL_NODE, deps,
                        attrs={"comm_type": T.ALL_REDUCE, "comm_size": tp_bytes, "pg_name": str(p + 1)})
                    if tp_overlap:
                        side.append(last)
                    else:
                        deps = [last]
            deps = deps + side
            if has_out:
                peer = ((p + 1) % stages if forward else (p - 1) % stages) * tp + t
                edge = v if forward else v - 1
                tag = 2 * (mb * virtual + edge) + (0 if forward else 1)
                kernel = last
                add(f"send.{kind}{mb}", T.COMM_SEND_NODE, deps,
                    attrs={"comm_src": rank, "comm_dst": peer, "comm_size": size, "comm_tag": tag})
                if overlap:
                    last = kernel
        write_et(f"{folder}/t.{rank}.et", make_metadata(), nodes)
    dims = 1 if tp == 1 else 2  # a stage's ranks along the first dimension (a symmetry: ranks may fold)
    counts = [stages] if tp == 1 else [tp, stages]
    (folder / "net.yml").write_text(f"topology: [ {', '.join(['Ring'] * dims)} ]\nnpus_count: {counts}\n"
                                    f"bandwidth: {[50] * dims}\nlatency: {[500] * dims}\n")
    system = {"all-reduce-implementation": ["ring"] * dims, "local-mem-bw": 50}
    if tp_bytes:
        system.update({"all-reduce-implementation": ["nccl"] * dims, "preferred-dataset-splits": splits,
                       "comm-streams": "per-communicator", "scheduling-policy": policy})
    (folder / "sys.json").write_text(json.dumps(system))
    if tp > 1:
        groups = {str(p + 1): list(range(p * tp, (p + 1) * tp)) for p in range(stages)}
        (folder / "t.groups.json").write_text(json.dumps(groups))
    return str(folder / "t"), str(folder / "sys.json"), str(folder / "net.yml")


def numbers(report):
    return [(r.rank, r.finish_ns, r.compute_ns, r.exposed_comm_ns, r.comm_ns, r.nodes) for r in report.ranks]


def report_json(report):
    """The report as JSON, less what differs between two runs of one simulation (wall times, the fold line)."""
    data = json.loads(json.dumps(report.to_dict()))
    data["settings"].pop("fold")
    data["stats"] = {k: v for k, v in data["stats"].items() if not k.endswith("_s") and k != "time_fold"}
    return json.dumps(data, sort_keys=True)


def check_exact(args, no_fold_run=True, reports=None, **kwargs):
    """The folded run's numbers and report are the plain run's; ``no_fold_run=False`` leaves out the run with
    ``--no-fold`` (a caller that makes it once for several calls on the same trace: with folding off the planner is
    never asked, so the runs that differ only in their planner are one simulation). ``reports``: a dict that gets
    the runs' reports (``folded``, ``plain``, ``no_fold``), for a caller's further checks on the same runs."""
    folded = simulate(*args, time_fold=True, **kwargs)
    plain = simulate(*args, **kwargs)
    assert numbers(folded) == numbers(plain)
    assert report_json(folded) == report_json(plain)
    assert "time" not in plain.settings["fold"]  # without --time-fold every event is simulated
    if reports is not None:
        reports.update(folded=folded, plain=plain)
    if no_fold_run:
        no_fold = simulate(*args, time_fold=True, fold=False, **kwargs)
        assert "time" not in no_fold.settings["fold"]  # nor with --no-fold
        if reports is not None:
            reports["no_fold"] = no_fold
    return folded.settings["fold"]["time"]


@pytest.mark.parametrize("stages,micro_batches", [(2, 8), (4, 16), (6, 32)])
@pytest.mark.parametrize("preposted", [True, False])
def test_1f1b_jumps_over_its_steady_state_to_the_ns(tmp_path, stages, micro_batches, preposted):
    info = check_exact(write_pipeline(tmp_path, stages, micro_batches, preposted=preposted))
    assert info["folded"] is True, info
    # the period is one forward and one backward of the slowest stage and its transfers; most of the
    # steady state (micro-batches minus the warm-up) is jumped over
    assert 60_000 < info["period_ns"] < 110_000
    assert info["periods"] >= micro_batches - 2 * stages
    assert info["skipped_ns"] == info["periods"] * info["period_ns"]


@pytest.mark.parametrize("stages,micro_batches,chunks", [(2, 16, 3), (4, 32, 2), (4, 48, 2)])
def test_interleaved_1f1b_jumps_to_the_ns(tmp_path, stages, micro_batches, chunks):
    info = check_exact(write_pipeline(tmp_path, stages, micro_batches, chunks))
    assert info["folded"] is True, info


def test_a_slower_last_stage_still_folds_and_the_numbers_match(tmp_path):
    info = check_exact(write_pipeline(tmp_path, 4, 16, last_us=37))
    assert info["folded"] is True


def test_a_short_interleaved_steady_state_gives_the_same_numbers_and_says_why_it_was_not_jumped(tmp_path):
    """4 stages x 2 chunks, 16 micro-batches: the tags move on evenly only over 8 passes, about what repeats."""
    info = check_exact(write_pipeline(tmp_path, 4, 16, 2))
    assert info["folded"] is True or "not repeat" in info["reason"]


def test_no_steady_state_no_jump_and_why(tmp_path):
    """Two micro-batches on four stages: all warm-up and cool-down; nothing repeats."""
    info = check_exact(write_pipeline(tmp_path, 4, 2))
    assert info["folded"] is False and info["reason"]


@pytest.mark.parametrize("kwargs,why", [
    ({"network_backend": "congestion"}, "congestion network backend keeps its own state"),
    ({"rendezvous": True}, "rendezvous"),
])
def test_what_cannot_be_compared_is_not_folded_and_the_report_says_why(tmp_path, kwargs, why):
    info = check_exact(write_pipeline(tmp_path, 4, 16), **kwargs)
    assert info["folded"] is False and why in info["reason"]


class _CountingModel:
    """A compute model that keeps a per-node record (how many kernels it timed): a jump would skip it."""

    name = "counting"

    def __init__(self, context=None):
        self.timed = 0

    def compute_time_ns(self, node, rank):
        self.timed += 1
        return node.duration_micros * 1000


class _CountingPlugin:
    @staticmethod
    @hookimpl
    def astra_register_compute_models(registry):
        registry.compute_model("counting", _CountingModel, "times a node from its duration and counts it")


def test_a_compute_model_not_known_to_be_stateless_is_not_folded(tmp_path):
    info = check_exact(write_pipeline(tmp_path, 4, 16), compute_model="counting", extra_plugins=(_CountingPlugin,))
    assert info["folded"] is False and "counting compute model is not known" in info["reason"]


@settings(max_examples=int(os.environ.get("TIME_FOLD_EXAMPLES", 25)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.integers(2, 5), groups=st.integers(1, 6), chunks=st.integers(1, 3), layers=st.integers(1, 3),
       forward_us=st.integers(1, 30), backward_us=st.integers(1, 40), last_us=st.none() | st.integers(1, 50),
       preposted=st.booleans(), size=st.sampled_from([1024, 1 << 20, 3 * (1 << 20) + 7]),
       launch_us=st.sampled_from([None, None, 1, 4]), overlap=st.booleans(),
       model=st.sampled_from(["replay", "replay", "gpu", "gpu-contention"]),
       tp_bytes=st.sampled_from([None, None, 1 << 20, 48 << 20]), splits=st.integers(1, 3), tp_overlap=st.booleans(),
       rank_fold=st.booleans())
def test_random_pipelines_give_the_same_numbers_folded_in_time_or_not(stages, groups, chunks, layers, forward_us,
                                                                       backward_us, last_us, preposted, size,
                                                                       launch_us, overlap, model, tp_bytes, splits,
                                                                       tp_overlap, rank_fold):
    """``model``: kernels replayed, or ATen GEMMs timed by the gpu model (with its measured contention);
    ``tp_bytes``: TP 2 with an all-reduce after every kernel (NCCL's model), before the next one or beside it;
    ``rank_fold``: then the two ranks of a stage folded by symmetry (one simulated)."""
    tp = 2 if tp_bytes else 1
    options = {} if launch_us is None else {"host_launch_us": launch_us}
    if model != "replay":
        options.update(compute_model="gpu", gpu_contention=model == "gpu-contention", gpu_contention_model="measured")
    with tempfile.TemporaryDirectory() as folder:
        args = write_pipeline(pathlib.Path(folder), stages, stages * groups, chunks, layers, forward_us, backward_us,
                              size, preposted, last_us, overlap, tp, tp_bytes, splits, tp_overlap=tp_overlap)
        if model != "replay":
            _as_aten_ops(args[0], stages * tp)
        if tp > 1:
            options["comm_groups"] = args[0] + ".groups.json"
            if rank_fold:
                options["extra_plugins"] = (_AlwaysFold,)
        check_exact(args, **options)


@pytest.mark.parametrize("launch_us", [1, 7, 30])
def test_the_host_launch_model_folds_to_the_ns(tmp_path, launch_us):
    """Kernels launched by a host that runs ahead (``host_launch_us``): launches wait as events of their own."""
    check_exact(write_pipeline(tmp_path, 4, 16), host_launch_us=launch_us)


@pytest.mark.parametrize("launch_us", [1, 6])
def test_a_host_behind_its_gpu_is_not_compared_by_its_clock_and_the_run_folds_to_the_ns(tmp_path, launch_us):
    """A host that launches faster than the GPU runs falls further behind every period (its clock is not the same
    relative to now, and these runs never repeated before): once it has posted its held receives and can delay no
    launch it is left out of the compared state, and a jump leaves it where it is (its walk goes on from there)."""
    info = check_exact(write_pipeline(tmp_path, 4, 48, layers=4), host_launch_us=launch_us, host_sync_us=0)
    assert info["folded"] is True, info


def test_astra_run_time_fold_says_what_it_jumped_over_and_is_off_by_default(tmp_path, capsys):
    prefix, system, network = write_pipeline(tmp_path, 4, 16)
    argv = ["run", "--workload-configuration", prefix, "--system-configuration", system, "--network-configuration",
            network, "--report-json", str(tmp_path / "r.json")]
    assert main(argv + ["--time-fold"]) == 0
    out = capsys.readouterr().out.replace("\n", " ")
    info = json.loads((tmp_path / "r.json").read_text())["settings"]["fold"]["time"]
    assert info["folded"] is True and f"time folded: {info['periods']:,} repeats of" in out
    for off in ([], ["--time-fold", "--no-fold"]):
        assert main(argv + off) == 0
        assert "time folded" not in capsys.readouterr().out
        assert "time" not in json.loads((tmp_path / "r.json").read_text())["settings"]["fold"]


class _AlwaysFold:
    """The fold planner with the cost rule off (folds whenever a symmetry is found)."""

    @staticmethod
    @hookimpl
    def astra_fold_planner(setup, catalogue, requested, refused):
        from astra_folding.plan import FoldPlanner

        return FoldPlanner(setup, catalogue, requested, refused, event_cost=0)


@pytest.mark.parametrize("chunks", [1, 2])
def test_a_run_folded_by_symmetry_folds_in_time_too_to_the_ns(tmp_path, chunks):
    """Two identical pipelines side by side (ranks 0-3 and 4-7): a symmetry, 4 ranks simulated. The folded engine's
    histories are reset at the compared points (astra_folding.time_ties): the report is the one without the time
    fold, and the unfolded run's."""
    first = write_pipeline(tmp_path, 4, 32, chunks)
    for rank in range(4):  # the second pipeline: the same traces, peers moved by 4
        trace = read_et(f"{first[0]}.{rank}.et")
        nodes = trace[1] if isinstance(trace, tuple) else trace.nodes
        for node in nodes:
            for key in ("comm_src", "comm_dst"):
                if key in node.attrs:
                    node.attrs[key] += 4
        write_et(f"{first[0]}.{rank + 4}.et", make_metadata(), nodes)
    (tmp_path / "net.yml").write_text("topology: [ Ring, Ring ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50, 50 ]\n"
                                      "latency: [ 500, 500 ]\n")
    (tmp_path / "sys.json").write_text(json.dumps({"all-reduce-implementation": ["ring", "ring"], "local-mem-bw": 50}))
    report = simulate(*first, time_fold=True, extra_plugins=(_AlwaysFold,))
    assert report.stats["simulated_ranks"] == 4
    assert report.settings["fold"]["time"]["folded"] is True, report.settings["fold"]
    plain = simulate(*first, extra_plugins=(_AlwaysFold,))
    assert plain.stats["simulated_ranks"] == 4
    assert report_json(report) == report_json(plain)
    assert numbers(report) == numbers(simulate(*first, fold=False))


class _Spans:
    """Keeps every rank's spans (node id, start, end in finish order) as the run left them, and, with ``observe``,
    every finished node as an observer of its own sees it (which makes a jump report its nodes one by one)."""

    def __init__(self, observe=False):
        self.spans, self.seen, self.observe = None, [], observe

    @hookimpl
    def astra_run_start(self, run):
        run.record_spans()
        if self.observe:
            run.add_node_observer(lambda rank, node, start, end: self.seen.append((rank, node.id, start, end)))

    @hookimpl
    def astra_run_finish(self, run, report):
        self.spans = {rank: bytes(spans) for rank, spans in run.spans.spans.items()}


@pytest.mark.parametrize("chunks", [1, 2])
def test_a_jump_reports_in_bulk_the_spans_each_node_would_have(tmp_path, chunks):
    """No output observes the nodes one by one: the repeats' spans are written in bulk, and are the unfolded run's
    byte for byte; with an observer of its own every node is reported to it, in the unfolded run's order."""
    args = write_pipeline(tmp_path, 4, 32, chunks)
    bulk, each, plain, plain_seen = _Spans(), _Spans(observe=True), _Spans(), _Spans(observe=True)
    info = simulate(*args, time_fold=True, extra_plugins=(bulk,)).settings["fold"]["time"]
    assert info["folded"] is True, info
    assert simulate(*args, time_fold=True, extra_plugins=(each,)).settings["fold"]["time"]["folded"] is True
    simulate(*args, extra_plugins=(plain,))
    simulate(*args, extra_plugins=(plain_seen,))
    assert bulk.spans == plain.spans == each.spans
    assert each.seen == plain_seen.seen


GPU_MM = {"is_cpu_op": False, "inputs_shapes": "[[2048, 2048], [2048, 2048]]",
          "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"}


def _as_aten_ops(prefix, stages, odd=None):
    """Every kernel of the pipeline an ``aten::mm`` with shapes (the gpu model times it from them), but those
    whose id is in ``odd`` (per rank a range), which become ``aten::relu`` with the same attributes: only the
    name tells them apart."""
    for rank in range(stages):
        trace = read_et(f"{prefix}.{rank}.et")
        nodes = trace[1] if isinstance(trace, tuple) else trace.nodes
        for node in nodes:
            if node.type == T.COMP_NODE:
                node.name = "aten::relu" if odd is not None and node.id in odd[rank] else "aten::mm"
                node.attrs.update(GPU_MM)
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)


@pytest.mark.parametrize("chunks", [1, 2])
def test_the_gpu_model_folds_in_time_to_the_ns(tmp_path, chunks):
    """The gpu model times a kernel from its node alone (name, shapes; its counts move on with the jump)."""
    args = write_pipeline(tmp_path, 4, 32, chunks)
    _as_aten_ops(args[0], 4)
    info = check_exact(args, compute_model="gpu")
    assert info["folded"] is True, info


def test_the_gpu_model_reads_a_kernels_name_and_a_jump_does_not_skip_a_renamed_one(tmp_path):
    """Kernels of the steady state that differ from their neighbours by their ATen name only: a jump over them
    would time them as the others; the numbers stay the unfolded run's."""
    args = write_pipeline(tmp_path, 4, 48)
    odd = {}
    for rank in range(4):
        trace = read_et(f"{args[0]}.{rank}.et")
        count = len(trace[1] if isinstance(trace, tuple) else trace.nodes)
        odd[rank] = range(count * 6 // 10, count * 6 // 10 + 4)
    _as_aten_ops(args[0], 4, odd)
    check_exact(args, compute_model="gpu")


@pytest.mark.parametrize("mode", ["sm-hbm", "measured"])
@pytest.mark.parametrize("observe", [False, True])
def test_gpu_contention_folds_in_time_to_the_ns(tmp_path, mode, observe):
    """--gpu-contention: a kernel's time reads the sends running beside it (compared state); the model's intervals
    (its utilisation report) are the unfolded run's, replayed in bulk or, with an observer of its own, its
    communication intervals seen node by node."""
    args = write_pipeline(tmp_path, 4, 48, size=64 << 20, overlap=True)
    _as_aten_ops(args[0], 4)
    extra = (_Spans(observe=True),) if observe else ()
    runs = {}
    info = check_exact(args, reports=runs, compute_model="gpu", gpu_contention=True, gpu_contention_model=mode,
                       extra_plugins=extra)
    assert info["folded"] is True, info
    # without an observer the unfolded run is check_exact's own (CI margin: not run again)
    report = runs["plain"] if not observe else simulate(*args, compute_model="gpu", gpu_contention=True,
                                                        gpu_contention_model=mode)
    assert any(r["contended_compute_ns"] for r in report.stats["gpu_utilization"].values())  # it did contend


def test_gpu_contention_with_per_transfer_hbm_shares_is_not_folded_and_says_why(tmp_path):
    args = write_pipeline(tmp_path, 4, 16)
    _as_aten_ops(args[0], 4)
    info = check_exact(args, compute_model="gpu", gpu_contention=True, nccl_nic_gbps=50)
    assert info["folded"] is False and "per-transfer HBM shares" in info["reason"]


@pytest.mark.parametrize("change", ["value", "extra", "missing"])
def test_a_kernel_whose_read_attributes_differ_is_not_jumped_over(tmp_path, change):
    """Roofline kernels (timed from ``num_ops`` and ``tensor_size``); a few in the steady state differ from their
    neighbours by one attribute's value, by one more attribute or by one fewer: the numbers stay the unfolded run's."""
    args = write_pipeline(tmp_path, 4, 48)
    for rank in range(4):
        trace = read_et(f"{args[0]}.{rank}.et")
        nodes = trace[1] if isinstance(trace, tuple) else trace.nodes
        odd = range(len(nodes) * 6 // 10, len(nodes) * 6 // 10 + 4)
        for node in nodes:
            if node.type == T.COMP_NODE:
                node.attrs.update(num_ops=1 << 30, tensor_size=1 << 20, label=f"k{node.id}")
                if node.id in odd and change == "value":
                    node.attrs["num_ops"] = 1 << 32
                elif node.id in odd and change == "extra":
                    node.attrs["is_cpu_op"] = True  # timed as a CPU op, on its own slot
                elif node.id not in odd and change == "missing":
                    node.attrs["is_cpu_op"] = False
        write_et(f"{args[0]}.{rank}.et", make_metadata(), nodes)
    pathlib.Path(args[1]).write_text(json.dumps({"all-reduce-implementation": ["ring"], "local-mem-bw": 50,
                                                 "peak-perf": 100}))
    check_exact(args, compute_model="roofline")


def test_a_trace_whose_sends_do_not_repeat_is_run_as_it_is_and_says_why(tmp_path):
    """Three micro-batches on four stages: the anchor's sends and receives never repeat long enough anywhere in its
    trace, so no state can: the run is not looked at (no cost) and says why."""
    info = check_exact(write_pipeline(tmp_path, 4, 3))
    assert info["folded"] is False and "do not repeat long enough" in info["reason"]


@pytest.mark.parametrize("layers,chunks,micro_batches", [
    (8, 1, 32), pytest.param(16, 2, 64, marks=pytest.mark.slow)])
def test_gpt3_layers_on_a_platform_fold_in_time_to_the_ns(tmp_path, layers, chunks, micro_batches):
    """GPT-3 175B's layers from ``astra workload llm`` (FP8 GEMMs, PP 8, 1F1B or interleaved) on ``--platform
    hgx-h100``: the gpu model with its measured contention and the host launch model, as every platform run."""
    prefix = str(tmp_path / "g")
    assert main(["workload", "llm", "--preset", "gpt3-175b", "--layers", str(layers), "--tp", "1", "--pp", "8",
                 "--virtual-stages", str(chunks), "--micro-batches", str(micro_batches), "--micro-batch-size", "1",
                 "--gemm-dtype", "fp8", "--no-dropout", "-o", prefix]) == 0
    info = check_exact((), workload=prefix, platform="hgx-h100", nodes=1, comm_groups=prefix + ".groups.json",
                       allow_oom=True)
    assert info["folded"] is True, info


@pytest.mark.parametrize("stages,micro_batches,chunks,splits,policy", [
    (4, 16, 1, 1, "LIFO"), (4, 32, 2, 1, "LIFO"), (4, 24, 1, 4, "FIFO"), (2, 16, 3, 2, "EXPLICIT")])
def test_tensor_parallel_collectives_in_the_steady_state_fold_in_time_to_the_ns(tmp_path, stages, micro_batches, chunks,
                                                                               splits, policy):
    """TP 2: after every kernel an all-reduce on the stage's two ranks, timed by NCCL's model (1F1B and interleaved;
    one or several chunks per collective; the three scheduling policies). Their stream counters move on every
    period; the state is compared without them and the jump moves them on."""
    args = write_pipeline(tmp_path, stages, micro_batches, chunks, tp=2, tp_bytes=8 << 20, splits=splits,
                          policy=policy)
    info = check_exact(args, comm_groups=args[0] + ".groups.json")
    assert info["folded"] is True, info


@pytest.mark.parametrize("chunks,micro_batches,layers", [(1, 32, 3), (2, 64, 2)])
def test_tensor_parallel_collectives_beside_kernels_fold_in_time_with_the_measured_contention(tmp_path, chunks,
                                                                                             micro_batches, layers):
    """The all-reduces run beside the next kernels (the gpu model's measured contention: a collective that starts
    beside a kernel is slowed until it ends, which reads the kernels running then; a kernel beside a collective
    whose end is known, read from its dataset). Every number is the unfolded run's."""
    args = write_pipeline(tmp_path, 4, micro_batches, chunks, layers=layers, tp=2, tp_bytes=64 << 20, tp_overlap=True)
    _as_aten_ops(args[0], 8)
    options = dict(comm_groups=args[0] + ".groups.json", compute_model="gpu", gpu_contention=True,
                   gpu_contention_model="measured")
    runs = {}
    info = check_exact(args, reports=runs, **options)
    assert info["folded"] is True, info
    report = runs["plain"]  # the unfolded run (CI margin: check_exact's own, not run again)
    assert any(r["contended_compute_ns"] for r in report.stats["gpu_utilization"].values())  # it did contend


@pytest.mark.parametrize("tp_bytes", [1 << 10, 64 << 20])
def test_collectives_of_packets_fold_in_time_only_where_none_runs_at_the_compared_points(tmp_path, tp_bytes):
    """The native ring sends packets whose handlers are its own: a state where one runs is not compared (the
    report says so). Where none runs at the compared points (small ones) the state compares without them, and the
    counters that number their packets move on with the jump: the same numbers either way."""
    args = write_pipeline(tmp_path, 4, 16, tp=2, tp_bytes=tp_bytes, overlap=True)
    pathlib.Path(args[1]).write_text(json.dumps({"all-reduce-implementation": ["ring"], "local-mem-bw": 50,
                                                 "preferred-dataset-splits": 2}))
    info = check_exact(args, comm_groups=args[0] + ".groups.json")
    assert info["folded"] is True or info["reason"], info


class _NoRankFold:
    """The fold planner that never folds ranks (the cost rule at its most expensive): every rank is simulated."""

    @staticmethod
    @hookimpl
    def astra_fold_planner(setup, catalogue, requested, refused):
        from astra_folding.plan import FoldPlanner

        return FoldPlanner(setup, catalogue, requested, refused, event_cost=float("inf"))


MLPERF_OVERLAP = pathlib.Path(__file__).parents[2] / "validation/src/astra_validation/cases/mlperf_v31_gpt3_tp_overlap.yaml"


# 16 of GPT-3's 96 layers (the whole depth took 74 s in CI; benchmarks/bench_time_fold.py checks the validation's own
# TP 4 layout, every report against the unfolded one). Every rank simulated and ranks folded by symmetry are one test
# (CI margin): one trace written, and the run with --no-fold (the same simulation for both: with folding off the
# planner is never asked) made once.
def test_the_mlperf_gpt3_layout_at_small_scale_folds_in_time_to_the_ns(tmp_path):
    """The validation case mlperf-v3.1-gpt3-512's flags (sequence parallelism, TP communication overlap in
    userbuffers exchanges, ZeRO-1 with overlapped parameter all-gather, FP8, the amax all-reduces, the case's SM
    budgets) at TP 2, PP 4, VP 2, DP 2 on hgx-h100 (2 nodes), every rank simulated: tensor-parallel exchanges,
    pipeline transfers and collectives in the steady state; and ranks folded by symmetry as the case runs (4 of
    16 simulated: TP and DP peers fold)."""
    prefix = str(tmp_path / "g")
    assert main(["workload", "llm", "--preset", "gpt3-175b", "--layers", "16",
                 "--tp", "2", "--pp", "4", "--virtual-stages", "2", "--micro-batch-size", "1", "--sequence-parallel",
                 "--zero", "1", "--overlap-param-gather", "--tp-comm-overlap", "--gemm-dtype", "fp8", "--no-dropout",
                 "--dtype", "bf16", "--dp", "2", "--micro-batches", "32", "--comm-sms",
                 "tp=8,dp=8,pp=2,amax=1", "--tp-overlap-config", str(MLPERF_OVERLAP), "-o", prefix]) == 0
    options = dict(workload=prefix, platform="hgx-h100", nodes=2, comm_groups=prefix + ".groups.json",
                   allow_oom=True)
    for every_rank in (True, False):
        info = check_exact((), no_fold_run=every_rank, extra_plugins=(_NoRankFold,) if every_rank else (), **options)
        assert info["folded"] is True, (every_rank, info)
        assert info["skipped_events"] > 0, every_rank


@pytest.mark.parametrize("chunks,tp_overlap", [(1, False), (2, True)])
def test_tensor_parallel_ranks_folded_by_symmetry_fold_in_time_too(tmp_path, chunks, tp_overlap):
    """TP 2 along the network's first dimension: each stage's two ranks fold into one (4 of 8 simulated), the
    all-reduces between them mirrored; the time fold jumps over the folded run's repeats, and the numbers are the
    folded run's and the unfolded run's."""
    args = write_pipeline(tmp_path, 4, 32, chunks, tp=2, tp_bytes=8 << 20, tp_overlap=tp_overlap)
    groups = args[0] + ".groups.json"
    runs = {}
    info = check_exact(args, reports=runs, comm_groups=groups, extra_plugins=(_AlwaysFold,))
    assert info["folded"] is True, info
    # check_exact's own runs (CI margin: not run again): folded in time and by symmetry; and with --no-fold, where
    # the planner is never asked and nothing folds in time, so every rank runs as with fold=False alone
    report, unfolded = runs["folded"], runs["no_fold"]
    assert report.stats["simulated_ranks"] == 4 and unfolded.stats["simulated_ranks"] == 8
    assert numbers(report) == numbers(unfolded)
