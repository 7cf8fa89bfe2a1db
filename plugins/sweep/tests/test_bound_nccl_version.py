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

import pytest

from astra_gpu_model import nccl, nccl_tuning
from astra_sim.platforms import get_platform

from astra_sweep.bound import BoundCache
from astra_workload_generators.llm import LlmConfig

LAYER_AR_BYTES = 3162112
CFG = LlmConfig(tp=2, pp=1, dp=8, micro_batches=1, micro_batch_size=1, zero=0, sequence_parallel=True)


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


def test_the_bound_times_the_runs_release(caches, dp_all_reduce_bytes):
    (default, a), (old, b) = caches[None], caches["2.26.2"]
    assert old.nccl is nccl.config_for_options({"gpu": old.gpu, "nccl_nic_gbps": old.nic_gbps,
                                                "nccl_version": "2.26.2"})  # the run's own object
    assert default.nccl.tuning == nccl_tuning.MASTER and old.nccl.tuning == nccl_tuning.V2_26
    sizes = dp_all_reduce_bytes
    layers = [size for size in sizes if 2.5 * 2**20 <= size <= 10.5 * 2**20]  # where the picks differ
    assert len(layers) == 2 and abs(layers[0] - LAYER_AR_BYTES) < 16384  # the layers' (and their norms')
    ns = [[int(nccl.collective_time_us("all_reduce", size, 8, c.nccl, 2)[0] * 1000) for size in sizes]
          for c in (default, old)]
    assert b.slot_fixed_ns[0] - a.slot_fixed_ns[0] == sum(ns[1]) - sum(ns[0]) > 0
    assert b.bound_ns(1) > a.bound_ns(1)


def test_a_search_with_the_release_bounds_its_own_runs(caches, search_in_process):
    """The search end to end: its one layout runs with 2.26 (the sweep's run options say so) and its bound, the
    2.26 one, stays below the simulated step."""
    answer, runs = search_in_process("--nccl-version", "2.26.2")
    assert runs and all(run["nccl-version"] == "2.26.2" for run in runs)
    step = answer["ranked"][0]["step_ns"]
    bound = caches["2.26.2"][1].bound_ns(1)
    assert answer["bound_error"]["max"] == round(bound / step, 4) <= 1
    assert round(caches[None][1].bound_ns(1) / step, 4) != answer["bound_error"]["max"]
