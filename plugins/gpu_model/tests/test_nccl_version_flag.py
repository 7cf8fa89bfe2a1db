"""A ``--nccl-version`` the model does not reproduce is refused where it is parsed, by every door that takes it
(``astra run``, a sweep's run options and axes, ``astra search``, a validation case's run words), naming the flag
and the accepted values, with a non-zero exit: not when the first collective across nodes is timed."""

from __future__ import annotations

import argparse

import pytest

from astra_gpu_model import nccl_tuning
from astra_sim.cli import main

BAD = "2.27.3"


def _refused(text):
    assert "--nccl-version" in text and "2.26.x" in text and "master" in text and BAD in text, text


@pytest.mark.parametrize("good", ["2.26.2", "2.26", "v2.26.6-1", "master"])
def test_known_releases_pass_through(good):
    assert nccl_tuning.version_arg(good) == good


def test_the_type_refuses_other_releases():
    with pytest.raises(argparse.ArgumentTypeError, match="accepted: 2.26.x"):
        nccl_tuning.version_arg("2.28.9")


def test_astra_run(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--workload-configuration", str(tmp_path / "w"), "--platform", "hgx-h100", "--nccl-version", BAD])
    assert exit_.value.code == 2
    _refused(capsys.readouterr().err)


def test_python_api(tmp_path):
    from astra_sim.errors import ConfigError
    from astra_sim.spec import RunSpec

    with pytest.raises(ConfigError) as exc:
        RunSpec.from_mapping({"workload_configuration": str(tmp_path / "w"), "platform": "hgx-h100",
                              "nccl_version": BAD})
    _refused(str(exc.value))


@pytest.mark.parametrize("run, axes", [(f'nccl-version: "{BAD}"', ""),
                                       ("", f'axes:\n  grid: {{run.nccl-version: ["2.26.2", "{BAD}"]}}\n')])
def test_a_sweeps_run_options_and_axes(capsys, tmp_path, run, axes):
    pytest.importorskip("astra_sweep")
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload: {micro: {collective: all_reduce, npus: 16, size: 1MiB}}\n"
                    f"run: {{platform: hgx-h100{', ' + run if run else ''}}}\n{axes}")
    assert main(["sweep", str(spec), "-o", str(tmp_path / "rows.csv"), "--no-progress"]) != 0
    _refused(capsys.readouterr().err)
    assert not (tmp_path / "rows.csv").exists()


def test_astra_search(capsys):
    pytest.importorskip("astra_sweep")
    with pytest.raises(SystemExit) as exit_:
        main(["search", "--preset", "llama2-7b", "--gpus", "16", "--platform", "hgx-h100", "--global-batch", "8",
              "--nccl-version", BAD])
    assert exit_.value.code == 2
    _refused(capsys.readouterr().err)


def test_a_validation_cases_run_words(capsys, tmp_path):
    pytest.importorskip("astra_validation")
    cases = tmp_path / "cases.yaml"
    cases.write_text(f"""cases:
  - name: bad-release
    kind: collective
    source: "a test"
    source_id: "a test"
    role: check
    hardware: "16 H100-SXM5-80GB"
    platform: hgx-h100
    nodes: 2
    run: [--nccl-version, "{BAD}"]
    collective: all_reduce
    size_bytes: 1024
    measured: {{bus_bandwidth_gbps: 0.06}}
""")
    assert main(["validate", "--cases", str(cases)]) == 2  # refused when the registry loads, before any case runs
    err = capsys.readouterr().err
    assert f"validation case 'bad-release' ({cases}): run: argument --nccl-version" in err
    _refused(err)
