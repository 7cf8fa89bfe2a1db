"""``astra search --cudnn-version``: the layouts run with that cuDNN release's attention rows (astra run's option,
the gpu_model plugin's), and their lower bound's gpu model times attention with the same rows, so the bound stays
below the run it bounds (an older release's rows are not slower at every length: B200 FP8 backward at 2k keys runs
589 TFLOP/s at 9.10.2 against 556 at 9.13.1). On Blackwell only; with --serve, astra serve's --cudnn-version for every candidate."""

from __future__ import annotations

import pytest

from astra_sim.platforms import get_platform

from astra_sweep.bound import BoundCache
from astra_workload_generators.llm import LlmConfig


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))


CFG = LlmConfig(tp=2, pp=1, dp=8, micro_batches=1, micro_batch_size=1, zero=0, sequence_parallel=True)


def test_a_search_on_b200_runs_and_bounds_with_the_release(tiny, search_in_process):
    answer, runs = search_in_process("--platform", "hgx-b200", "--cudnn-version", "9.10.2")
    assert runs and all(run["cudnn-version"] == "9.10.2" for run in runs)
    source = {"model": tiny, "seq-len": 256, "platform": "hgx-b200"}
    old = BoundCache.for_platform(source, get_platform("hgx-b200"), 16, disk=False, cudnn_version="9.10.2")
    new = BoundCache.for_platform(source, get_platform("hgx-b200"), 16, disk=False)
    assert old.model.cudnn_version is not None and new.model.cudnn_version is None
    bound_old, bound_new = old.terms(CFG).bound_ns(1), new.terms(CFG).bound_ns(1)
    assert bound_old > bound_new  # 256 keys: 9.10.2's attention is the slower (x1.83 forward at 512)
    step = answer["ranked"][0]["step_ns"]
    assert answer["bound_error"]["max"] == round(bound_old / step, 4) <= 1


def test_serve_takes_it_for_every_candidate(capsys, monkeypatch):
    """astra search --serve --cudnn-version: every candidate is astra serve with --cudnn-version (a serving door too,
    issue 36); a release older than every B200 measurement is astra serve's one-line error, before anything runs."""
    import astra_serving.search as serving_search
    from astra_sim.cli import main

    seen = []
    monkeypatch.setattr(serving_search, "run_candidate",
                        lambda task, _payload=None: seen.append(task["spec"].cudnn_version) or ("skipped", "test"))
    words = ["search", "--serve", "--model", "llama3-8b", "--platform", "hgx-b200", "--qps", "1",
             "--slo-ttft-p99", "500", "--tp", "8"]
    assert main(words + ["--cudnn-version", "9.10.2"]) == 1  # every candidate skipped here: no answer
    assert seen and set(seen) == {"9.10.2"}
    capsys.readouterr()
    code = main(words + ["--cudnn-version", "9.9"])
    err = capsys.readouterr().err
    assert code != 0 and "--cudnn-version 9.9: no B200 attention was measured" in err
