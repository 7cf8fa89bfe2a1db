"""``astra run --compute-model gpu`` checks the generator's per-rank memory estimate against the GPU's HBM:
an error naming the rank, the parts and the GPU (exit 2), a warning with ``--allow-oom``; the numbers go
into the report's ``settings.memory``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from astra_sim.cli import main

SMALL = ["--preset", "gpt3-13b", "--layers", "4", "--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "2"]


def _llm(tmp_path, *extra):
    prefix = str(tmp_path / "w")
    assert main(["workload", "llm", *SMALL, *extra, "-o", prefix]) == 0
    return prefix


def _run(prefix, gpu, *extra, report=None):
    args = ["run", "--platform", "hgx-h100", "--compute-model", "gpu", "--gpu", gpu, "--workload-configuration",
            prefix, "-q", *extra]
    if report:
        args += ["--report-json", report]
    return main(args)


def _small_gpu(tmp_path, gb):
    path = tmp_path / "small.yaml"
    path.write_text(f"base: H100-SXM5-80GB\nname: H100-{gb}GB\nhbm_capacity_gb: {gb}\n")
    return str(path)


@pytest.mark.parametrize("per_rank", [False, True])
def test_a_rank_over_its_hbm_is_an_error_naming_it(tmp_path, capsys, per_rank):
    prefix = _llm(tmp_path, *(["--per-rank-files"] if per_rank else []))
    capsys.readouterr()
    assert _run(prefix, _small_gpu(tmp_path, 4)) == 2
    err = capsys.readouterr().err
    assert "out of memory: rank 0" in err and "H100-4GB has 4.3 GB (4 GiB)" in err and "activations" in err
    assert "--allow-oom" in err


def test_allow_oom_warns_and_reports(tmp_path, capsys):
    prefix = _llm(tmp_path)
    report = str(tmp_path / "r.json")
    assert _run(prefix, _small_gpu(tmp_path, 4), "--allow-oom", report=report) == 0
    memory = json.load(open(report))["settings"]["memory"]
    assert memory["fits"] is False and memory["hbm_capacity_bytes"] == 4 * 2**30  # a datasheet's GB of HBM are GiB
    assert memory["peak_bytes"] == sum(memory["peak_breakdown_bytes"].values()) > 4 * 2**30
    assert json.load(open(report))["warnings"][0].startswith("out of memory")


def test_a_configuration_that_fits_runs_and_says_so(tmp_path):
    prefix = _llm(tmp_path)
    report = str(tmp_path / "r.json")
    assert _run(prefix, "H100-SXM5-80GB", report=report) == 0
    memory = json.load(open(report))["settings"]["memory"]
    assert memory["fits"] is True and memory["peak_rank"] == 0 and set(memory["classes"]) == {"0", "4"}
    assert memory["classes"]["0"] > memory["classes"]["4"]  # the first stage keeps more micro-batches


def test_without_the_gpu_model_nothing_is_checked(tmp_path):
    prefix = _llm(tmp_path)
    assert main(["run", "--platform", "hgx-h100", "--workload-configuration", prefix, "-q"]) == 0


def _estimate(prefix):
    from astra_sim.chakra import read_metadata

    attrs = read_metadata(f"{prefix}.class0.et")
    return attrs["memory_peak_bytes"], json.loads(attrs["memory_fixes"])


def test_a_near_miss_within_the_uncertainty_is_a_warning(tmp_path, capsys):
    prefix = _llm(tmp_path)
    peak, _ = _estimate(prefix)
    report = str(tmp_path / "r.json")
    assert _run(prefix, _small_gpu(tmp_path, round(peak / 1.05 / 2**30, 3)), report=report) == 0
    memory = json.load(open(report))["settings"]["memory"]
    assert memory["fits"] is False and memory["near_miss"] is True and memory["margin_bytes"] < 0
    assert json.load(open(report))["warnings"][0].startswith("near miss")


def test_a_refusal_names_the_largest_part_and_the_one_change_that_fits(tmp_path, capsys):
    prefix = _llm(tmp_path)
    peak, fixes = _estimate(prefix)
    smallest = min(p for _, p in fixes)
    assert smallest < peak / 1.1  # (the test needs a capacity between the two)
    gb = round((smallest + peak / 1.1) / 2 / 2**30, 3)
    expected = next(flags for flags, p in fixes if p <= gb * 2**30)
    capsys.readouterr()
    assert _run(prefix, _small_gpu(tmp_path, gb)) == 2
    err = capsys.readouterr().err
    assert f"`{expected}` would make it fit" in err and "largest: " in err
    # and no change fits a GPU far too small
    assert _run(prefix, _small_gpu(tmp_path, 1)) == 2
    assert "no single change" in capsys.readouterr().err


@given(st.one_of(st.none(), st.text(max_size=60), st.integers(),
                 st.lists(st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3),
                          max_size=3).map(json.dumps)))
@settings(max_examples=200, deadline=None)
def test_memory_fixes_of_any_trace_read_without_crashing(value):
    from astra_gpu_model.capacity import _fixes

    fixes = _fixes({"memory_fixes": value})
    assert all(isinstance(flags, str) and isinstance(peak, int) for flags, peak in fixes)
