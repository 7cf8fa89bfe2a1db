"""astra search for GPT-3 175B on 1024 H100s (global batch 1536): the layouts that do not fit are dropped (TP 1
PP 1 with full replication among them), and the best simulated layout's MFU lies in the range Megatron-LM
published at that scale: 44% for GPT-3 175B on 1024 GPUs at batch 1536 (Narayanan et al. 2021, 140 of 312
TFLOP/s on A100) up to 47% on H100 (Megatron-Core), taken with a margin as 40-52%."""

from __future__ import annotations

import json

from astra_sim.cli import main

from astra_workload_generators.llm import LlmConfig, model_dims, peak_memory

PUBLISHED_MFU = (0.40, 0.52)


def test_full_replication_does_not_fit():
    dims = model_dims("gpt3-175b")
    assert peak_memory(dims, LlmConfig(dp=1024, micro_batches=1)).total > 80e9 * 30


def test_gpt3_175b_on_1024_h100(tmp_path, capsys):
    out = tmp_path / "search.json"
    args = ["search", "--preset", "gpt3-175b", "--gpus", "1024", "--platform", "hgx-h100", "--global-batch", "1536",
            "--tp", "1,8", "--pp", "1,8", "--vp", "1", "--mbs", "1", "--zero", "1", "--recompute", "none",
            "--jobs", "1", "--no-progress", "-o", str(out), "--plot", str(tmp_path / "front.png")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "do not fit 80 GiB" in text and "dropped 3: weights, gradients and optimizer states alone" in text
    result = json.loads(out.read_text())
    assert result["units"] == {"time": "ns", "size": "bytes"} and isinstance(result["ranked"][0]["step_ns"], int)
    dropped = [d for items in result["dropped"].values() for d in items]
    assert {"tp": 1, "pp": 1} in [{"tp": d["tp"], "pp": d["pp"]} for d in dropped]
    best = result["ranked"][0]
    assert (best["layout"]["tp"], best["layout"]["pp"]) == (8, 8)
    assert PUBLISHED_MFU[0] <= best["mfu"] <= PUBLISHED_MFU[1], best
    assert best["peak_mem_bytes"] < 80e9 and (tmp_path / "front.png").stat().st_size > 0


def test_search_takes_a_model_config(tmp_path, capsys):
    """``--model``: a Hugging Face config (here a shipped one, Qwen3-8B with its explicit head_dim) instead of a
    preset; the sweep's points generate it from the same file (``--points`` keeps them). ``--json`` prints the
    answer on stdout, the table goes to stderr."""
    points = tmp_path / "points.csv"
    capsys.readouterr()
    assert main(["search", "--model", "qwen3-8b", "--gpus", "8", "--platform", "hgx-h100", "--global-batch", "8",
                 "--tp", "8", "--pp", "1", "--vp", "1", "--mbs", "1", "--zero", "1", "--recompute", "full",
                 "--seq-len", "1024", "--jobs", "1", "--no-progress", "--points", str(points), "--json"]) == 0
    printed = capsys.readouterr()
    assert printed.err.startswith("qwen3-8b on 8 x")
    result = json.loads(printed.out)
    best = result["ranked"][0]
    assert best["layout"]["tp"] == 8 and 0 < best["mfu"] < 1 and result["units"]["time"] == "ns"
    assert str(best["step_ns"]) in points.read_text()  # the row's integer ns


def test_search_output_is_the_json_answer(tmp_path, capsys):
    """-o/--output writes the answer (JSON); the simulated points go to --points, which a results suffix names."""
    assert main(["search", "--preset", "gpt3-13b", "--gpus", "8", "--platform", "hgx-h100", "--global-batch", "8",
                 "-o", str(tmp_path / "r.parquet")]) == 2
    assert "--points" in capsys.readouterr().err


def test_a_point_runs_with_few_collections_and_restores_them():
    """A search's (or sweep's) point runs with the garbage collector's first threshold raised and the thresholds
    restored afterwards, also when the point fails; the collection after it frees the cycles it left."""
    import gc

    from astra_sweep.point import POINT_GC_THRESHOLD, few_collections

    before = gc.get_threshold()
    with few_collections():
        assert gc.get_threshold()[0] == POINT_GC_THRESHOLD
        cycle = []
        cycle.append(cycle)
        del cycle
    assert gc.get_threshold() == before and gc.get_count()[0] < 50
    try:
        with few_collections():
            raise ValueError("a failing point")
    except ValueError:
        pass
    assert gc.get_threshold() == before
