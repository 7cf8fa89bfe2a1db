"""A run's ``--gpu`` that replaces its platform's GPU is the GPU the step is generated for (issue 36): Transformer
Engine's FP8 layout (``te_fp8_transposes``) follows the GPU that runs, through the Python API
(``LlmSpec.for_platform(platform, run options)``), ``astra workload llm --platform P --gpu G`` and the doors that
generate a step for a run (validation, energy)."""

from __future__ import annotations

import pytest

from astra_sim.errors import ConfigError
from astra_sim.platforms import platforms

from astra_workload_generators.llm import LlmSpec
from astra_workload_generators.llm.fp8 import fp8_layout_mismatch, fp8_transpose_for, run_gpu

FP8 = LlmSpec(preset="llama3-8b", layers=2, seq_len=256, gemm_dtype="fp8")


def _transposes(spec):
    return spec.resolve(on_warning=lambda line: None)[1].fp8_transpose


def test_run_gpu_follows_the_platforms_rule():
    assert run_gpu("hgx-h100", {"gpu": "B200"}) == "B200"
    assert run_gpu("hgx-h100", {"gpu": "H100-SXM5-80GB"}) is None  # (the platform's own)
    # the option's default is what a run without --gpu has: the platform's GPU runs (resolve_gpu_platform)
    assert run_gpu("hgx-b200", {"gpu": "H100-SXM5-80GB"}) is None
    assert run_gpu("hgx-b200", {}) is None and run_gpu(None, {"gpu": "B200"}) is None


def test_python_api_generates_for_the_gpu_that_runs():
    assert _transposes(FP8.for_platform("hgx-h100")) is True  # Hopper: TN-only FP8 GEMMs
    on_b200 = FP8.for_platform("hgx-h100", {"gpu": "B200"})
    assert (on_b200.platform, on_b200.gpu) == ("hgx-h100", "B200")
    assert _transposes(on_b200) is False  # Blackwell: any layout, no transposes
    assert _transposes(FP8.for_platform("hgx-b200", {"gpu": "H200-SXM"})) is True
    assert _transposes(FP8.for_platform("hgx-b200", {"gpu": "H100-SXM5-80GB"})) is False  # (no --gpu given)
    assert fp8_transpose_for("hgx-h100", "B200") is False and fp8_transpose_for("hgx-h100") is True


def test_cli_words_and_gpu_without_platform():
    spec = LlmSpec.from_argv(["--preset", "llama3-8b", "--layers", "2", "--gemm-dtype", "fp8", "--platform",
                              "hgx-h100", "--gpu", "B200"])
    assert spec.gpu == "B200" and _transposes(spec) is False
    with pytest.raises(ConfigError, match="--gpu B200: replaces a platform's GPU"):
        LlmSpec.from_argv(["--preset", "llama3-8b", "--gpu", "B200"]).resolve()


def test_layout_mismatch_names_the_gpu_that_runs():
    # a step written with Hopper's transposes, run on hgx-h100 with --gpu B200: the run's GPU wants none
    message = fp8_layout_mismatch(True, "hgx-h100", "B200")
    assert message is not None and "--gpu B200" in message and "astra workload llm --platform hgx-h100 --gpu B200" \
        in message
    assert fp8_layout_mismatch(False, "hgx-h100", "B200") is None
    assert fp8_layout_mismatch(True, "hgx-h100", "H100-SXM5-80GB") is None  # the platform's own GPU
    assert "--platform hgx-b200's GPU is Blackwell" in fp8_layout_mismatch(True, "hgx-b200")  # (no --gpu: as before)
    # a TPU slice: no GPU to replace (a run's gpu option is its default there), no FP8 layout to check
    tpu = next(name for name, p in platforms().items() if getattr(p, "gpu", None) is None)
    assert fp8_layout_mismatch(True, tpu, "H100-SXM5-80GB") is None


class _Generated(Exception):
    """Stops a door once it generated (its spec is what the test reads)."""


def _capture(monkeypatch):
    import astra_workload_generators
    import astra_workload_generators.llm as llm

    seen = []

    def generate(spec, prefix, **kwargs):
        seen.append(spec)
        raise _Generated

    monkeypatch.setattr(llm, "generate_llm_workload", generate)
    monkeypatch.setattr(astra_workload_generators, "generate_llm_workload", generate)
    return seen


@pytest.mark.parametrize("words, gpu", [((), None), (("--gpu", "B200"), "B200")])
def test_validation_door_generates_for_the_runs_gpu(monkeypatch, words, gpu):
    registry = pytest.importorskip("astra_validation.registry")
    from astra_validation.runner import run_case

    seen = _capture(monkeypatch)
    case = registry.Case(name="t", kind="llm_step", source="s", hardware="h", platform="hgx-h100", nodes=1,
                         measured={"step_ms": 1.0}, workload=("--preset", "llama3-8b", "--layers", "2",
                                                               "--gemm-dtype", "fp8", "--dp", "8"), run=words)
    with pytest.raises(_Generated):
        run_case(case)
    assert (seen[0].platform, seen[0].gpu) == ("hgx-h100", gpu)
    assert _transposes(seen[0]) is (gpu is None)


