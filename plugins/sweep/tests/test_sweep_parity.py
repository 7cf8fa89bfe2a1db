"""A sweep point is ``astra run`` with the same options: for every registered platform (TPUs too) a one-point
sweep's step_ns equals :func:`astra_sim.runner.run_spec` of ``RunSpec.from_mapping`` with the same options, to
the ns; platform axes are the platform's ``variant``; system/network axes keep what the platform implies; an
unknown platform or run option is an error naming the key."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_sim.platforms import get_platform, platforms
from astra_sim.runner import run_spec
from astra_sim.spec import RunSpec

from astra_sweep import Executor, run_sweep
from astra_sweep.results import Results

SIZE_BYTES = 4 << 20


class InProcess(Executor):
    """Every point in this process, one after the other (no worker start-up in a unit test)."""

    name = "in-process"

    def run(self, fn, tasks, timeout=None):
        for task, payload in tasks:
            yield task, fn(task, payload)


def _all_reduce(prefix, ranks):
    """A compact trace: one all-reduce of SIZE_BYTES on ``ranks`` ranks (one class of symmetric ranks)."""
    from astra_sim.chakra import encode_et, make_metadata, make_node, types as T
    from astra_folding.symmetry import BlockShift
    from astra_workload_compact import write_compact_workload

    node = make_node(0, "all_reduce", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": SIZE_BYTES})
    write_compact_workload(prefix, ranks, [BlockShift(1, ranks, ranks)],
                           [(0, encode_et(make_metadata(), [node]))], generator="sweep parity test")
    return str(prefix)


def _rows(tmp_path, text, name="r.csv"):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / name
    summary = run_sweep(str(spec), str(out), progress=False, executor_object=InProcess())
    rows = Results(str(out), [], {})._read_results()
    assert summary["ok"] == len(rows), [r["status"] for r in rows]
    return rows


def _step(report):
    return max(rank["finish_ns"] for rank in report.to_dict()["ranks"])


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_sweep_row_is_astra_run_on_every_platform(tmp_path, name):
    platform = get_platform(name)
    prefix = _all_reduce(tmp_path / "w", platform.gpus_per_node)
    rows = _rows(tmp_path, f"workload: {{trace: {prefix}}}\nrun: {{platform: {name}}}\n")
    direct = run_spec(RunSpec.from_mapping({"workload": prefix, "platform": name, "nodes": 1}))
    assert rows[0]["step_ns"] == _step(direct) > 0


def test_two_nodes_and_run_options_are_astra_runs(tmp_path):
    prefix = _all_reduce(tmp_path / "w", 16)
    rows = _rows(tmp_path, f"workload: {{trace: {prefix}}}\nrun: {{platform: hgx-h100, host-launch-us: 0}}\n"
                 "axes:\n  grid: {run.platform-collective: [ring, nccl]}\n")
    for row in rows:
        collective = row["run.platform-collective"]
        direct = run_spec(RunSpec.from_mapping({"workload": prefix, "platform": "hgx-h100", "nodes": 2,
                                                "host-launch-us": 0, "platform-collective": collective}))
        assert row["step_ns"] == _step(direct), collective
    assert rows[0]["step_ns"] != rows[1]["step_ns"]


def test_platform_axes_are_the_platforms_variants(tmp_path):
    prefix = _all_reduce(tmp_path / "w", 16)
    rows = _rows(tmp_path, f"workload: {{trace: {prefix}}}\nrun: {{platform: hgx-h100}}\n"
                 "axes:\n  grid: {platform.nic_gbps: [12.5, 50], platform.gpus_per_node: [4, 8]}\n")
    assert len({row["step_ns"] for row in rows}) == 4
    for row in rows:
        variant = get_platform("hgx-h100").variant(nic_gbps=row["platform.nic_gbps"],
                                                    gpus_per_node=row["platform.gpus_per_node"])
        spec = RunSpec.from_mapping({"workload": prefix}).replace(platform=variant,
                                                                  nodes=16 // row["platform.gpus_per_node"])
        assert row["step_ns"] == _step(run_spec(spec)), row


def test_system_and_network_axes_keep_what_the_platform_implies(tmp_path):
    """Overriding a system key with the platform's own value changes nothing: the host model, contention,
    NCCL collective and GPU compute model the platform implies still apply; another value changes the step."""
    prefix = _all_reduce(tmp_path / "w", 16)
    direct = _step(run_spec(RunSpec.from_mapping({"workload": prefix, "platform": "hgx-h100", "nodes": 2})))
    rows = _rows(tmp_path, f"workload: {{trace: {prefix}}}\nrun: {{platform: hgx-h100}}\n"
                 "axes:\n  grid: {system.preferred-dataset-splits: [1, 4], network.latency.1: [1000.0]}\n")
    by_splits = {row["system.preferred-dataset-splits"]: row["step_ns"] for row in rows}
    assert by_splits[1] == direct  # the nccl platform writes preferred-dataset-splits 1, fabric latency 1000
    assert by_splits[4] != direct


def test_gpu_axes_change_the_platforms_gpu(tmp_path):
    prefix = _all_reduce(tmp_path / "w", 8)
    rows = _rows(tmp_path, f"workload: {{trace: {prefix}}}\nrun: {{platform: hgx-h100, platform-collective: ring}}\n"
                 "axes:\n  grid: {gpu.hbm_bandwidth_gbps: [1000, 3350]}\n")
    assert rows[0]["step_ns"] != rows[1]["step_ns"]  # the ring's reductions run at the GPU's memory bandwidth


@pytest.mark.parametrize("text, needle", [
    ("run: {platform: no-such-machine}\n", "run.platform: unknown --platform 'no-such-machine'"),
    ("run: {platform: hgx-h100}\naxes:\n  grid: {run.platform: [hgx-h100, tpu-v9]}\n",
     "axis run.platform: unknown --platform 'tpu-v9'"),
    ("run: {platform: hgx-h100, platform-colective: nccl}\n",
     "run.platform-colective: unknown astra run option 'platform-colective' (did you mean 'platform-collective'?)"),
    ("run: {platform: hgx-h100, timeline: t.json}\n", "run.timeline: timeline writes files of its own"),
])
def test_unknown_platforms_and_options_name_the_key(tmp_path, text, needle):
    prefix = _all_reduce(tmp_path / "w", 8)
    with pytest.raises(ConfigError) as info:
        _rows(tmp_path, f"workload: {{trace: {prefix}}}\n" + text)
    assert needle in str(info.value)


def test_generated_workloads_are_the_generators_and_astra_runs(tmp_path):
    """llm and micro points: the workload the generator's public call writes, run as astra run runs it."""
    from astra_workload_generators.llm import generate_llm_workload
    from astra_workload_generators.micro import generate_micro

    llm = {"preset": "gpt3-13b", "layers": 4, "hidden": 512, "heads": 8, "kv-heads": 8, "ffn-hidden": 2048,
           "seq-len": 256, "tp": 2, "pp": 2, "dp": 2, "micro-batches": 2}
    rows = _rows(tmp_path, "workload:\n  llm: " + repr(llm).replace("'", "") +
                 "\nrun: {platform: hgx-h100, compute-model: gpu}\n", "llm.csv")
    generate_llm_workload(llm, str(tmp_path / "llm"))
    direct = run_spec(RunSpec.from_mapping({"workload": str(tmp_path / "llm"), "platform": "hgx-h100",
                                            "compute-model": "gpu"}))
    assert rows[0]["step_ns"] == _step(direct)
    rows = _rows(tmp_path, "workload: {micro: {collective: all_reduce, size: 64MiB, npus: 8}}\n"
                 "run: {platform: hgx-h100}\n", "micro.csv")
    generate_micro(str(tmp_path / "ar"), collective="all_reduce", size="64MiB", npus=8)
    direct = run_spec(RunSpec.from_mapping({"workload": str(tmp_path / "ar"), "platform": "hgx-h100"}))
    assert rows[0]["step_ns"] == _step(direct)  # (issue 34: astra run 390393 ns, the sweep gave 342144 ns)
