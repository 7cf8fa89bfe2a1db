"""``astra search --nccl-nvls off``: the layouts run with NCCL_NVLS_ENABLE=0 (no NVLS nor NVLSTree in NCCL's choice,
src/transport/nvls.cc v2.26.2-1 lines 147-171 and enqueue.cc's cost table), and their lower bound times each
collective with the same choice: the bound's NCCL config is the run's own object (``config_for_options`` keyed on
``nccl_nvls``). A bound priced with NVLSTree where the run cannot use it is not guaranteed below the run: the choice is
made on NCCL's uncalibrated times, and the picked pair is then timed with calibrated ones.

The case, by hand: a 2-layer model (hidden 512, MLP 1376) on two hgx-h100 nodes, TP 2 x DP 8, ZeRO 0, NCCL 2.26's
tuning. Each layer's gradients are one all-reduce of about 3,164,160 B over the data-parallel group, 2 nodes of 4
ranks. With NVLS, 2.26 picks NVLSTree: 25 + 2 x 14 = 53 us + 3,164,160 B / (4 x 48 x 5/6 = 160 GB/s) = 72.78 us.
Without, ring LL128: NCCL's ring graph of 4 GPUs with 4 NICs is 8 channels at 24 GB/s (search.cc: one channel at 48
per NIC, duplicated), busBw min(0.92 x 8 x 24 = 176.64, 8 x 36.7) = 176.64, algBw 176.64 x 8/14 = 100.94 GB/s:
31.35 us + 44.8 us of latency = 76.15 us (tree LL128 99.64 us is next). Each pair is then timed with master's
calibrated terms, so the bound's serial work changes by the sum of the differences."""

from __future__ import annotations

import pytest

from astra_gpu_model import nccl, nccl_tuning
from astra_sim.platforms import get_platform

from astra_sweep.bound import BoundCache
from astra_workload_generators.llm import LlmConfig

LAYER_AR_BYTES = 3164160
CFG = LlmConfig(tp=2, pp=1, dp=8, micro_batches=1, micro_batch_size=1, zero=0, sequence_parallel=True)
V226 = "2.26.2"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


def test_nvls_off_changes_the_pair_by_hand():
    from dataclasses import replace

    on = nccl.config_for_options({"gpu": "h100-sxm", "nccl_version": V226})
    off = nccl.config_for_options({"gpu": "h100-sxm", "nccl_version": V226, "nccl_nvls": "off"})
    assert on.nvls and not off.nvls and off.tuning == nccl_tuning.V2_26
    top_on = nccl.predict("all_reduce", LAYER_AR_BYTES, 8, replace(on, calibrated=False), 2)[0]
    top_off = nccl.predict("all_reduce", LAYER_AR_BYTES, 8, replace(off, calibrated=False), 2)[0]
    assert top_on[1] == nccl.NVLS_TREE and top_on[0] == pytest.approx(53.0 + LAYER_AR_BYTES / 160e3)
    assert top_off[1:3] == (nccl.RING, nccl.LL128)
    assert top_off[4] == pytest.approx(LAYER_AR_BYTES / (1000 * 0.92 * 8 * 24 * 8 / 14))
    assert top_off[0] == pytest.approx(76.15, abs=0.01)


@pytest.fixture(scope="module")
def caches(tiny):
    """The bound's caches of 2.26 with NVLS and without, as the search makes them, with the layout's terms."""
    source = {"model": tiny, "seq-len": 256, "platform": "hgx-h100"}
    out = {}
    for nvls in (None, "off"):
        cache = BoundCache.for_platform(source, get_platform("hgx-h100"), 16, disk=False, nccl_version=V226,
                                        nccl_nvls=nvls)
        out[nvls] = (cache, cache.terms(CFG))
    return out


def test_the_bound_uses_the_runs_nvls_setting(caches, dp_all_reduce_bytes):
    (on, a), (off, b) = caches[None], caches["off"]
    assert off.nccl is nccl.config_for_options({"gpu": off.gpu, "nccl_nic_gbps": off.nic_gbps,
                                                "nccl_version": V226, "nccl_nvls": "off"})  # the run's own object
    assert on.nccl.nvls and not off.nccl.nvls
    sizes = dp_all_reduce_bytes
    assert sum(abs(size - LAYER_AR_BYTES) < 16384 for size in sizes) == 2  # the layers' (and their norms')
    ns = [[int(nccl.collective_time_us("all_reduce", size, 8, c.nccl, 2)[0] * 1000) for size in sizes]
          for c in (on, off)]
    assert b.slot_fixed_ns[0] - a.slot_fixed_ns[0] == sum(ns[1]) - sum(ns[0]) != 0
    assert b.bound_ns(1) != a.bound_ns(1)


def test_a_search_without_nvls_bounds_its_own_runs(caches, search_in_process):
    """The search end to end: its one layout runs with 2.26 and NVLS off (the sweep's run options say so), and its
    bound, the NVLS-off one, stays at or below the simulated step."""
    answer, runs = search_in_process("--nccl-version", V226, "--nccl-nvls", "off")
    assert runs and all(run["nccl-nvls"] == "off" and run["nccl-version"] == V226 for run in runs)
    step = answer["ranked"][0]["step_ns"]
    bound = caches["off"][1].bound_ns(1)
    assert answer["bound_error"]["max"] == round(bound / step, 4) <= 1
    assert round(caches[None][1].bound_ns(1) / step, 4) != answer["bound_error"]["max"]


def test_search_refuses_a_bad_nvls_word(capsys):
    from astra_sim.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["search", "--gpus", "16", "--platform", "hgx-h100", "--nccl-nvls", "maybe"])
    assert stop.value.code == 2
    assert "--nccl-nvls" in capsys.readouterr().err
