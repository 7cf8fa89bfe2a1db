"""Bad specs are one-line errors (exit 2) naming the axis and the option, or the value; a spec whose base case
fails runs no point."""

from __future__ import annotations

import os

import pytest

from astra_sim.cli import main

BASE = "workload:\n  llm: {preset: gpt3-13b, layers: 4, tp: 2, pp: 2, dp: 2, micro-batches: 2}\n" \
       "run: {platform: hgx-h100}\n"


def _sweep(tmp_path, text, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "r.csv"
    code = main(["sweep", str(spec), "-o", str(out), "--jobs", "1", "--no-progress"])
    err = capsys.readouterr().err
    return code, err, out


def test_unknown_option_names_the_axis_and_the_option(tmp_path, capsys):
    code, err, out = _sweep(tmp_path, BASE + "axes:\n  grid: {workload.llm.micro-batchez: [2, 4]}\n", capsys)
    assert code == 2 and "axis workload.llm.micro-batchez" in err and "'micro-batchez'" in err
    assert "did you mean 'micro-batches'" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    code, err, _ = _sweep(tmp_path, BASE + "axes:\n  grid: {run.platform-colective: [ring]}\n", capsys)
    assert code == 2 and "run.platform-colective" in err and "unknown astra run option" in err


def test_wrong_type_names_the_value(tmp_path, capsys):
    code, err, out = _sweep(tmp_path, BASE + "axes:\n  grid: {workload.llm.tp: [1, two]}\n", capsys)
    assert code == 2 and "axis workload.llm.tp" in err and "'two'" in err and not out.exists()
    code, err, _ = _sweep(tmp_path, BASE + "axes:\n  grid: {run.platform-collective: [ring, bogus]}\n", capsys)
    assert code == 2 and "'bogus'" in err and "nccl" in err
    code, err, _ = _sweep(tmp_path, BASE + "axes:\n  grid: {workload.llm.sequence-parallel: [yes-please]}\n",
                          capsys)
    assert code == 2 and "'yes-please'" in err and "true or false" in err


def test_a_failing_base_case_runs_no_point(tmp_path, capsys):
    text = BASE.replace("layers: 4", "layers: 5") + "axes:\n  grid: {workload.llm.layers: [4, 8]}\n"
    code, err, out = _sweep(tmp_path, text, capsys)
    assert code == 2 and "base case" in err and "not divisible by --pp 2" in err
    assert not out.exists() and not os.path.exists(str(out) + ".journal")


@pytest.mark.parametrize("text, needle", [
    ("workload: {llm: {}, trace: x}\n", "exactly one of"),
    (BASE + "axes:\n  zip: {workload.llm.tp: [1, 2], workload.llm.dp: [2]}\n", "as many values"),
    (BASE + "axes:\n  random: {n: 0, space: {workload.llm.tp: [1]}}\n", "axes.random.n"),
    (BASE + "axes:\n  grid: {gpu.hbm_bandwidth_gbps: [1000]}\nplatform: {nic_gbs: 5}\n", "nic_gbps"),
    (BASE + "axes:\n  grid: {system.preferred-dataset-split: [1]}\n", "preferred-dataset-splits"),
    (BASE + "extra: 1\n", "unknown key 'extra'"),
])
def test_other_spec_errors(tmp_path, capsys, text, needle):
    code, err, _ = _sweep(tmp_path, text, capsys)
    assert code == 2 and needle in err


def test_an_llm_model_config_is_part_of_the_workload_digest(tmp_path):
    """``llm: {model: FILE}``: editing the config file makes a new workload (the cache key hashes its contents)."""
    from astra_sweep.point import workload_digest

    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama"}')
    before = workload_digest("llm", {"model": str(config)})
    config.write_text('{"model_type": "qwen3"}')
    assert workload_digest("llm", {"model": str(config)}) != before