def test_energy_door_generates_for_the_options_gpu(monkeypatch):
    cases = pytest.importorskip("astra_energy.cases")
    seen = _capture(monkeypatch)
    case = cases.Case(name="t", source="s", quantity="q", measured=1.0, platform="hgx-h100",
                      llm={"preset": "llama3-8b", "layers": 2, "gemm_dtype": "fp8", "dp": 8}, options={"gpu": "B200"})
    with pytest.raises(_Generated):
        cases.evaluate(case)
    assert seen[0].gpu == "B200" and _transposes(seen[0]) is False


def test_cli_generate_and_run_on_a_replaced_gpu(tmp_path, capsys):
    """``astra workload llm --platform hgx-h100 --gpu B200`` writes Blackwell's layout (no FP8 transposes), and
    ``astra run --platform hgx-h100 --gpu B200`` warns about a step written for the platform's H100 (naming the GPU
    that runs), not about the one written for the B200; with the platform's own GPU the other way round."""
    from astra_sim.chakra import read_metadata
    from astra_sim.cli import main
    from astra_workload_compact import read_compact_workload

    small = ["--layers", "1", "--hidden", "256", "--heads", "8", "--ffn-hidden", "512", "--vocab", "1000",
             "--seq-len", "128", "--dp", "8", "--gemm-dtype", "fp8", "--platform", "hgx-h100"]
    warned = {}
    for name, extra in (("h100", []), ("b200", ["--gpu", "B200"])):
        prefix = str(tmp_path / name)
        assert main(["workload", "llm", *small, *extra, "-o", prefix]) == 0
        assert read_metadata(read_compact_workload(prefix).traces[0])["te_fp8_transposes"] is (name == "h100")
        for run_on in ([], ["--gpu", "B200"]):
            capsys.readouterr()
            assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", *run_on]) == 0
            warned[name, bool(run_on)] = [line for line in capsys.readouterr().err.splitlines()
                                          if "FP8 transposes" in line]
    assert not warned["h100", False] and not warned["b200", True]
    assert "--gpu B200 (instead of --platform hgx-h100's), is Blackwell" in warned["h100", True][0]
    assert "generated without" in warned["b200", False][0]


def test_cluster_and_serve_doors_generate_for_the_runs_gpu(tmp_path, monkeypatch):
    workloads = pytest.importorskip("astra_cluster.workloads")
    spec_mod = pytest.importorskip("astra_cluster.spec")
    steptime = pytest.importorskip("astra_serving.steptime")
    seen = _capture(monkeypatch)
    job = spec_mod.JobSpec(name="j", gpus=8, steps=1, arrival_ns=0, workload_kind="llm",
                           workload={"preset": "llama3-8b", "layers": 2, "gemm_dtype": "fp8", "dp": 8})
    with pytest.raises(_Generated):
        workloads.materialize(job, str(tmp_path), str(tmp_path), "hgx-h100", {"gpu": "B200"})
    assert (seen[0].platform, seen[0].gpu) == ("hgx-h100", "B200") and _transposes(seen[0]) is False
    layout = steptime.Layout(model={"preset": "llama3-8b", "layers": 2}, platform="hgx-h100", run={"gpu": "B200"})
    assert (layout.llm_spec().platform, layout.llm_spec().gpu) == ("hgx-h100", "B200")
    plain = steptime.Layout(model={"preset": "llama3-8b", "layers": 2}, platform="hgx-h100").llm_spec()
    assert (plain.platform, plain.gpu) == ("hgx-h100", None)


def test_sweep_door_generates_for_the_runs_gpu(tmp_path):
    commands = pytest.importorskip("astra_sweep.commands")
    from astra_sweep.spec import load_spec
    from astra_sweep.sweep import Plan

    path = tmp_path / "s.yaml"
    path.write_text("workload:\n  llm: {preset: llama3-8b, layers: 2, gemm-dtype: fp8, dp: 8}\n"
                    "run: {platform: hgx-h100}\naxes:\n  grid: {run.gpu: [H100-SXM5-80GB, B200]}\n")
    parsers = commands.command_parsers()["parsers"]
    spec = load_spec(str(path), parsers)
    plan = Plan(spec, parsers)
    gpus = {point.run["gpu"]: plan.refs[point.id].options for point in spec.points}
    assert gpus["B200"]["gpu"] == "B200" and "gpu" not in gpus["H100-SXM5-80GB"]
    assert _transposes(LlmSpec.from_mapping(gpus["B200"])) is False
    assert _transposes(LlmSpec.from_mapping(gpus["H100-SXM5-80GB"])) is True
