"""``astra serve --cudnn-version`` (issue 36: the same question gets the same answer through every door): every
simulated step runs with astra run's ``--cudnn-version``, so a serving run on B200 states which cuDNN release's
measured rows time its attention; checked and warned as astra run checks and warns, before any step."""

import json

import pytest

from astra_serving import deployment
from astra_serving.spec import ServeSpec
from astra_sim.cli import main
from astra_sim.errors import ConfigError

#: one lone request on a B200 node: its TTFT is one prefill step of 2,048 tokens (GPU-bound there, so attention
#: shows in the step; at 512 the eager host launch hides it), nothing else on the engine's clock
LONE = ["--model", "llama3-8b", "--platform", "hgx-b200", "--qps", "0.01", "--requests", "1", "--prompt-len",
        "2048", "--output-len", "1", "--exact-shapes", "--host-us-per-seq", "0", "--no-async-output", "--frontend",
        "none", "--sampler", "none"]


def _ttft(tmp_path, *words):
    out = tmp_path / "serve.json"
    assert main(["serve", *LONE, *words, "-o", str(out), "-q"]) == 0
    report = json.loads(out.read_text())
    assert report["ttft_ns"]["max"] == report["ttft_ns"]["p50"]
    return report["ttft_ns"]["max"], report["deployment"]["cudnn_version"]


def _run_step(tmp_path, *words):
    """The same prefill step as a user gets it: astra workload llm + astra run --platform hgx-b200 [words]."""
    prefix, out = str(tmp_path / "step"), tmp_path / "step.json"
    if not (tmp_path / "step.workload.json").exists():
        assert main(["workload", "llm", "--model", "llama3-8b", "--tp", "1", "--dp", "8", "--logits", "last",
                     "--inference-elementwise", "--mode", "prefill", "--batch-size", "1", "--prompt-len", "2048",
                     "-o", prefix]) == 0
    assert main(["run", "--workload-configuration", prefix, "--platform", "hgx-b200", "--allow-oom", *words,
                 "--report-json", str(out), "-q"]) == 0
    return json.loads(out.read_text())["summary"]["max_finish_ns"]


def test_serve_at_two_releases_differs_as_astra_run_does(tmp_path):
    """TTFT at cuDNN 9.10.2 and at the default rows (9.13.1) equals astra run's prefill step with the same flag,
    to the ns, so the two releases differ by exactly what astra run says (9.10.2's causal BF16 forward at 2k keys:
    670 against 908 TFLOP/s, the slower)."""
    old, old_said = _ttft(tmp_path, "--cudnn-version", "9.10.2")
    new, new_said = _ttft(tmp_path)
    assert (old_said, new_said) == ("9.10.2", None)
    run_old, run_new = _run_step(tmp_path, "--cudnn-version", "9.10.2"), _run_step(tmp_path, "--cudnn-version",
                                                                                    "9.13.1")
    assert (old, new) == (run_old, run_new)
    assert old - new == run_old - run_new > 0


@pytest.mark.parametrize("value,says", [("banana", "not a cuDNN release"),
                                        ("9.9", "no B200 attention was measured at or below it")])
def test_a_bad_release_is_a_one_line_error_naming_the_flag(value, says, capsys):
    """Not a release (the parser), or older than every B200 measurement (the gpu model's check, made before any
    step): exit non-zero, one line naming --cudnn-version and the releases measured."""
    try:
        code = main(["serve", *LONE, "--cudnn-version", value, "-q"])
    except SystemExit as exc:  # the parser's refusal, as astra run's
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and "--cudnn-version" in err[-1] and says in err[-1] and "B200 9.10.2, 9.13.1" in err[-1]
    assert len(err) == 1 or err[0].startswith("usage:")  # the parser's usage, then its one line


def _spec(platform, **more):
    return ServeSpec.from_mapping({"model": "llama3-8b", "platform": platform, "qps": 1, **more})


def test_the_gpu_models_notes_are_said_once(monkeypatch, capsys):
    """A release between two measured ones: timed at the older (astra run's warning); a GPU not timed by release:
    no effect, said; the same note is not said again by a second resolve (a QPS sweep's or a search's)."""
    monkeypatch.setattr(deployment, "_CUDNN_SAID", set())
    _spec("hgx-b200", cudnn_version="9.12").resolve()
    _spec("hgx-b200", cudnn_version="9.12").resolve()
    _spec("dgx-a100", cudnn_version="9.10.2").resolve()  # (the H200 is timed by release since hoppercudnn)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["astra: warning: gpu model: --cudnn-version 9.12: B200 attention timed at the rows measured with "
                     "cuDNN 9.10.2, the newest measured at or below it",
                     "astra: warning: gpu model: --cudnn-version 9.10.2: A100-SXM4-80GB's attention is not timed by "
                     "cuDNN release (measured: B200 9.10.2, 9.13.1; B300 9.13.1; GB200 9.17.0; H100-SXM5-80GB 9.1.1, "
                     "9.19.0; H200-SXM 9.1.1, 9.19.0); no effect"]


def test_every_door_gives_the_steps_the_same_run_option():
    """The flag, a mapping's key (a sweep's serve: block, Python) and --run-arg give the steps the same run option
    (and so the same step cache); the flag and --run-arg naming two releases is an error."""
    by_flag = ServeSpec.from_argv(LONE + ["--cudnn-version", "9.10.2"]).resolve().layout
    by_key = _spec("hgx-b200", **{"cudnn-version": "9.10.2"}).resolve().layout
    by_run_arg = ServeSpec.from_argv(LONE + ["--run-arg=--cudnn-version=9.10.2"]).resolve().layout
    assert by_flag.run["cudnn_version"] == by_key.run["cudnn_version"] == by_run_arg.run["cudnn_version"] == "9.10.2"
    assert by_flag.key() == by_run_arg.key() != ServeSpec.from_argv(LONE).resolve().layout.key()
    with pytest.raises(ConfigError, match="two cuDNN releases"):
        ServeSpec.from_argv(LONE + ["--cudnn-version", "9.13.1", "--run-arg=--cudnn-version=9.10.2"]).resolve()


def test_a_python_run_mapping_with_dashes_is_one_key():
    """``ServeSpec(run={"cudnn-version": ...})`` (the Python API, where no parser normalises the key) gives the steps
    the flag's run option under its one name, so the check, the step cache and the report read one key; a dashed key
    naming another release than the flag is the same error."""
    import dataclasses

    base = ServeSpec.from_argv(LONE)
    by_flag = ServeSpec.from_argv(LONE + ["--cudnn-version", "9.10.2"])
    by_python = dataclasses.replace(base, run={"cudnn-version": "9.10.2"})
    assert deployment.run_options(by_python) == deployment.run_options(by_flag) == {"cudnn_version": "9.10.2"}
    assert by_python.resolve().layout.key() == by_flag.resolve().layout.key()
    with pytest.raises(ConfigError, match="two cuDNN releases"):
        deployment.run_options(dataclasses.replace(by_flag, run={"cudnn-version": "9.13.1"}))
