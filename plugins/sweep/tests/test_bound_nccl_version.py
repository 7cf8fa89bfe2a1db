"""``astra search --nccl-version``: the layouts run with that release's NCCL choice across nodes, and their lower
bound times each collective with the same choice (astra_sweep.bound through ``config_for_options``): a bound priced
with another release's pair could exceed the run it bounds.

The case, by hand: a 2-layer model (hidden 512, MLP 1376) on two hgx-h100 nodes, TP 2 x DP 8, ZeRO 0. Its
data-parallel group (ranks 0, 2, ..., 14) spans 2 nodes of 4 ranks each, and each layer's gradients are one
all-reduce on it of about (4 x 512^2 + 3 x 512 x 1376) / 2 bf16 = 3,162,112 bytes (the generator's exact count, with
the norms', is read from its trace). NCCL master's model (the default) runs ring LL128. NCCL 2.26's picks NVLSTree:
its NVLS graph on 4 heads of path 48 GB/s is 4 channels at 48 (NVLink 370.8 holds floor(370.8 / 48) - 1 = 6 >= 4),
so 53 us (25 + 2 x log2(2) x 14) + 3,162,112 B / (4 x min(48, 48) x 5/6 = 160 GB/s) = 72.76 us, below ring LL128's
(the picks differ from 2.5 to 10.5 MiB). Each run times its pair with master's calibrated terms, so the 2.26 run's
all-reduce is the slower one. The bound follows: its communicators' serial work holds both layer all-reduces, so it
rises by the sum of their differences."""

from __future__ import annotations

import json

import pytest

from astra_gpu_model import nccl, nccl_tuning
from astra_sim.platforms import get_platform

from astra_sweep.bound import BoundCache
from astra_workload_generators.llm import LlmConfig

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
        "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 32000,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"}
LAYER_AR_BYTES = 3162112
CFG = LlmConfig(tp=2, pp=1, dp=8, micro_batches=1, micro_batch_size=1, zero=0, sequence_parallel=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


def test_the_release_changes_the_pair_by_hand():
    master = nccl.config_for_options({"gpu": "h100-sxm"})
    old = nccl.config_for_options({"gpu": "h100-sxm", "nccl_version": "2.26.2"})
    assert nccl.collective_time_us("all_reduce", LAYER_AR_BYTES, 8, master, 2)[1:] == (nccl.RING, nccl.LL128)
    assert nccl.collective_time_us("all_reduce", LAYER_AR_BYTES, 8, old, 2)[1:] == (nccl.NVLS_TREE, nccl.SIMPLE)
    assert nccl_tuning.nvls_graph(nccl_tuning.SPEEDS_INTER_226["sm90"], 4, 50.0, 48.0, 370.8) == (4, 48.0, 48.0)
    raw = nccl.config_for_gpu("h100-sxm", calibrated=False, tuning=nccl_tuning.V2_26)
    top = nccl.predict("all_reduce", LAYER_AR_BYTES, 8, raw, 2)[0]
    assert top[1] == nccl.NVLS_TREE and top[0] == pytest.approx(53.0 + LAYER_AR_BYTES / 160e3)


@pytest.fixture(scope="module")
def caches(tiny):
    """The bound's caches of the default and of 2.26, as the search makes them, with the layout's terms."""
    source = {"model": tiny, "seq-len": 256, "platform": "hgx-h100"}
    out = {}
    for version in (None, "2.26.2"):
        cache = BoundCache.for_platform(source, get_platform("hgx-h100"), 16, disk=False, nccl_version=version)
        out[version] = (cache, cache.terms(CFG))
    return out


def _dp_all_reduce_bytes(tiny, folder):
    """The sizes of rank 0's all-reduces on its data-parallel group (ranks 0, 2, ..., 14), from the generator."""
    from astra_sim.chakra import types as T
    from astra_workload_compact import read_compact_workload, trace_nodes
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    from astra_sweep.search import _options

    prefix = str(folder / "w")
    generate_llm_workload(LlmSpec.from_mapping({"model": tiny, "seq-len": 256, **_options(CFG)}, "workload.llm"),
                          prefix, on_warning=lambda _: None)
    groups = json.loads((folder / "w.groups.json").read_text())
    dp = [g for g, members in groups.items() if members == list(range(0, 16, 2))]
    return [node.attrs["comm_size"] for node in trace_nodes(read_compact_workload(prefix).traces[0])
            if node.type == T.COMM_COLL_NODE and node.attrs.get("comm_type") == T.ALL_REDUCE
            and str(node.attrs.get("pg_name")) in dp]


def test_the_bound_times_the_runs_release(caches, tiny, tmp_path):
    (default, a), (old, b) = caches[None], caches["2.26.2"]
    assert old.nccl is nccl.config_for_options({"gpu": old.gpu, "nccl_nic_gbps": old.nic_gbps,
                                                "nccl_version": "2.26.2"})  # the run's own object
    assert default.nccl.tuning == nccl_tuning.MASTER and old.nccl.tuning == nccl_tuning.V2_26
    sizes = _dp_all_reduce_bytes(tiny, tmp_path)
    layers = [size for size in sizes if 2.5 * 2**20 <= size <= 10.5 * 2**20]  # where the picks differ
    assert len(layers) == 2 and abs(layers[0] - LAYER_AR_BYTES) < 16384  # the layers' (and their norms')
    ns = [[int(nccl.collective_time_us("all_reduce", size, 8, c.nccl, 2)[0] * 1000) for size in sizes]
          for c in (default, old)]
    assert b.slot_fixed_ns[0] - a.slot_fixed_ns[0] == sum(ns[1]) - sum(ns[0]) > 0
    assert b.bound_ns(1) > a.bound_ns(1)


def test_a_search_with_the_release_bounds_its_own_runs(tiny, caches, capsys, monkeypatch):
    """The search end to end: its one layout runs with 2.26 (the sweep's run options say so) and its bound, the
    2.26 one, stays below the simulated step."""
    import yaml

    from astra_sim import executors
    from astra_sim.cli import main
    from astra_sweep import sweep

    class InProcess(executors.Executor):
        def run(self, fn, tasks, timeout=None):
            for task, payload in tasks:
                yield task, fn(task, payload)

    runs, run_sweep = [], sweep.run_sweep

    def spy(spec_path, *args, **kw):
        with open(spec_path) as handle:
            runs.append(yaml.safe_load(handle)["run"])
        return run_sweep(spec_path, *args, **kw)

    monkeypatch.setattr(sweep, "run_sweep", spy)
    monkeypatch.setattr(executors, "make_executor", lambda *args: InProcess())  # no worker to start: cheap
    assert main(["search", "--model", tiny, "--seq-len", "256", "--gpus", "16", "--platform", "hgx-h100",
                 "--global-batch", "8", "--tp", "2", "--pp", "1", "--vp", "1", "--mbs", "1", "--zero", "0",
                 "--recompute", "none", "--nccl-version", "2.26.2", "--no-progress", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert runs and all(run["nccl-version"] == "2.26.2" for run in runs)
    step = answer["ranked"][0]["step_ns"]
    bound = caches["2.26.2"][1].bound_ns(1)
    assert answer["bound_error"]["max"] == round(bound / step, 4) <= 1
    assert round(caches[None][1].bound_ns(1) / step, 4) != answer["bound_error"]["max"]
